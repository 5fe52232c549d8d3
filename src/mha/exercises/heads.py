"""Exercises on attention heads: attention weights and one head (lesson 01, one head from
scratch), and many heads (lesson 03, dimension math, after the reshapes it needs)."""

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


# ---------------------------------------------------------------- 1. attention weights

def attention_weights(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) over keys: q (Tq, d), k (Tk, d) -> (Tq, Tk)."""
    scores = q @ k.T / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1)


def _weights_public(g):
    return [Case((_randn(g, 3, 4, scale=2), _randn(g, 5, 4, scale=2))),
            Case((_randn(g, 4, 8, scale=2), _randn(g, 4, 8, scale=2))),
            Case((_randn(g, 2, 16, dtype=torch.float64), _randn(g, 6, 16, dtype=torch.float64)))]


def _weights_hidden(g):
    cases = []
    for dtype in (torch.float32, torch.float64, torch.float32):
        tq, tk, d = _int(g, 2, 7), _int(g, 2, 9), _int(g, 2, 24)
        cases.append(Case((_randn(g, tq, d, dtype=dtype, scale=2), _randn(g, tk, d, dtype=dtype, scale=2))))
    return cases


WEIGHTS = Exercise(
    id="heads.attention_weights", title="Attention weights", lesson="01-one-head",
    function="attention_weights", params=("q", "k"), points=3,
    reference=attention_weights, public=_weights_public, hidden=_weights_hidden, public_seed=101,
    mistakes=(
        Mistake("divide the scores by sqrt(d), the square root of the key width",
                lambda q, k: torch.softmax(q @ k.T, dim=-1)),
        Mistake("the softmax runs over the keys, the last dimension (dim=-1), so each row sums to 1",
                lambda q, k: torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=0)),
        Mistake("scale by sqrt(d), not by d",
                lambda q, k: torch.softmax(q @ k.T / q.shape[-1], dim=-1)),
    ),
    forbidden=NO_MHA,
)


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
    # Always one head narrower than C: there, scaling by sqrt(C) instead of sqrt(d) changes
    # the answer.
    c = _int(g, 3, 12)
    return cases + [_single_case(g, _int(g, 2, 8), c, _int(g, 2, c - 1), torch.float32)]


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
                lambda x, a, b, c: torch.softmax((x @ a) @ (x @ b).T, -1) @ (x @ c)),
        Mistake("scale by sqrt(d), the head width (w_q.shape[1]), not sqrt(C), the model width",
                lambda x, a, b, c: torch.softmax((x @ a) @ (x @ b).T / math.sqrt(x.shape[1]), -1) @ (x @ c)),
        Mistake("the softmax runs over the keys, the last dimension (dim=-1)",
                lambda x, a, b, c: torch.softmax((x @ a) @ (x @ b).T / math.sqrt(a.shape[1]), 0) @ (x @ c)),
    ),
    forbidden=NO_MHA, explain=_single_explain,
)


# ---------------------------------------------------------------- 3. many heads

def multi_head(x, w_q, w_k, w_v, w_o, num_heads):
    """Multi-head self-attention without a mask: x (B, T, C), each weight (C, C) -> (B, T, C)."""
    B, T, C = x.shape
    d = C // num_heads

    def split(t):  # (B, T, C) -> (B, h, T, d)
        return t.view(B, T, num_heads, d).transpose(1, 2)

    q, k, v = split(x @ w_q), split(x @ w_k), split(x @ w_v)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1)  # (B, h, T, T)
    heads = weights @ v                                                     # (B, h, T, d)
    merged = heads.transpose(1, 2).contiguous().view(B, T, C)
    return merged @ w_o


def _multi_variant(x, w_q, w_k, w_v, w_o, h, *, scale=None, transpose=True, project=True):
    B, T, C = x.shape
    d = C // h

    def split(t):
        return t.view(B, T, h, d).transpose(1, 2) if transpose else t.reshape(B, h, T, d)

    q, k, v = split(x @ w_q), split(x @ w_k), split(x @ w_v)
    out = torch.softmax(q @ k.transpose(-2, -1) / (scale or math.sqrt(d)), dim=-1) @ v
    out = out.transpose(1, 2).reshape(B, T, C) if transpose else out.reshape(B, T, C)
    return out @ w_o if project else out


def _multi_case(g, b, t, h, d, dtype=torch.float32):
    c = h * d
    w = [_randn(g, c, c, dtype=dtype, scale=1 / math.sqrt(c)) for _ in range(4)]
    return Case((_randn(g, b, t, c, dtype=dtype), *w, h))


def _multi_public(g):
    return [_multi_case(g, 2, 5, 2, 4), _multi_case(g, 1, 3, 3, 4, torch.float64), _multi_case(g, 2, 4, 4, 2)]


def _multi_hidden(g):
    return [_multi_case(g, _int(g, 1, 3), _int(g, 2, 6), h, _int(g, 2, 5), dt)
            for h, dt in ((_int(g, 2, 4), torch.float32), (_int(g, 2, 4), torch.float64), (1, torch.float32))]


MULTI = Exercise(
    id="heads.multi_head", title="Many heads", lesson="03-dimension-math",
    function="multi_head", params=("x", "w_q", "w_k", "w_v", "w_o", "num_heads"), points=6,
    reference=multi_head, public=_multi_public, hidden=_multi_hidden, public_seed=103,
    mistakes=(
        Mistake("after merging the heads, mix them with the output projection: merged @ w_o",
                lambda *a: _multi_variant(*a, project=False)),
        Mistake("view (B, T, C) as (B, T, h, d) and then transpose to (B, h, T, d); a direct "
                "view to (B, h, T, d) mixes tokens across heads",
                lambda *a: _multi_variant(*a, transpose=False)),
        Mistake("each head has width d = C // num_heads: scale by sqrt(d), not sqrt(C)",
                lambda *a: _multi_variant(*a, scale=math.sqrt(a[0].shape[-1]))),
    ),
    forbidden=NO_MHA,
)

EXERCISES = (WEIGHTS, SINGLE, MULTI)
