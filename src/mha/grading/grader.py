"""Grade submissions: the trusted parent.

For each submission the grader
1. reads the notebook and keeps only what the exercise functions need (``extract``);
2. refuses, without running them, functions that are missing, have the wrong signature,
   or name a function the exercise forbids;
3. makes the inputs: the public checks, plus hidden ones from a fresh random seed;
4. runs the functions in a sandboxed worker (``sandbox``), which leaves plain data only;
5. after the worker is gone, computes the expected answers with the reference
   implementation, compares, and scores each check (partial credit).

Feedback never quotes hidden inputs, expected values, the student's own output values
or exception texts (those could carry data read from disk), nor reference code.
"""

from __future__ import annotations

import ast
import datetime
import functools
import hashlib
import math
import json
import os
import queue
import re
import secrets
import shutil
import stat
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mha.autograde import (EXERCISES, Exercise, Kind, MalformedResult, Outcome, Status, forbidden_uses, read_record,
                           safe_error_name, score, select, traps_of)
from mha.autograde.wire import encode, pack, unpack

from . import extract, sandbox
from .anonymise import anonymous_code, fingerprint, name_tokens

MAX_RESULT_BYTES = 32 << 20


@dataclass
class CheckReport:
    name: str
    passed: bool
    message: str
    hidden: bool
    kind: Kind = Kind.CORRECT   # what kind of verdict: a listed mistake, a diagnosis, a forbidden call...
    hint: str = ""              # the hint the message ends with, if any
    mistake: str | None = None  # the name of the listed mistake the answer makes here (Exercise.mistake_name)
    # A hash of what the answer gave on a public check (see value_fingerprint): equal for two
    # answers that gave the same values; never the values, and "" on hidden checks.
    value_fingerprint: str = ""


@dataclass
class ExerciseReport:
    id: str
    title: str
    function: str
    score: float
    max_score: float
    status: Status
    message: str = ""
    checks: list[CheckReport] = field(default_factory=list)
    seconds: float | None = None  # how long the submission's function ran on the checks (None: it did not run)
    code: str = ""  # a wrong answer's function and what it uses, anonymised (see anonymise.anonymous_code)
    code_fingerprint: str = ""  # the shape of any answer's code (anonymise.fingerprint), right or wrong
    answer_group: str = ""      # a wrong answer's group in the class report: "g" and the start of code_fingerprint


