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
  student gets: ``DIR/<name>.json`` (statements, the public cases with their expected answers
  and each listed mistake's answers, hints; no reference, no hidden case) and a notebook
  ``DIR/<name>.ipynb`` with a stub and a ``check`` cell per exercise.
- ``load_exercises("<name>.json")`` in the student's notebook registers the student version:
  ``check("their.id", fn)`` then runs the public checks from the stored answers.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from mha._plain import MalformedResult, decode_input, encode, pack, unpack, validate

from ._core import Case, Exercise, Mistake, clone_args, compare, settle

FORMAT = "mha-student-exercises"
VERSION = 1
ANSWERS = ("tensor", "tensors", "int", "shapes", "number")
DRAWS = 20  # hidden draws the checks run at load time

# exercise id -> the file it was loaded from (so that running a notebook cell twice reloads)
LOADED: dict[str, str] = {}


class ExerciseFileError(ValueError):
    """An exercise file that cannot be used: the message names the exercise and what failed."""


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
        exercises = exercises_in(path)
        check_ids(exercises, path)
        for ex in exercises:
            check_exercise(ex, draws=draws)
    else:
        raise ExerciseFileError(f"{path.name}: an exercise file is a .py file (or the .json student version "
                                f"made from one), not {path.suffix or 'a file without a suffix'}")
    register(exercises, path)
    return exercises


def exercises_in(path) -> list[Exercise]:
    """The module-level Exercise objects of the Python file ``path``, in the file's order
    (an ``EXERCISES`` tuple or list is looked into too), after checking their fields."""
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
    if not found:
        raise ExerciseFileError(f"{path.name} defines no exercise: write module-level "
                                "mha.exercises.Exercise(...) objects (see the instructors' page, "
                                "'Writing your own exercises')")
    for ex in found:
        check_fields(ex, path.name)
    for ex in found:  # quick before slow: every exercise's cases take the right arguments
        _cases(ex, "public", ex.public_cases)
        _cases(ex, "hidden", lambda: ex.hidden_cases(0))
    return found


def check_fields(ex: Exercise, where: str = "") -> None:
    """Refuse an exercise whose fields the grader could not use, naming the field."""
    import keyword

    at = f"{where}: " if where else ""
    name = f"exercise {ex.id!r}" if isinstance(ex.id, str) else "an exercise"

    def fail(what: str):
        raise ExerciseFileError(f"{at}{name}: {what}")

    if not isinstance(ex.id, str) or not ex.id or not all(part.isidentifier() for part in ex.id.split(".")):
        fail(f"id must be a name such as 'softmax.temperature' (letters, digits, _ and dots), got {ex.id!r}")
    for attr in ("title", "lesson", "statement"):
        if not isinstance(getattr(ex, attr), str):
            fail(f"{attr} must be a string, got {type(getattr(ex, attr)).__name__}")
    if not isinstance(ex.function, str) or not ex.function.isidentifier() or keyword.iskeyword(ex.function):
        fail(f"function must be the name of the function students write, got {ex.function!r}")
    if (not isinstance(ex.params, (tuple, list))
            or not all(isinstance(p, str) and p.isidentifier() for p in ex.params)):
        fail(f"params must be a tuple of parameter names, got {ex.params!r}")
    if isinstance(ex.points, bool) or not isinstance(ex.points, (int, float)) or not ex.points > 0:
        fail(f"points must be a positive number, got {ex.points!r}")
    if ex.answer not in ANSWERS:
        fail(f"answer must be one of {', '.join(map(repr, ANSWERS))}, got {ex.answer!r}")
    for attr in ("reference", "public", "hidden"):
        if not callable(getattr(ex, attr)):
            fail(f"{attr} must be a function, got {type(getattr(ex, attr)).__name__}")
    if not isinstance(ex.mistakes, (tuple, list)):
        fail(f"mistakes must be a tuple of Mistake(hint, wrong), got {type(ex.mistakes).__name__}")
    for k, m in enumerate(ex.mistakes):
        if not isinstance(m, Mistake) or not isinstance(m.hint, str) or not m.hint or not callable(m.wrong):
            fail(f"mistake {k + 1} must be Mistake(hint, wrong) with a hint and a function, got {m!r}")
    names = [ex.mistake_name(k) for k in range(len(ex.mistakes))]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        fail(f"two mistakes are named {twice[0]!r}: names must differ")
    if (not isinstance(ex.forbidden, (tuple, list)) or not all(isinstance(f, str) for f in ex.forbidden)):
        fail(f"forbidden must be a tuple of dotted names such as 'torch.softmax', got {ex.forbidden!r}")
    unknown = [p for p in ex.may_modify if p not in ex.params]
    if unknown:
        fail(f"may_modify names {unknown[0]!r}, which is not one of params {tuple(ex.params)}")


# ----------------------------------------------------------------------------- test the tests

def check_exercise(ex: Exercise, *, draws: int = DRAWS) -> None:
    """The test-the-tests checks, under the rules the grader applies (forbidden functions
    trapped, arguments watched): on the public checks and on each of ``draws`` hidden draws,
    the reference gets full marks; in each grading (the public checks and one hidden draw)
    every listed mistake loses points and shows its hint on at least one check. Raises
    :class:`ExerciseFileError` naming what failed."""
    from .feedback import call_outcome, traps_of

    traps, trace = tuple(traps_of(ex)), ex.audit is not None
    calls = [ex.reference] + [m.wrong for m in ex.mistakes]

    def fail(what: str):
        raise ExerciseFileError(f"exercise {ex.id!r}: {what}")

    def judged(cases: list[Case], draw: str) -> list[list]:
        """Per case: the verdicts of the reference and of each mistake (before ``settle``)."""
        out = []
        for n, case in enumerate(cases):
            try:
                expected = None if case.raises else ex.expected(case)
            except Exception as e:
                fail(f"the reference raises {type(e).__name__} on {_label(cases, n)} of {draw}: {e}")
            values = None if case.raises else ex.mistake_values(case)
            out.append([ex.judge(case, call_outcome(fn, case, traps=traps, trace=trace), reveal=(j == 0),
                                 expected=expected, mistake_values=values) for j, fn in enumerate(calls)])
        return out

    public = _cases(ex, "public", ex.public_cases)
    if not public:
        fail("public must give at least one Case: students check their answers on the public cases")
    public_verdicts = judged(public, "the public checks")
    for seed in range(max(1, draws)):
        hidden = _cases(ex, "hidden", lambda: ex.hidden_cases(seed)) if draws and not ex.prediction else []
        cases = public + hidden
        rows = public_verdicts + judged(hidden, f"hidden draw {seed}")
        for j in range(len(calls)):
            verdicts = settle(cases, [row[j] for row in rows])
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
            if all(v.passed for v in verdicts):
                fail(f"{what} gets full marks on {draw}: add a case on which it gives another answer "
                     "than the reference")
            if not any(not v.passed and v.mistake is not None and ex.mistakes[v.mistake].hint == m.hint
                       for v in verdicts):
                twins = _twins(ex, k, cases)
                why = (f"{', '.join(twins)} give{'s' if len(twins) == 1 else ''} the same answers wherever it "
                       "is wrong, so an answer cannot tell them apart: add a case on which they differ"
                       if twins else "it fails only where its answer is not a value the checks compare "
                       "(it raises, or has the wrong type or shape), where no hint can name it")
                fail(f"{what} loses points on {draw} but its hint is never shown: {why}")


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


# ----------------------------------------------------------------------------- registering

def register(exercises: list[Exercise], origin) -> None:
    """Add ``exercises`` to ``mha.exercises.EXERCISES``, refusing an id or a function name
    that the course, another file, or another exercise of this file already has. Loading
    the same file again replaces what it registered before."""
    from . import EXERCISES

    check_ids(exercises, origin)
    origin = str(Path(origin).resolve())
    mine = {i for i, o in LOADED.items() if o == origin}
    for i in mine:
        EXERCISES.pop(i, None)
        LOADED.pop(i, None)
    for ex in exercises:
        EXERCISES[ex.id] = ex
        LOADED[ex.id] = origin


def check_ids(exercises: list[Exercise], origin) -> None:
    """Refuse, as ``register`` would, an id or a function name that the course, another
    file, or another exercise of this file already has; registers nothing."""
    from . import EXERCISES

    origin = str(Path(origin).resolve())
    mine = {i for i, o in LOADED.items() if o == origin}
    others = {i: e for i, e in EXERCISES.items() if i not in mine}
    functions = {e.function: i for i, e in others.items()}
    seen_ids: dict[str, str] = {}
    seen_functions: dict[str, str] = {}
    where = Path(origin).name
    for ex in exercises:
        if ex.id in others:
            owner = "the course" if ex.id not in LOADED else Path(LOADED[ex.id]).name
            raise ExerciseFileError(f"{where}: exercise {ex.id!r} has the id of an exercise of {owner}: "
                                    "choose another id (e.g. with a prefix of your own)")
        if ex.function in functions:
            raise ExerciseFileError(f"{where}: exercise {ex.id!r} asks for a function called {ex.function!r}, as "
                                    f"exercise {functions[ex.function]} does: the grader finds answers by their "
                                    "function's name, so choose another")
        if ex.id in seen_ids:
            raise ExerciseFileError(f"{where}: two exercises have the id {ex.id!r}")
        if ex.function in seen_functions:
            raise ExerciseFileError(f"{where}: exercises {seen_functions[ex.function]!r} and {ex.id!r} both ask for "
                                    f"a function called {ex.function!r}")
        seen_ids[ex.id] = ex.function
        seen_functions[ex.function] = ex.id


def unregister(path) -> None:
    """Forget the exercises loaded from ``path``."""
    from . import EXERCISES

    origin = str(Path(path).resolve())
    for i in [i for i, o in LOADED.items() if o == origin]:
        EXERCISES.pop(i, None)
        LOADED.pop(i, None)


# ----------------------------------------------------------------------------- student version

@dataclass
class StoredCase(Case):
    """A public case of a student version, with the answers the instructor's file gave."""

    expected: object = None                        # a validated Value, or None for a case that raises
    mistake_answers: list = field(default_factory=list)  # one Value (or None) per listed mistake


def _no_reference(*args):
    raise ExerciseFileError("this is the student version of the exercise: it has no reference; "
                            "grade with the instructor's file")


@dataclass
class StudentExercise(Exercise):
    """An exercise read from a student version: its public cases carry their expected answers
    and the listed mistakes' answers; there is no reference and no hidden case."""

    stored: list = field(default_factory=list)

    def public_cases(self) -> list[Case]:
        return list(self.stored)

    def hidden_cases(self, seed: int) -> list[Case]:
        return []

    def expected(self, case):
        return case.expected

    def mistake_values(self, case):
        return list(case.mistake_answers)


def student_version(exercises: list[Exercise], *, source: str = "") -> dict:
    """The student version of ``exercises`` as a JSON-able dict (arrays as base64 raw bytes
    with a JSON index, as the grader's wire format: nothing to unpickle)."""
    arrays: dict = {}
    out = []
    for ex in exercises:
        cases = []
        for case in ex.public_cases():
            expected = None if case.raises else encode(ex.reference(*clone_args(case.args)), arrays)
            wrong = []
            for m in ex.mistakes:
                if case.raises:
                    wrong.append(None)
                    continue
                try:
                    wrong.append(encode(m.wrong(*clone_args(case.args)), arrays))
                except Exception:
                    wrong.append(None)
            cases.append({"args": [encode(a, arrays) for a in case.args], "raises": case.raises, "note": case.note,
                          "noncontiguous": [int(i) for i in case.noncontiguous], "names": list(case.names),
                          "expected": expected, "mistakes": wrong})
        out.append({"id": ex.id, "title": ex.title, "lesson": ex.lesson, "statement": ex.statement,
                    "function": ex.function, "params": list(ex.params), "points": ex.points, "answer": ex.answer,
                    "forbidden": list(ex.forbidden), "may_modify": list(ex.may_modify),
                    "audited": ex.audit is not None, "tolerance": ex.tolerance,
                    "mistakes": [{"hint": m.hint, "name": m.name} for m in ex.mistakes], "cases": cases})
    index, data = pack(arrays)
    return {"format": FORMAT, "version": VERSION, "source": source, "exercises": out, "arrays": index,
            "data": base64.b64encode(data).decode("ascii")}


def read_student_version(path) -> list[Exercise]:
    """The exercises of a student version written by :func:`write_student_version`."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ExerciseFileError(f"{path.name} is not a student version of exercises (not JSON: {e})") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ExerciseFileError(f"{path.name} is not a student version of exercises (made by `mha assign`)")
    if doc.get("version") != VERSION:
        raise ExerciseFileError(f"{path.name} was made by another version of the course package "
                                f"(format version {doc.get('version')!r}, this one reads {VERSION})")
    try:
        arrays = unpack(doc["arrays"], base64.b64decode(doc["data"]))
        exercises = [_student_exercise(e, arrays) for e in doc["exercises"]]
    except (KeyError, TypeError, ValueError, MalformedResult) as e:
        raise ExerciseFileError(f"{path.name}: a damaged student version ({type(e).__name__}: {e})") from e
    for ex in exercises:
        check_fields(ex, path.name)
    return exercises


def _student_exercise(e: dict, arrays: dict) -> StudentExercise:
    mistakes = tuple(Mistake(m["hint"], _no_reference, name=m.get("name", "")) for m in e["mistakes"])
    stored = []
    for c in e["cases"]:
        value = (lambda tree: None if tree is None else validate(tree, arrays))
        stored.append(StoredCase(tuple(decode_input(a, arrays) for a in c["args"]), raises=c["raises"],
                                 note=c["note"], noncontiguous=tuple(c["noncontiguous"]), names=tuple(c["names"]),
                                 expected=value(c["expected"]), mistake_answers=[value(w) for w in c["mistakes"]]))
    return StudentExercise(
        id=e["id"], title=e["title"], lesson=e["lesson"], function=e["function"], params=tuple(e["params"]),
        points=e["points"], reference=_no_reference, public=lambda g: [], hidden=lambda g: [], answer=e["answer"],
        mistakes=mistakes, forbidden=tuple(e["forbidden"]), may_modify=tuple(e["may_modify"]),
        statement=e["statement"], stored=stored, tolerance=float(e.get("tolerance", 0.0)))


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
    notebook = out_dir / f"{path.stem}.ipynb"
    notebook.write_text(json.dumps(_notebook(exercises, data.name), indent=1), encoding="utf-8")
    return [data, notebook]


def _notebook(exercises: list[Exercise], data_name: str) -> dict:
    from mha.notebooks import STUB

    def md(text):
        return {"cell_type": "markdown", "metadata": {}, "source": text}

    def code(text):
        return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": text}

    cells = [md("# Exercises\n\nWrite each function, then run the check cell below it: it runs the public "
                "checks (not your grade: the grader also runs hidden checks)."),
             code(f"import torch\n\nfrom mha.exercises import check, load_exercises\n\n"
                  f"exercises = load_exercises({data_name!r})  # the exercises' public checks, for check\n"
                  "[ex.id for ex in exercises]")]
    for ex in exercises:
        text = f"## {ex.title}\n\n" + (ex.statement.strip() + "\n\n" if ex.statement.strip() else "")
        text += f"The function: `{ex.signature}`; {ex.points:g} points."
        if ex.audit is not None:
            text += " The grader also checks how the answer is computed."
        cells.append(md(text))
        cells.append(code(f"def {ex.function}({', '.join(ex.params)}):\n    {STUB}"))
        cells.append(code(f"check({ex.id!r}, {ex.function})"))
    return {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                        "name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}


__all__ = ["load_exercises", "write_student_version", "ExerciseFileError", "check_exercise", "exercises_in",
           "read_student_version", "StudentExercise", "unregister"]
