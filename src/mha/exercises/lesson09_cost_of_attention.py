"""Exercises of lesson 09, the cost of attention: FLOPs of a cross-attention layer and of the
backward pass, the crossover length, reading an exponent off a log-log fit written by hand, and a
prediction of how the count grows with the length."""

from __future__ import annotations

import math

import torch

from mha.autograde import Case, Exercise, Mistake
from mha.autograde.draw import randint


# ---------------------------------------------------------------- 1. FLOPs of a cross-attention layer

def cross_layer_flops(batch: int, tgt_len: int, src_len: int, embed_dim: int, num_heads: int) -> int:
    """Forward FLOPs of one cross-attention layer without biases (a multiply-add counts 2): T =
    tgt_len queries read S = src_len keys and values, every width C = embed_dim. W_Q and W_O
    work on the T target positions, 2 B T C^2 each; W_K and W_V on the S source positions,
    2 B S C^2 each; Q K^T and weights @ V cost 2 B T S C each, whatever h is."""
    B, T, S, C = batch, tgt_len, src_len, embed_dim
    return 4 * B * T * C * C + 4 * B * S * C * C + 4 * B * T * S * C


def _cross_flops_public(g):
    return [Case((1, 4, 6, 12, 3), note="4 target positions read 6 source positions"),
            Case((3, 320, 640, 512, 8), note="a batch of 3, a source twice as long as the target"),
            Case((1, 1024, 300, 768, 12), note="a long target, a short source")]


def _cross_flops_hidden(g):
    # B >= 3 and h >= 3 (with B = 2 or h = 2, a count without the batch, or of one head, in the
    # T S part equals one of the two T S products, and the hint could not tell which mistake it
    # was); T, S and C all different, so that counting the projections on the wrong side shows.
    cases = []
    for _ in range(3):
        h = randint(g, 3, 16)
        C = h * randint(g, 1, 64)
        T = randint(g, 1, 2048)
        S = randint(g, 1, 2048)
        while S in (T, C) or T == C:
            S, T = S + 1, T + 2
        cases.append(Case((randint(g, 3, 8), T, S, C, h)))
    return cases


def _cross_flops(B, T, S, C, h, *, mac=2, proj_q=2, proj_kv=2, kv_len=None, core=2, core_width=None,
                 core_batch=None, q_len=None):
    kv_len = S if kv_len is None else kv_len
    q_len = T if q_len is None else q_len
    width = C if core_width is None else core_width
    cb = B if core_batch is None else core_batch
    return mac * (proj_q * B * q_len * C * C + proj_kv * B * kv_len * C * C + core * cb * T * S * width)


