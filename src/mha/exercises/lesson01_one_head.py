"""The exercises of lesson 01, one head from scratch: one attention head; one head on a batch,
from a colleague's code with three bugs; and the softmax itself, written so that it survives
scores of any size."""

from __future__ import annotations

import math

import torch

from mha.autograde import Case, ErrorHint, Exercise, Explain, Mistake
from mha.autograde.draw import other_than, randint, randn, returned_nan

from .common import NO_MHA, NO_SOFTMAX


# ---------------------------------------------------------------- 2. one head

def single_head(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor) -> torch.Tensor:
    """One attention head: x (T, C), weights (C, d) -> (T, d)."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v


def _single_case(g, t, c, d, dtype=torch.float32):
    # Weights of size 1/sqrt(C), as at initialisation: queries and keys have unit-variance
    # components, so the scaled scores are of order 1. With unit weights the scores reach
    # +-40, the softmax saturates, and a float32 answer that multiplies in another (equally
    # correct) order can differ from the reference by more than the tolerance.
    w = [randn(g, c, d, dtype=dtype, scale=c ** -0.5) for _ in range(3)]
    return Case((randn(g, t, c, dtype=dtype), *w))


def _single_public(g):
    # C is never d * d (with C = 4 and d = 2, sqrt(C) = d: scaling by sqrt(C) and by d give one
    # answer, and neither mistake could be named there)
    return [_single_case(g, 4, 6, 3), _single_case(g, 5, 8, 8), _single_case(g, 3, 6, 2, torch.float64)]


def _single_hidden(g):
    cases = [_single_case(g, randint(g, 2, 8), c, randint(g, 2, c), dt)
             for c, dt in ((randint(g, 3, 12), torch.float32), (randint(g, 3, 12), torch.float64))]
    # Always one head narrower than C, with T different from both and neither C nor T equal to
    # d * d: there every listed mistake (sqrt(C), sqrt(T) or d for sqrt(d), ...) changes the
    # answer, each differently.
    c = other_than(g, 5, 12, (9,))
    d = randint(g, 2, c - 1)
    return cases + [_single_case(g, other_than(g, 2, 9, (d, c, d * d)), c, d, torch.float32)]


def _one_head(x, a, b, c, *, scale=None, after=False, swap=False, dim=-1):
    q, k, v = x @ a, x @ b, x @ c
    s = math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (k @ q.transpose(-2, -1)) if swap else (q @ k.transpose(-2, -1))
    if after:
        return torch.softmax(scores, dim=dim) / s @ v
    return torch.softmax(scores / s, dim=dim) @ v


def _single_explain(case, outcome):
    x, w_q = case.args[0], case.args[1]
    if outcome.status == "value" and outcome.value.kind == "tensor":
        if tuple(outcome.value.data.shape) == (x.shape[0], x.shape[0]) and w_q.shape[1] != x.shape[0]:
            return "that looks like the (T, T) attention weights: multiply them by the values x @ w_v"
    return None


SINGLE = Exercise(
    id="heads.single_head", title="One attention head", lesson="01-one-head",
    function="single_head", params=("x", "w_q", "w_k", "w_v"), points=3,
    reference=single_head, public=_single_public, hidden=_single_hidden, public_seed=102,
    section="Why divide by $\\sqrt{d_h}$?",
    mistakes=(
        Mistake("divide the scores by sqrt(d), the width of one head",
                lambda x, a, b, c: _one_head(x, a, b, c, scale=1.0), name="no-scale"),
        Mistake("scale by sqrt(d), the head width (w_q.shape[1]), not sqrt(C), the model width",
                lambda x, a, b, c: _one_head(x, a, b, c, scale=math.sqrt(x.shape[-1])), name="scale-by-c"),
        Mistake("scale by sqrt(d), the width of a query and a key, not sqrt(T), the number of keys",
                lambda x, a, b, c: _one_head(x, a, b, c, scale=math.sqrt(x.shape[-2])), name="scale-by-t"),
        Mistake("the softmax runs over the keys, the last dimension (dim=-1)",
                lambda x, a, b, c: _one_head(x, a, b, c, dim=-2), name="softmax-over-queries",
                section="A soft dictionary look-up"),
        Mistake("scale the scores before the softmax: dividing the weights after it leaves rows that "
                "no longer sum to 1", lambda x, a, b, c: _one_head(x, a, b, c, after=True),
                name="scale-after-softmax"),
        Mistake("row i of the scores is query i against every key: Q @ K.T, not K @ Q.T (which gives "
                "the transposed matrix)", lambda x, a, b, c: _one_head(x, a, b, c, swap=True), name="k-times-q",
                section="From tokens to queries, keys and values"),
        Mistake("divide by sqrt(d), not by d: the scores' spread grows like sqrt(d), the square root of the "
                "head width", lambda x, a, b, c: _one_head(x, a, b, c, scale=float(a.shape[-1])), name="scale-by-d"),
        Mistake("the weights average the VALUES, x @ w_v: the queries only ask, through the scores, how much of "
                "each value to take", lambda x, a, b, c: _one_head(x, a, b, a), name="averages-the-queries",
                section="From tokens to queries, keys and values"),
    ),
    forbidden=NO_MHA, explain=_single_explain,
)


# ---------------------------------------------------------------- 2b. a batched head, fixed

def batched_head(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor) -> torch.Tensor:
    """One head on a batch: x (B, T, C), weights (C, d) -> (B, T, d)."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v                                  # (B, T, d) each
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])            # (B, T, T)
    return torch.softmax(scores, dim=-1) @ v                             # (B, T, d)


