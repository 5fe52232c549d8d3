"""Exercises on attention heads: one head, and one head on a batch whose code needs fixing
(lesson 01, one head from scratch); many query heads sharing one key/value head (lesson 03,
dimension math, after the reshapes it needs)."""

from __future__ import annotations

import math

import torch

from ._core import Case, Exercise, Mistake

NO_MHA = ("mha", "torch.nn.functional.scaled_dot_product_attention",
          "torch.nn.MultiheadAttention", "torch.nn.functional.multi_head_attention_forward")


def _randn(g: torch.Generator, *shape: int, dtype=torch.float32, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def _int(g: torch.Generator, low: int, high: int) -> int:
    """A random int in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=g))


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
    w = [_randn(g, c, d, dtype=dtype, scale=c ** -0.5) for _ in range(3)]
    return Case((_randn(g, t, c, dtype=dtype), *w))


def _single_public(g):
    return [_single_case(g, 4, 6, 3), _single_case(g, 5, 8, 8), _single_case(g, 3, 4, 2, torch.float64)]


def _single_hidden(g):
    cases = [_single_case(g, _int(g, 2, 8), c, _int(g, 2, c), dt)
             for c, dt in ((_int(g, 3, 12), torch.float32), (_int(g, 3, 12), torch.float64))]
    # Always one head narrower than C, with T different from both and neither C nor T equal to
    # d * d: there every listed mistake (sqrt(C), sqrt(T) or d for sqrt(d), ...) changes the
    # answer, each differently.
    c = _other(g, 5, 12, (9,))
    d = _int(g, 2, c - 1)
    return cases + [_single_case(g, _other(g, 2, 9, (d, c, d * d)), c, d, torch.float32)]


def _other(g: torch.Generator, low: int, high: int, avoid) -> int:
    """A random int in [low, high] not in ``avoid``."""
    choices = [n for n in range(low, high + 1) if n not in avoid]
    return choices[_int(g, 0, len(choices) - 1)]


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
    mistakes=(
        Mistake("divide the scores by sqrt(d), the width of one head",
                lambda x, a, b, c: _one_head(x, a, b, c, scale=1.0), name="no-scale"),
        Mistake("scale by sqrt(d), the head width (w_q.shape[1]), not sqrt(C), the model width",
                lambda x, a, b, c: _one_head(x, a, b, c, scale=math.sqrt(x.shape[-1])), name="scale-by-c"),
        Mistake("scale by sqrt(d), the width of a query and a key, not sqrt(T), the number of keys",
                lambda x, a, b, c: _one_head(x, a, b, c, scale=math.sqrt(x.shape[-2])), name="scale-by-t"),
        Mistake("the softmax runs over the keys, the last dimension (dim=-1)",
                lambda x, a, b, c: _one_head(x, a, b, c, dim=-2), name="softmax-over-queries"),
        Mistake("scale the scores before the softmax: dividing the weights after it leaves rows that "
                "no longer sum to 1", lambda x, a, b, c: _one_head(x, a, b, c, after=True),
                name="scale-after-softmax"),
        Mistake("row i of the scores is query i against every key: Q @ K.T, not K @ Q.T (which gives "
                "the transposed matrix)", lambda x, a, b, c: _one_head(x, a, b, c, swap=True), name="k-times-q"),
        Mistake("divide by sqrt(d), not by d: the scores' spread grows like sqrt(d), the square root of the "
                "head width", lambda x, a, b, c: _one_head(x, a, b, c, scale=float(a.shape[-1])), name="scale-by-d"),
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
    w = [_randn(g, c, d, dtype=dtype, scale=c ** -0.5) for _ in range(3)]
    return Case((_randn(g, b, t, c, dtype=dtype), *w))


def _batched_public(g):
    return [_batched_case(g, 2, 3, 6, 4), _batched_case(g, 3, 5, 4, 2, torch.float64),
            _batched_case(g, 4, 2, 8, 3)]


def _batched_hidden(g):
    # B, T, C and d all different (and d >= 2) in every case, so that each of the colleague's
    # bugs, fixed alone, leaves a wrong answer: the scale sqrt(B) or sqrt(T), the softmax over
    # the queries...
    cases = []
    for dtype in (torch.float32, torch.float64, torch.float32):
        d = _int(g, 2, 5)
        c = _other(g, 3, 9, (d,))
        b = _other(g, 2, 5, (d, c))
        cases.append(_batched_case(g, b, _other(g, 2, 7, (b, c, d)), c, d, dtype))
    return cases


def _batched_explain(case, outcome):
    if outcome.status == "raised" and outcome.error_type == "RuntimeError":
        return (".T on a 3-D tensor reverses all its axes, (B, T, d) -> (d, T, B); transpose only the "
                "last two: k.transpose(-2, -1) (or k.mT)")
    return None


BATCHED = Exercise(
    id="heads.batched_head", title="Fix a batched head", lesson="01-one-head",
    function="batched_head", params=("x", "w_q", "w_k", "w_v"), points=3,
    reference=batched_head, public=_batched_public, hidden=_batched_hidden, public_seed=104,
    mistakes=(
        Mistake("k.shape[0] is the batch size B here: the scale is 1 / sqrt(d) with d the head width, "
                "k.shape[-1]", lambda x, a, b, c: _one_head(x, a, b, c, scale=math.sqrt(x.shape[0])),
                name="scale-by-batch"),
        Mistake("scale by sqrt(d), the width of a query and a key (k.shape[-1]), not sqrt(T), the number "
                "of keys (k.shape[1])", lambda x, a, b, c: _one_head(x, a, b, c, scale=math.sqrt(x.shape[1])),
                name="scale-by-t"),
        Mistake("with a batch the scores are (B, T, T) and dim=1 runs over the queries: the softmax "
                "runs over the keys, dim=-1", lambda x, a, b, c: _one_head(x, a, b, c, dim=1),
                name="softmax-over-queries"),
        Mistake("row i of the scores is query i against every key: q @ k.transpose(-2, -1), not "
                "k @ q.transpose(-2, -1)", lambda x, a, b, c: _one_head(x, a, b, c, swap=True), name="k-times-q"),
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


# ---------------------------------------------------------------- 3. many query heads, one K/V head

def multi_query_head(x, w_q, w_k, w_v, w_o, num_heads):
    """Multi-query attention without a mask: x (B, T, C), w_q and w_o (C, C), w_k and w_v
    (C, d) with d = C // num_heads: h query heads, one key head and one value head."""
    B, T, C = x.shape
    d = C // num_heads
    q = (x @ w_q).view(B, T, num_heads, d).transpose(1, 2)                 # (B, h, T, d)
    k, v = (x @ w_k)[:, None], (x @ w_v)[:, None]                           # (B, 1, T, d): shared
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1)  # (B, h, T, T)
    heads = weights @ v                                                     # (B, h, T, d)
    return heads.transpose(1, 2).reshape(B, T, C) @ w_o


