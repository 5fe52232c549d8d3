"""How far a computed result may be from the exact one: bounds set by what the dtype can do.

A numerical test that says "error < 2e-5" holds on the machine whose rounding it was tuned on
and fails on the next: the BLAS kernel (OpenBLAS picks one per CPU, OPENBLAS_CORETYPE
overrides it) decides the order of every sum, and with it every rounding. The two rules here
state bounds that move with the machine because they are measured on it, or that hold for
any summation order:

- ``assert_as_accurate_as(got, same, exact)``: the result of the code under test (``got``,
  in float32, float16 or bfloat16) is at most ``factor`` (2) times as far from the float64
  truth (``exact``) as a straightforward computation of the same maths in the same dtype
  (``same``), plus two units in the last place (ulps) of the problem's largest value. This is
  FlashAttention's own test rule. The ulps are for results that the plain maths get exactly
  (a gradient that is 0 in exact arithmetic, as with a single key) but that the code under
  test computes from terms of the problem's size. The distance is the root mean square of the error over
  all elements. The largest single error would be one rounding's luck: between two float32
  computations of the same attention, as accurate as each other on average, the ratio of
  their largest errors ranged from 0.3 to 4.7 over 20 draws and three BLAS kernels; the
  ratio of their RMS errors stays near 1. A real bug, even in one element, still shows: an
  error of 1 in one of 2,000 elements is an RMS of 0.02, far above any rounding.
- ``assert_within_rounding(got, want, terms=n)``: two computations in the same dtype (two
  float64 ones, when there is no more precise truth to compare with) agree to the worst-case
  rounding of sums of ``n`` terms: a sum of n terms computed in any order is within
  n * eps * (the sum of their magnitudes) of the exact sum (Higham, "Accuracy and Stability of
  Numerical Algorithms", section 3.1), so two such computations are within twice that.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

FACTOR = 2.0     # the code under test may be this many times less accurate than the reference
ULPS = 2         # plus this many units in the last place of the problem's largest value


def eps(dtype: torch.dtype) -> float:
    """The distance from 1 to the next number of ``dtype``: 2^-23 for float32."""
    return torch.finfo(dtype).eps


def rms(t: torch.Tensor) -> float:
    t = t.double()
    return float(t.pow(2).mean().sqrt()) if t.numel() else 0.0


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def assert_as_accurate_as(got, same, exact, *, names: Sequence[str] | None = None, factor: float = FACTOR,
                          ulps: float = ULPS, magnitude: float | None = None) -> list[float]:
    """Assert that each tensor of ``got`` is at most ``factor`` times as far (RMS) from the
    matching tensor of ``exact`` as the matching tensor of ``same`` is, plus ``ulps`` units
    in the last place of ``magnitude`` in got's dtype (default: the largest |value| of all
    of ``exact``, so that a result that should be exactly 0 is held to the rounding of the
    values it was computed from). Returns the ratios error(got) / error(same), for reports.
    """
    got, same, exact = _as_list(got), _as_list(same), _as_list(exact)
    names = list(names) if names else [f"result {i}" for i in range(len(got))]
    assert len(got) == len(same) == len(exact) == len(names)
    if magnitude is None:
        magnitude = max(float(e.abs().max()) if e.numel() else 0.0 for e in exact)
    ratios, failures = [], []
    for name, g, s, e in zip(names, got, same, exact):
        assert g.shape == e.shape and s.shape == e.shape, (name, g.shape, s.shape, e.shape)
        assert torch.isfinite(g).all(), f"{name} has {int((~torch.isfinite(g)).sum())} non-finite entries"
        err, ref = rms(g.double() - e.double()), rms(s.double() - e.double())
        atol = ulps * eps(g.dtype) * magnitude
        ratios.append(err / ref if ref > 0 else (0.0 if err == 0 else float("inf")))
        if err > factor * ref + atol:
            failures.append(f"{name}: RMS error {err:.2e} > {factor} x {ref:.2e} (the same maths in {s.dtype}) "
                            f"+ {atol:.1e} ({ulps} ulps of {magnitude:.3g} in {g.dtype})")
    assert not failures, "; ".join(failures)
    return ratios


def assert_within_rounding(got, want, *, terms: int, magnitude: float | None = None,
                           dtype: torch.dtype | None = None, msg: str = "") -> None:
    """Assert |got - want| <= 2 * terms * eps(dtype) * magnitude elementwise: two computations
    of the same sums of ``terms`` terms, each within terms * eps * (sum of the terms'
    magnitudes) of the exact sum whatever its order. ``magnitude`` bounds the sum of the
    terms' magnitudes (default: the largest |want|, right when the terms do not cancel);
    ``dtype`` defaults to got's."""
    dtype = dtype or got.dtype
    if magnitude is None:
        magnitude = float(want.abs().max()) if want.numel() else 0.0
    bound = 2 * terms * eps(dtype) * magnitude
    diff = float((got.double() - want.double()).abs().max()) if got.numel() else 0.0
    assert got.shape == want.shape, (msg, got.shape, want.shape)
    assert diff <= bound, (f"{msg + ': ' if msg else ''}largest difference {diff:.2e} > {bound:.2e} = 2 x {terms} "
                           f"terms x eps({dtype}) x {magnitude:.3g}")