def _batched_case(g, b, t, c, d, dtype=torch.float32):
    w = [randn(g, c, d, dtype=dtype, scale=c ** -0.5) for _ in range(3)]
    return Case((randn(g, b, t, c, dtype=dtype), *w))


def _batched_public(g):
    return [_batched_case(g, 2, 3, 6, 4), _batched_case(g, 3, 5, 4, 2, torch.float64),
            _batched_case(g, 4, 2, 8, 3)]


def _batched_hidden(g):
    # B, T, C and d all different (and d >= 2) in every case, so that each of the colleague's
    # bugs, fixed alone, leaves a wrong answer: the scale sqrt(B) or sqrt(T), the softmax over
    # the queries...
    cases = []
    for dtype in (torch.float32, torch.float64, torch.float32):
        d = randint(g, 2, 5)
        c = other_than(g, 3, 9, (d,))
        b = other_than(g, 2, 5, (d, c))
        cases.append(_batched_case(g, b, other_than(g, 2, 7, (b, c, d)), c, d, dtype))
    return cases


def _k_reversed(case, found):
    """Whether the sizes an error quotes are those of q against k.T = (d, T, B): k.T on a 3-D
    tensor reverses every axis, and the batch axis B then meets d (matmul's broadcast, or
    bmm's "but got: [d, T]")."""
    x, w_q = case.args[0], case.args[1]
    B, T, d = x.shape[0], x.shape[1], w_q.shape[1]
    sizes = tuple(int(n) for n in found.groups())
    return sizes in ((B, d), (d, T))


_T_ON_3D = (".T on a 3-D tensor reverses all its axes, (B, T, d) -> (d, T, B); transpose only the "
            "last two: k.transpose(-2, -1) (or k.mT)")

_batched_explain = Explain(
    ErrorHint("t-on-3d-tensor", _T_ON_3D,
              (r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension 0",
               r"batch2 tensor to be: \[\d+, \d+\] but got: \[(\d+), (\d+)\]"), when=_k_reversed),
    ErrorHint("bmm-needs-3d", "torch.bmm multiplies two batches of matrices, (B, n, m) @ (B, m, p), both 3-D: "
              "check the number of axes of each operand (a (C, d) weight needs @, which broadcasts)",
              (r"batch[12] must be a 3D tensor",)),
)


