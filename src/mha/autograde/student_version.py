"""The student version of an instructor's exercises: what ``mha assign`` writes and the
student's notebook loads, with no reference and no hidden case.

``DIR/<name>.json`` holds each exercise's statement, public cases with their expected answers
and each listed mistake's answers, and hints (arrays as base64 raw bytes with a JSON index, as
the grader's wire format: nothing to unpickle); ``DIR/<name>.ipynb`` is a notebook with a stub
and a ``check`` cell per exercise. ``load_exercises("<name>.json")`` in that notebook reads it
back as :class:`StudentExercise` objects, whose public checks run from the stored answers.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path

from .exercise import Exercise, ExerciseFileError, check_fields
from .model import Case, Mistake, clone_args
from .wire import MalformedResult, decode_input, encode, pack, unpack, validate

FORMAT = "mha-student-exercises"
VERSION = 1


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




def notebook(exercises: list[Exercise], data_name: str) -> dict:
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