CROSS_FLOPS = Exercise(
    id="cost.cross_layer_flops", title="FLOPs of a cross-attention layer", lesson="09-cost-of-attention",
    function="cross_layer_flops", params=("batch", "tgt_len", "src_len", "embed_dim", "num_heads"), points=3,
    reference=cross_layer_flops, public=_cross_flops_public, hidden=_cross_flops_hidden, answer="int",
    public_seed=901,
    section="Counting the FLOPs of one layer",
    mistakes=(
        Mistake("a multiply-add is two floating-point operations: an (m, k) @ (k, n) product "
                "costs 2 m k n FLOPs, not m k n", lambda *a: _cross_flops(*a, mac=1), name="mac-counts-one"),
        Mistake("there are four projections: W_Q, W_K, W_V and the output projection W_O, which works on "
                "the T target positions too", lambda *a: _cross_flops(*a, proj_q=1), name="no-output-proj"),
        Mistake("the S x T part has two products, Q K^T and weights @ V, 2 B T S C each",
                lambda *a: _cross_flops(*a, core=1), name="one-product"),
        Mistake("each head works on d_h = C / h features, so the h heads together cost 4 B T S C, not h "
                "times that", lambda *a: _cross_flops(*a, core_width=a[3] * a[4]), name="times-heads"),
        Mistake("every head has its own T x S scores: the h heads together cost 4 B T S C, not the "
                "4 B T S d_h of one head", lambda *a: _cross_flops(*a, core_width=a[3] // a[4]), name="one-head"),
        Mistake("W_K and W_V project the SOURCE: they run on the S = src_len source positions, not on the "
                "T target positions", lambda *a: _cross_flops(*a, kv_len=a[1]), name="kv-on-target"),
        Mistake("W_Q and W_O work on the T target positions, W_K and W_V on the S source positions: the "
                "projections are 4 B T C^2 + 4 B S C^2, not all on the source",
                lambda *a: _cross_flops(*a, q_len=a[2]), name="q-on-source"),
        Mistake("that is the count of self-attention over the target: here the keys and values come from "
                "the S source positions, so the scores are T x S, not T x T",
                lambda B, T, S, C, h: 8 * B * T * C * C + 4 * B * T * T * C, name="self-attention"),
        Mistake("the score matrix of a head is T x S, one row per target position and one column per source "
                "position, not T x T", lambda B, T, S, C, h: 4 * B * (T + S) * C * C + 4 * B * T * T * C,
                name="square-scores"),
        Mistake("every sequence of the batch has its own T x S scores: the products cost 2 B T S C each, "
                "B included", lambda *a: _cross_flops(*a, core_batch=1), name="scores-without-batch"),
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
    g1, r = randint(g, 2, 8), randint(g, 3, 8)   # r >= 3: with r = 2, 2C = C + 2 g d_h
    h1 = g1 * r
    h2 = randint(g, 1, 16)
    g3 = randint(g, 1, 8)
    h3 = g3 * randint(g, 1, 4)
    return [Case((h1 * 16 * randint(g, 1, 16), h1, g1)), Case((h2 * 16 * randint(g, 1, 16), h2, h2)),
            Case((h3 * 16 * randint(g, 1, 16), h3, g3))]


CROSSOVER = Exercise(
    id="cost.crossover_length", title="Where the T^2 part takes over", lesson="09-cost-of-attention",
    function="crossover_length", params=("embed_dim", "num_heads", "num_kv_heads"), points=3,
    reference=crossover_length, public=_cross_public, hidden=_cross_hidden, answer="int", public_seed=902,
    section="When does the $T^2$ part take over?",
    mistakes=(
        Mistake("keep the constants: the four projections cost 8 T C^2 and the two T^2 matmuls "
                "4 T^2 C, so plain multi-head attention crosses at T = 2C, not at T = C",
                lambda C, h, g: C, name="at-c"),
        Mistake("with grouped-query attention W_K and W_V are C x (num_kv_heads * d_h): the "
                "projections shrink and the crossover comes earlier than 2C",
                lambda C, h, g: 2 * C, name="gqa-ignored"),
        Mistake("the T^2 part does not shrink with fewer key/value heads: every query head "
                "still has its own T x T scores, 4 T^2 C in all",
                lambda C, h, g: C + C * h // g, name="t2-shrinks-with-g"),
        Mistake("the T^2 part is that of all the query heads, 4 T^2 C, not 4 T^2 d_h for one head",
                lambda C, h, g: h * (C + g * (C // h)), name="one-head-t2"),
        Mistake("W_K and W_V together cost 2 T C (2 g d_h), so after cancelling 4 T C the crossover is "
                "T = C + g d_h: the keys and values are counted once, not twice",
                lambda C, h, g: C + 2 * g * (C // h), name="kv-counted-twice"),
    ),
    forbidden=("mha",), dtypes=(),
)


# ---------------------------------------------------------------- 3. FLOPs of the backward pass

def backward_flops(batch: int, seq_len: int, embed_dim: int, num_heads: int, input_grad: bool) -> int:
    """FLOPs of the backward pass of one self-attention layer without biases (a multiply-add
    counts 2), from the stored attention weights, no recomputation. Each linear map needs the
    gradient of its weight (2 B T C^2) and, if its input needs one, of its input (2 B T C^2):
    W_O's input always does; x, the input of W_Q, W_K, W_V, only with input_grad. The core
    needs dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: 2 B T^2 C each."""
    B, T, C = batch, seq_len, embed_dim
    per_matmul = 2 * B * T * C * C                       # one (B T, C) x (C, C) product
    projections = 4 * per_matmul + (3 if input_grad else 0) * per_matmul + per_matmul
    core = 4 * 2 * B * T * T * C
    return projections + core


def _bw(B, T, C, h, x_grad, *, weights=4, inputs=None, core=4, heads=None):
    per = 2 * B * T * C * C
    inputs = (4 if x_grad else 1) if inputs is None else inputs
    width = C if heads is None else heads
    return weights * per + inputs * per + core * 2 * B * T * T * width


def _bw_public(g):
    return [Case((1, 4, 12, 3, True)), Case((2, 256, 512, 8, False)), Case((1, 1024, 768, 12, True))]


def _bw_hidden(g):
    # T != C, at least three heads (the per-head T^2 count differs from every other mistake),
    # one case with and one without the input's gradient
    cases = []
    for x_grad in (True, False, bool(randint(g, 0, 1))):
        h = randint(g, 3, 16)
        C = h * randint(g, 1, 64)
        T = randint(g, 1, 2048)
        if T == C:
            T += 1
        cases.append(Case((randint(g, 1, 8), T, C, h, x_grad)))
    return cases


BACKWARD_FLOPS = Exercise(
    id="cost.backward_flops", title="FLOPs of the backward pass", lesson="09-cost-of-attention",
    function="backward_flops", params=("batch", "seq_len", "embed_dim", "num_heads", "input_grad"),
    points=3, reference=backward_flops, public=_bw_public, hidden=_bw_hidden, answer="int", public_seed=905,
    section="What each path keeps for the backward pass",
    mistakes=(
        Mistake("each linear map has two gradients to compute, of its weight and of its input, one "
                "matmul of the forward's size each: the backward is not the same count as the forward",
                lambda B, T, C, h, xg: 8 * B * T * C * C + 4 * B * T * T * C, name="same-as-forward"),
        Mistake("without input_grad, x's gradient is not needed, so W_Q, W_K and W_V need only their "
                "weights' gradients; with input_grad they need x's too",
                lambda B, T, C, h, xg: _bw(B, T, C, h, xg, inputs=4), name="x-grad-always"),
        Mistake("W_O's input, the heads' output, always needs its gradient: the core's backward starts "
                "from it, whatever input_grad says",
                lambda B, T, C, h, xg: _bw(B, T, C, h, xg, inputs=3 if xg else 0), name="w-o-input-skipped"),
        Mistake("the core's backward has four T^2 matmuls: dV = P^T dO, dP = dO V^T, dQ = dS K and "
                "dK = dS^T Q", lambda B, T, C, h, xg: _bw(B, T, C, h, xg, core=2), name="two-core-products"),
        Mistake("every head has its own T x T weights: the core's matmuls cost 2 B T^2 C each for the "
                "h heads together, not 2 B T^2 d_h", lambda B, T, C, h, xg: _bw(B, T, C, h, xg, heads=C // h),
                name="one-head-core"),
        Mistake("the projections' inputs need gradients too: W_O's always, x's with input_grad; counting the "
                "weights' gradients alone leaves them out",
                lambda B, T, C, h, xg: _bw(B, T, C, h, xg, inputs=0), name="weights-only"),
        Mistake("this backward starts from the stored weights P: nothing is recomputed, so there is no extra "
                "Q K^T (FlashAttention's backward recomputes it, this one does not)",
                lambda B, T, C, h, xg: backward_flops(B, T, C, h, xg) + 2 * B * T * T * C, name="recomputed-scores"),
    ),
    forbidden=("mha",), dtypes=(),
)


# ---------------------------------------------------------------- 4. the exponent of a power law

NO_FIT = ("mha", "numpy.polyfit", "numpy.polynomial", "numpy.linalg.lstsq", "numpy.linalg.pinv",
          "torch.linalg.lstsq", "torch.linalg.pinv", "torch.linalg.solve", "scipy.stats.linregress",
          "scipy.optimize.curve_fit")


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
            Case((torch.tensor([64.0, 96.0, 256.0, 512.0, 1024.0]), torch.tensor([0.41, 0.8, 3.1, 9.8, 26.0])),
                 note="measured times in ms: a noisy power law"),
            Case((x, 1e3 / x), note="a falling one, y = 1000 / x")]


def _slope_hidden(g):
    # noisy points, so that the end points alone give another slope than the fit
    return [Case(_power_law(g, randint(g, 4, 8), 2.0 * float(torch.rand(1, generator=g)) + 0.5, 0.2))
            for _ in range(3)]


def _endpoints(x, y):
    return (y[-1].log() - y[0].log()) / (x[-1].log() - x[0].log())


def _through_origin(x, y):
    lx, ly = x.log(), y.log()
    return (lx * ly).sum() / (lx * lx).sum()


def _swapped_fit(x, y):
    lx, ly = x.log(), y.log()
    dy = ly - ly.mean()
    return (dy * dy).sum() / (dy * (lx - lx.mean())).sum()


def _mean_of_local_slopes(x, y):
    lx, ly = x.log(), y.log()
    return ((ly[1:] - ly[:-1]) / (lx[1:] - lx[:-1])).mean()


def _semilog(x, y):
    ly = y.log()
    dx = x - x.mean()
    return (dx * (ly - ly.mean())).sum() / (dx * dx).sum()


SLOPE = Exercise(
    id="cost.loglog_slope", title="The exponent of a power law", lesson="09-cost-of-attention",
    function="loglog_slope", params=("x", "y"), points=3,
    reference=loglog_slope, public=_slope_public, hidden=_slope_hidden, public_seed=904,
    section="Time against length",
    mistakes=(
        Mistake("fit all the points by least squares: the slope between the first and the last "
                "point ignores the others and follows their noise", _endpoints, name="end-points"),
        Mistake("a power law y = a x^p is a line with an intercept, log y = log a + p log x: "
                "subtract the means of log x and log y (a fit through the origin forces a = 1)",
                _through_origin, name="through-origin"),
        Mistake("take the logarithm of x as well: log y against x is not a straight line for a "
                "power law", _semilog, name="log-y-only"),
        Mistake("use the same logarithm on both axes: log10 of y against the natural log of x "
                "divides the slope by ln(10)",
                lambda x, y: loglog_slope(x, y) / math.log(10), name="mixed-logarithms"),
        Mistake("regress log y on log x, not log x on log y: the slope of the swapped fit is not the inverse "
                "of the exponent once the points are noisy", _swapped_fit, name="swapped-axes"),
        Mistake("one least-squares fit through all the points, not the mean of the slopes between neighbours "
                "(which gives the noisy pairs too much say)", _mean_of_local_slopes, name="mean-of-local-slopes"),
        Mistake("use the same logarithm on both axes: the base-10 log of x against the natural log of y "
                "multiplies the slope by ln(10)", lambda x, y: loglog_slope(x, y) * math.log(10),
                name="mixed-logarithms-x"),
        Mistake("that is the slope of log x against log y, about 1 / p: fit log y against log x, whose slope "
                "is the exponent p", lambda x, y: 1 / _swapped_fit(x, y), name="axes-swapped"),
    ),
    forbidden=NO_FIT,
)

# ---------------------------------------------------------------- 5. a prediction: how the count grows

def flop_growth() -> float:
    """By what factor do the forward FLOPs of one self-attention layer (C = 512, h = 8, batch 1,
    no biases) grow when the sequence grows from T = 512 to T = 4096?"""
    return flop_growth_at(4096)


def flop_growth_at(T2: int, T1: int = 512, C: int = 512, *, projections: int = 8, core: int = 4,
                   core_width: int | None = None) -> float:
    """The growth of the count from T1 to T2: ``projections`` T C^2 for the projections (8: four
    of them, a multiply-add counting 2) and ``core`` T^2 x ``core_width`` (C) for Q K^T and
    weights @ V; the listed slips change one part."""
    width = C if core_width is None else core_width

    def flops(T):
        return projections * T * C * C + core * T * T * width
    return flops(T2) / flops(T1)


FLOP_GROWTH = Exercise(
    id="cost.flop_growth", title="Predict: how the count grows", lesson="09-cost-of-attention",
    function="flop_growth", params=(), points=2, reference=flop_growth, answer="number", tolerance=0.05,
    public=lambda g: [Case((), note="T from 512 to 4096 at C = 512")], hidden=lambda g: [], public_seed=906,
    section="When does the $T^2$ part take over?",
    mistakes=(
        Mistake("8 is how the projections grow, linearly in T; the T^2 part grows 64 times, so the layer "
                "grows faster than that", lambda: 8.0, name="linear"),
        Mistake("64 is how the T^2 part grows; the projections grow only 8 times, and at T = 512 they are "
                "two thirds of the count", lambda: 64.0, name="quadratic"),
        Mistake("the two parts do not weigh the same: at T = 512 the projections, 8 T C^2, are twice the T^2 "
                "part, 4 T^2 C; weigh each growth by its share of the count", lambda: 36.0, name="plain-average"),
        Mistake("the growth is not the geometric mean of the two parts' growths: weigh each part's growth by "
                "its share of the count at T = 512 (the projections, 8 T C^2, are two thirds of it there)",
                lambda: math.sqrt(8.0 * 64.0), name="geometric-mean"),
        Mistake("there are four projections, W_Q, W_K, W_V and the output projection W_O: 8 T C^2 in all, "
                "not 6 T C^2", lambda: flop_growth_at(4096, projections=6), name="no-output-proj"),
        Mistake("the T^2 part has two products, Q K^T and weights @ V, 2 T^2 C each: 4 T^2 C",
                lambda: flop_growth_at(4096, core=2), name="one-t2-product"),
        Mistake("every head has its own T x T scores: the h heads together cost 4 T^2 C, not the 4 T^2 d_h of "
                "one head", lambda: flop_growth_at(4096, core_width=512 // 8), name="one-head-t2"),
        Mistake("the factor asked for is the count at T = 4096 divided by the count at T = 512: a growth, "
                "larger than 1", lambda: 1 / flop_growth(), name="upside-down"),
    ),
    forbidden=("mha",), dtypes=(),
)


EXERCISES = (CROSS_FLOPS, CROSSOVER, BACKWARD_FLOPS, SLOPE, FLOP_GROWTH)
