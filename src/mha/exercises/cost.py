"""Exercises of lesson 09, the cost of attention: FLOPs, the crossover length, the bytes of
the naive path's weights, and reading an exponent off a log-log fit."""

from __future__ import annotations

import math

import torch

from ._core import Case, Exercise, Mistake
from .heads import _int


# ---------------------------------------------------------------- 1. FLOPs of one layer

def layer_flops(batch: int, seq_len: int, embed_dim: int, num_heads: int) -> int:
    """Forward FLOPs of one self-attention layer (a multiply-add counts 2): the four C x C
    projections, 8 B T C^2, plus Q K^T and weights @ V, 2 B T^2 C each, whatever h is."""
    B, T, C = batch, seq_len, embed_dim
    return 8 * B * T * C * C + 4 * B * T * T * C


def _flops_public(g):
    return [Case((1, 4, 8, 2)), Case((2, 256, 512, 8)), Case((1, 1024, 768, 12))]


def _flops_hidden(g):
    # Every case has at least two heads (the per-head mistake shows) and T != C (forgetting
    # W_O and counting one T^2 matmul give different totals only when T != C).
    cases = []
    for _ in range(3):
        h = _int(g, 2, 16)
        C = h * _int(g, 1, 64)
        T = _int(g, 1, 2048)
        if T == C:
            T += 1
        cases.append(Case((_int(g, 1, 8), T, C, h)))
    return cases


LAYER_FLOPS = Exercise(
    id="cost.layer_flops", title="FLOPs of one layer", lesson="09-cost-of-attention",
    function="layer_flops", params=("batch", "seq_len", "embed_dim", "num_heads"), points=2,
    reference=layer_flops, public=_flops_public, hidden=_flops_hidden, answer="int", public_seed=901,
    mistakes=(
        Mistake("a multiply-add is two floating-point operations: an (m, k) @ (k, n) product "
                "costs 2 m k n FLOPs, not m k n",
                lambda B, T, C, h: 4 * B * T * C * C + 2 * B * T * T * C),
        Mistake("there are four projections: W_Q, W_K, W_V and the output projection W_O, "
                "2 B T C^2 each",
                lambda B, T, C, h: 6 * B * T * C * C + 4 * B * T * T * C),
        Mistake("the T^2 part has two matmuls, Q K^T and weights @ V, 2 B T^2 C each",
                lambda B, T, C, h: 8 * B * T * C * C + 2 * B * T * T * C),
        Mistake("each head works on d_h = C / h features, so the h heads together cost "
                "4 B T^2 C, not h times that",
                lambda B, T, C, h: 8 * B * T * C * C + 4 * B * T * T * C * h),
    ),
    forbidden=("mha",), dtypes=(),
)


# ---------------------------------------------------------------- 2. crossover length

def crossover_length(embed_dim: int, num_heads: int, num_kv_heads: int) -> int:
    """The length T at which Q K^T and weights @ V (4 T^2 C per sequence) cost as many FLOPs
    as the projections. With g = num_kv_heads, W_K and W_V map C to g * d_h features:
    projections 2 T C (2 C + 2 g d_h), so T = C + g * d_h (2 C for plain MHA)."""
    d_h = embed_dim // num_heads
    return embed_dim + num_kv_heads * d_h


def _cross_public(g):
    return [Case((512, 8, 8)), Case((4096, 32, 8)), Case((4096, 32, 1))]


def _cross_hidden(g):
    # The first case shares K/V heads (g < h), so that ignoring GQA shows; the second is
    # plain multi-head attention.
    g1, r = _int(g, 1, 8), _int(g, 2, 8)
    h1 = g1 * r
    h2 = _int(g, 1, 16)
    g3 = _int(g, 1, 8)
    h3 = g3 * _int(g, 1, 4)
    return [Case((h1 * 16 * _int(g, 1, 16), h1, g1)), Case((h2 * 16 * _int(g, 1, 16), h2, h2)),
            Case((h3 * 16 * _int(g, 1, 16), h3, g3))]