@dataclass
class SubmissionReport:
    student: str       # unique in its grading run (see unique_names): every report uses it
    path: str
    score: float = 0.0
    max_score: float = 0.0
    exercises: list[ExerciseReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    files: list[str] = field(default_factory=list)  # the files read (a folder's, by name); none: nothing to grade
    sandbox: str = ""  # the weakest isolation level its workers reached (sandbox.LEVELS); "": nothing ran
    submitted: dict[str, str] = field(default_factory=dict)  # file -> when it was last changed (ISO, local time)

    def as_dict(self):
        return asdict(self)


# ----------------------------------------------------------------------------- one submission

def grade_submission(path, exercises: list[Exercise] | None = None, *, limits: sandbox.Limits | None = None,
                     seed: int | None = None, tmp_root: str | None = None, slot: int = 0,
                     student: str | None = None, isolation: sandbox.Isolation | None = None) -> SubmissionReport:
    """Grade one submission file or folder. Never raises for anything the submission does.
    ``student``: the name the reports give it (default: derived from the path).
    ``isolation``: the levels its worker may use (default: any but none)."""
    t0 = time.monotonic()
    exercises = exercises or select()
    limits = limits or sandbox.Limits()
    seed = secrets.randbits(62) if seed is None else seed
    sub = extract.read_submission(path)
    report = SubmissionReport(student or sub.student, str(path), max_score=float(sum(e.points for e in exercises)),
                              files=list(sub.files), submitted=_submitted(Path(path), sub.files))
    if sub.error:
        report.notes.append(sub.error)
        report.exercises = [_zero(e, Status.UNREADABLE, sub.error) for e in exercises]
        report.seconds = round(time.monotonic() - t0, 2)
        return report
    stmts, notes = extract.parse_cells(sub.cells, sub.origins)
    report.notes += notes
    if not sub.cells:
        report.notes.append("the submission has no code cells")
    if len(sub.files) > 1:
        stmts, notes = extract.prefer_answers(stmts, [e.function for e in exercises])
        report.notes += notes

    to_run: list[tuple[int, Exercise, list]] = []
    results: dict[int, ExerciseReport] = {}
    found: dict[int, list[ast.stmt]] = {}
    taken = frozenset(e.function for e in EXERCISES.values())
    for i, ex in enumerate(exercises):
        info = extract.find_function(stmts, ex.function, ex.params, taken)
        found[i] = info.statements
        if not info.found:
            results[i] = _zero(ex, Status.MISSING, info.problem)
            continue
        if info.problem:
            results[i] = _zero(ex, Status.WRONG_SIGNATURE, info.problem)
            continue
        used = forbidden_uses(ast.Module(body=info.statements, type_ignores=[]), ex.forbidden)
        if used:
            results[i] = _zero(ex, Status.FORBIDDEN, f"{ex.function} uses {', '.join(used)}, which this exercise "
                               f"does not allow: {ex.write_it}")
            continue
        cases = ex.public_cases() + ex.hidden_cases((seed + 7919 * (i + 1)) % (1 << 62))
        to_run.append((i, ex, cases))

    if to_run:
        base = Path(tmp_root or tempfile.gettempdir())
        jobdir = Path(tempfile.mkdtemp(prefix=f"job-{sub.student[:60]}-", dir=base))
        try:
            _prepare(jobdir, stmts, to_run)
            user = sandbox.unprivileged_user(slot)
            hide = sandbox.hidden_candidates([*sandbox.course_dirs(), str(Path(path).resolve().parent),
                                              *exercise_dirs(ex for _, ex, _ in to_run)])
            jobs = [{"index": i, "function": ex.function, "traps": _traps(ex), "trace": ex.audit is not None,
                     "launches": ex.kernel, "exercise_s": _limit_s(ex, limits)} for i, ex, _ in to_run]
            run = sandbox.run_job(jobdir, jobs, limits, hide=hide, user=user, isolation=isolation)
            report.sandbox = run.level
            load = _read_json(jobdir / "out" / "load.json")
            for err in (load or {}).get("errors", [])[:5] if isinstance(load, dict) else []:
                if isinstance(err, str):
                    report.notes.append("outside the functions, " + _safe_load_error(err))
            for i, ex, cases in to_run:
                status = run.status.get(i, "no result")
                if status != "done":
                    kind = Status.TIMEOUT if "timed out" in status or "time limit" in status else Status.CRASHED
                    results[i] = _zero(ex, kind, status)
                    results[i].seconds = run.seconds.get(i)
                    continue
                results[i] = _judge(ex, cases, jobdir / "out", i)
                results[i].seconds = run.seconds.get(i)
        finally:
            if not os.environ.get("MHA_GRADER_KEEP"):
                shutil.rmtree(jobdir, ignore_errors=True)

    tokens = name_tokens(sub.student, report.student)
    for i, ex in enumerate(exercises):  # the wrong answers' code, for the class report's answer groups
        r = results[i]
        if found.get(i) and r.status not in (Status.MISSING, Status.NOT_ATTEMPTED):
            r.code_fingerprint = fingerprint(ast.unparse(ast.Module(body=found[i], type_ignores=[])), ex.function)
        if r.status == Status.GRADED and r.score < r.max_score and found.get(i):
            r.code = anonymous_code(found[i], tokens, keep={ex.function})
            r.answer_group = group_id(r.code_fingerprint)
    report.exercises = [results[i] for i in range(len(exercises))]
    report.score = round(sum(e.score for e in report.exercises), 2)
    report.seconds = round(time.monotonic() - t0, 2)
    return report


def _submitted(path: Path, files: list[str]) -> dict[str, str]:
    """When each file of a submission was last changed (an LMS's download keeps the time it
    was handed in), as ISO text in local time; {} where it cannot be read."""
    out = {}
    for name in files:
        target = path / name if path.is_dir() else path
        try:
            out[name] = datetime.datetime.fromtimestamp(target.stat().st_mtime).isoformat(timespec="seconds")
        except (OSError, ValueError, OverflowError):
            continue
    return out


def _zero(ex: Exercise, status: Status, message: str) -> ExerciseReport:
    return ExerciseReport(ex.id, ex.title, ex.function, 0.0, float(ex.points), status, message)


def _limit_s(ex: Exercise, limits: sandbox.Limits) -> float:
    """The wall-clock limit of one exercise: longer for a Triton kernel, which the interpreter
    runs program after program on the CPU."""
    return max(limits.exercise_s, limits.kernel_exercise_s) if ex.kernel else limits.exercise_s


def _traps(ex: Exercise) -> list[str]:
    return traps_of(ex)


def exercise_dirs(exercises) -> list[str]:
    """The folders of the files that define ``exercises``' references (an instructor's own
    file, see ``mha.exercises.load_exercises``): hidden from the worker like the course's."""
    dirs = []
    for ex in exercises:
        try:
            folder = _source_dir(ex.reference)
        except TypeError:  # a reference that cannot be hashed
            folder = _source_dir.__wrapped__(ex.reference)
        if folder and folder not in dirs:
            dirs.append(folder)
    return dirs


@functools.lru_cache(maxsize=None)
def _source_dir(fn) -> str | None:
    import inspect

    try:
        source = inspect.getsourcefile(fn)
    except TypeError:  # a builtin, or a callable object
        source = getattr(inspect.getmodule(type(fn)), "__file__", None)
    return str(Path(source).resolve().parent) if source else None


def _prepare(jobdir: Path, stmts, to_run) -> None:
    os.chmod(jobdir, 0o755)
    (jobdir / "in").mkdir()
    names = {ex.function for _, ex, _ in to_run}
    (jobdir / "submission.py").write_text(extract.program(stmts, names), encoding="utf-8")
    arrays: dict = {}  # every exercise's inputs in one pair of files
    specs = {str(i): {"cases": [[encode(a, arrays) for a in c.args] for c in cases],
                      "noncontiguous": [[int(k) for k in c.noncontiguous] for c in cases]}
             for i, ex, cases in to_run}
    index, data = pack(arrays)
    (jobdir / "in" / "cases.json").write_text(json.dumps({"exercises": specs, "arrays": index}))
    (jobdir / "in" / "cases.bin").write_bytes(data)


def _safe_load_error(err: str) -> str:
    """'line N: Type: message' -> keep the message only for a missing module."""
    m = re.match(r"line (\d+): (\w+): (.*)$", err, re.S)
    if not m:
        return "a statement failed"
    line, typ, msg = m.groups()
    if typ in ("ModuleNotFoundError", "ImportError") and re.fullmatch(r"No module named '[\w.]+'", msg):
        return f"statement {line} of the graded code raised {typ}: {msg}"
    return f"statement {line} of the graded code raised {safe_error_name(typ, False)}"


def _read_regular(path: Path, limit: int) -> bytes | None:
    """Read a regular file written by the worker, refusing links, FIFOs and huge files."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit + 1)
    finally:
        os.close(fd)


def _read_json(path: Path):
    data = _read_regular(path, MAX_RESULT_BYTES)
    if data is None:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def _read_arrays(obj, path: Path) -> dict:
    data = _read_regular(path, MAX_RESULT_BYTES)
    if data is None:
        raise MalformedResult("no arrays file")
    return unpack(obj.get("arrays") if isinstance(obj, dict) else None, data)


def _outcomes(obj, arrays, cases) -> list[Outcome]:
    if not isinstance(obj, dict) or not isinstance(obj.get("results"), list) or len(obj["results"]) != len(cases):
        raise MalformedResult("wrong number of results")
    return [read_record(r, arrays, len(c.args)) for r, c in zip(obj["results"], cases)]


def _judge(ex: Exercise, cases, out: Path, i: int) -> ExerciseReport:
    try:
        obj = _read_json(out / f"{i}.json")
        outcomes = _outcomes(obj, _read_arrays(obj, out / f"{i}.bin"), cases)
    except MalformedResult as e:
        return _zero(ex, Status.UNREADABLE, f"the result could not be read back ({e}); no points")
    scored = score(ex, cases, outcomes, reveal=False)
    if scored.status == Status.NOT_ATTEMPTED:
        return _zero(ex, Status.NOT_ATTEMPTED, f"{ex.function} still raises NotImplementedError")
    if scored.status == Status.MISSING:
        return _zero(ex, Status.MISSING, outcomes[0].reason)
    checks = []
    n_public = sum(not c.hidden for c in cases)
    for k, (case, v) in enumerate(zip(cases, scored.verdicts)):
        name = (f"hidden check {k - n_public + 1}" if case.hidden else f"public check {k + 1}")
        mistake = None if v.mistake is None else ex.mistake_name(v.mistake)
        checks.append(CheckReport(name, v.passed, "correct" if v.passed else v.grader_message, case.hidden,
                                  v.kind, v.hint, mistake, "" if case.hidden else value_fingerprint(outcomes[k])))
    msg = f"{scored.passed} of {scored.total} checks pass"
    return ExerciseReport(ex.id, ex.title, ex.function, scored.score, float(ex.points), Status.GRADED, msg, checks)


# ----------------------------------------------------------------------------- values, as hashes

SIGNIFICANT = 3   # digits of a float a value's fingerprint keeps: what float error cannot change
PROJECTIONS = 4   # fixed random weightings of a float array that its fingerprint keeps
MAX_PROJECTED = 1 << 16  # elements of a float array the weightings read, at most


def group_id(code_fingerprint: str) -> str:
    """The id of a wrong answer's group in the class report, from its code's fingerprint: the
    same for every answer of the same code, in every run (mha.grading.classstats uses it)."""
    return "g" + code_fingerprint[:10] if code_fingerprint else ""


def value_fingerprint(outcome: Outcome) -> str:
    """A short hash of what one call gave: equal for two answers that gave the same values
    (floats to ``SIGNIFICANT`` digits, so that two ways of computing one wrong value agree) or
    raised the same type of error; "" for a call that gave nothing. It is a hash of a summary,
    never the value, and the grader records it for public checks only, whose inputs are
    public: the class report uses it to see one slip in answers whose code differs."""
    if outcome.status == "raised":
        text = f"raised {outcome.error_type}"
    elif outcome.status == "value" and outcome.value is not None:
        text = _canonical(outcome.value)
    else:
        return ""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _round(x: float) -> str:
    if not math.isfinite(x):
        return repr(x)
    return f"{x:.{SIGNIFICANT - 1}e}" if x else "0"


def _canonical(value) -> str:
    """The text a value's fingerprint hashes: its kind, dtype and shape, exact integers and
    booleans, and floats as a few rounded numbers (their mean size, and fixed random weightings
    of them in steps of a thousandth of that size times the root of their count: float error
    moves a weighting by a thousandth of a step, another wrong value by many steps)."""
    import numpy as np

    kind = value.kind
    if kind in ("tensor", "ndarray"):
        a = np.asarray(value.data)
        head = f"{kind} {value.dtype} {tuple(a.shape)}"
        if a.dtype.kind in "biu":
            return head + " " + hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
        x = a.astype(np.float64).ravel()
        finite = np.isfinite(x)
        odd = hashlib.sha256(np.where(finite, 0, np.where(np.isnan(x), 1, np.sign(x) + 3)).astype(np.int8)
                             .tobytes()).hexdigest()
        x = np.where(finite, x, 0.0)
        size = float(np.abs(x).mean()) if x.size else 0.0
        if not size:
            return f"{head} {odd} zero"
        x = x[::max(1, x.size // MAX_PROJECTED)]  # a large array: evenly spaced elements of it
        weights = np.random.default_rng(x.size).uniform(-1.0, 1.0, size=(PROJECTIONS, x.size))
        steps = np.round(weights @ x / math.sqrt(x.size) / size * 10 ** SIGNIFICANT).astype(np.int64)
        return f"{head} {odd} {_round(size)} {steps.tolist()}"
    if kind == "float":
        return f"float {_round(float(value.data))}"
    if kind in ("tuple", "list"):
        return f"{kind}({', '.join(_canonical(v) for v in value.data)})"
    if kind == "dict":
        return "dict(" + ", ".join(f"{_canonical(k)}: {_canonical(v)}" for k, v in value.data) + ")"
    return f"{kind} {value.data!r}"


# ----------------------------------------------------------------------------- many submissions

def _grade_or_report(path, exercises, **kwargs) -> SubmissionReport:
    """``grade_submission``, tried a second time if the grader itself fails; a second
    failure gives a report that says so, and the batch goes on."""
    for _ in range(2):
        try:
            return grade_submission(path, exercises, **kwargs)
        except Exception as e:  # a bug of the grader's, not the submission's
            error = type(e).__name__
    report = SubmissionReport(kwargs.get("student") or extract.student_name(Path(path)), str(path),
                              max_score=float(sum(e.points for e in exercises)))
    message = f"the grader failed on this submission ({error}); grade it again"
    report.notes.append(message)
    report.exercises = [_zero(ex, Status.CRASHED, message) for ex in exercises]
    return report


def expand(paths) -> list[Path]:
    """Submissions from the command line: files as given; a folder holding notebooks is one
    submission per notebook unless it is a student folder of several lessons (use --by-folder)."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            out += extract.gradable_files(p) or [p]
        else:
            out.append(p)
    return out


def unique_names(paths, *, repeats: bool = False) -> list[str]:
    """One name per submission, for every report: the name derived from its file or folder
    (``li_wei``) where no other submission has it, else that name with as much of the
    folders above as tells them apart (``li_wei (section-b)``, ``bo (2025, section-b)``),
    the same on a file system that ignores case. Raises ValueError, naming it, when one
    path is given twice, unless ``repeats`` (a benchmark grading one file many times): then
    the second is ``name (2)``, and so on."""
    paths = [Path(p) for p in paths]
    seen: dict[Path, Path] = {}
    for p in paths:
        key = p.resolve()
        if key in seen and not repeats:
            raise ValueError(f"{p} is given twice (as {seen[key]} and {p}): each submission once")
        seen.setdefault(key, p)
    if len(seen) < len(paths):
        firsts = unique_names(list(seen.values()))
        named = dict(zip(seen, firsts))
        count: Counter = Counter()
        out = []
        for p in paths:
            count[p.resolve()] += 1
            n = count[p.resolve()]
            out.append(named[p.resolve()] + (f" ({n})" if n > 1 else ""))
        return out
    names = [extract.student_name(p) for p in paths]
    out = list(names)
    for depth in range(1, 1 + max((len(p.resolve().parts) for p in paths), default=0)):
        counts = Counter(n.casefold() for n in out)  # Li_Wei and li_wei would share a folder on some disks
        clash = {n for n, c in counts.items() if c > 1}
        if not clash:
            break
        for k, p in enumerate(paths):
            if out[k].casefold() in clash:
                parents = p.resolve().parent.parts[-depth:]
                out[k] = f"{names[k]} ({', '.join(parents)})" if parents else names[k]
    return out


def grade_many(paths, exercises=None, *, limits=None, jobs: int = 2, seed: int | None = None,
               on_done=None, isolation: sandbox.Isolation | None = None) -> list[SubmissionReport]:
    """Grade several submissions ``jobs`` at a time; ``on_done(report, n_done, n_total)``
    is called as each finishes. Reports come back in the order of ``paths``, each under a
    name of its own (``unique_names``). Raises ``sandbox.NoIsolation``, before grading
    anything, where no isolation is to be had and ``isolation`` does not allow that."""
    isolation = isolation or sandbox.Isolation()
    if sandbox.probe(isolation) == "none" and not isolation.allow_none:
        raise sandbox.NoIsolation(f"no isolation is available here ({sandbox.PROTECTS['none']})")
    paths = list(paths)
    names = unique_names(paths, repeats=True)
    exercises = exercises or select()
    tmp_root = tempfile.mkdtemp(prefix="mha-grade-")
    os.chmod(tmp_root, 0o711)  # the worker can reach its own job folder but not list the others
    lock = threading.Lock()
    done = [0]
    slots: queue.Queue = queue.Queue()
    for n in range(max(1, jobs)):
        slots.put(n)

    def one(path, name):
        slot = slots.get()
        try:
            r = _grade_or_report(path, exercises, limits=limits, seed=seed, tmp_root=tmp_root, slot=slot,
                                 student=name, isolation=isolation)
        finally:
            slots.put(slot)
        with lock:
            done[0] += 1
            if on_done:
                on_done(r, done[0], len(paths))
        return r

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the references' tensors are small: more threads only contend
    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            return list(pool.map(one, paths, names))
    finally:
        torch.set_num_threads(threads)
        if sandbox.CLOSE_ZYGOTES_AFTER_BATCH:
            sandbox.stop_zygotes()
        if os.environ.get("MHA_GRADER_KEEP"):
            import sys

            print(f"MHA_GRADER_KEEP: the job folders are kept in {tmp_root}", file=sys.stderr)
        else:
            shutil.rmtree(tmp_root, ignore_errors=True)