def _mqa_variant(x, w_q, w_k, w_v, w_o, h, *, split="right", merge="right", scale=None, project=True, dim=-1,
                 w_o_t=False):
    B, T, C = x.shape
    d = C // h
    q = x @ w_q
    if split == "right":
        q = q.view(B, T, h, d).transpose(1, 2)
    elif split == "interleaved":                               # head i gets every h-th feature
        q = q.view(B, T, d, h).permute(0, 3, 1, 2)
    else:
        q = q.reshape(B, h, T, d)
    k, v = (x @ w_k)[:, None], (x @ w_v)[:, None]
    out = torch.softmax(q @ k.transpose(-2, -1) / (scale or math.sqrt(d)), dim=dim) @ v
    out = out.transpose(1, 2).reshape(B, T, C) if merge == "right" else out.reshape(B, T, C)
    return out @ (w_o.T if w_o_t else w_o) if project else out


def _mqa_case(g, b, t, h, d, dtype=torch.float32):
    c = h * d
    return Case((_randn(g, b, t, c, dtype=dtype), _randn(g, c, c, dtype=dtype, scale=c ** -0.5),
                 _randn(g, c, d, dtype=dtype, scale=c ** -0.5), _randn(g, c, d, dtype=dtype, scale=c ** -0.5),
                 _randn(g, c, c, dtype=dtype, scale=c ** -0.5), h))


