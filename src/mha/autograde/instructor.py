"""Exercises written by an instructor in a file of their own, outside the package.

The file is plain Python: module-level :class:`~mha.exercises.Exercise` objects built with
:class:`~mha.exercises.Case` and :class:`~mha.exercises.Mistake`, exactly as the course's
own exercises are (``book/grading.md`` has a worked example). Three ways in:

- ``load_exercises("FILE.py")`` (and ``mha grade --exercises FILE.py``) imports the file in
  this process, the trusted one, runs the test-the-tests checks on every exercise (the
  reference gets full marks on its public checks and on ``draws`` hidden draws; every listed
  mistake loses points on each of them, and its hint is shown), refuses the file with an
  :class:`ExerciseFileError` naming what failed, and registers the exercises: ``check`` and
  ``select`` then know them, and the grader grades them like the course's (the reference
  runs in the grader's own process only; the worker gets the inputs as plain data).
- ``write_student_version("FILE.py", DIR)`` (``mha assign FILE.py --out DIR``) writes what a
  student gets (:mod:`mha.autograde.student_version`): the statements, the public cases with
  their expected answers and hints, in a JSON file and a notebook; no reference, no hidden case.
- ``load_exercises("<name>.json")`` in the student's notebook registers the student version:
  ``check("their.id", fn)`` then runs the public checks from the stored answers.

A file may also add mistakes to exercises that exist already, the course's or another file's:
a module-level ``MISTAKES = {"masking.causal_mask": [Mistake(...), ...]}``. ``mha report
--draft-mistakes FILE`` writes such a file from a class's answer groups that no hint explains;
each added mistake passes the same checks (and is refused while its hint is still the draft's
placeholder, or when it gives the answers of a mistake the exercise lists already).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
import traceback
from pathlib import Path

from .check import call_outcome, traps_of
from .compare import compare
from .exercise import Exercise, ExerciseFileError, check_fields
from .judge import judge, score_verdicts
from .model import Case, Kind, Mistake
from .registry import EXERCISES, EXTENDED, LOADED, check_ids, extend, register
from .student_version import notebook, read_student_version, student_version

DRAWS = 20  # hidden draws the checks run at load time
# The hint of a draft mistake (mha report --draft-mistakes) until the instructor writes one.
DRAFT_HINT = "WRITE THE HINT"


# ----------------------------------------------------------------------------- loading

def load_exercises(path, *, draws: int = DRAWS) -> list[Exercise]:
    """Load the exercises of an instructor's file (``.py``) or of a student version made
    from one (``.json``, see :func:`write_student_version`), check them, and register them
    so that ``check(id, fn)``, ``select`` and the grader know them. Returns them, in the
    file's order. Raises :class:`ExerciseFileError` naming what failed."""
    path = Path(path)
    if not path.is_file():
        raise ExerciseFileError(f"no exercise file {str(path)!r}: give the path of a .py file that defines "
                                "exercises (or of the .json student version made from one)")
    if path.suffix == ".json":
        exercises = read_student_version(path)
    elif path.suffix == ".py":
        exercises, added = file_contents(path)
        check_ids(exercises, path)
        for ex in exercises:
            check_exercise(ex, draws=draws)
        extended = _extended(exercises, added, path)
        for ex in extended:
            check_exercise(ex, draws=draws)
        register(exercises, path)
        extend(extended, path)
        return exercises + extended
    register(exercises, path)
    return exercises


def exercises_in(path) -> list[Exercise]:
    """The module-level Exercise objects of the Python file ``path``, in the file's order
    (an ``EXERCISES`` tuple or list is looked into too), after checking their fields."""
    exercises, _ = file_contents(path, mistakes=False)
    return exercises


def file_contents(path, *, mistakes: bool = True) -> tuple[list[Exercise], dict[str, list[Mistake]]]:
    """The module-level Exercise objects of the Python file ``path`` (after checking their
    fields), and the mistakes its ``MISTAKES`` dict adds to exercises by id."""
    path = Path(path).resolve()
    name = "mha_exercise_file_" + "".join(c if c.isalnum() else "_" for c in path.stem)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling-free helpers look their module up there
    sys.path.insert(0, str(path.parent))  # a helper module beside the file can be imported
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        where = traceback.extract_tb(e.__traceback__)
        line = next((f.lineno for f in reversed(where) if f.filename == str(path)), None)
        at = f", line {line}" if line else ""
        raise ExerciseFileError(f"{path.name}{at}: loading the file raised {type(e).__name__}: {e}") from e
    finally:
        sys.path.remove(str(path.parent))
    found: list[Exercise] = []
    for value in vars(module).values():
        items = value if isinstance(value, (tuple, list)) else (value,)
        for item in items:
            if isinstance(item, Exercise) and all(item is not f for f in found):
                found.append(item)
    added = _added_mistakes(path, getattr(module, "MISTAKES", None)) if mistakes else {}
    if not found and not added:
        raise ExerciseFileError(f"{path.name} defines no exercise: write module-level "
                                "mha.exercises.Exercise(...) objects (see the instructors' page, "
                                "'Writing your own exercises'), or a MISTAKES dict that adds mistakes to "
                                "exercises by id")
    for ex in found:
        check_fields(ex, path.name)
    for ex in found:  # quick before slow: every exercise's cases take the right arguments
        _cases(ex, "public", ex.public_cases)
        _cases(ex, "hidden", lambda: ex.hidden_cases(0))
    return found, added


