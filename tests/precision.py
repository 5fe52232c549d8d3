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
  test computes from terms of the problem's size. The distance is the root mean square of
  the error over all elements. The largest single error would be one rounding's luck: between two float32
  computations of the same attention, as accurate as each other on average, the ratio of
  their largest errors ranged from 0.3 to 4.7 over 20 draws and three BLAS kernels; the
  ratio of their RMS errors stays near 1. A real bug, even in one element, still shows: an
  error of 1 in one of 2,000 elements is an RMS of 0.02, far above any rounding.
- ``assert_within_rounding(got, want, terms=n)``: two computations in the same dtype (two
  float64 ones, when there is no more precise truth to compare with) agree to the worst-case
  rounding of sums of ``n`` terms: a sum of n terms computed in any order is within
  n * eps * (the sum of their magnitudes) of the exact sum (Higham, "Accuracy and Stability of
  Numerical Algorithms", section 3.1), so two such computations are within twice that.
  Where the sums are chained (a softmax of dot products, a module of projections and
  attention, a gradient), ``Rounding`` carries that bound through the steps and
  ``assert_within`` applies the rule with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

FACTOR = 2.0     # the code under test may be this many times less accurate than the reference
ULPS = 2         # plus this many units in the last place of the problem's largest value


def eps(dtype: torch.dtype) -> float:
    """The distance from 1 to the next number of ``dtype``: 2^-23 for float32."""
    return torch.finfo(dtype).eps


def rms(t: torch.Tensor) -> float:
    t = t.detach().double()
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
        magnitude = max(float(e.detach().abs().max()) if e.numel() else 0.0 for e in exact)
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
        magnitude = float(want.detach().abs().max()) if want.numel() else 0.0
    bound = 2 * terms * eps(dtype) * magnitude
    diff = float((got.detach().double() - want.detach().double()).abs().max()) if got.numel() else 0.0
    assert got.shape == want.shape, (msg, got.shape, want.shape)
    assert diff <= bound, (f"{msg + ': ' if msg else ''}largest difference {diff:.2e} > {bound:.2e} = 2 x {terms} "
                           f"terms x eps({dtype}) x {magnitude:.3g}")


# ----------------------------------------------------------------------------- bounds carried through a computation

class Rounding:
    """A tensor computed in float64 from exact inputs, with a bound on how far a floating-point
    computation of the same steps may be from it: ``err * eps``, entry by entry.

    This is running error analysis (Higham, section 3.3). An input is exact (``Rounding.of(x)``:
    err 0); each step carries its operands' errors, to first order in eps, and adds its own
    rounding by the rule of ``assert_within_rounding``: a sum of n terms is within n eps times
    the sum of their magnitudes, in any order; one product, quotient, cos or sin within eps of
    its result (torch's vectorised exp within 2 ulps):

    - ``a @ b`` (inner length n): err(a) @ |b| + |a| @ err(b) + n |a| @ |b|;
    - ``a * b``: err(a) |b| + |a| err(b) + |a b|; ``a.scaled(c)`` for a number c:
      err(a) |c| + |a c|, twice the last term when c is itself rounded (1 / sqrt(d));
    - ``a + b``, ``a - b``: err(a) + err(b) + |result|;
    - ``a.sum(dim)``: the errors summed, plus n times the sum of the magnitudes;
    - ``a.softmax()``, ``a.rms_norm(weight, eps)`` and ``rope(x, positions)``: see there.

    The magnitudes are those of the float64 values, so a result that cancels (a gradient that
    sums to nearly 0) keeps the errors of the terms it was made of. An infinite entry (a
    masked score, -inf) is exact: it gives a weight of exactly 0. ``assert_within(got, want, r)``
    checks two computations of r against each other.
    """

    def __init__(self, value: torch.Tensor, err: torch.Tensor):
        self.value = value
        self.err = err.masked_fill(~torch.isfinite(value), 0.0)

    @classmethod
    def of(cls, x) -> "Rounding":
        """An exact input (a Rounding is returned as it is)."""
        if isinstance(x, Rounding):
            return x
        x = torch.as_tensor(x).detach().double()
        return cls(x, torch.zeros_like(x))

    @property
    def shape(self):
        return self.value.shape

    def map(self, fn) -> "Rounding":
        """Entries moved, not computed (a transpose, a reshape, an index, an expand): no rounding."""
        return Rounding(fn(self.value), fn(self.err))

    @property
    def mT(self) -> "Rounding":
        return self.map(lambda t: t.transpose(-2, -1))

    def __getitem__(self, index) -> "Rounding":
        return self.map(lambda t: t[index])

    @staticmethod
    def cat(parts, dim=-1) -> "Rounding":
        parts = [Rounding.of(p) for p in parts]
        return Rounding(torch.cat([p.value for p in parts], dim), torch.cat([p.err for p in parts], dim))

    def __matmul__(self, other) -> "Rounding":
        other = Rounding.of(other)
        a, b = self.value.abs(), other.value.abs()
        return Rounding(self.value @ other.value, self.err @ b + a @ other.err + self.shape[-1] * (a @ b))

    def __rmatmul__(self, other) -> "Rounding":
        return Rounding.of(other) @ self

    def __mul__(self, other) -> "Rounding":
        if isinstance(other, (int, float)):
            return self.scaled(other)
        other = Rounding.of(other)
        value = self.value * other.value
        return Rounding(value, self.err * other.value.abs() + self.value.abs() * other.err + value.abs())

    __rmul__ = __mul__

    def scaled(self, c: float, *, rounded: bool = False) -> "Rounding":
        """Times the number c; ``rounded``: c is itself a rounded constant such as 1 / sqrt(d)."""
        value = self.value * c
        return Rounding(value, self.err * abs(c) + (1 + rounded) * value.abs())

    def __add__(self, other) -> "Rounding":
        other = Rounding.of(other)
        value = self.value + other.value
        return Rounding(value, self.err + other.err + value.abs())

    __radd__ = __add__

    def __sub__(self, other) -> "Rounding":
        return self + (-Rounding.of(other))

    def __rsub__(self, other) -> "Rounding":
        return Rounding.of(other) - self

    def __neg__(self) -> "Rounding":
        return Rounding(-self.value, self.err)

    def sum(self, dim, keepdim: bool = False) -> "Rounding":
        n = self.shape[dim]
        return Rounding(self.value.sum(dim, keepdim),
                        self.err.sum(dim, keepdim) + n * self.value.abs().sum(dim, keepdim))

    def sum_to_size(self, shape) -> "Rounding":
        """The sum over broadcast dimensions (a gradient's, back to its input's shape)."""
        n = self.value.numel() // max(1, math.prod(shape))
        return Rounding(self.value.sum_to_size(shape),
                        self.err.sum_to_size(shape) + n * self.value.abs().sum_to_size(shape))

    def linear(self, weight, bias=None) -> "Rounding":
        """x @ W^T (+ b), as torch.nn.Linear."""
        out = self @ Rounding.of(weight).mT
        return out + bias if bias is not None else out

    def rms_norm(self, weight, eps: float) -> "Rounding":
        """x / sqrt(mean(x^2) + eps) * weight over the last dimension (torch.nn.RMSNorm).

        The mean of n squares is within (2 err(x) |x| summed) / (sum x^2) + n + 2 eps of its
        value, relatively (the squares' errors, the sum of n positive terms, the division by
        n and the addition of eps); the square root halves that and adds one rounding; the
        division and the product with the weight add one each."""
        x, w = self.value, Rounding.of(weight).value
        n = x.shape[-1]
        squares = x.pow(2).sum(-1, keepdim=True)
        r = (squares / n + eps).sqrt()
        y = x / r * w
        relative_r = ((2 * x.abs() * self.err).sum(-1, keepdim=True) / squares.clamp_min(1e-300) + n + 2) / 2 + 1
        return Rounding(y, self.err * (w.abs() / r) + y.abs() * (relative_r + 2))

    def masked(self, allowed: torch.Tensor) -> "Rounding":
        """-inf where ``allowed`` is False (exact)."""
        return Rounding(self.value.masked_fill(~allowed, float("-inf")), self.err)

    def softmax(self, *, rescales: int = 0) -> "Rounding":
        """Softmax over the last dimension of scores: -inf scores get weight 0, and a row of
        nothing but -inf gets zeros.

        exp(s_j - m), m the row's largest score, is within (err(s_j) + |s_j - m| + 2) eps of
        its exact value, relatively: the score's error, the rounding of the difference, the
        exp's 2 ulps. Relative errors e_j of the exponentials move weight w_j by
        w_j (e_j - sum_i w_i e_i): at most twice the largest. The normaliser (Tk positive terms)
        and the division (a reciprocal and a product) add Tk + 2. So w_j is within
        w_j (2 max_i (err(s_i) + |s_i - m|) + Tk + 6) eps.

        ``rescales``: an online softmax (mha.tiled_attention, FlashAttention; torch's fused CPU
        kernel past 512 keys) multiplies its running sums by exp(m_old - m_new) at each of
        ``rescales`` key blocks: the exp of a rounded difference of two scores at most R apart
        (R, the row's range), within (R + 2) eps, which moves the earlier blocks' weights
        against the later ones' (twice, as any error of the exponentials), and its products
        with the running numerator and denominator add 1 each: 2 R + 7 more per block.
        """
        s = self.value
        blocked = torch.isneginf(s)
        empty = blocked.all(-1, keepdim=True)
        hi = s.masked_fill(blocked, float("-inf")).amax(-1, keepdim=True)
        lo = s.masked_fill(blocked, float("inf")).amin(-1, keepdim=True)
        R = (hi - lo).masked_fill(empty, 0.0)
        worst = (self.err + (s - hi).abs()).masked_fill(blocked, 0.0).amax(-1, keepdim=True)
        w = torch.softmax(s.masked_fill(empty, 0.0), -1).masked_fill(empty, 0.0)
        return Rounding(w, w * (2 * worst + s.shape[-1] + 6 + rescales * (2 * R + 7)))


def _causal(Tq: int, Tk: int) -> torch.Tensor:
    """Query i may see key j <= i + Tk - Tq (aligned bottom-right, as everywhere in mha)."""
    return torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq)


