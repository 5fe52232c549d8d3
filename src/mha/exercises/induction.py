"""Exercises of lesson 13, induction heads: the previous-token score, the induction score,
and the output of a layer with one head removed."""

from __future__ import annotations

import torch

from ._core import Case, Exercise, Mistake
from .heads import NO_MHA, _int, _randn


def _causal_weights(g, b, h, t, dtype=torch.float32):
    """Random causal attention weights (b, h, t, t): rows are queries and sum to 1."""
    scores = _randn(g, b, h, t, t, dtype=torch.float64, scale=2.0)
    future = torch.ones(t, t, dtype=torch.bool).triu(diagonal=1)       # keys j > i
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1).to(dtype)


# ---------------------------------------------------------------- 1. previous-token score

def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """weights (B, h, T, T), rows = queries -> (h,): for each head, the mean over the batch and
    over the queries i = 1..T-1 of weights[b, head, i, i - 1]."""
    previous = weights.diagonal(offset=-1, dim1=-2, dim2=-1)    # (B, h, T - 1): entries (i, i - 1)
    return previous.mean(dim=(0, 2))


def _prev_public(g):
    return [Case((_causal_weights(g, 1, 2, 4),), note="one sequence, two heads"),
            Case((_causal_weights(g, 3, 4, 6, torch.float64),), note="three sequences, four heads"),
            Case((_causal_weights(g, 2, 1, 2),), note="T = 2: a single query has a previous token")]


def _prev_hidden(g):
    return [Case((_causal_weights(g, _int(g, 1, 4), _int(g, 2, 4), _int(g, 3, 9), dt),))
            for dt in (torch.float32, torch.float64, torch.float32)]


PREVIOUS = Exercise(
    id="induction.previous_token_score", title="A previous-token score",
    lesson="13-induction-heads", function="previous_token_score", params=("weights",), points=3,
    reference=previous_token_score, public=_prev_public, hidden=_prev_hidden, public_seed=1301,
    mistakes=(
        Mistake("the previous token of query i is key i - 1, one step LEFT of the diagonal; the "
                "diagonal itself (i -> i) is the token attending to itself",
                lambda w: w.diagonal(dim1=-2, dim2=-1).mean(dim=(0, 2))),
        Mistake("rows are queries and columns are keys: query i's weight on key i - 1 is "
                "weights[..., i, i - 1], below the diagonal, not weights[..., i - 1, i] above it",
                lambda w: w.diagonal(offset=1, dim1=-2, dim2=-1).mean(dim=(0, 2))),
        Mistake("query 0 has no previous token: average over the T - 1 queries 1..T-1, not over "
                "all T queries",
                lambda w: w.diagonal(offset=-1, dim1=-2, dim2=-1).sum(dim=2).mean(dim=0) / w.shape[-1]),
    ),
    forbidden=NO_MHA,
)


# ---------------------------------------------------------------- 2. induction score

def induction_score(weights: torch.Tensor, half: int) -> torch.Tensor:
    """weights (B, h, 2 * half, 2 * half) on sequences whose second half repeats the first
    -> (h,): the mean over the batch and over the queries i = half..2*half-1 of
    weights[b, head, i, i - half + 1], the token right after the earlier occurrence of token i."""
    T = weights.shape[-1]
    i = torch.arange(half, T)                                   # the queries of the second copy
    return weights[:, :, i, i - half + 1].mean(dim=(0, 2))     # (B, h, half) -> (h,)


def _ind_case(g, b, h, half, dtype=torch.float32):
    return Case((_causal_weights(g, b, h, 2 * half, dtype), half))


def _ind_public(g):
    return [_ind_case(g, 1, 2, 3), _ind_case(g, 2, 3, 4, torch.float64), _ind_case(g, 3, 2, 2)]


def _ind_hidden(g):
    return [_ind_case(g, _int(g, 1, 4), _int(g, 2, 4), _int(g, 2, 6), dt)
            for dt in (torch.float32, torch.float64, torch.float32)]


def _ind_shifted(w, half):
    i = torch.arange(half, w.shape[-1])
    return w[:, :, i, i - half].mean(dim=(0, 2))


def _ind_diagonal(w, half):
    return w.diagonal(offset=-(half - 1), dim1=-2, dim2=-1).mean(dim=(0, 2))