def _added_mistakes(path: Path, value) -> dict[str, list[Mistake]]:
    """A file's ``MISTAKES``: exercise id -> the mistakes it adds, checked for their form."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ExerciseFileError(f"{path.name}: MISTAKES must be a dict of exercise id -> [Mistake(...), ...], got "
                                f"{type(value).__name__}")
    out = {}
    for exercise_id, items in value.items():
        items = list(items) if isinstance(items, (list, tuple)) else [items]
        for m in items:
            if not isinstance(m, Mistake) or not isinstance(m.hint, str) or not m.hint or not callable(m.wrong):
                raise ExerciseFileError(f"{path.name}: MISTAKES[{exercise_id!r}] must hold Mistake(hint, wrong) "
                                        f"objects, with a hint and a function; got {m!r}")
        out[str(exercise_id)] = items
    return out


def _extended(mine: list[Exercise], added: dict[str, list[Mistake]], path: Path) -> list[Exercise]:
    """The exercises ``added`` names (this file's, the course's or another file's), each
    with the added mistakes after its own, their fields checked."""
    out = []
    origin = str(path.resolve())
    for exercise_id, items in added.items():
        before = EXTENDED.get(exercise_id) if LOADED.get(exercise_id) == origin else None  # loaded again
        target = next((ex for ex in mine if ex.id == exercise_id), None) or before or EXERCISES.get(exercise_id)
        if target is None:
            raise ExerciseFileError(f"{path.name}: MISTAKES names {exercise_id!r}, which is no exercise of the course "
                                    "or of a file loaded before this one")
        if any(ex is target for ex in mine):
            raise ExerciseFileError(f"{path.name}: add the mistakes of {exercise_id!r} to its own Exercise(mistakes=...) "
                                    "in this file, not in MISTAKES")
        try:
            extended = dataclasses.replace(target, mistakes=(*target.mistakes, *items))
        except ValueError as e:  # two mistakes of one name
            raise ExerciseFileError(f"{path.name}: {e}") from None
        check_fields(extended, path.name)
        out.append(extended)
    return out


# ----------------------------------------------------------------------------- test the tests

def check_exercise(ex: Exercise, *, draws: int = DRAWS) -> None:
    """The test-the-tests checks, under the rules the grader applies (forbidden functions
    trapped, arguments watched): on the public checks and on each of ``draws`` hidden draws,
    the reference gets full marks; in each grading (the public checks and one hidden draw)
    every listed mistake loses points and shows its hint on at least one check. Raises
    :class:`ExerciseFileError` naming what failed."""
    traps, trace = tuple(traps_of(ex)), ex.audit is not None
    calls = [ex.reference] + [m.wrong for m in ex.mistakes]

    def fail(what: str):
        raise ExerciseFileError(f"exercise {ex.id!r}: {what}")

    def judged(cases: list[Case], draw: str) -> list[list]:
        """Per case: the verdicts of the reference and of each mistake (before they are scored)."""
        out = []
        for n, case in enumerate(cases):
            try:
                expected = None if case.raises else ex.expected(case)
            except Exception as e:
                fail(f"the reference raises {type(e).__name__} on {_label(cases, n)} of {draw}: {e}")
            values = None if case.raises else ex.mistake_values(case)
            out.append([judge(ex, case, call_outcome(fn, case, traps=traps, trace=trace), reveal=(j == 0),
                              expected=expected, mistake_values=values) for j, fn in enumerate(calls)])
        return out

    for k, m in enumerate(ex.mistakes):
        if m.hint.strip().upper().startswith(DRAFT_HINT):
            fail(f"{ex.mistake_name(k)!r} still has the draft's hint: write what these students got wrong and what "
                 "to do instead (and give it a name)")
    public = _cases(ex, "public", ex.public_cases)
    if not public:
        fail("public must give at least one Case: students check their answers on the public cases")
    public_verdicts = judged(public, "the public checks")
    draws_ = []
    for seed in range(max(1, draws)):
        hidden = _cases(ex, "hidden", lambda: ex.hidden_cases(seed)) if draws and not ex.prediction else []
        draws_.append((seed, hidden, judged(hidden, f"hidden draw {seed}")))
    _no_repeats(ex, public + [c for _, hidden, _ in draws_ for c in hidden], fail)
    for seed, hidden, hidden_verdicts in draws_:
        cases = public + hidden
        rows = public_verdicts + hidden_verdicts
        for j in range(len(calls)):
            scored = score_verdicts(ex, cases, [row[j] for row in rows])
            verdicts = scored.verdicts
            if j == 0:
                for n, v in enumerate(verdicts):
                    if not v.passed:
                        draw = "the public checks" if n < len(public) else f"hidden draw {seed}"
                        k = n if n < len(public) else n - len(public)
                        fail(f"the reference does not get full marks: {_label(cases, n, k)} of {draw} fails "
                             f"({v.message})")
                continue
            k, m = j - 1, ex.mistakes[j - 1]
            what = f"{ex.mistake_name(k)!r} ({_short(m.hint)})"
            draw = f"the public checks and hidden draw {seed}" if hidden else "the public checks"
            if scored.passed == scored.total:
                fail(f"{what} gets full marks on {draw}: add a case on which it gives another answer "
                     "than the reference")
            if not any(v.kind is Kind.MISTAKE and ex.mistakes[v.mistake].hint == m.hint for v in verdicts):
                twins = _twins(ex, k, cases)
                why = (f"{', '.join(twins)} give{'s' if len(twins) == 1 else ''} the same answers wherever it "
                       "is wrong, so an answer cannot tell them apart: add a case on which they differ"
                       if twins else "it fails only where its answer is not a value the checks compare "
                       "(it raises, or has the wrong type or shape), where no hint can name it")
                fail(f"{what} loses points on {draw} but its hint is never shown: {why}")


def _no_repeats(ex: Exercise, cases: list[Case], fail) -> None:
    """Refuse a mistake that gives the answers of a mistake listed before it on every case
    (raising where it raises): it is that mistake, whose hint its answers get already."""
    values = [ex.mistake_values(c) for c in cases if not c.raises]
    for k in range(1, len(ex.mistakes)):
        for j in range(k):
            if values and all((w[k] is None) == (w[j] is None) and (w[k] is None or compare(
                    ex.answer, w[j], w[k], ex.tolerance)[0]) for w in values):
                fail(f"{ex.mistake_name(k)!r} ({_short(ex.mistakes[k].hint)}) gives the answers of "
                     f"{ex.mistake_name(j)!r} on every check: it is that mistake, whose hint these answers get "
                     "already; leave it out")


def _cases(ex: Exercise, which: str, make) -> list[Case]:
    try:
        cases = make()
    except Exception as e:
        raise ExerciseFileError(f"exercise {ex.id!r}: {which} raised {type(e).__name__}: {e}") from e
    if not isinstance(cases, list) or not all(isinstance(c, Case) for c in cases):
        raise ExerciseFileError(f"exercise {ex.id!r}: {which}(generator) must return a list of Case, "
                                f"got {type(cases).__name__}")
    for c in cases:
        if not isinstance(c.args, tuple) or len(c.args) != len(ex.params):
            raise ExerciseFileError(f"exercise {ex.id!r}: a {which} Case has {_count(c.args)} arguments, and "
                                    f"{ex.function} takes {len(ex.params)} ({', '.join(ex.params)}): give "
                                    "Case a tuple, e.g. Case((x,)) for one argument")
    return cases


def _count(args) -> str:
    return str(len(args)) if isinstance(args, tuple) else f"not a tuple of ({type(args).__name__})"


def _label(cases: list[Case], n: int, k: int | None = None) -> str:
    return f"check {(n if k is None else k) + 1}" + (f" ({cases[n].note})" if cases[n].note else "")


def _short(text: str, n: int = 50) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def _twins(ex: Exercise, k: int, cases) -> list[str]:
    """The other mistakes (with another hint) that answer as mistake ``k`` on every case."""
    values = [ex.mistake_values(c) for c in cases if not c.raises]
    out = []
    for j, other in enumerate(ex.mistakes):
        if j == k or other.hint == ex.mistakes[k].hint:
            continue
        if all(w[k] is not None and w[j] is not None and compare(ex.answer, w[j], w[k], ex.tolerance)[0] for w in values):
            out.append(repr(ex.mistake_name(j)))
    return out




# ----------------------------------------------------------------------------- the student version

def write_student_version(path, out_dir, *, draws: int = DRAWS) -> list[Path]:
    """Check the instructor's file ``path`` (as :func:`load_exercises` does) and write its
    student version into ``out_dir``: ``<name>.json`` (for ``load_exercises`` in the
    student's notebook) and ``<name>.ipynb`` (a notebook with a stub and a check cell per
    exercise). Returns the two paths."""
    path = Path(path)
    if path.suffix != ".py":
        raise ExerciseFileError(f"{path.name}: give the instructor's .py file of exercises")
    exercises = exercises_in(path)
    check_ids(exercises, path)  # what the student's load_exercises would refuse
    for ex in exercises:
        check_exercise(ex, draws=draws)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = out_dir / f"{path.stem}.json"
    data.write_text(json.dumps(student_version(exercises, source=path.name)), encoding="utf-8")
    handout = out_dir / f"{path.stem}.ipynb"
    handout.write_text(json.dumps(notebook(exercises, data.name), indent=1), encoding="utf-8")
    return [data, handout]


