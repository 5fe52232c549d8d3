"""Held-out wrong answers, each classified by hand with the slip it really makes: the
measurement of whether a named hint names the student's real slip.

Written for issue 36 as students would write them, after reading each exercise's statement:
new answers, none of them a copy of a listed mistake's code or of ``tests/alternatives``'
``WRONG`` ones (a listed slip may be made, in the student's own code). One module per first
part of the exercises' ids, each with ``SLIPS = {"<id>": [Slip(fn, makes, names), ...]}``:

- ``makes``: the slip, in words, as read off the code by hand;
- ``names``: the names under which the course may name that slip, those of the exercise's
  listed mistakes (``Mistake.name``) or of its error hints (``ErrorHint.name``); empty for a
  slip the course does not list, which must then get no named hint at all (a generic
  diagnosis, or nothing).

``tests/test_the_tests.py`` grades every answer on the public checks and on each hidden draw,
as the grader does, and counts: named hints that name a slip the answer did not make (at most
2% of the gradings that name one), and gradings whose every failing check says nothing more
than "wrong values" or "the prediction is off" (at most 5%, predictions included). Every
answer must lose points on every draw.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Slip:
    """A wrong answer, the slip it makes (by hand), and the course's names for that slip."""

    fn: Callable
    makes: str
    names: tuple[str, ...] = ()


def load() -> dict[str, list[Slip]]:
    """Every module's ``SLIPS``, merged: exercise id -> slips."""
    found: dict[str, list[Slip]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for exercise_id, slips in getattr(module, "SLIPS", {}).items():
            found.setdefault(exercise_id, []).extend(slips)
    return found
