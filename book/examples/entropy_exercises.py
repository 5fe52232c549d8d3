"""An instructor's own exercise, outside the course package: the entropy of attention weights.

Graded with `mha grade submissions/ --exercises entropy_exercises.py`; students get the
student version that `mha assign entropy_exercises.py --out handout/` makes (no reference,
no hidden cases) and check their answers with `check("entropy.attention_entropy", fn)`.
"""

import math

import torch

from mha.exercises import Case, Exercise, Mistake


def attention_entropy(weights):
    """The entropy, in nats, of each query's attention weights: (..., Tq, Tk) -> (..., Tq)."""
    return -torch.special.xlogy(weights, weights).sum(dim=-1)


def _weights(g, *shape, masked=0.0, dtype=torch.float32):
    """Random attention weights (*shape), each row summing to 1; a share ``masked`` of the
    keys has weight exactly 0 (never a whole row)."""
    scores = torch.randn(*shape, generator=g, dtype=torch.float64)
    hide = torch.rand(*shape, generator=g) < masked
    hide[..., 0] = False
    return torch.softmax(scores.masked_fill(hide, float("-inf")), dim=-1).to(dtype)


def _public(g):
    return [
        Case((torch.tensor([[0.5, 0.5, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]]),),
             note="a masked key has weight 0, which adds nothing"),
        Case((_weights(g, 2, 3, 5, masked=0.3),), note="a batch of heads, masked keys"),
        Case((_weights(g, 4, 6, dtype=torch.float64),), note="float64"),
    ]


def _hidden(g):
    tq, tk = 2 + int(torch.randint(4, (1,), generator=g)), 6 + int(torch.randint(4, (1,), generator=g))
    return [
        Case((_weights(g, 3, tq, tk, masked=0.4),)),
        Case((_weights(g, 2, 2, tq, tk, masked=0.2, dtype=torch.float64),)),
        Case((_weights(g, tq, tk),)),
    ]


ENTROPY = Exercise(
    id="entropy.attention_entropy", title="How spread out is a query's attention?", lesson="week-3",
    function="attention_entropy", params=("weights",), points=2,
    statement=("Write `attention_entropy(weights)`: the entropy, in nats, of each query's attention weights, "
               "(..., Tq, Tk) -> (..., Tq). A weight of 0 (a masked key) adds nothing (0 log 0 = 0)."),
    reference=attention_entropy, public=_public, hidden=_hidden,
    mistakes=(
        Mistake("0 * log(0) is 0 * -inf = NaN in floating point: a masked key must add 0, "
                "e.g. with torch.special.xlogy(w, w) or torch.where(w > 0, ...)",
                lambda w: -(w * w.log()).sum(dim=-1), name="nan at zero weights",
                section="https://example.org/week-3/entropy#zero-weights"),
        Mistake("that is the entropy in bits (log base 2): use the natural logarithm, nats",
                lambda w: -torch.special.xlogy(w, w).sum(dim=-1) / math.log(2), name="bits, not nats"),
        Mistake("sum over the keys, the last axis: each query (row) has its own entropy",
                lambda w: -torch.special.xlogy(w, w).sum(dim=-2), name="summed over the queries"),
        Mistake("entropy is minus the sum of w log w: every log w is <= 0, so without the minus sign "
                "it comes out negative", lambda w: torch.special.xlogy(w, w).sum(dim=-1), name="sign"),
    ),
    forbidden=("torch.distributions",),  # Categorical(probs=w).entropy() would do it all
)
