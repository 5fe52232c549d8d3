"""A held-out set of answers to every exercise: correct ones written differently from the
references, classic wrong ones, and shortcuts through forbidden functions.

One module per first part of the exercises' ids (``heads.py`` for ``heads.single_head``,
``heads.batched_head`` and ``heads.multi_query_head``, ...), each with
- ``CORRECT = {"<module>.<function>": [fn_a, fn_b, ...]}``: at least two correct answers per
  exercise, written differently from the reference and from each other (einsum, loops over
  heads, a float64 round trip, numpy, unbind/cat, ...);
- ``WRONG``: at least two classic wrong answers per exercise, other than the exercise's own
  listed mistakes (a wrong axis, scale or order, an argument changed in place, an error
  message that names nothing...);
- ``FORBIDDEN`` (where the exercise forbids something beyond ``mha``): right values through a
  function the statement forbids.

``tests/test_the_tests.py`` grades them over many hidden draws in every dtype the exercise
accepts, in the notebook's way and through the sandboxed grader: every correct answer gets
full marks on every draw, every wrong one and every shortcut loses points on every draw,
and ``check`` agrees with the grader on each of them. So a reference that rejects a correct
answer, a tolerance that is too tight, a case that lets a mistake through, or a dtype the
grader mishandles shows up there.

Write each alternative as a plain top-level function of its arguments, with imports and
helpers at module level (the sandbox test ships a function together with the helpers,
imports and constants of its module that it uses), and without ``mha``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable


def load(kind: str = "CORRECT") -> dict[str, list[Callable]]:
    """Every module's ``kind`` (``CORRECT``, ``WRONG`` or ``FORBIDDEN``), merged: exercise id
    -> answers."""
    found: dict[str, list[Callable]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for exercise_id, fns in getattr(module, kind, {}).items():
            found.setdefault(exercise_id, []).extend(fns)
    return found
