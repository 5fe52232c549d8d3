"""Exercise of lesson 01, one head from scratch: how spread out a head's attention is."""

from __future__ import annotations

import math

import torch

from ._core import Case, Exercise, Mistake
from .heads import _int, _randn


# ---------------------------------------------------------------- entropy of attention rows

def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of every row of attention weights: (..., Tk) -> (...).

    H = -sum_j w_j log w_j over the last dimension, with 0 log 0 = 0 (a weight of exactly 0
    contributes nothing). Same dtype as ``weights``.
    """
    return torch.special.entr(weights).sum(dim=-1)


def _rows(g: torch.Generator, *shape: int, dtype=torch.float32, zeros: bool = True) -> torch.Tensor:
    """Random attention weights (*shape) whose rows sum to 1. With zeros=True, about a third
    of the weights are exactly 0 (a masked key) and the first row is one-hot."""
    scores = _randn(g, *shape, dtype=torch.float64, scale=2.0)
    if zeros:
        blocked = torch.rand(*shape, generator=g, dtype=torch.float64) < 0.35
        blocked[..., 0] = False                         # every row keeps at least one key
        scores = scores.masked_fill(blocked, float("-inf"))
        first = scores.reshape(-1, shape[-1])[0]        # a view: the first row of scores
        first.fill_(float("-inf"))
        first[_int(g, 0, shape[-1] - 1)] = 0.0          # one-hot row: entropy exactly 0
    return torch.softmax(scores, dim=-1).to(dtype)


def _entropy_public(g):
    return [
        Case((torch.tensor([[0.5, 0.5, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]]),),
             note="a 50/50 blend, a one-hot row and a uniform row: log 2, 0 and log 4"),
        Case((_rows(g, 2, 3, 5),), note="a batch of (3, 5) weight matrices, some weights exactly 0"),
        Case((_rows(g, 4, 6, dtype=torch.float64),), note="float64, some weights exactly 0"),
    ]


def _entropy_hidden(g):
    return [
        Case((_rows(g, _int(g, 2, 6), _int(g, 3, 9)),)),                          # square or not
        Case((_rows(g, _int(g, 1, 3), _int(g, 2, 5), _int(g, 2, 8), dtype=torch.float64),)),
        Case((_rows(g, _int(g, 3, 6), _int(g, 3, 6), zeros=False),)),             # no zeros at all
    ]


def _entropy_explain(case, outcome):
    if outcome.status == "value" and outcome.value.kind == "tensor":
        import numpy as np

        if np.isnan(outcome.value.data.astype(np.float64)).any():
            return ("a weight of exactly 0 gives 0 * log 0 = 0 * -inf = NaN in floating point; "
                    "its contribution is 0 (torch.special.entr or torch.xlogy handle it)")
    return None


ENTROPY = Exercise(
    id="onehead.attention_entropy", title="How spread out is a head?", lesson="01-one-head",
    function="attention_entropy", params=("weights",), points=3,
    reference=attention_entropy, public=_entropy_public, hidden=_entropy_hidden, public_seed=111,
    mistakes=(
        Mistake("a weight of exactly 0 contributes 0 to the entropy (0 log 0 = 0), not NaN",
                lambda w: -(w * w.log()).sum(-1)),
        Mistake("the entropy is minus the sum of w log w: every term w log w is <= 0",
                lambda w: torch.special.entr(w).sum(-1).neg()),
        Mistake("measure the entropy in nats, with the natural logarithm (torch.log), not log2",
                lambda w: torch.special.entr(w).sum(-1) / math.log(2)),
        Mistake("each row is one query's weights over the keys: sum over the last dimension",
                lambda w: torch.special.entr(w).sum(0)),
    ),
    forbidden=("mha", "torch.distributions"), explain=_entropy_explain,
)

EXERCISES = (ENTROPY,)
