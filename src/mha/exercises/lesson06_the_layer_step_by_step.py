"""Exercises of lesson 06, the layer step by step: W_O over a list of heads, the split of a
fused grouped-query projection, attention dropout with a given keep-mask, and the weights of
many heads in one matrix."""

from __future__ import annotations

import math

import torch

from mha.autograde import Case, ErrorHint, Exercise, Explain, Mistake
from mha.autograde.draw import randint, randn


LESSON = "06-the-layer-step-by-step"


# ---------------------------------------------------------------- 1. concatenate and project

def concat_heads(heads: torch.Tensor, w_o: torch.Tensor) -> torch.Tensor:
    """heads (h, B, T, d): the outputs of h heads; w_o (C, C), C = h * d, stored as
    nn.Linear stores it (out_features, in_features) -> (B, T, C) = concat(heads) @ w_o^T."""
    h, B, T, d = heads.shape
    merged = heads.permute(1, 2, 0, 3).reshape(B, T, h * d)  # (B, T, C): head i in columns i*d:(i+1)*d
    return merged @ w_o.T


def _concat_sum(heads, w_o):
    d = heads.shape[-1]
    return heads.sum(0) @ w_o.T[:d]


def _concat_case(g, h, b, t, d, dtype=torch.float32):
    c = h * d
    return Case((randn(g, h, b, t, d, dtype=dtype), randn(g, c, c, dtype=dtype, scale=1 / math.sqrt(c))))


def _concat_public(g):
    return [_concat_case(g, 2, 1, 3, 2), _concat_case(g, 3, 2, 4, 2, torch.float64), _concat_case(g, 4, 2, 2, 3)]


def _concat_hidden(g):
    # h >= 2, d >= 2 and T >= 2 in every case, so that every mistake changes the answer
    return [_concat_case(g, randint(g, 2, 5), randint(g, 1, 3), randint(g, 2, 5), randint(g, 2, 4), dt)
            for dt in (torch.float32, torch.float64, torch.float32)]


def _concat_wrong(*, project=True, transpose_w=True, order="hd"):
    def wrong(heads, w_o):
        h, B, T, d = heads.shape
        if order == "hd":
            merged = heads.permute(1, 2, 0, 3).reshape(B, T, h * d)
        elif order == "dh":
            merged = heads.permute(1, 2, 3, 0).reshape(B, T, h * d)
        else:  # a plain reshape of the (h, B, T, d) memory
            merged = heads.reshape(B, T, h * d)
        if not project:
            return merged
        return merged @ (w_o.T if transpose_w else w_o)
    return wrong


CONCAT = Exercise(
    id="layer.concat_heads", title="Concatenate the heads and mix them", lesson=LESSON,
    function="concat_heads", params=("heads", "w_o"), points=3,
    reference=concat_heads, public=_concat_public, hidden=_concat_hidden, public_seed=601,
    section="$W_O$: where the heads meet",
    mistakes=(
        Mistake("the concatenated heads still need the output projection W_O: return merged @ w_o.T; "
                "without it no output channel mixes two heads", _concat_wrong(project=False), name="no-out-proj"),
        Mistake("w_o is stored as nn.Linear stores it, (out_features, in_features): multiply by w_o.T",
                _concat_wrong(transpose_w=False), name="w-o-not-transposed"),
        Mistake("head i's d features go to columns i*d to (i+1)*d - 1: put the head axis before the "
                "feature axis when you flatten ((B, T, h, d), not (B, T, d, h))", _concat_wrong(order="dh"),
                name="features-interleaved",
                section="Version 2: one batched reshape"),
        Mistake("a plain reshape of (h, B, T, d) to (B, T, C) mixes batch and time across heads: "
                "move the head axis first (permute(1, 2, 0, 3)), then flatten", _concat_wrong(order="raw"),
                name="direct-reshape",
                section="Version 2: one batched reshape"),
        Mistake("concatenate the heads side by side, do not add them: each head keeps its own d columns, "
                "and W_O has a block of weights for each", _concat_sum, name="heads-summed"),
        Mistake("concatenate in head order, head 0 first: head i's features meet columns i * d .. (i + 1) * d - 1 "
                "of w_o", lambda heads, w_o: concat_heads(heads.flip(0), w_o), name="heads-reversed"),
    ),
    forbidden=("mha",),
)