def _mqa_public(g):
    return [_mqa_case(g, 2, 5, 2, 4), _mqa_case(g, 1, 3, 4, 2, torch.float64), _mqa_case(g, 2, 4, 3, 3)]


def _mqa_hidden(g):
    # h >= 2, d >= 2 and T different from h in every case: a direct view of the queries or of
    # the heads' outputs then scrambles tokens, and sqrt(C) differs from sqrt(d)
    cases = []
    for dt in (torch.float32, torch.float64, torch.float32):
        h = _int(g, 2, 4)
        cases.append(_mqa_case(g, _int(g, 1, 3), _other(g, 2, 6, (h,)), h, _int(g, 2, 4), dt))
    return cases


def _mqa_explain(case, outcome):
    if outcome.status == "raised" and outcome.error_type == "RuntimeError":
        return ("w_k and w_v have only d = C // num_heads columns: the keys and values form ONE head "
                "(B, 1, T, d) that every query head reads; do not split them into heads")
    return None


MULTI_QUERY = Exercise(
    id="heads.multi_query_head", title="Many query heads, one key head", lesson="03-dimension-math",
    function="multi_query_head", params=("x", "w_q", "w_k", "w_v", "w_o", "num_heads"), points=6,
    reference=multi_query_head, public=_mqa_public, hidden=_mqa_hidden, public_seed=105,
    mistakes=(
        Mistake("after merging the heads, mix them with the output projection: merged @ w_o",
                lambda *a: _mqa_variant(*a, project=False), name="no-out-proj"),
        Mistake("view the queries (B, T, C) as (B, T, h, d) and then transpose to (B, h, T, d); a "
                "direct view to (B, h, T, d) mixes tokens across heads",
                lambda *a: _mqa_variant(*a, split="direct"), name="direct-view"),
        Mistake("merge the heads back by transposing (B, h, T, d) to (B, T, h, d) before the reshape "
                "to (B, T, C); a direct reshape mixes tokens across heads",
                lambda *a: _mqa_variant(*a, merge="direct"), name="direct-merge"),
        Mistake("each head has width d = C // num_heads: scale by sqrt(d), not sqrt(C)",
                lambda *a: _mqa_variant(*a, scale=math.sqrt(a[0].shape[-1])), name="scale-by-c"),
        Mistake("divide the scores by sqrt(d), d = C // num_heads the width of a head, before the softmax",
                lambda *a: _mqa_variant(*a, scale=1.0), name="no-scale"),
        Mistake("w_o is applied as x @ W here, like w_q, w_k and w_v: merged @ w_o, not merged @ w_o.T",
                lambda *a: _mqa_variant(*a, w_o_t=True), name="w-o-transposed"),
        Mistake("the softmax runs over the keys, the last dimension: the scores are (B, h, T, T) and "
                "dim=-2 normalises over the queries", lambda *a: _mqa_variant(*a, dim=-2),
                name="softmax-over-queries"),
        Mistake("head i owns the features i * d .. (i + 1) * d - 1: view the queries as (B, T, h, d), not "
                "(B, T, d, h), which gives head i every h-th feature", lambda *a: _mqa_variant(*a, split="interleaved"),
                name="heads-interleaved"),
    ),
    forbidden=NO_MHA, explain=_mqa_explain,
)

EXERCISES = (SINGLE, BATCHED, MULTI_QUERY)