BATCHED = Exercise(
    id="heads.batched_head", title="Fix a batched head", lesson="01-one-head",
    function="batched_head", params=("x", "w_q", "w_k", "w_v"), points=3,
    reference=batched_head, public=_batched_public, hidden=_batched_hidden, public_seed=104,
    section="Why divide by $\\sqrt{d_h}$?",
    mistakes=(
        Mistake("k.shape[0] is the batch size B here: the scale is 1 / sqrt(d) with d the head width, "
                "k.shape[-1]", lambda x, a, b, c: _one_head(x, a, b, c, scale=math.sqrt(x.shape[0])),
                name="scale-by-batch"),
        Mistake("scale by sqrt(d), the width of a query and a key (k.shape[-1]), not sqrt(T), the number "
                "of keys (k.shape[1])", lambda x, a, b, c: _one_head(x, a, b, c, scale=math.sqrt(x.shape[1])),
                name="scale-by-t"),
        Mistake("with a batch the scores are (B, T, T) and dim=1 runs over the queries: the softmax "
                "runs over the keys, dim=-1", lambda x, a, b, c: _one_head(x, a, b, c, dim=1),
                name="softmax-over-queries",
                section="A soft dictionary look-up"),
        Mistake("row i of the scores is query i against every key: q @ k.transpose(-2, -1), not "
                "k @ q.transpose(-2, -1)", lambda x, a, b, c: _one_head(x, a, b, c, swap=True), name="k-times-q",
                section="From tokens to queries, keys and values"),
        Mistake("scale the scores before the softmax: dividing the weights after it leaves rows that "
                "no longer sum to 1", lambda x, a, b, c: _one_head(x, a, b, c, after=True),
                name="scale-after-softmax"),
        Mistake("keep the scale: divide the scores by sqrt(d) before the softmax",
                lambda x, a, b, c: _one_head(x, a, b, c, scale=1.0), name="no-scale"),
        Mistake("scale by sqrt(d), the width of one head (k.shape[-1] or w_q.shape[1]), not sqrt(C), the "
                "width of x", lambda x, a, b, c: _one_head(x, a, b, c, scale=math.sqrt(x.shape[-1])),
                name="scale-by-c"),
        Mistake("that fixes the transpose only: the scale still uses k.shape[0], the batch size, and the "
                "softmax still runs over dim=1, the queries; the colleague's code has three bugs",
                lambda x, a, b, c: _one_head(x, a, b, c, scale=math.sqrt(x.shape[0]), dim=1),
                name="only-transpose-fixed"),
    ),
    forbidden=NO_MHA, explain=_batched_explain,
)


# ---------------------------------------------------------------- 4. a softmax that never overflows

def stable_softmax(scores: torch.Tensor) -> torch.Tensor:
    """softmax over the last dimension, (..., Tk) -> (..., Tk), for scores of any size:
    -inf (a masked key) gets weight 0; every row holds at least one finite score."""
    shifted = scores - scores.amax(dim=-1, keepdim=True)    # each row's largest score becomes 0
    e = torch.exp(shifted)                                  # in [0, 1]: nothing overflows
    return e / e.sum(dim=-1, keepdim=True)


def _rows(g: torch.Generator, *shape: int, spread: float, offset: float, masked: float = 0.0,
          dtype=torch.float32) -> torch.Tensor:
    """Scores (*shape): every row has its own level, drawn in [-offset, offset], plus noise of
    size ``spread``; a fraction ``masked`` of the entries is -inf (never a whole row)."""
    rows = shape[:-1]
    level = (2 * torch.rand(*rows, 1, generator=g, dtype=torch.float64) - 1) * offset
    if level.numel() > 1:   # at least two rows far apart: one max for the whole tensor fails
        flat = level.view(-1)
        flat[0], flat[-1] = offset, -offset
    scores = level + randn(g, *shape, dtype=torch.float64, scale=spread)
    if masked:
        hide = torch.rand(*shape, generator=g) < masked
        hide[..., randint(g, 0, shape[-1] - 1)] = False
        scores = scores.masked_fill(hide, float("-inf"))
    return scores.to(dtype)


def _ss_public(g):
    return [
        Case((torch.tensor([[1.0, 2.0, 3.0], [1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -999.0]]),),
             note="three rows, the same differences; exp(1000) overflows float32"),
        Case((_rows(g, 2, 3, 5, spread=2.0, offset=0.0, masked=0.3),), note="masked keys (-inf)"),
        Case((_rows(g, 4, 6, spread=5.0, offset=3000.0, dtype=torch.float64),),
             note="float64, rows in the thousands"),
    ]


def _ss_hidden(g):
    t = randint(g, 2, 6)
    return [
        # float32, square, rows far apart: overflow, a shared max and a max without keepdim
        Case((_rows(g, t, t, spread=3.0, offset=400.0 + 1600 * float(torch.rand(1, generator=g))),)),
        # float64, rows farther apart than float64's exp range, masked keys
        Case((_rows(g, randint(g, 2, 4), randint(g, 3, 7), spread=4.0, offset=2000.0, masked=0.3,
                    dtype=torch.float64),)),
        # small scores, no two sizes alike: the sum over the wrong axis or a mean shows
        Case((_rows(g, randint(g, 3, 5), randint(g, 6, 9), spread=2.0, offset=1.0),)),
    ]


