"""Exercises of lesson 02, why multiple heads: combining heads through W_O, ablating a head,
and measuring where a head looks."""

from __future__ import annotations

import torch

from mha.autograde import Case, Exercise, Mistake
from mha.autograde.draw import randint, randn

from .common import NO_MHA


def _concat(head_outputs: torch.Tensor) -> torch.Tensor:
    """(h, T, d_h) -> (T, h * d_h): token t's row is [head 0's row t | head 1's row t | ...]."""
    h, T, d = head_outputs.shape
    return head_outputs.transpose(0, 1).reshape(T, h * d)   # (T, h, d_h) -> (T, h * d_h)


def _heads_case(g, h, T, d, dtype=torch.float32, *extra):
    c = h * d
    return Case((randn(g, h, T, d, dtype=dtype), randn(g, c, c, dtype=dtype, scale=c ** -0.5), *extra))


# ---------------------------------------------------------------- 1. combine the heads

def combine_heads(head_outputs: torch.Tensor, w_o: torch.Tensor) -> torch.Tensor:
    """head_outputs (h, T, d_h), w_o (C, C) with C = h * d_h -> (T, C): concat(heads) @ w_o."""
    return _concat(head_outputs) @ w_o


def _combine_public(g):
    return [_heads_case(g, 2, 3, 2), _heads_case(g, 3, 4, 2, torch.float64), _heads_case(g, 4, 2, 3)]


def _combine_hidden(g):
    return [_heads_case(g, randint(g, 2, 4), randint(g, 2, 6), randint(g, 2, 5), dt)
            for dt in (torch.float32, torch.float64, torch.float32)]


COMBINE = Exercise(
    id="why.combine_heads", title="Combine the heads through W_O", lesson="02-why-multiple-heads",
    function="combine_heads", params=("head_outputs", "w_o"), points=3,
    reference=combine_heads, public=_combine_public, hidden=_combine_hidden, public_seed=211,
    section="Why one average is not enough",
    mistakes=(
        Mistake("the concatenated heads still go through the output projection: concat @ w_o",
                lambda o, w: _concat(o), name="no-out-proj"),
        Mistake("concatenate along the features: token t's row is [head 0's row t | head 1's row t "
                "| ...]; reshaping (h, T, d_h) straight to (T, h * d_h) mixes up tokens",
                lambda o, w: o.reshape(o.shape[1], -1) @ w, name="direct-reshape"),
        Mistake("keep each head's d_h features together, in head order [head 0 | head 1 | ...], "
                "not interleaved feature by feature",
                lambda o, w: o.permute(1, 2, 0).reshape(o.shape[1], -1) @ w, name="features-interleaved"),
        Mistake("w_o is in the maths layout here, (in, out): multiply by w_o itself, not by w_o.T "
                "(nn.Linear's layout)", lambda o, w: _concat(o) @ w.T, name="w-o-transposed"),
        Mistake("concatenate in head order, [head 0 | head 1 | ...]: head i's output meets the rows "
                "i * d_h .. (i + 1) * d_h - 1 of w_o", lambda o, w: _concat(o.flip(0)) @ w, name="heads-reversed"),
        Mistake("concatenate the heads side by side, do not average them: each head keeps its own d_h "
                "features, which W_O then mixes", lambda o, w: o.mean(dim=0).repeat(1, o.shape[0]) @ w,
                name="mean-of-heads"),
    ),
    forbidden=NO_MHA,
)


# ---------------------------------------------------------------- 2. ablate one head

def ablate_head(head_outputs: torch.Tensor, w_o: torch.Tensor, head: int) -> torch.Tensor:
    """The layer's output (T, C) with head `head` removed: its rows of w_o set to zero."""
    d = head_outputs.shape[-1]
    w = w_o.clone()
    w[head * d:(head + 1) * d] = 0                # rows [head * d_h, (head + 1) * d_h) read this head
    return _concat(head_outputs) @ w


def _zero_columns(o, w, head):
    d = o.shape[-1]
    w = w.clone()
    w[:, head * d:(head + 1) * d] = 0
    return _concat(o) @ w


def _drop_and_shift(o, w, head):
    others = torch.cat([o[:head], o[head + 1:]])   # (h - 1, T, d_h)
    return _concat(others) @ w[:others.shape[0] * o.shape[-1]]


def _only_that_head(o, w, head):
    d = o.shape[-1]
    return o[head] @ w[head * d:(head + 1) * d]


def _previous_head(o, w, head):
    return ablate_head(o, w, head - 1) if head >= 1 else _concat(o) @ w   # rows [-d, 0): an empty slice


def _ablate_public(g):
    return [_heads_case(g, 2, 3, 2, torch.float32, 0), _heads_case(g, 3, 4, 2, torch.float64, 1),
            _heads_case(g, 4, 2, 3, torch.float32, 3)]


