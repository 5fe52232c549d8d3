"""Auto-graded exercises: definitions, and ``check`` for instant feedback in a notebook.

Each lesson defines its exercises' functions with the solution between
``# BEGIN SOLUTION`` and ``# END SOLUTION`` and calls ``check("dims.split_heads",
split_heads)`` right after. ``check`` runs the *public* checks in the student's own
kernel: it teaches, it does not grade. Grades come from ``mha grade`` (see
:mod:`mha.grading`), which runs student code in a separate, limited process.
"""

from __future__ import annotations

import importlib
import pkgutil

from ._core import Case, Exercise, Mistake, Op, Outcome, Verdict
from .feedback import CheckResult, check


def _discover() -> dict[str, Exercise]:
    """Every module of this package not starting with "_" (feedback aside) defines a tuple
    ``EXERCISES``; they are listed in lesson order, then in the order each module gives."""
    found: list[Exercise] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name == "feedback":
            continue
        found.extend(importlib.import_module(f"{__name__}.{info.name}").EXERCISES)
    order = {ex.id: i for i, ex in enumerate(found)}
    found.sort(key=lambda ex: (ex.lesson, order[ex.id]))
    taken: dict[str, str] = {}
    for ex in found:  # the grader finds a student's answer by its function's name
        if ex.function in taken:
            raise RuntimeError(f"exercises {taken[ex.function]} and {ex.id} both ask for a "
                               f"function called {ex.function!r}; names must be unique")
        taken[ex.function] = ex.id
    return {ex.id: ex for ex in found}


EXERCISES: dict[str, Exercise] = _discover()


def get(exercise_id: str) -> Exercise:
    """The exercise called ``exercise_id`` (e.g. ``"dims.split_heads"``)."""
    try:
        return EXERCISES[exercise_id]
    except (KeyError, TypeError):
        known = ", ".join(EXERCISES)
        raise KeyError(f"exercise_id must be one of {known}; got {exercise_id!r}") from None


def select(patterns: list[str] | None = None) -> list[Exercise]:
    """Exercises whose id starts with one of ``patterns`` (all when None or empty)."""
    if not patterns:
        return list(EXERCISES.values())
    chosen = [e for e in EXERCISES.values() if any(e.id == p or e.id.startswith(p.rstrip(".") + ".")
                                                   or e.lesson == p for p in patterns)]
    if not chosen:
        raise ValueError(f"no exercise matches {patterns}; ids are {', '.join(EXERCISES)} "
                         f"and lessons {', '.join(sorted({e.lesson for e in EXERCISES.values()}))}")
    return chosen


from ._load import ExerciseFileError, load_exercises, write_student_version  # noqa: E402 - needs EXERCISES

__all__ = ["check", "CheckResult", "EXERCISES", "get", "select", "Exercise", "Case", "Mistake",
           "Op", "Outcome", "Verdict", "load_exercises", "write_student_version", "ExerciseFileError"]
