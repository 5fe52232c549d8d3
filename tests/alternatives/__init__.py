"""Correct solutions of every exercise, written differently from the references.

One module per exercise module (``heads.py`` for ``mha.exercises.heads``, ...), each with
``CORRECT = {"<module>.<function>": [fn_a, fn_b, ...]}``: at least two correct answers per
exercise, written differently from the reference and from each other (einsum, loops over
heads, a float64 round trip, numpy, unbind/cat, ...). ``tests/test_the_tests.py`` grades
them over many hidden draws in every dtype the exercise accepts, in the notebook's way and
once through the sandboxed grader; so a reference that rejects a correct answer, a
tolerance that is too tight, or a dtype the grader mishandles shows up there.

Write each alternative as a plain top-level function of its arguments, with imports and
helpers at module level (the sandbox test ships a function together with the helpers,
imports and constants of its module that it uses), and without ``mha``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable


def load() -> dict[str, list[Callable]]:
    """Every module's ``CORRECT``, merged: exercise id -> correct solutions."""
    found: dict[str, list[Callable]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for exercise_id, fns in getattr(module, "CORRECT", {}).items():
            found.setdefault(exercise_id, []).extend(fns)
    return found