# ---------------------------------------------------------------- 2. fused QKV split, grouped-query

def split_qkv_gqa(qkv: torch.Tensor, num_heads: int, num_kv_heads: int) -> tuple:
    """qkv (B, T, (h + 2 g) d): the output of one fused projection whose weight is
    cat[W_q; W_k; W_v], with h query heads and g key/value heads of width d
    -> (q (B, h, T, d), k (B, g, T, d), v (B, g, T, d))."""
    B, T, width = qkv.shape
    d = width // (num_heads + 2 * num_kv_heads)
    q, k, v = qkv.split([num_heads * d, num_kv_heads * d, num_kv_heads * d], dim=-1)

    def heads(t, n):                                       # (B, T, n d) -> (B, n, T, d)
        return t.reshape(B, T, n, d).transpose(1, 2)
    return heads(q, num_heads), heads(k, num_kv_heads), heads(v, num_kv_heads)


def _gqa_qkv_case(g, b, t, h, groups, d, dtype=torch.float32):
    return Case((randn(g, b, t, (h + 2 * groups) * d, dtype=dtype), h, groups))


def _gqa_qkv_public(g):
    return [_gqa_qkv_case(g, 1, 3, 4, 2, 2), _gqa_qkv_case(g, 2, 4, 2, 1, 3, torch.float64),
            _gqa_qkv_case(g, 2, 2, 3, 3, 2)]


def _gqa_qkv_hidden(g):
    # g >= 2 key/value heads shared by 2..3 query heads each, d >= 2, and T different from
    # every head count, so that each listed mistake moves some number
    cases = []
    for dt in (torch.float32, torch.float64, torch.float32):
        groups, per = randint(g, 2, 3), randint(g, 2, 3)
        t = randint(g, 2, 9)
        while t in (groups, groups * per):
            t += 1
        cases.append(_gqa_qkv_case(g, randint(g, 1, 3), t, groups * per, groups, randint(g, 2, 4), dt))
    return cases