def _scores(q, k, scale, mask, is_causal):
    q, k = Rounding.of(q), Rounding.of(k)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.mT).scaled(scale, rounded=True)
    if mask is not None:
        s = s.masked(mask) if mask.dtype == torch.bool else s + mask
    if is_causal:
        s = s.masked(_causal(q.shape[-2], k.shape[-2]))
    return s, scale


def attention(q, k, v, *, scale=None, mask=None, is_causal=False, rescales: int = 0):
    """(weights, out) of softmax(q k^T scale + mask) v, from Roundings of the inputs (or exact
    tensors). ``rescales``: the key blocks of an online softmax (see Rounding.softmax)."""
    s, _ = _scores(q, k, scale, mask, is_causal)
    w = s.softmax(rescales=rescales)
    return w, w @ Rounding.of(v)


def attention_backward(q, k, v, grad_out, *, scale=None, mask=None, is_causal=False, rescales: int = 0):
    """(dq, dk, dv) of attention, by the formulas of mha.attention_backward, whose steps
    autograd's follow too: P = softmax(S), dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dP P)),
    dQ = s dS K, dK = s dS^T Q. (FlashAttention's rowsum(dO O) is the same sum regrouped, within
    the same bound.) Gradients of broadcast leading dimensions are summed back.
    ``rescales``: an online softmax's key blocks; its backward multiplies the incoming
    gradients by the same factors and adds up dQ, dK and dV block by block: per block, one
    more rounding of dP and of each of those sums (counted as a term of each)."""
    q, k, v, dO = (Rounding.of(t) for t in (q, k, v, grad_out))
    s, scale = _scores(q, k, scale, mask, is_causal)
    P = s.softmax(rescales=rescales)

    def blocks(r):
        return Rounding(r.value, r.err + rescales * r.value.abs())

    dV = blocks(P.mT @ dO)
    dP = blocks(dO @ v.mT)
    dS = P * (dP - (dP * P).sum(-1, keepdim=True))
    dQ = blocks(dS @ k).scaled(scale, rounded=True)
    dK = blocks(dS.mT @ q).scaled(scale, rounded=True)
    return dQ.sum_to_size(q.shape), dK.sum_to_size(k.shape), dV.sum_to_size(v.shape)