def _max_dropped_axis(case, found):
    """Whether the error is the rows' maxima without their axis meeting the scores: (..., R)
    against (..., R, K) gives "tensor a (K) must match tensor b (R)" at the last dimension."""
    shape = case.args[0].shape
    a, b, dim = (int(n) for n in found.groups())
    return (a, b, dim) == (shape[-1], shape[-2], len(shape) - 1)


def _ss_nan(case, outcome):
    if returned_nan(outcome):
        return ("exp overflows to inf (float32 beyond 88.7) or underflows to 0 for a whole row, and "
                "inf/inf or 0/0 is NaN: subtract each row's own largest score before exp")
    return None


_ss_explain = Explain(
    ErrorHint("max-without-keepdim", "scores.amax(dim=-1) drops the last axis, so it no longer lines up with "
              "the rows: keep it with keepdim=True, giving (..., 1)",
              (r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension (\d+)",),
              when=_max_dropped_axis),
    ErrorHint("max-returns-pair", "max(dim=...) returns a pair, (values, indices): take its .values, or use "
              "scores.amax(dim=-1, keepdim=True), which returns the values alone",
              (r"torch\.return_types\.max",), types=("TypeError",)),
    values=_ss_nan,
)


def _global_max(s):
    e = torch.exp(s - s.max())
    return e / e.sum(dim=-1, keepdim=True)


def _sum_of_everything(s):
    e = torch.exp(s - s.amax(dim=-1, keepdim=True))
    return e / e.sum()


def _clamped(s):
    e = torch.exp(s.clamp(-80.0, 80.0))
    return e / e.sum(dim=-1, keepdim=True)


STABLE_SOFTMAX = Exercise(
    id="onehead.stable_softmax", title="A softmax that never overflows", lesson="01-one-head",
    function="stable_softmax", params=("scores",), points=3,
    reference=stable_softmax, public=_ss_public, hidden=_ss_hidden, public_seed=112,
    section="Large scores: `exp` overflows, so shift each row by its own max",
    mistakes=(
        Mistake("exp overflows for large scores (float32 beyond 88.7), and inf / inf is NaN: subtract "
                "each row's largest score first; the softmax does not change when a row is shifted",
                lambda s: torch.exp(s) / torch.exp(s).sum(dim=-1, keepdim=True), name="no-max-shift"),
        Mistake("subtract each row's own max (scores.amax(dim=-1, keepdim=True)), not one max for the "
                "whole tensor: a row far below the overall max underflows to 0 / 0 = NaN", _global_max,
                name="one-max-for-all"),
        Mistake("normalise each row over the keys, the last dimension: a sum over dim 0 makes the "
                "columns sum to 1 instead",
                lambda s: torch.exp(s - s.amax(dim=-1, keepdim=True))
                / torch.exp(s - s.amax(dim=-1, keepdim=True)).sum(dim=0, keepdim=True), name="sum-over-dim-0"),
        Mistake("divide by the row's sum, not its mean: the weights of a row must add up to 1",
                lambda s: torch.exp(s - s.amax(dim=-1, keepdim=True))
                / torch.exp(s - s.amax(dim=-1, keepdim=True)).mean(dim=-1, keepdim=True), name="mean-for-sum"),
        Mistake("keep the row axis when you take the max (keepdim=True): without it the maxima line up "
                "with the columns, and each row is shifted by other rows' maxima",
                lambda s: torch.exp(s - s.amax(dim=-1)) / torch.exp(s - s.amax(dim=-1)).sum(dim=-1, keepdim=True),
                name="max-without-keepdim"),
        Mistake("normalise each row by its own sum, e.sum(dim=-1, keepdim=True): a sum without dim adds up "
                "the whole tensor, and every row then sums to less than 1", _sum_of_everything, name="sum-of-all"),
        Mistake("clamping the scores changes every score past the bound, and the softmax with it: shift each "
                "row by its largest score instead, which changes nothing", _clamped, name="clamped-scores"),
    ),
    forbidden=NO_SOFTMAX, explain=_ss_explain,
)


EXERCISES = (SINGLE, BATCHED, STABLE_SOFTMAX)