def _gqa_qkv_wrong(kind: str):
    def wrong(qkv, h, groups):
        B, T, width = qkv.shape
        d = width // (h + 2 * groups)
        if kind == "grouped":           # [q of group 0, k_0, v_0, q of group 1, ...]
            per = h // groups
            x = qkv.reshape(B, T, groups, per + 2, d)
            q = x[:, :, :, :per].reshape(B, T, h, d).transpose(1, 2)
            return q, x[:, :, :, per].transpose(1, 2), x[:, :, :, per + 1].transpose(1, 2)
        q, k, v = qkv.split([h * d, groups * d, groups * d], dim=-1)
        if kind == "interleaved":       # (B, T, d, n): head i gets every n-th feature
            return tuple(t.reshape(B, T, d, -1).permute(0, 3, 1, 2) for t in (q, k, v))
        if kind == "direct":            # a reshape straight to (B, n, T, d)
            return q.reshape(B, h, T, d), k.reshape(B, groups, T, d), v.reshape(B, groups, T, d)
        heads = [t.reshape(B, T, n, d).transpose(1, 2) for t, n in ((q, h), (k, groups), (v, groups))]
        if kind == "swapped":
            return heads[0], heads[2], heads[1]
        return heads[0], heads[1].repeat_interleave(h // groups, 1), heads[2].repeat_interleave(h // groups, 1)
    return wrong


def _third(case, found):
    """Whether the part a reshape could not split is a third of the fused projection (chunk(3)
    or split(width // 3)): the slip of three equal parts."""
    qkv = case.args[0]
    B, T, width = qkv.shape
    size = int(found.group(1))
    return size % (B * T) == 0 and size // (B * T) in (width // 3, -(-width // 3))


def _gqa_qkv_values(case, outcome):
    qkv, h, groups = case.args
    if outcome.status == "value" and outcome.value.kind in ("tuple", "list") and outcome.value.length == 3:
        k = outcome.value.data[1]
        if k.kind == "tensor" and k.data.ndim == 4 and k.data.shape[1] == h and h != groups:
            return ("return the g key and value heads as they are, (B, g, T, d); sharing them among the "
                    "query heads is attention's job, not the split's")
    return None


_gqa_qkv_explain = Explain(
    ErrorHint("three-equal-parts", "the fused projection is h + 2 g heads of width d wide, not three equal "
              "parts: d = width // (h + 2 g), and the queries take h * d features, the keys and the values "
              "g * d each", (r"shape '\[[\d, -]+\]' is invalid for input of size (\d+)",), when=_third),
    values=_gqa_qkv_values,
)


SPLIT_QKV_GQA = Exercise(
    id="layer.split_qkv_gqa", title="Split a fused grouped-query projection", lesson=LESSON,
    function="split_qkv_gqa", params=("qkv", "num_heads", "num_kv_heads"), points=4, answer="tensors",
    reference=split_qkv_gqa, public=_gqa_qkv_public, hidden=_gqa_qkv_hidden, public_seed=605,
    section="The `split(3)` bug",
    mistakes=(
        Mistake("the fused weight is cat[W_q; W_k; W_v]: all the query heads' features come first, then "
                "all the key heads', then all the value heads'; they are not grouped per key/value head",
                _gqa_qkv_wrong("grouped"), name="grouped-per-kv-head"),
        Mistake("view each part as (B, T, n, d) and then transpose to (B, n, T, d); a direct reshape to "
                "(B, n, T, d) mixes tokens across heads", _gqa_qkv_wrong("direct"), name="direct-reshape",
                section="Version 2: one batched reshape"),
        Mistake("W_k comes before W_v in the fused weight: the key heads are the middle part",
                _gqa_qkv_wrong("swapped"), name="k-and-v-swapped"),
        Mistake("return the g key and value heads as they are, (B, g, T, d); sharing them among the "
                "query heads is attention's job, not the split's", _gqa_qkv_wrong("expanded"), name="kv-expanded",
                section="11-kv-cache-gqa-mla: Fewer key/value heads: MQA and GQA"),
        Mistake("each head's d features are consecutive: view each part as (B, T, n, d), not (B, T, d, n), "
                "which gives head i every n-th feature", _gqa_qkv_wrong("interleaved"), name="features-interleaved"),
    ),
    forbidden=("mha",), explain=_gqa_qkv_explain,
)


# ---------------------------------------------------------------- 3. attention dropout

def attention_dropout(weights: torch.Tensor, keep: torch.Tensor, p: float) -> torch.Tensor:
    """Dropout on attention weights (..., Tq, Tk) with a given bool keep-mask of the same
    shape (True = the weight survives) and drop probability p: survivors / (1 - p), others 0."""
    return weights * keep / (1 - p)


def _dropout_case(g, shape, p, dtype=torch.float32):
    weights = torch.softmax(randn(g, *shape, dtype=torch.float64, scale=2), dim=-1).to(dtype)
    keep = torch.rand(*shape, generator=g) >= p
    keep.view(-1, shape[-1])[:, 0] = False      # every row loses one weight...
    keep.view(-1, shape[-1])[:, -1] = True      # ...and keeps one
    return Case((weights, keep, p))


def _dropout_public(g):
    return [_dropout_case(g, (3, 4), 0.25), _dropout_case(g, (2, 2, 4, 5), 0.1, torch.float64),
            _dropout_case(g, (1, 3, 6, 6), 0.4)]


def _dropout_hidden(g):
    ps = (0.1, 0.2, 0.3, 0.4, 0.6, 0.7)   # never 0.5, where 1 / p and 1 / (1 - p) coincide
    cases = []
    for dt in (torch.float32, torch.float64, torch.float32):
        p = ps[randint(g, 0, len(ps) - 1)]
        shape = (randint(g, 1, 2), randint(g, 1, 3), randint(g, 2, 6), randint(g, 3, 7))
        cases.append(_dropout_case(g, shape, p, dt))
    return cases


def _renormalised(weights, keep, p):
    kept = weights * keep
    return kept / kept.sum(dim=-1, keepdim=True)


DROPOUT = Exercise(
    id="layer.attention_dropout", title="Attention dropout with a given mask", lesson=LESSON,
    function="attention_dropout", params=("weights", "keep", "p"), points=3,
    reference=attention_dropout, public=_dropout_public, hidden=_dropout_hidden, public_seed=603,
    section="Attention dropout",
    mistakes=(
        Mistake("scale the surviving weights by 1 / (1 - p), so that each weight keeps its expected value",
                lambda w, keep, p: w * keep, name="no-rescale"),
        Mistake("divide by the probability of keeping a weight, 1 - p, not by the drop probability p",
                lambda w, keep, p: w * keep / p, name="divide-by-p"),
        Mistake("multiplying the survivors by (1 - p) is the old test-time convention; here the survivors "
                "are divided by (1 - p) during training", lambda w, keep, p: w * keep * (1 - p),
                name="times-one-minus-p"),
        Mistake("do not renormalise the rows: after dropout a row no longer sums to 1 in training, "
                "and that is intended", _renormalised, name="renormalised"),
        Mistake("keep is True where the weight survives: zero the weights where keep is False",
                lambda w, keep, p: w * ~keep / (1 - p), name="keep-inverted"),
        Mistake("this is the weights unchanged, what dropout does in evaluation mode: here, in training, "
                "zero the weights where keep is False and divide the survivors by (1 - p)",
                lambda w, keep, p: w.clone(), name="no-dropout"),
        Mistake("that is the test-time rule, every weight times (1 - p): in training the keep-mask decides "
                "which weights survive, and the survivors are divided by (1 - p)",
                lambda w, keep, p: w * (1 - p), name="expected-value-only"),
    ),
    forbidden=("mha",),
)


# ---------------------------------------------------------------- 4. many heads in one matrix

def fuse_head_weights(w_heads: torch.Tensor) -> torch.Tensor:
    """w_heads (h, 3d, C): head i's in_proj weight [W_q^i; W_k^i; W_v^i] (each (d, C)), as
    mha.SingleHeadAttention stores it -> (3C, C), C = h * d: the in_proj weight of
    mha.MultiHeadAttention(C, h), all heads' W_q rows, then all W_k rows, then all W_v rows."""
    h, three_d, C = w_heads.shape
    d = three_d // 3
    by_role = w_heads.view(h, 3, d, C).transpose(0, 1)      # (3, h, d, C)
    return by_role.reshape(3 * h * d, C)                     # (3C, C)


def _fuse_case(g, h, d, c, dtype=torch.float32):
    return Case((randn(g, h, 3 * d, c, dtype=dtype),))


def _fuse_public(g):
    return [_fuse_case(g, 2, 2, 4), _fuse_case(g, 3, 2, 6, torch.float64), _fuse_case(g, 4, 3, 12)]


def _fuse_hidden(g):
    # h >= 2 and d >= 2 in every case: with one head, or heads of width 1, the mistakes are right
    cases = []
    for dt in (torch.float32, torch.float64, torch.float32):
        h, d = randint(g, 2, 5), randint(g, 2, 4)
        cases.append(_fuse_case(g, h, d, h * d, dt))
    return cases


def _fuse_head_major(w):
    h, three_d, C = w.shape
    return w.reshape(h * three_d, C)


def _fuse_roles_reversed(w):
    h, three_d, C = w.shape
    return w.view(h, 3, three_d // 3, C).flip(1).transpose(0, 1).reshape(h * three_d, C)


def _fuse_interleaved(w):
    h, three_d, C = w.shape
    return w.view(h, 3, three_d // 3, C).permute(1, 2, 0, 3).reshape(h * three_d, C)


FUSE = Exercise(
    id="layer.fuse_head_weights", title="Many heads in one matrix", lesson=LESSON,
    function="fuse_head_weights", params=("w_heads",), points=4,
    reference=fuse_head_weights, public=_fuse_public, hidden=_fuse_hidden, public_seed=604,
    section="Version 3: one fused projection",
    mistakes=(
        Mistake("stacking the heads' matrices one after the other gives [W_q^0; W_k^0; W_v^0; W_q^1; ...]; "
                "the fused matrix is grouped by role first: all heads' W_q, then all W_k, then all W_v",
                _fuse_head_major, name="head-major"),
        Mistake("inside W_q, head i owns the block of rows i*d to (i+1)*d - 1: keep each head's d rows "
                "together instead of interleaving the heads row by row", _fuse_interleaved, name="rows-interleaved"),
        Mistake("inside each role keep the heads in order, head 0 first: W_q's rows are [W_q^0; W_q^1; ...]",
                lambda w: fuse_head_weights(w.flip(0)), name="heads-reversed"),
        Mistake("each head's block is [W_q^i; W_k^i; W_v^i], in that order: the fused matrix starts with the "
                "queries' rows, then the keys', then the values'", _fuse_roles_reversed, name="roles-reversed"),
    ),
    forbidden=("mha",),
)

# ---------------------------------------------------------------- 5. a prediction: how much dropout shakes a row

def dropout_row_spread() -> float:
    """A row of 16 equal attention weights, 1/16 each, goes through dropout with p = 0.2 in
    training, again and again: what is the standard deviation of the row's sum over the draws?"""
    n, p = 16, 0.2
    one = (1 / n) ** 2 * p / (1 - p)       # variance of one weight w m / (1 - p), m ~ Bernoulli(1 - p)
    return math.sqrt(n * one)              # the n weights are dropped independently: variances add


DROPOUT_SPREAD = Exercise(
    id="layer.dropout_row_spread", title="Predict: how much dropout shakes a row", lesson=LESSON,
    function="dropout_row_spread", params=(), points=2, reference=dropout_row_spread, answer="number",
    tolerance=0.02, public=lambda g: [Case((), note="16 weights of 1/16, p = 0.2")], hidden=lambda g: [],
    public_seed=606,
    section="Attention dropout",
    mistakes=(
        Mistake("the rescaling by 1 / (1 - p) keeps the sum right on AVERAGE only: each draw drops other weights, "
                "so the sum changes from draw to draw", lambda: 0.0, name="no-spread"),
        Mistake("the survivors are divided by (1 - p) in training, which widens the spread too: each weight's "
                "variance is w^2 p / (1 - p), not w^2 p (1 - p)", lambda: math.sqrt(16 * (1 / 16) ** 2 * 0.2 * 0.8),
                name="survivors-not-rescaled"),
        Mistake("that is the variance: the spread asked for is its square root, the standard deviation",
                lambda: dropout_row_spread() ** 2, name="variance-not-std"),
        Mistake("the row's sum adds 16 independent weights: their variances add, so its spread is sqrt(16) "
                "times one weight's, not one weight's alone", lambda: dropout_row_spread() / 4,
                name="one-weight-only"),
        Mistake("that is the spread of the NUMBER of surviving weights, sqrt(n p (1 - p)); the sum of the "
                "weights, each 1/16 and divided by 1 - p, spreads much less",
                lambda: math.sqrt(16 * 0.2 * 0.8), name="count-of-survivors"),
        # With w = 1/16 = (p / (1 - p))^2 these two slips give the same number: one hint says both.
        Mistake("two slips give this number, here: p and 1 - p swapped (p is the probability of being DROPPED, "
                "so the rescaling divides by 1 - p), or the weight not squared (scaling a number by w scales its "
                "variance by w^2: Var(w m / (1 - p)) = w^2 Var(m) / (1 - p)^2)",
                lambda: math.sqrt(16 * (1 / 16) ** 2 * 0.8 / 0.2), name="p-swap-or-w-unsquared"),
        Mistake("the rescaling by 1 / (1 - p) scales the variance by its square, 1 / (1 - p)^2: with Var(m) = "
                "p (1 - p) one weight's variance is w^2 p / (1 - p), not w^2 p",
                lambda: math.sqrt(16 * (1 / 16) ** 2 * 0.2), name="rescaled-once"),
        Mistake("the question is about the row's SUM, the total weight, not its mean: the sum of 16 terms spreads "
                "16 times more than their mean", lambda: dropout_row_spread() / 16, name="mean-not-sum"),
    ),
    forbidden=("mha",), dtypes=(),
)

EXERCISES = (CONCAT, SPLIT_QKV_GQA, DROPOUT, FUSE, DROPOUT_SPREAD)