def rope(x, positions, *, base: float = 10000.0, layout: str = "interleaved") -> Rounding:
    """Rotary position embedding of x (..., T, d): pair (a, b) -> (a cos t - b sin t,
    a sin t + b cos t), t = position * theta, theta = base^(-2i/d), pairs (2i, 2i + 1) or, for
    layout "half", (i, i + d/2). The same bound holds for the rotation back (-positions), which
    autograd's backward of a rotation is.

    t is rounded at its own scale: theta within (|ln theta| + 1) eps (the exponent's rounding
    and the power's), its product with the position within eps more, so t is within
    (|ln theta| + 2) eps t <= 3 eps |position| (theta <= 1, theta |ln theta| <= 1/e); cos t and
    sin t move by as much, plus their own ulp. Then 2 products and a sum.
    """
    x = Rounding.of(x)
    positions = torch.as_tensor(positions)
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    t = positions.double()[..., None] * theta                           # (..., T, d/2)
    cos, sin = t.cos(), t.sin()
    trig = 1 + 3 * positions.double().abs()[..., None]                  # the error of cos t and sin t, in eps
    if layout == "interleaved":
        pairs = lambda r: (r[..., 0::2], r[..., 1::2])                   # noqa: E731
        join = lambda u, w: torch.stack((u, w), -1).flatten(-2)         # noqa: E731
    else:
        pairs = lambda r: (r[..., : d // 2], r[..., d // 2:])            # noqa: E731
        join = lambda u, w: torch.cat((u, w), -1)                       # noqa: E731
    (a, b), (ea, eb) = pairs(x.value), pairs(x.err)

    def rotated(a, b, ea, eb, sign):                                    # a cos t - sign b sin t
        value = a * cos - sign * b * sin
        err = (ea * cos.abs() + eb * sin.abs() + (a.abs() + b.abs()) * trig
               + (a * cos).abs() + (b * sin).abs() + value.abs())
        return value, err

    (u, eu), (w, ew) = rotated(a, b, ea, eb, 1), rotated(b, a, eb, ea, -1)   # a sin t + b cos t = b cos t + a sin t
    return Rounding(join(u, w), join(eu, ew))


def assert_within(got, want, *bounds: Rounding, msg: str = "") -> None:
    """``assert_within_rounding`` for two computations of the maths that ``bounds`` carried:
    one Rounding when both computed the same steps, one for each when their steps differ (the
    rule's factor 2 then covers each within the larger). The bound is passed as a count of
    roundings (``terms``) of the largest |want| (``magnitude``)."""
    err = bounds[0].err
    for b in bounds[1:]:
        err = torch.maximum(err, b.err)
    magnitude = float(want.detach().abs().max()) if want.numel() else 0.0
    magnitude = magnitude or 1.0
    terms = math.ceil(float(err.max()) / magnitude) if err.numel() else 0
    assert_within_rounding(got, want, terms=terms, magnitude=magnitude, msg=msg)
