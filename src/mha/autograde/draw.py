"""Random draws that exercises share: the inputs of their cases, made from the generator the
exercise is given (a fixed seed for the public checks, a fresh one per grading for the hidden
ones), and a draw that keeps an exercise's named mistakes apart."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from .compare import compare
from .model import Called, Case, Outcome

if TYPE_CHECKING:
    from .exercise import Exercise


def randn(g: torch.Generator, *shape: int, dtype=torch.float32, scale: float = 1.0) -> torch.Tensor:
    """Normal values of the given shape and dtype (drawn in float64, so that a draw does not
    depend on the dtype), times ``scale``."""
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def randint(g: torch.Generator, low: int, high: int) -> int:
    """A random int in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=g))


def other_than(g: torch.Generator, low: int, high: int, avoid) -> int:
    """A random int in [low, high] not in ``avoid`` (a size that must differ from others, so
    that an answer mixing them up gives another result)."""
    choices = [n for n in range(low, high + 1) if n not in avoid]
    return choices[randint(g, 0, len(choices) - 1)]


def separating(make: Callable[[], Case], ex: Exercise, names: tuple[str, ...] | None = None,
               tries: int = 20) -> Case:
    """A case from ``make()`` on which each listed mistake of ``ex`` (those called ``names``, or
    all) answers differently from the reference and from every other one with another hint, so
    that it loses the check and shows its own hint there; redrawn up to ``tries`` times (the last
    draw is kept if none separates them all)."""
    chosen = [k for k, m in enumerate(ex.mistakes) if names is None or m.name in names]

    def separates(case) -> bool:
        try:
            right, wrong = ex.expected(case), ex.mistake_values(case)
        except Exception:
            return False
        for k in chosen:
            if wrong[k] is None or compare(ex.answer, right, wrong[k], ex.tolerance)[0]:
                return False
            if any(j != k and ex.mistakes[j].hint != ex.mistakes[k].hint and wrong[j] is not None
                   and compare(ex.answer, wrong[j], wrong[k], ex.tolerance)[0] for j in range(len(wrong))):
                return False
        return True

    case = make()
    for _ in range(tries - 1):
        if separates(case):
            return case
        case = make()
    return case


def returned_nan(outcome: Outcome) -> bool:
    """Whether a call returned a tensor holding NaN where the exercise's diagnosis looks for
    one (a row with nothing to attend to, an exp that overflowed)."""
    return (outcome.status == Called.VALUE and outcome.value.kind == "tensor"
            and bool(np.isnan(outcome.value.data.astype(np.float64)).any()))