CROSSOVER = Exercise(
    id="cost.crossover_length", title="Where the T^2 part takes over", lesson="09-cost-of-attention",
    function="crossover_length", params=("embed_dim", "num_heads", "num_kv_heads"), points=3,
    reference=crossover_length, public=_cross_public, hidden=_cross_hidden, answer="int", public_seed=902,
    mistakes=(
        Mistake("keep the constants: the four projections cost 8 T C^2 and the two T^2 matmuls "
                "4 T^2 C, so plain multi-head attention crosses at T = 2C, not at T = C",
                lambda C, h, g: C),
        Mistake("with grouped-query attention W_K and W_V are C x (num_kv_heads * d_h): the "
                "projections shrink and the crossover comes earlier than 2C",
                lambda C, h, g: 2 * C),
        Mistake("the T^2 part does not shrink with fewer key/value heads: every query head "
                "still has its own T x T scores, 4 T^2 C in all",
                lambda C, h, g: C + C * h // g),
    ),
    forbidden=("mha",), dtypes=(),
)


# ---------------------------------------------------------------- 3. bytes of the weights

def naive_weights_bytes(batch: int, num_heads: int, seq_len: int, bytes_per_element: int) -> int:
    """Bytes of one (B, h, T, T) tensor of attention weights, which the naive path stores."""
    return batch * num_heads * seq_len * seq_len * bytes_per_element


def _bytes_public(g):
    return [Case((1, 2, 1024, 4)), Case((4, 12, 1024, 2)), Case((1, 32, 8192, 2))]


def _bytes_hidden(g):
    # The first case has batch, heads and bytes per element all different and >= 2, so
    # that each forgotten factor gives its own wrong answer.
    e = (2, 4, 8)[_int(g, 0, 2)]
    B = _int(g, 2, 8)
    while B == e:
        B = _int(g, 2, 8)
    h = _int(g, 2, 32)
    while h in (B, e):
        h = _int(g, 2, 32)
    return [Case((B, h, _int(g, 1, 4096), e)),
            Case((_int(g, 1, 16), _int(g, 1, 64), _int(g, 1, 16384), (1, 2, 4)[_int(g, 0, 2)])),
            Case((_int(g, 1, 4), _int(g, 1, 128), _int(g, 1, 131072), 2))]


NAIVE_BYTES = Exercise(
    id="cost.naive_weights_bytes", title="The memory of the weights", lesson="09-cost-of-attention",
    function="naive_weights_bytes", params=("batch", "num_heads", "seq_len", "bytes_per_element"),
    points=2, reference=naive_weights_bytes, public=_bytes_public, hidden=_bytes_hidden, answer="int",
    public_seed=903,
    mistakes=(
        Mistake("every head has its own T x T weights: multiply by num_heads",
                lambda B, h, T, e: B * T * T * e),
        Mistake("every sequence of the batch has its own weights: multiply by batch",
                lambda B, h, T, e: h * T * T * e),
        Mistake("multiply the number of elements by bytes_per_element to get bytes",
                lambda B, h, T, e: B * h * T * T),
    ),
    forbidden=("mha",), dtypes=(),
)


# ---------------------------------------------------------------- 4. the exponent of a power law

def loglog_slope(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Least-squares slope of log y against log x: the exponent p of the best fit y = a x^p.
    x, y: (n,) positive, same floating dtype; returns a 0-dim tensor of that dtype."""
    lx, ly = x.log(), y.log()
    dx = lx - lx.mean()
    return (dx * (ly - ly.mean())).sum() / (dx * dx).sum()


def _power_law(g, n, exponent, noise):
    x = 32.0 * 2.0 ** torch.arange(n, dtype=torch.float64)
    x = x * (1 + 0.2 * torch.rand(n, generator=g, dtype=torch.float64))
    y = 0.5 * x ** exponent * torch.exp(noise * torch.randn(n, generator=g, dtype=torch.float64))
    return x, y


def _slope_public(g):
    x = torch.tensor([64.0, 128.0, 256.0, 512.0])
    return [Case((x, 3 * x ** 2), note="an exact power law, y = 3 x^2"),
            Case((torch.tensor([64.0, 128.0, 256.0, 512.0, 1024.0]), torch.tensor([0.41, 1.2, 3.1, 9.8, 26.0])),
                 note="measured times in ms: a noisy power law"),
            Case((x, 1e3 / x), note="a falling one, y = 1000 / x")]


def _slope_hidden(g):
    # noisy points, so that the end points alone give another slope than the fit
    return [Case(_power_law(g, _int(g, 4, 8), 2.0 * float(torch.rand(1, generator=g)) + 0.5, 0.2))
            for _ in range(3)]


def _endpoints(x, y):
    return (y[-1].log() - y[0].log()) / (x[-1].log() - x[0].log())


def _through_origin(x, y):
    lx, ly = x.log(), y.log()
    return (lx * ly).sum() / (lx * lx).sum()


def _semilog(x, y):
    ly = y.log()
    dx = x - x.mean()
    return (dx * (ly - ly.mean())).sum() / (dx * dx).sum()


SLOPE = Exercise(
    id="cost.loglog_slope", title="The exponent of a power law", lesson="09-cost-of-attention",
    function="loglog_slope", params=("x", "y"), points=3,
    reference=loglog_slope, public=_slope_public, hidden=_slope_hidden, public_seed=904,
    mistakes=(
        Mistake("fit all the points by least squares: the slope between the first and the last "
                "point ignores the others and follows their noise", _endpoints),
        Mistake("a power law y = a x^p is a line with an intercept, log y = log a + p log x: "
                "subtract the means of log x and log y (a fit through the origin forces a = 1)",
                _through_origin),
        Mistake("take the logarithm of x as well: log y against x is not a straight line for a "
                "power law", _semilog),
        Mistake("use the same logarithm on both axes: log10 of y against the natural log of x "
                "divides the slope by ln(10)",
                lambda x, y: loglog_slope(x, y) / math.log(10)),
    ),
    forbidden=("mha",),
)

EXERCISES = (LAYER_FLOPS, CROSSOVER, NAIVE_BYTES, SLOPE)
