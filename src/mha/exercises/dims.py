"""Exercises of lesson 03, dimension math: splitting heads, folding them into the batch of a
sequence-first tensor as torch does, and the shapes."""

from __future__ import annotations

import torch

from ._core import Case, Exercise, Mistake
from .heads import _int, _randn


# ---------------------------------------------------------------- 4. split heads

def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, T, C) -> (B, h, T, C // h): view as (B, T, h, d), then swap T and h."""
    B, T, C = x.shape
    return x.view(B, T, num_heads, C // num_heads).transpose(1, 2)


def _split_public(g):
    return [Case((_randn(g, 2, 5, 8), 2)), Case((_randn(g, 1, 3, 12, dtype=torch.float64), 4)),
            Case((_randn(g, 3, 4, 6), 1))]


def _split_hidden(g):
    # heads wider than 1 in the first case, so that a (B, T, d, h) split shows
    cases = []
    for least in (2, 1, 1):
        h, d = _int(g, 2, 5), _int(g, least, 4)
        cases.append(Case((_randn(g, _int(g, 1, 3), _int(g, 2, 6), h * d), h)))
    return cases


def _split_explain(case, outcome):
    x, h = case.args
    if outcome.status == "value" and outcome.value.kind == "tensor":
        B, T, C = x.shape
        if tuple(outcome.value.data.shape) == (B, T, h, C // h) and h != T:
            return "the view gives (B, T, h, d); transpose the T and h axes to get (B, h, T, d)"
    return None


SPLIT = Exercise(
    id="dims.split_heads", title="Split the heads", lesson="03-dimension-math",
    function="split_heads", params=("x", "num_heads"), points=3,
    reference=split_heads, public=_split_public, hidden=_split_hidden, public_seed=201,
    mistakes=(
        Mistake("a direct view or reshape to (B, h, T, d) scrambles tokens across heads: "
                "view as (B, T, h, d) first, then transpose(1, 2)",
                lambda x, h: x.reshape(x.shape[0], h, x.shape[1], x.shape[2] // h), name="direct-view"),
        Mistake("head i owns channels i*d to (i+1)*d - 1: view as (B, T, h, d), not (B, T, d, h)",
                lambda x, h: x.reshape(x.shape[0], x.shape[1], x.shape[2] // h, h).permute(0, 3, 1, 2),
                name="features-interleaved"),
    ),
    forbidden=("mha",), explain=_split_explain, dtypes=("float16", "float32", "float64"),
)


# ---------------------------------------------------------------- 5. heads into the batch

def heads_into_batch(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Sequence-first (T, B, C) -> (B * h, T, C // h), row b * h + i = head i of sequence b:
    the layout nn.MultiheadAttention works in."""
    T, B, C = x.shape
    return x.reshape(T, B * num_heads, C // num_heads).transpose(0, 1)


def _hib_case(g, t, b, h, d, dtype=torch.float32, noncontiguous=()):
    return Case((_randn(g, t, b, h * d, dtype=dtype), h), noncontiguous=noncontiguous)


def _hib_public(g):
    return [_hib_case(g, 3, 2, 2, 4), _hib_case(g, 4, 1, 3, 2, torch.float64), _hib_case(g, 2, 3, 2, 3),
            _hib_case(g, 5, 2, 2, 2, noncontiguous=(0,))]


def _hib_hidden(g):
    # T, B, h >= 2 and d >= 2 in every case, so every listed mistake moves some number; two
    # of the three arrive non-contiguous, as the statement allows
    return [_hib_case(g, _int(g, 2, 6), _int(g, 2, 4), _int(g, 2, 4), _int(g, 2, 4), dt, nc)
            for dt, nc in ((torch.float32, ()), (torch.float64, (0,)), (torch.float32, (0,)))]


def _hib_explain(case, outcome):
    if outcome.status == "raised" and outcome.error_type == "RuntimeError" and (
            case.noncontiguous or "view size is not compatible" in outcome.error_message):
        return ("x may arrive non-contiguous (for example the transpose of a batch-first tensor), and "
                ".view needs a contiguous layout: use .reshape, or .contiguous() before .view")
    return None


def _hib_wrong(order: str):
    def wrong(x, h):
        T, B, C = x.shape
        d = C // h
        if order == "head-major":   # row i * B + b
            return x.reshape(T, B, h, d).permute(2, 1, 0, 3).reshape(h * B, T, d)
        if order == "direct":       # time never moved
            return x.reshape(B * h, T, d)
        if order == "batch-first":  # x read as (B, T, C)
            return x.reshape(T, B, h, d).transpose(1, 2).reshape(T * h, B, d)
        return x.reshape(T, B, d, h).permute(1, 3, 0, 2).reshape(B * h, T, d)   # features (d, h)
    return wrong


HEADS_INTO_BATCH = Exercise(
    id="dims.heads_into_batch", title="Heads into the batch, sequence first", lesson="03-dimension-math",
    function="heads_into_batch", params=("x", "num_heads"), points=3,
    reference=heads_into_batch, public=_hib_public, hidden=_hib_hidden, public_seed=204,
    mistakes=(
        Mistake("row b * h + i holds head i of sequence b: the heads of one sequence are neighbours "
                "(batch-major), not row i * B + b", _hib_wrong("head-major"), name="head-major"),
        Mistake("x is sequence-first, (T, B, C): the time axis must end up second, behind the "
                "batch-and-heads axis; a reshape alone mixes time and batch", _hib_wrong("direct"),
                name="time-not-moved"),
        Mistake("head i owns the features i * d_h .. (i + 1) * d_h - 1: split C as (h, d_h), not "
                "(d_h, h)", _hib_wrong("interleaved"), name="features-interleaved"),
        Mistake("x is sequence-first, (T, B, C), not batch-first: its first axis is time, so reading it "
                "as (B, T, C) swaps every sequence with every position", _hib_wrong("batch-first"),
                name="read-as-batch-first"),
    ),
    forbidden=("mha",), explain=_hib_explain,
)


# ---------------------------------------------------------------- 6. shapes

def shapes(batch: int, seq_len: int, embed_dim: int, num_heads: int) -> dict:
    """The shapes inside multi-head self-attention, as tuples of ints."""
    if embed_dim % num_heads != 0:
        raise ValueError(f"embed_dim={embed_dim} is not divisible by num_heads={num_heads}")
    B, T, C, h = batch, seq_len, embed_dim, num_heads
    return {"qkv": (B, T, 3 * C), "q_heads": (B, h, T, C // h), "scores": (B, h, T, T), "merged": (B, T, C)}


def _shapes_wrong(*, heads_full=False, no_head_axis=False, scores_over_features=False, qkv_one=False,
                  merged_split=False):
    def wrong(B, T, C, h):
        scores = (B, T, T) if no_head_axis else (B, h, T, C // h) if scores_over_features else (B, h, T, T)
        return {"qkv": (B, T, C) if qkv_one else (B, T, 3 * C), "q_heads": (B, h, T, C if heads_full else C // h),
                "scores": scores, "merged": (B, T, h, C // h) if merged_split else (B, T, C)}
    return wrong


def _shapes_public(g):
    return [Case((2, 5, 8, 2)), Case((1, 10, 512, 8)),
            Case((2, 5, 10, 3), raises="ValueError", names=("embed_dim", "num_heads"),
                 note="embed_dim=10 is not divisible by num_heads=3")]


def _shapes_hidden(g):
    h = _int(g, 2, 12)
    h2 = _int(g, 3, 7)
    return [Case((_int(g, 1, 8), _int(g, 2, 64), h * _int(g, 1, 64), h)),
            Case((_int(g, 1, 8), _int(g, 2, 64), 64 * h2, h2)),
            Case((_int(g, 1, 8), _int(g, 2, 64), h2 * _int(g, 2, 30) + 1, h2), raises="ValueError",
                 names=("embed_dim", "num_heads"), note="embed_dim not divisible by num_heads")]


SHAPES = Exercise(
    id="dims.shapes", title="Every shape in one place", lesson="03-dimension-math",
    function="shapes", params=("batch", "seq_len", "embed_dim", "num_heads"), points=3,
    reference=shapes, public=_shapes_public, hidden=_shapes_hidden, answer="shapes", public_seed=203,
    mistakes=(
        Mistake("each head has width embed_dim // num_heads", _shapes_wrong(heads_full=True), name="full-width-heads"),
        Mistake("every head has its own (T, T) score matrix: (B, h, T, T)", _shapes_wrong(no_head_axis=True),
                name="no-head-axis"),
        Mistake("the scores compare every query with every key: their last two axes are both the sequence, "
                "(B, h, T, T), not (B, h, T, d_h)", _shapes_wrong(scores_over_features=True),
                name="scores-over-features"),
        Mistake("one fused projection makes queries, keys and values at once: 3 * embed_dim features per "
                "token", _shapes_wrong(qkv_one=True), name="qkv-of-one"),
        Mistake("after the heads are merged back the tensor is (B, T, C) again, one vector per token",
                _shapes_wrong(merged_split=True), name="merged-still-split"),
    ),
    forbidden=("mha",), dtypes=(),
)

# ---------------------------------------------------------------- 7. a prediction: the memory of the weights

def weights_mib() -> float:
    """GPT-2 small's attention layer (C = 768, 12 heads) returns its attention weights for one
    sequence of 1024 tokens in float32 (need_weights=True): how many MiB does that tensor hold?"""
    B, h, T, bytes_per_number = 1, 12, 1024, 4
    return B * h * T * T * bytes_per_number / 2**20          # (B, h, T, T): one weight per head, query, key


WEIGHTS_MIB = Exercise(
    id="dims.weights_mib", title="Predict: the memory of the attention weights", lesson="03-dimension-math",
    function="weights_mib", params=(), points=2, reference=weights_mib, answer="number", tolerance=0.1,
    public=lambda g: [Case((), note="GPT-2 small, one sequence of 1024 tokens, float32")], hidden=lambda g: [],
    public_seed=205,
    mistakes=(
        Mistake("every head has its own (T, T) weights: the tensor is (B, h, T, T), 12 times one head's",
                lambda: 1024 * 1024 * 4 / 2**20, name="one-head"),
        Mistake("a float32 number takes 4 bytes, not 2", lambda: 12 * 1024 * 1024 * 2 / 2**20, name="two-bytes"),
        Mistake("the weights compare every query with every key: T x T per head, not T x d_h (that is the "
                "size of the heads' outputs)", lambda: 12 * 1024 * 64 * 4 / 2**20, name="t-by-d-h"),
        Mistake("count bytes, then divide by 2**20 for MiB: the number of weights alone is not a size in MiB",
                lambda: 12 * 1024 * 1024 / 2**20, name="numbers-not-bytes"),
        Mistake("the weights are (B, h, T, T), T squared: one row of T weights per query, not one weight per "
                "query", lambda: 12 * 1024 * 4 / 2**20, name="t-not-squared"),
    ),
    forbidden=("mha",), dtypes=(),
)

EXERCISES = (SPLIT, HEADS_INTO_BATCH, SHAPES, WEIGHTS_MIB)