def _ind_transposed(w, half):
    i = torch.arange(half, w.shape[-1])
    return w[:, :, i - half + 1, i].mean(dim=(0, 2))


INDUCTION = Exercise(
    id="induction.induction_score", title="An induction score", lesson="13-induction-heads",
    function="induction_score", params=("weights", "half"), points=4,
    reference=induction_score, public=_ind_public, hidden=_ind_hidden, public_seed=1302,
    mistakes=(
        Mistake("an induction head looks at the token AFTER the earlier occurrence, key "
                "i - half + 1; key i - half is the earlier occurrence itself (the same token)",
                _ind_shifted),
        Mistake("only the queries of the second copy, i = half..2*half-1, count; the diagonal at "
                "offset -(half - 1) also holds query half - 1 (on key 0), which is in the first half",
                _ind_diagonal),
        Mistake("rows are queries and columns are keys: query i's weight on key i - half + 1 is "
                "weights[..., i, i - half + 1], not weights[..., i - half + 1, i]",
                _ind_transposed),
    ),
    forbidden=NO_MHA,
)


# ---------------------------------------------------------------- 3. remove one head

def output_without_head(head_outputs: torch.Tensor, out_proj_weight: torch.Tensor,
                        head: int) -> torch.Tensor:
    """head_outputs (B, h, T, d_h), out_proj_weight (C, C) in nn.Linear's layout
    (y = x @ W.T), C = h * d_h -> (B, T, C): the layer's output with head `head` zeroed
    before the output projection."""
    B, h, T, d = head_outputs.shape
    kept = head_outputs.clone()
    kept[:, head] = 0                                            # silence the head
    merged = kept.transpose(1, 2).reshape(B, T, h * d)          # (B, h, T, d) -> (B, T, h * d)
    return merged @ out_proj_weight.T


def _merge(o):
    B, h, T, d = o.shape
    return o.transpose(1, 2).reshape(B, T, h * d)


def _rows_zeroed(o, w, head):
    d = o.shape[-1]
    w = w.clone()
    w[head * d:(head + 1) * d] = 0                               # rows are OUTPUT features
    return _merge(o) @ w.T


def _interleaved(o, w, head):
    x = _merge(o).clone()
    x[..., head::o.shape[1]] = 0                                 # every h-th feature: not a head
    return x @ w.T


def _untransposed(o, w, head):
    kept = o.clone()
    kept[:, head] = 0
    return _merge(kept) @ w


def _remove_case(g, b, h, t, d, head, dtype=torch.float32):
    c = h * d
    return Case((_randn(g, b, h, t, d, dtype=dtype), _randn(g, c, c, dtype=dtype, scale=c ** -0.5), head))


def _remove_public(g):
    return [_remove_case(g, 1, 2, 3, 2, 0), _remove_case(g, 2, 3, 4, 2, 2, torch.float64),
            _remove_case(g, 1, 4, 2, 3, 1)]


def _remove_hidden(g):
    cases = []
    for dt in (torch.float32, torch.float64, torch.float32):
        h = _int(g, 2, 4)
        cases.append(_remove_case(g, _int(g, 1, 3), h, _int(g, 2, 6), _int(g, 2, 4), _int(g, 0, h - 1), dt))
    return cases


REMOVE = Exercise(
    id="induction.output_without_head", title="A layer without one head", lesson="13-induction-heads",
    function="output_without_head", params=("head_outputs", "out_proj_weight", "head"), points=3,
    reference=output_without_head, public=_remove_public, hidden=_remove_hidden, public_seed=1303,
    mistakes=(
        Mistake("the head is still there: zero its d_h features before the output projection",
                lambda o, w, head: _merge(o) @ w.T),
        Mistake("nn.Linear computes x @ W.T, so the input features, and with them head j, are the "
                "COLUMNS W[:, j * d_h:(j + 1) * d_h]; zeroing rows removes output features instead",
                _rows_zeroed),
        Mistake("after merging, head j owns the contiguous features j * d_h..(j + 1) * d_h - 1, "
                "not every h-th feature", _interleaved),
        Mistake("nn.Linear's weight is (out, in) and the layer computes x @ W.T: transpose the weight",
                _untransposed),
    ),
    forbidden=NO_MHA,
)

EXERCISES = (PREVIOUS, INDUCTION, REMOVE)
