"""Comparing an answer with the expected one, by the kind of answer an exercise asks for.

Every comparison returns ``(ok, problem, detail)``: ``problem`` never quotes a value (the
grader shows it for hidden checks too), ``detail`` does (``check`` shows it for public checks).
"""

from __future__ import annotations

import numpy as np

from .wire import Value

TOLERANCE = {  # (rtol, atol) per dtype
    "float16": (1e-2, 2e-3),
    "bfloat16": (3e-2, 1e-2),
    "float32": (1e-4, 1e-5),
    "float64": (1e-7, 1e-9),
}


def compare(answer: str, expected: Value, got: Value, tolerance: float = 0.0) -> tuple[bool, str, str]:
    """Return (ok, problem, detail) for one answer of kind ``answer`` (one of ``ANSWERS``).
    ``tolerance``: the relative error a "number" may have."""
    if answer == "number":
        return _compare_number(expected, got, tolerance)
    if answer not in _COMPARE:
        raise ValueError(f"answer must be one of {', '.join(map(repr, ANSWERS))}, got {answer!r}")
    return _COMPARE[answer](expected, got)


def _compare_number(expected: Value, got: Value, tolerance: float) -> tuple[bool, str, str]:
    """A prediction: a Python number within ``tolerance`` (relative) of the expected one. A wrong
    one is told only that it is off: not which way, nor by how much, since ``check`` can be run
    again and again, and a direction would let a student home in on the number without
    predicting it. What part of the reasoning was off is for the exercise's listed mistakes to
    say (the page measures the number right after)."""
    if got.kind not in ("int", "float"):
        if got.kind == "tensor":
            return False, "returned a tensor; return a Python number (float(...) converts it)", ""
        return False, f"expected a number, got {got.describe(False)}", got.describe(True)
    want, have = float(expected.data), float(got.data)
    if have != have:  # NaN
        return False, "the prediction is NaN: return a number", ""
    if abs(have - want) <= tolerance * abs(want):
        return True, "", ""
    within = f"within {tolerance:.0%}" if tolerance else "exactly"
    return False, f"the prediction is off (it must be right {within})", ""


def compare_tensor(expected: Value, got: Value) -> tuple[bool, str, str]:
    if got.kind != "tensor":
        extra = " (convert with torch.from_numpy)" if got.kind == "ndarray" else ""
        return False, f"expected a torch.Tensor, got {got.describe(False)}{extra}", got.describe(True)
    e, g = expected.data, got.data
    if e.shape != g.shape:
        return False, "wrong shape", f"expected {tuple(e.shape)}, got {tuple(g.shape)}"
    if expected.dtype != got.dtype:
        return False, f"wrong dtype {got.dtype}: keep the dtype this exercise asks for", f"expected {expected.dtype}"
    if e.dtype == np.bool_:
        wrong = int(np.count_nonzero(e != g))
        if wrong:
            return False, "wrong values", f"{wrong} of {e.size} entries are wrong"
        return True, "", ""
    g64, e64 = g.astype(np.float64), e.astype(np.float64)
    bad_nan = np.isnan(g64) & ~np.isnan(e64)
    if bad_nan.any():
        return False, "the result contains NaN", f"{int(bad_nan.sum())} entries"
    rtol, atol = TOLERANCE.get(expected.dtype, (1e-5, 1e-8))
    close = np.isclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return True, "", ""
    with np.errstate(invalid="ignore"):  # inf - inf where both are infinite
        diff = np.abs(g64 - e64)[~close]
        diff = diff[~np.isnan(diff)]
        worst = float(diff.max()) if diff.size else float("nan")
    return False, "wrong values", f"{int((~close).sum())} of {e.size} values differ (largest difference {worst:.3g})"


def _compare_tensors(expected: Value, got: Value) -> tuple[bool, str, str]:
    """A tuple of tensors (e.g. several gradients), compared one by one."""
    n = len(expected.data)
    if got.kind not in ("tuple", "list") or got.length != n:
        return False, f"expected a tuple of {n} tensors, got {got.describe(False)}", got.describe(True)
    for k, (want, have) in enumerate(zip(expected.data, got.data)):
        ok, problem, detail = compare_tensor(want, have)
        if not ok:
            return False, f"item {k} of the tuple: {problem}", detail
    return True, "", ""


def _compare_int(expected: Value, got: Value) -> tuple[bool, str, str]:
    if got.kind != "int":
        if got.kind == "float":
            return (False, "returned a float; return an int (integer division // keeps integers integers)",
                    f"{got.data!r}")
        if got.kind == "tensor":
            return False, "returned a tensor; return a python int (int(...) converts it)", ""
        return False, f"expected an int, got {got.describe(False)}", got.describe(True)
    if got.data == expected.data:
        return True, "", ""
    return False, "wrong value", f"expected {expected.data:,}, got {got.data:,}"


def _compare_shapes(expected: Value, got: Value) -> tuple[bool, str, str]:
    if got.kind != "dict":
        return False, f"expected a dict, got {got.describe(False)}", got.describe(True)
    have = {}
    for k, v in got.data:
        if k.kind == "str":
            have[k.data] = v
    for key, want in expected.data:
        name = key.data
        if name not in have:
            return False, f"the dict has no key {name!r}", ""
        v = have[name]
        if v.kind not in ("tuple", "list"):
            return False, f"{name!r} should be a tuple of ints, got {v.describe(False)}", v.describe(True)
        for i, x in enumerate(v.data):
            if x.kind != "int":
                why = ": use // (integer division), so that sizes stay ints" if x.kind == "float" else ""
                return False, f"{name!r} should be a tuple of ints, but its entry {i} is {x.describe(False)}{why}", \
                    repr(x.data) if x.kind in ("float", "int", "str", "bool") else ""
        got_t = tuple(x.data for x in v.data)
        want_t = tuple(x.data for x in want.data)
        if got_t != want_t:
            return False, f"{name!r} is wrong", f"expected {want_t}, got {got_t}"
    return True, "", ""


# The kinds of answer an exercise may ask for (``Exercise.answer``): a tensor, a tuple of
# tensors, a Python int, a dict of shapes, or a number (a prediction, within the exercise's
# tolerance).
_COMPARE = {"tensor": compare_tensor, "tensors": _compare_tensors, "int": _compare_int, "shapes": _compare_shapes}
ANSWERS = (*_COMPARE, "number")
