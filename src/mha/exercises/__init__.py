"""Auto-graded exercises: definitions, and ``check`` for instant feedback in a notebook.

Each lesson defines its exercises' functions with the solution between
``# BEGIN SOLUTION`` and ``# END SOLUTION`` and calls ``check("dims.split_heads",
split_heads)`` right after. ``check`` runs the *public* checks in the student's own
kernel: it teaches, it does not grade. Grades come from ``mha grade`` (see
:mod:`mha.grading`), which runs student code in a separate, limited process.
"""

from __future__ import annotations

from . import dims, heads, masking, params
from ._core import Case, Exercise, Mistake, Outcome, Verdict
from .feedback import CheckResult, check

EXERCISES: dict[str, Exercise] = {
    ex.id: ex for mod in (heads, dims, params, masking) for ex in mod.EXERCISES
}


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


__all__ = ["check", "CheckResult", "EXERCISES", "get", "select", "Exercise", "Case", "Mistake",
           "Outcome", "Verdict"]
