"""Every exercise ``check`` and the grader know, by id: the course's, then those loaded from
instructors' files (:mod:`mha.autograde.instructor`).

The course's exercises are content, kept apart from this framework in ``mha.exercises``: one
module per lesson, named ``lessonNN_<lesson>``, each with a tuple ``EXERCISES`` in the page's
order. :func:`course` is the one place the framework reads them; ``EXERCISES`` reads them
there on first use.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator, MutableMapping
from pathlib import Path

from .exercise import Exercise, ExerciseFileError

# The package of the course's exercises, and the form of its lessons' module names.
COURSE = "mha.exercises"
LESSON_MODULE = re.compile(r"lesson\d\d_\w+$")


def course() -> list[Exercise]:
    """The course's exercises: every ``lessonNN_*`` module of ``mha.exercises``, in lesson order,
    each in the order its module gives. Refuses two exercises that ask for one function name
    (the grader finds an answer by its function's name)."""
    package = importlib.import_module(COURSE)
    found: list[Exercise] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if LESSON_MODULE.match(info.name):
            found.extend(importlib.import_module(f"{COURSE}.{info.name}").EXERCISES)
    taken: dict[str, str] = {}
    for ex in found:
        if ex.function in taken:
            raise RuntimeError(f"exercises {taken[ex.function]} and {ex.id} both ask for a "
                               f"function called {ex.function!r}; names must be unique")
        taken[ex.function] = ex.id
    return found


class Registry(MutableMapping):
    """Exercises by id, in order: the course's (read on first use), then those registered."""

    def __init__(self):
        self._exercises: dict[str, Exercise] | None = None

    @property
    def _all(self) -> dict[str, Exercise]:
        if self._exercises is None:
            self._exercises = {ex.id: ex for ex in course()}
        return self._exercises

    def __getitem__(self, exercise_id: str) -> Exercise:
        return self._all[exercise_id]

    def __setitem__(self, exercise_id: str, ex: Exercise) -> None:
        self._all[exercise_id] = ex

    def __delitem__(self, exercise_id: str) -> None:
        del self._all[exercise_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all)

    def __len__(self) -> int:
        return len(self._all)

    def __repr__(self) -> str:
        return f"Registry({', '.join(self._all)})"


EXERCISES = Registry()

# exercise id -> the file it was loaded from (so that loading a file again replaces its exercises)
LOADED: dict[str, str] = {}
# exercise id -> the exercise as it was before a file's MISTAKES added to it (restored when unregistered)
EXTENDED: dict[str, Exercise] = {}


def get(exercise_id: str) -> Exercise:
    """The exercise called ``exercise_id`` (e.g. ``"dims.split_heads"``)."""
    try:
        return EXERCISES[exercise_id]
    except (KeyError, TypeError):
        known = ", ".join(EXERCISES)
        raise KeyError(f"exercise_id must be one of {known}; got {exercise_id!r}") from None


def select(patterns: list[str] | None = None) -> list[Exercise]:
    """Exercises whose id starts with one of ``patterns``, or of the lesson a pattern names (all
    when None or empty)."""
    if not patterns:
        return list(EXERCISES.values())
    chosen = [e for e in EXERCISES.values() if any(e.id == p or e.id.startswith(p.rstrip(".") + ".")
                                                   or e.lesson == p for p in patterns)]
    if not chosen:
        raise ValueError(f"no exercise matches {patterns}; ids are {', '.join(EXERCISES)} "
                         f"and lessons {', '.join(sorted({e.lesson for e in EXERCISES.values()}))}")
    return chosen


def register(exercises: list[Exercise], origin) -> None:
    """Add ``exercises``, loaded from the file ``origin``, refusing an id or a function name
    that the course, another file, or another exercise of this file already has. Loading the
    same file again replaces what it registered before."""
    check_ids(exercises, origin)
    unregister(origin)
    origin = str(Path(origin).resolve())
    for ex in exercises:
        EXERCISES[ex.id] = ex
        LOADED[ex.id] = origin


def extend(exercises: list[Exercise], origin) -> None:
    """Put ``exercises``, known ones with mistakes that the file ``origin`` adds (its
    ``MISTAKES``), in the place of the exercises of the same ids; ``unregister(origin)``
    puts the originals back."""
    origin = str(Path(origin).resolve())
    for ex in exercises:
        EXTENDED.setdefault(ex.id, EXERCISES[ex.id])
        EXERCISES[ex.id] = ex
        LOADED[ex.id] = origin


def unregister(path) -> None:
    """Forget the exercises loaded from ``path`` (and the mistakes it added to others)."""
    origin = str(Path(path).resolve())
    for i in [i for i, o in LOADED.items() if o == origin]:
        if i in EXTENDED:
            EXERCISES[i] = EXTENDED.pop(i)
        else:
            EXERCISES.pop(i, None)
        LOADED.pop(i, None)


def check_ids(exercises: list[Exercise], origin) -> None:
    """Refuse, as ``register`` would, an id or a function name that the course, another
    file, or another exercise of this file already has; registers nothing."""
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
