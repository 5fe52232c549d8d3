"""Words for what a wrong answer got wrong, where no listed mistake of its exercise explains it.

``common_diagnosis`` reads the error an answer raised (a float mask combined with ``&``, a
kernel lane past the end of a tensor...). ``value_diagnosis`` compares a wrong value with the
right one: the same values up to one factor, transposed, in another order, a mask wrong only on
one diagonal... Both are words only: they are shown for hidden checks too, so they never
quote a value. Neither may break grading: anything unexpected gives no diagnosis.

An exercise's own diagnosis of an error (``Exercise.explain``) is built from :class:`ErrorHint` hints
by :class:`Explain`: each names one slip and is shown only for the exception that slip raises,
recognised by its type AND its text (and, where the text carries sizes, by the case's sizes),
never for every exception of a type: a hint that names a slip the answer did not make sends
the student to fix code that is right.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .compare import TOLERANCE, compare_tensor
from .model import Case, Outcome
from .wire import Value


@dataclass(frozen=True)
class ErrorHint:
    """The hint for one slip that raises: shown when the call raised one of ``types`` (a name
    of the exception's class or of a base) with a message in which one of the regular
    expressions ``texts`` is found, and ``when(case, match)`` (if given) holds, where ``match``
    is that :class:`re.Match`: so a hint can ask that the sizes quoted in the message be the
    case's own (the reversed axes of a ``.T``, the width of the keys). ``name`` says which slip
    it is (the tests and the class report tell hints apart by it)."""

    name: str
    hint: str
    texts: tuple[str, ...]
    types: tuple[str, ...] = ("RuntimeError",)
    when: Callable[[Case, re.Match], bool] | None = None

    def matches(self, case: Case, outcome: Outcome) -> bool:
        if outcome.status != "raised" or not ({outcome.error_type, *outcome.error_bases} & set(self.types)):
            return False
        for text in self.texts:
            found = re.search(text, outcome.error_message)
            if found and (self.when is None or self.when(case, found)):
                return True
        return False


class Explain:
    """An exercise's ``explain``: the first of its :class:`ErrorHint` hints that matches an error,
    else ``values(case, outcome)`` (a diagnosis of a returned value, or of a NaN), else None.
    ``hints`` lists the error hints, so that a test can tell which slip a hint names."""

    def __init__(self, *hints: ErrorHint, values: Callable[[Case, Outcome], str | None] | None = None):
        names = [h.name for h in hints]
        if len(set(names)) != len(names):
            raise ValueError(f"two error hints share a name: {names}")
        self.hints, self.values = hints, values

    def __call__(self, case: Case, outcome: Outcome) -> str | None:
        for h in self.hints:
            if h.matches(case, outcome):
                return h.hint
        return self.values(case, outcome) if self.values is not None else None

    def named(self, hint: str) -> str | None:
        """The name of the error hint whose text is ``hint`` (None for another hint)."""
        return next((h.name for h in self.hints if h.hint == hint), None)


def common_diagnosis(outcome: Outcome) -> str | None:
    """Hints that fit every exercise, from the error an answer raised."""
    if outcome.status != "raised":
        return None
    msg = outcome.error_message
    if ("bitwise_" in msg or "logical_" in msg) and "not implemented for" in msg and "'Bool'" not in msg:
        return ("&, | and ~ combine masks of dtype torch.bool, and one of yours holds numbers (torch.ones, "
                "torch.zeros and tril give float32 by default): make every mask torch.bool, with "
                "torch.ones(..., dtype=torch.bool) or from a comparison such as j <= i")
    if "masked_fill_ only supports boolean masks" in msg:
        return ("masked_fill takes a mask of dtype torch.bool: build it with torch.ones(..., dtype=torch.bool) "
                "or from a comparison such as j <= i")
    if "memory outside the tensors it was given" in msg:
        return ("a lane whose mask is True points past the end of a tensor: every tl.load and tl.store needs a "
                "mask that is False for the lanes past the data, such as offs < n (not offs <= n), in the "
                "last block too")
    if "arange's range must be a power of 2" in msg:
        return ("tl.arange(0, BLOCK) needs a power of two: take BLOCK = triton.next_power_of_2(n) and mask "
                "the lanes past n")
    return None


def value_diagnosis(answer: str, expected: Value, got: Value) -> str | None:
    """What a wrong value has in common with the right one, where no listed mistake and no
    diagnosis of the exercise's own explains it: the same values up to one factor, transposed,
    in another order, a mask that is wrong only on a diagonal... Words only: it is shown for
    hidden checks too, so it never quotes a value."""
    try:
        with np.errstate(all="ignore"):
            return _value_diagnosis(answer, expected, got)
    except Exception:  # a diagnosis must never break grading
        return None


def _value_diagnosis(answer: str, expected: Value, got: Value) -> str | None:
    if answer == "tensors" and got.kind in ("tuple", "list") and got.length == len(expected.data):
        for k, (want, have) in enumerate(zip(expected.data, got.data)):
            if not compare_tensor(want, have)[0]:
                found = _tensor_diagnosis(want, have)
                return f"in item {k} of the tuple, {found}" if found else None
    if answer == "tensor":
        return _tensor_diagnosis(expected, got)
    if answer == "int" and got.kind == "int":
        return _int_diagnosis(int(expected.data), int(got.data))
    return None


def _int_diagnosis(want: int, have: int) -> str | None:
    if want and have and want != have:
        big, small = max(abs(want), abs(have)), min(abs(want), abs(have))
        if big % small == 0 and big // small <= 16:
            return ("the count is off by a whole factor: a factor of it (2 for a multiply-add or for keys and "
                    "values, the layers, the heads, the batch, the bytes per element...) is missing or counted twice")
    if abs(want - have) == 1:
        return "off by one: check where a range starts or stops (< or <=, a + 1 or - 1)"
    if want > 0 and have > 0:
        r = have / want
        if 0.9 < r < 1.1:
            return (f"the count is a little too {'high' if r > 1 else 'low'} (by less than 10%): a small term "
                    "(the biases, a last partial block, a rounding) is counted wrongly")
        if any(abs(r * k - round(r * k)) < 1e-9 for k in (2, 3, 4)):
            return ("the count is off by a simple fraction (such as 3/4 or 3/2): one part of it (a projection, a "
                    "product, a term of the sum) is missing or counted twice")
    return _direction(have - want, have / want if want else None)


def _direction(error: float, ratio: float | None) -> str | None:
    """Which way a single number is off, and roughly by how much."""
    if error == 0 or error != error:
        return None
    way = "too large" if error > 0 else "too small"
    if ratio is None or ratio <= 0:
        return f"the number is {way}, and its sign is not the right one"
    size = max(ratio, 1 / ratio)
    band = "by less than a factor of 2" if size < 2 else "by a factor of 2 to 10" if size <= 10 else "by more than a factor of 10"
    return f"the number is {way}, {band}: a term or a factor of it is missing, extra or the wrong one"


def _tensor_diagnosis(expected: Value, got: Value) -> str | None:
    if got.kind != "tensor" or expected.kind != "tensor":
        return None
    e, g = expected.data, got.data
    if e.shape != g.shape or expected.dtype != got.dtype or e.size == 0:
        return None
    if e.dtype == np.bool_:
        return _mask_diagnosis(e, g)
    e64, g64 = e.astype(np.float64), g.astype(np.float64)
    rtol, atol = TOLERANCE.get(expected.dtype, (1e-5, 1e-8))
    close = lambda a, b: a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))
    if np.isnan(g64).any() and not np.isnan(e64).any():
        return ("NaN comes from 0 / 0, inf - inf or 0 * inf: look for a row with nothing to attend to, or an exp "
                "that overflowed, on the way")
    finite = np.isfinite(e64) & np.isfinite(g64)
    if not finite.any():
        return None
    if e.ndim >= 2 and e.shape[-1] == e.shape[-2] and close(np.swapaxes(g64, -1, -2), e64):
        return "these are the right values transposed: the last two axes are swapped"
    big = finite & (np.abs(e64) > 10 * atol)
    if big.any() and close(-g64, e64):
        return "every value has the right size and the wrong sign: a sign, or the order of a subtraction, is flipped"
    if big.sum() >= 2:
        ratio = g64[big] / e64[big]
        r = float(np.median(ratio))
        if abs(r - 1) > 10 * rtol and np.allclose(ratio, r, rtol=10 * rtol) and close(g64, r * e64):
            return ("every value is the right one times the same factor: a scale, a normalisation, a sum "
                    "against a mean, or a count is off")
        shift = float(np.median((g64 - e64)[finite]))
        if abs(shift) > 10 * atol and close(g64 - shift, e64):
            return "every value is off by the same amount: a constant is added or left out"
    if e.ndim >= 2 and e.shape[-1] >= 2 and _per_row_factor(e64, g64, close):
        return ("each row is the right one times a factor of its own: a per-row normalisation (a sum, a max, a "
                "count of what the row sees) is taken wrongly")
    sums = np.nansum(e64, axis=-1)
    if e.ndim >= 1 and e.shape[-1] >= 2 and np.all((np.abs(sums - 1) < 1e-3) | (np.abs(sums) < 1e-6)) \
            and sums.max() > 0.5 and not np.allclose(np.nansum(g64, axis=-1), sums, rtol=1e-3, atol=1e-3):
        return ("these rows should each sum to 1, like weights (0 for a row with nothing to attend to), and "
                "they do not: a normalisation over the wrong axis, or a term missing from it")
    for axis in range(e.ndim):
        if e.shape[axis] > 1 and _reordered(e64, g64, axis, close):
            return (f"whole slices along dimension {axis} hold the right values in the wrong places: an index, "
                    "the order of heads or of a split, or a layout is off")
    if e.size > 1 and close(np.sort(g64, axis=None), np.sort(e64, axis=None)):
        return "the right values in the wrong places: a reshape, view or transpose moved entries across axes"
    if e.size == 1:
        want, have = float(e64.reshape(-1)[0]), float(g64.reshape(-1)[0])
        return _direction(have - want, have / want if want else None)
    found = _partly_right(e64, g64, close)
    if found:
        return found
    wrong = ~np.isclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True) & finite
    if wrong.any():
        if (g64[wrong] > e64[wrong]).all():
            return "every wrong value is too large: something is added, or counted, that should not be"
        if (g64[wrong] < e64[wrong]).all():
            return "every wrong value is too small: something is left out, or divided by too much"
    return None


def _per_row_factor(e, g, close) -> bool:
    """Whether each row (last axis) of ``g`` is the same row of ``e`` times its own factor, the
    factors not all equal."""
    e2, g2 = e.reshape(-1, e.shape[-1]), g.reshape(-1, g.shape[-1])
    factors = []
    for er, gr in zip(e2, g2):
        big = np.isfinite(er) & np.isfinite(gr) & (np.abs(er) > 1e-6)
        if not big.any():
            if not close(gr, er):
                return False
            continue
        f = float(np.median(gr[big] / er[big]))
        if not close(gr, f * er):
            return False
        factors.append(f)
    return len(factors) >= 2 and not np.allclose(factors, factors[0], rtol=1e-3)


def _partly_right(e, g, close) -> str | None:
    """Which slices are right: along the first axis where some whole slices are right and others
    are not."""
    for axis in range(e.ndim):
        n = e.shape[axis]
        if n < 2:
            continue
        right = [close(np.take(g, i, axis=axis), np.take(e, i, axis=axis)) for i in range(n)]
        if any(right) and not all(right):
            k = right.index(False)
            if all(right[:k]) and not any(right[k:]):
                return (f"along dimension {axis} the first slices are right and the later ones wrong: something "
                        "goes wrong as the computation moves along it (a running value not updated, an offset, a "
                        "later block)")
            return (f"along dimension {axis} some slices are right and others wrong: look at what tells them "
                    "apart (a mask, a length, padding, a head or a block)")
    return None


def _reordered(e, g, axis, close) -> bool:
    """Whether ``g`` is ``e`` with its slices along ``axis`` in another order."""
    es, gs = np.moveaxis(e, axis, 0), np.moveaxis(g, axis, 0)
    if close(es, gs):
        return False
    used = set()
    for slice_ in gs:
        match = next((i for i in range(len(es)) if i not in used and close(slice_, es[i])), None)
        if match is None:
            return False
        used.add(match)
    return True


def _mask_diagnosis(e, g) -> str | None:
    if (g == ~e).all():
        return "every entry is the opposite of the right one: here True means may attend"
    wrong = g != e
    if e.ndim < 2:
        return None
    rows, cols = e.shape[-2], e.shape[-1]
    i, j = np.nonzero(wrong.reshape(-1, rows, cols).any(axis=0))
    if i.size and np.unique(j - i).size == 1:
        return ("only the entries of one diagonal are wrong: may a query attend to its own position, and which "
                "key sits at a query's position when there are more keys than queries?")
    extra, missing = (g & ~e).any(), (~g & e).any()
    which = "allows keys that must stay hidden" if extra and not missing else (
        "hides keys that may be seen" if missing and not extra else "is wrong both ways")
    if (wrong == wrong.any(axis=-2, keepdims=True)).all():       # every wrong key is wrong for every query
        return f"the mask {which} in whole key columns: which keys are padding (j against the length)?"
    if (wrong == wrong.any(axis=-1, keepdims=True)).all():       # every wrong query is wrong for every key
        return f"the mask {which} in whole query rows: padding hides keys, the columns, not queries"
    above = (np.arange(cols)[None, :] - np.arange(rows)[:, None]) > (cols - rows)
    if (wrong & ~above).sum() == 0:
        return f"the mask {which} above the bottom-right diagonal, in the future of a query: check the causal part"
    if (wrong & above).sum() == 0:
        return f"the mask {which} on or below the bottom-right diagonal: check the causal part and the padding"
    return None