def _ablate_hidden(g):
    cases = []
    for dt in (torch.float32, torch.float64, torch.float32):
        h = randint(g, 2, 4)
        cases.append(_heads_case(g, h, randint(g, 2, 6), randint(g, 2, 4), dt, randint(g, 0, h - 1)))
    h = randint(g, 2, 4)                             # a head that is not the last one, always
    cases[-1] = _heads_case(g, h, randint(g, 2, 6), randint(g, 2, 4), torch.float32, randint(g, 0, h - 2))
    h = randint(g, 3, 4)                             # and one that is not the first, of three or more
    cases[0] = _heads_case(g, h, randint(g, 2, 6), randint(g, 2, 4), torch.float32, randint(g, 1, h - 1))
    return cases


ABLATE = Exercise(
    id="why.ablate_head", title="Remove one head", lesson="02-why-multiple-heads",
    function="ablate_head", params=("head_outputs", "w_o", "head"), points=3,
    reference=ablate_head, public=_ablate_public, hidden=_ablate_hidden, public_seed=212,
    section="The experiment",
    mistakes=(
        Mistake("in concat @ w_o, head i is read by the ROWS [i * d_h, (i + 1) * d_h) of w_o: zero "
                "those rows, not the columns", _zero_columns, name="zero-columns"),
        Mistake("dropping the head from the concatenation shifts the later heads onto the wrong rows "
                "of w_o: keep every head in its place and zero the removed one", _drop_and_shift,
                name="drop-and-shift"),
        Mistake("removing a head keeps the others: return what every OTHER head contributes, "
                "not the removed head's own contribution", _only_that_head, name="only-that-head"),
        Mistake("heads are numbered from 0: head k is read by rows k * d_h .. (k + 1) * d_h - 1 of w_o, "
                "so remove that block, not the one before it", _previous_head, name="head-numbered-from-1"),
        Mistake("remove the head: zero the rows of w_o that read it (or its output) before multiplying; "
                "this is the intact layer's output", lambda o, w, head: _concat(o) @ w, name="nothing-removed"),
    ),
    forbidden=NO_MHA,
)


# ---------------------------------------------------------------- 3. where does a head look?

def attention_share(weights: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """weights (h, T, T), positions (T,) int -> (h,): mean over queries i of weights[:, i, positions[i]]."""
    T = weights.shape[-2]
    picked = weights[:, torch.arange(T), positions]    # (h, T): query i's weight on key positions[i]
    return picked.mean(dim=-1)


def _weights(g, h, T, dtype):
    return torch.softmax(randn(g, h, T, T, dtype=torch.float64, scale=2.0), dim=-1).to(dtype)


def _share_case(g, h, T, dtype=torch.float32, positions=None):
    if positions is None:
        positions = torch.randint(0, T, (T,), generator=g)
        positions[1] = (positions[0] + 1) % T      # at least two different keys
    return Case((_weights(g, h, T, dtype), positions))


def _share_public(g):
    return [
        _share_case(g, 2, 5, positions=(torch.arange(5) - 1).clamp(min=0)),   # the previous token
        _share_case(g, 3, 4, torch.float64, positions=torch.full((4,), 2)),   # one fixed key
        _share_case(g, 1, 6),
    ]


def _share_hidden(g):
    return [_share_case(g, randint(g, 2, 4), randint(g, 3, 8), dt) for dt in (torch.float32, torch.float64)] + [
        _share_case(g, randint(g, 1, 3), 6, positions=torch.full((6,), randint(g, 0, 5)))]


SHARE = Exercise(
    id="why.attention_share", title="Where does a head look?", lesson="02-why-multiple-heads",
    function="attention_share", params=("weights", "positions"), points=3,
    reference=attention_share, public=_share_public, hidden=_share_hidden, public_seed=213,
    section="Looking inside: what each head attends to",
    mistakes=(
        Mistake("weights[:, :, positions] takes those key columns for EVERY query; pick one key per "
                "query: query i's weight on key positions[i]",
                lambda w, p: w[:, :, p].mean(dim=(1, 2)), name="every-query-every-key"),
        Mistake("rows are queries and columns are keys: query i's weight on key positions[i] is "
                "weights[:, i, positions[i]], not weights[:, positions[i], i]",
                lambda w, p: w[:, p, torch.arange(w.shape[-1])].mean(dim=-1), name="rows-and-columns-swapped"),
        Mistake("average over the queries (divide by T), so that the share lies between 0 and 1",
                lambda w, p: w[:, torch.arange(w.shape[-2]), p].sum(dim=-1), name="sum-not-mean"),
        Mistake("the share is the AVERAGE weight over the queries, not the largest one",
                lambda w, p: w[:, torch.arange(w.shape[-2]), p].amax(dim=-1), name="max-not-mean"),
        Mistake("average over every query i (each with its own key positions[i]), not only the first",
                lambda w, p: w[:, 0, p[0]].clone(), name="first-query-only"),
    ),
    forbidden=NO_MHA,
)

EXERCISES = (COMBINE, ABLATE, SHARE)
