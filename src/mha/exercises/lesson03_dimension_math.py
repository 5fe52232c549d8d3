"""Exercises of lesson 03, dimension math: splitting heads, folding them into the batch of a
sequence-first tensor as torch does, and the shapes."""

from __future__ import annotations

import math

import torch

from mha.autograde import Case, ErrorHint, Exercise, Explain, Mistake
from mha.autograde.draw import other_than, randint, randn

from .common import NO_MHA


# ---------------------------------------------------------------- 4. split heads

def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, T, C) -> (B, h, T, C // h): view as (B, T, h, d), then swap T and h."""
    B, T, C = x.shape
    return x.view(B, T, num_heads, C // num_heads).transpose(1, 2)


def _split_public(g):
    return [Case((randn(g, 2, 5, 8), 2)), Case((randn(g, 1, 3, 12, dtype=torch.float64), 4)),
            Case((randn(g, 3, 4, 6), 1))]


def _split_hidden(g):
    # heads wider than 1 in the first case, so that a (B, T, d, h) split shows, and T != h there,
    # where a direct view and a view without the transpose give the same tensor
    cases = []
    for least in (2, 1, 1):
        h, d = randint(g, 2, 5), randint(g, least, 4)
        t = other_than(g, 2, 6, (h,)) if least == 2 else randint(g, 2, 6)
        cases.append(Case((randn(g, randint(g, 1, 3), t, h * d), h)))
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
    section="Why view first, then transpose",
    mistakes=(
        Mistake("a direct view or reshape to (B, h, T, d) scrambles tokens across heads: "
                "view as (B, T, h, d) first, then transpose(1, 2)",
                lambda x, h: x.reshape(x.shape[0], h, x.shape[1], x.shape[2] // h), name="direct-view"),
        Mistake("head i owns channels i*d to (i+1)*d - 1: view as (B, T, h, d), not (B, T, d, h)",
                lambda x, h: x.reshape(x.shape[0], x.shape[1], x.shape[2] // h, h).permute(0, 3, 1, 2),
                name="features-interleaved"),
        Mistake("the view gives (B, T, h, d); transpose the T and h axes to get (B, h, T, d)",
                lambda x, h: x.reshape(x.shape[0], x.shape[1], h, x.shape[2] // h), name="no-transpose"),
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
    return Case((randn(g, t, b, h * d, dtype=dtype), h), noncontiguous=noncontiguous)


def _hib_public(g):
    return [_hib_case(g, 3, 2, 2, 4), _hib_case(g, 4, 1, 3, 2, torch.float64), _hib_case(g, 2, 3, 2, 3),
            _hib_case(g, 5, 2, 2, 2, noncontiguous=(0,))]


def _hib_hidden(g):
    # T, B, h >= 2 and d >= 2 in every case, so every listed mistake moves some number; two
    # of the three arrive non-contiguous, as the statement allows
    return [_hib_case(g, randint(g, 2, 6), randint(g, 2, 4), randint(g, 2, 4), randint(g, 2, 4), dt, nc)
            for dt, nc in ((torch.float32, ()), (torch.float64, (0,)), (torch.float32, (0,)))]


# torch's words when .view meets a layout it cannot reinterpret (a transposed tensor)
VIEW_NOT_CONTIGUOUS = r"view size is not compatible with input tensor's size and stride"

_hib_explain = Explain(
    ErrorHint("view-not-contiguous", "x may arrive non-contiguous (for example the transpose of a batch-first "
              "tensor), and .view needs a contiguous layout: use .reshape, or .contiguous() before .view",
              (VIEW_NOT_CONTIGUOUS,)),
)


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
    section="Why view first, then transpose",
    mistakes=(
        Mistake("row b * h + i holds head i of sequence b: the heads of one sequence are neighbours "
                "(batch-major), not row i * B + b", _hib_wrong("head-major"), name="head-major",
                section="Batched matmul: all heads at once"),
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
    # never 3 heads: there 3 d_h = C, and a fused projection three heads wide would pass for one
    # C wide (the qkv-of-one slip)
    h = other_than(g, 2, 12, (3,))
    h2 = randint(g, 4, 7)
    return [Case((randint(g, 1, 8), randint(g, 2, 64), h * randint(g, 1, 64), h)),
            Case((randint(g, 1, 8), randint(g, 2, 64), 64 * h2, h2)),
            Case((randint(g, 1, 8), randint(g, 2, 64), h2 * randint(g, 2, 30) + 1, h2), raises="ValueError",
                 names=("embed_dim", "num_heads"), note="embed_dim not divisible by num_heads")]


SHAPES = Exercise(
    id="dims.shapes", title="Every shape in one place", lesson="03-dimension-math",
    function="shapes", params=("batch", "seq_len", "embed_dim", "num_heads"), points=3,
    reference=shapes, public=_shapes_public, hidden=_shapes_hidden, answer="shapes", public_seed=203,
    section="One tensor, step by step",
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
    function="weights_mib", params=(), points=2, reference=weights_mib, answer="number", tolerance=0.02,
    public=lambda g: [Case((), note="GPT-2 small, one sequence of 1024 tokens, float32")], hidden=lambda g: [],
    public_seed=205,
    section="Sizes of real models",
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
        Mistake("a MiB is 2**20 bytes (1,048,576); dividing by 10**6 gives megabytes, MB, about 5% more",
                lambda: 12 * 1024 * 1024 * 4 / 10**6, name="megabytes"),
        Mistake("divide the bytes by 2**20 for MiB: dividing by 2**10 gives KiB", lambda: 12 * 1024 * 1024 * 4 / 2**10,
                name="kibibytes"),
        Mistake("the weights are float32, 4 bytes per number; 8 bytes is float64",
                lambda: 12 * 1024 * 1024 * 8 / 2**20, name="eight-bytes"),
        Mistake("the question is about ONE attention layer, the one asked for its weights: GPT-2 small's 12 layers "
                "each return their own", lambda: 12 * 12 * 1024 * 1024 * 4 / 2**20, name="all-layers"),
        Mistake("that is 8 times the size: a float32 number takes 4 bytes (32 bits: count bytes, not bits), and the "
                "question is about one sequence, not a batch", lambda: 12 * 1024 * 1024 * 32 / 2**20,
                name="bits-or-batch-of-8"),
    ),
    forbidden=("mha",), dtypes=(),
)


# ---------------------------------------------------------------- many query heads, one K/V head

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
                 w_o_t=False, after=False):
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
    if after:   # the weights divided after the softmax
        out = torch.softmax(q @ k.transpose(-2, -1), dim=dim) / math.sqrt(d) @ v
    else:
        out = torch.softmax(q @ k.transpose(-2, -1) / (scale or math.sqrt(d)), dim=dim) @ v
    if merge == "right":
        out = out.transpose(1, 2).reshape(B, T, C)
    elif merge == "interleaved":                               # (B, T, d, h): head i at every h-th feature
        out = out.permute(0, 2, 3, 1).reshape(B, T, C)
    else:
        out = out.reshape(B, T, C)
    return out @ (w_o.T if w_o_t else w_o) if project else out


def _mqa_case(g, b, t, h, d, dtype=torch.float32):
    c = h * d
    return Case((randn(g, b, t, c, dtype=dtype), randn(g, c, c, dtype=dtype, scale=c ** -0.5),
                 randn(g, c, d, dtype=dtype, scale=c ** -0.5), randn(g, c, d, dtype=dtype, scale=c ** -0.5),
                 randn(g, c, c, dtype=dtype, scale=c ** -0.5), h))


def _mqa_public(g):
    return [_mqa_case(g, 2, 5, 2, 4), _mqa_case(g, 1, 3, 4, 2, torch.float64), _mqa_case(g, 2, 4, 3, 3)]


def _mqa_hidden(g):
    # h >= 2, d >= 2 and T different from h in every case: a direct view of the queries or of
    # the heads' outputs then scrambles tokens, and sqrt(C) differs from sqrt(d)
    cases = []
    for dt in (torch.float32, torch.float64, torch.float32):
        h = randint(g, 2, 4)
        cases.append(_mqa_case(g, randint(g, 1, 3), other_than(g, 2, 6, (h,)), h, randint(g, 2, 4), dt))
    return cases


def _keys_split(case, found):
    """Whether the tensor a reshape could not split is as large as the keys (B, T, d): the
    keys or values viewed as num_heads heads of d features."""
    x, w_k = case.args[0], case.args[2]
    return int(found.group(1)) == x.shape[0] * x.shape[1] * w_k.shape[1]


_mqa_explain = Explain(
    ErrorHint("kv-split-into-heads", "w_k and w_v have only d = C // num_heads columns: the keys and values form "
              "ONE head (B, 1, T, d) that every query head reads; do not split them into heads",
              (r"shape '\[[\d, -]+\]' is invalid for input of size (\d+)",), when=_keys_split),
    ErrorHint("view-after-transpose", "after the transpose back to (B, T, h, d) the heads' outputs are not "
              "contiguous, and .view cannot merge them: use .reshape(B, T, C) (or .contiguous().view)",
              (VIEW_NOT_CONTIGUOUS,)),
)


MULTI_QUERY = Exercise(
    id="heads.multi_query_head", title="Many query heads, one key head", lesson="03-dimension-math",
    function="multi_query_head", params=("x", "w_q", "w_k", "w_v", "w_o", "num_heads"), points=6,
    reference=multi_query_head, public=_mqa_public, hidden=_mqa_hidden, public_seed=105,
    section="Why view first, then transpose",
    mistakes=(
        Mistake("after merging the heads, mix them with the output projection: merged @ w_o",
                lambda *a: _mqa_variant(*a, project=False), name="no-out-proj",
                section="One tensor, step by step"),
        Mistake("view the queries (B, T, C) as (B, T, h, d) and then transpose to (B, h, T, d); a "
                "direct view to (B, h, T, d) mixes tokens across heads",
                lambda *a: _mqa_variant(*a, split="direct"), name="direct-view"),
        Mistake("merge the heads back by transposing (B, h, T, d) to (B, T, h, d) before the reshape "
                "to (B, T, C); a direct reshape mixes tokens across heads",
                lambda *a: _mqa_variant(*a, merge="direct"), name="direct-merge"),
        Mistake("each head has width d = C // num_heads: scale by sqrt(d), not sqrt(C)",
                lambda *a: _mqa_variant(*a, scale=math.sqrt(a[0].shape[-1])), name="scale-by-c",
                section="01-one-head: Why divide by $\\sqrt{d_h}$?"),
        Mistake("divide the scores by sqrt(d), d = C // num_heads the width of a head, before the softmax",
                lambda *a: _mqa_variant(*a, scale=1.0), name="no-scale"),
        Mistake("w_o is applied as x @ W here, like w_q, w_k and w_v: merged @ w_o, not merged @ w_o.T",
                lambda *a: _mqa_variant(*a, w_o_t=True), name="w-o-transposed"),
        Mistake("the softmax runs over the keys, the last dimension: the scores are (B, h, T, T) and "
                "dim=-2 normalises over the queries", lambda *a: _mqa_variant(*a, dim=-2),
                name="softmax-over-queries"),
        Mistake("the softmax runs over the keys, the last dimension: the scores are (B, h, T, T) and dim=1 "
                "normalises across the heads", lambda *a: _mqa_variant(*a, dim=1), name="softmax-over-heads"),
        Mistake("head i owns the features i * d .. (i + 1) * d - 1: view the queries as (B, T, h, d), not "
                "(B, T, d, h), which gives head i every h-th feature", lambda *a: _mqa_variant(*a, split="interleaved"),
                name="heads-interleaved"),
        Mistake("merge the heads back as they were split: head i's d outputs are the features i * d .. (i + 1) * d "
                "- 1, so transpose (B, h, T, d) to (B, T, h, d) and reshape; (B, T, d, h) interleaves the heads",
                lambda *a: _mqa_variant(*a, merge="interleaved"), name="merge-interleaved"),
        Mistake("scale the scores before the softmax: dividing the weights after it leaves rows that no longer sum "
                "to 1", lambda *a: _mqa_variant(*a, after=True), name="scale-after-softmax",
                section="01-one-head: Why divide by $\\sqrt{d_h}$?"),
    ),
    forbidden=NO_MHA, explain=_mqa_explain,
)


EXERCISES = (SPLIT, HEADS_INTO_BATCH, SHAPES, MULTI_QUERY, WEIGHTS_MIB)
