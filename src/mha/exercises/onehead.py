"""Exercise of lesson 01, one head from scratch: the softmax itself, written so that it
survives scores of any size."""

from __future__ import annotations

import torch

from ._core import Case, Exercise, Mistake
from .heads import _int, _randn

NO_SOFTMAX = ("mha", "torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax",
              "torch.special.softmax", "torch.log_softmax", "torch.nn.functional.log_softmax",
              "torch.Tensor.log_softmax", "torch.special.log_softmax", "torch.logsumexp",
              "torch.Tensor.logsumexp", "torch.special.logsumexp", "torch.distributions")


# ---------------------------------------------------------------- a softmax that never overflows

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
    scores = level + _randn(g, *shape, dtype=torch.float64, scale=spread)
    if masked:
        hide = torch.rand(*shape, generator=g) < masked
        hide[..., _int(g, 0, shape[-1] - 1)] = False
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
    t = _int(g, 2, 6)
    return [
        # float32, square, rows far apart: overflow, a shared max and a max without keepdim
        Case((_rows(g, t, t, spread=3.0, offset=400.0 + 1600 * float(torch.rand(1, generator=g))),)),
        # float64, rows farther apart than float64's exp range, masked keys
        Case((_rows(g, _int(g, 2, 4), _int(g, 3, 7), spread=4.0, offset=2000.0, masked=0.3,
                    dtype=torch.float64),)),
        # small scores, no two sizes alike: the sum over the wrong axis or a mean shows
        Case((_rows(g, _int(g, 3, 5), _int(g, 6, 9), spread=2.0, offset=1.0),)),
    ]


def _ss_explain(case, outcome):
    if outcome.status == "raised" and outcome.error_type == "RuntimeError":
        return ("scores.amax(dim=-1) drops the last axis, so it no longer lines up with the rows: keep "
                "it with keepdim=True, giving (..., 1)")
    if outcome.status == "value" and outcome.value.kind == "tensor":
        import numpy as np

        if np.isnan(outcome.value.data.astype(np.float64)).any():
            return ("exp overflows to inf (float32 beyond 88.7) or underflows to 0 for a whole row, and "
                    "inf/inf or 0/0 is NaN: subtract each row's own largest score before exp")
    return None


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

EXERCISES = (STABLE_SOFTMAX,)
