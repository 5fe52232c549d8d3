"""Exercises of lesson 06, the layer step by step: W_O over a list of heads, the split of a
fused grouped-query projection, attention dropout with a given keep-mask, the weights of
many heads in one matrix, a prediction, and the capstone: the whole layer, masks included."""

from __future__ import annotations

import math
import re

import torch

from mha.autograde import Case, ErrorHint, Exercise, Explain, Mistake
from mha.autograde.draw import other_than, randint, randn, separating

from .common import NO_MHA


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



# ---------------------------------------------------------------- 6. the capstone: the whole layer

def multi_head_attention(x: torch.Tensor, in_proj_weight: torch.Tensor, in_proj_bias: torch.Tensor | None,
                         out_proj_weight: torch.Tensor, out_proj_bias: torch.Tensor | None, num_heads: int,
                         key_mask: torch.Tensor | None, is_causal: bool) -> torch.Tensor:
    """Multi-head self-attention as torch.nn.MultiheadAttention(C, num_heads, batch_first=True)
    computes it in evaluation mode. x (B, T, C); in_proj_weight (3C, C) = cat[W_q; W_k; W_v] and
    out_proj_weight (C, C) in nn.Linear's (out, in) layout, their biases (3C,) and (C,) or None;
    key_mask (B, T) bool, True where the key is a real token (the real tokens first, at least
    one per sequence), or None; is_causal: query i sees the keys j <= i. -> (B, T, C)."""
    return _layer(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads, key_mask, is_causal)


def _layer(x, w_in, b_in, w_out, b_out, num_heads, key_mask, is_causal, *, w_in_t=True, split="roles",
           scale_by="d", triangle="lower", inverted=False, padding_on="keys", join="and", masked="before", fill=None,
           dim=-1, merge="right", w_out_t=True, biases=True):
    """The layer, and the slips its joins invite (the keyword arguments; the defaults are right)."""
    B, T, C = x.shape
    d = C // num_heads
    if w_in_t:
        qkv = x @ w_in.T                                                  # (B, T, 3C)
    else:                                                                 # each (C, C) block used as (in, out)
        qkv = torch.cat([x @ w for w in w_in.split(C)], dim=-1)
    if biases and b_in is not None:
        qkv = qkv + b_in
    if split == "roles":                                                  # (role, head, feature): the fused layout
        q, k, v = (t.reshape(B, T, num_heads, d).transpose(1, 2) for t in qkv.split(C, dim=-1))
    elif split == "heads":                                                # read as (head, role, feature)
        q, k, v = qkv.reshape(B, T, num_heads, 3, d).permute(3, 0, 2, 1, 4)
    else:                                                                 # a direct view to (B, h, T, d)
        q, k, v = (t.reshape(B, num_heads, T, d) for t in qkv.split(C, dim=-1))
    scores = q @ k.transpose(-2, -1) / math.sqrt(d if scale_by == "d" else C)   # (B, h, T, T)
    causal = None
    if is_causal:                                                         # (T, T): key j <= query i
        ones = torch.ones(T, T, dtype=torch.bool)
        causal = ones.tril() if triangle == "lower" else ones.triu()
    padding = None
    if key_mask is not None:
        real = ~key_mask if inverted else key_mask                        # (B, T)
        padding = real[:, None, None, :] if padding_on == "keys" else real[:, None, :, None]
    if causal is not None and padding is not None:
        allowed = (causal | padding) if join == "or" else (causal & padding)          # (B, 1, T, T)
    else:
        allowed = causal if causal is not None else padding
    if allowed is None:
        weights = torch.softmax(scores, dim=dim)
    elif masked == "before":
        weights = torch.softmax(scores.masked_fill(~allowed, float("-inf") if fill is None else fill), dim=dim)
    else:                                                                 # zeroed after the softmax
        weights = torch.softmax(scores, dim=dim) * allowed
    heads = weights @ v                                                   # (B, h, T, d)
    if merge == "right":
        merged = heads.transpose(1, 2).reshape(B, T, C)                   # (B, T, h, d) -> (B, T, C)
    else:
        merged = heads.reshape(B, T, C)
    out = merged @ (w_out.T if w_out_t else w_out)                        # (B, T, C)
    if biases and b_out is not None:
        out = out + b_out
    return out


def _layer_case(g, b, t, h, d, *, causal, lengths=None, in_bias=True, out_bias=True, dtype=torch.float32,
                note=""):
    c = h * d
    key_mask = None
    if lengths is not None:                                               # the real tokens first
        key_mask = torch.arange(t)[None, :] < torch.as_tensor(lengths)[:, None]
    return Case((randn(g, b, t, c, dtype=dtype),
                 randn(g, 3 * c, c, dtype=dtype, scale=c ** -0.5),
                 randn(g, 3 * c, dtype=dtype, scale=0.5) if in_bias else None,
                 randn(g, c, c, dtype=dtype, scale=c ** -0.5),
                 randn(g, c, dtype=dtype, scale=0.5) if out_bias else None,
                 h, key_mask, causal), note=note)


_SAME_AS_TORCH = "the same as torch.nn.MultiheadAttention holding these weights"


def _layer_public(g):
    return [_layer_case(g, 2, 4, 2, 4, causal=False, note=f"no mask, with biases: {_SAME_AS_TORCH}"),
            _layer_case(g, 1, 5, 3, 4, causal=True, in_bias=False, out_bias=False, dtype=torch.float64,
                        note=f"causal, no biases, float64: {_SAME_AS_TORCH}"),
            _layer_case(g, 3, 4, 2, 3, causal=False, lengths=[4, 2, 1], in_bias=False,
                        note=f"padding only (lengths 4, 2, 1), an output bias only: {_SAME_AS_TORCH}"),
            _layer_case(g, 2, 5, 4, 2, causal=True, lengths=[5, 3],
                        note=f"causal and padding (lengths 5 and 3), with biases: {_SAME_AS_TORCH}")]


def _layer_hidden(g):
    # Every case has h >= 2 heads of width d >= 2 and T >= 3 tokens, T different from h, so that a
    # direct view, a direct merge, the (head, role) split and sqrt(C) all change the answer; the
    # first, drawn until every listed mistake gives its own answer, holds causality, padding (a full
    # sequence and one padded by two or more) and both biases; the second pads every sequence, so
    # that an inverted mask still leaves each query a key.
    def first():
        b, h = randint(g, 2, 3), randint(g, 2, 4)
        t = other_than(g, 4, 7, (h,))
        lengths = [t] + [randint(g, 1, t) for _ in range(b - 2)] + [randint(g, 1, t - 2)]
        return _layer_case(g, b, t, h, randint(g, 2, 4), causal=True, lengths=lengths)

    b, h = randint(g, 1, 3), randint(g, 2, 4)
    t = other_than(g, 3, 7, (h,))
    padded = _layer_case(g, b, t, h, randint(g, 2, 4), causal=False, lengths=[randint(g, 1, t - 1) for _ in range(b)],
                         out_bias=False, dtype=torch.float64)
    h = randint(g, 2, 4)
    causal = _layer_case(g, randint(g, 1, 3), other_than(g, 3, 7, (h,)), h, randint(g, 2, 4), causal=True,
                         in_bias=False)
    return [separating(first, LAYER), padded, causal]


def _layer_explain(case, outcome):
    x, _, b_in, _, b_out, h, key_mask, _ = case.args
    if outcome.status != "raised":
        return None
    message = outcome.error_message
    if "view size is not compatible" in message:
        return (".view needs memory laid out in the order of the new shape, and after a transpose or permute it "
                "is not: merge the heads back with .reshape (or .contiguous().view)")
    unset = [name for name, arg in (("in_proj_bias", b_in), ("out_proj_bias", b_out), ("key_mask", key_mask))
             if arg is None]
    if outcome.error_type == "TypeError" and "'NoneType'" in message and unset:
        return (f"{' and '.join(unset)} may be None (a layer built with bias=False, a batch without padding), as "
                "here: use an optional argument only when it is given (if ... is not None)")
    sizes = {int(n) for n in re.findall(r"size of tensor [ab] \((\d+)\)", message)}
    if key_mask is not None and sizes == {x.shape[0], h} and x.shape[0] != h:
        return ("key_mask is (B, T), one row per sequence: give it the axes of the heads and the queries, "
                "key_mask[:, None, None, :], so that it lines up with the (B, h, T, T) scores")
    return None


def _slip(**slip):
    return lambda *args: _layer(*args, **slip)


LAYER = Exercise(
    id="layer.multi_head_attention", title="The whole layer, masks included", lesson=LESSON,
    function="multi_head_attention",
    params=("x", "in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias", "num_heads", "key_mask",
            "is_causal"),
    points=8, reference=multi_head_attention, public=_layer_public, hidden=_layer_hidden, public_seed=607,
    section="Matching `torch.nn.MultiheadAttention`",
    mistakes=(
        Mistake("in_proj_weight is stored as nn.Linear stores it, (out_features, in_features): the queries are "
                "x @ W_q.T with W_q = in_proj_weight[:C], or x @ in_proj_weight.T for all three at once",
                _slip(w_in_t=False), name="w-in-not-transposed"),
        Mistake("the fused projection's features are (role, head, feature): all of q first, then k, then v; "
                "split them into q, k and v first, then each into heads, not (head, role, feature)",
                _slip(split="heads"), name="heads-before-roles", section="Version 3: one fused projection"),
        Mistake("view q, k and v (B, T, C) as (B, T, h, d) and then transpose to (B, h, T, d); a direct view to "
                "(B, h, T, d) mixes tokens across heads", _slip(split="direct"), name="direct-view",
                section="03-dimension-math: Why view first, then transpose"),
        Mistake("each head has width d = C // num_heads: scale the scores by sqrt(d), not sqrt(C)",
                _slip(scale_by="C"), name="scale-by-c", section="01-one-head: Why divide by $\\sqrt{d_h}$?"),
        Mistake("the mask says True where a key is a real token (the course's convention); torch's "
                "key_padding_mask says True for padding: fill the scores where key_mask is False",
                _slip(inverted=True), name="true-means-blocked",
                section="05-causal-masking: Pitfall 3: PyTorch's two opposite boolean conventions"),
        Mistake("padding hides keys, the columns of the (T, T) scores: key_mask[:, None, None, :], not "
                "key_mask[:, None, :, None], which hides the padded queries' rows",
                _slip(padding_on="queries"), name="padding-on-queries",
                section="05-causal-masking: Padding meets causality"),
        Mistake("a key may be seen when it is not in the future AND is a real token: combine the two masks "
                "with &, not |", _slip(join="or"), name="masks-joined-by-or",
                section="05-causal-masking: Padding meets causality"),
        Mistake("tril keeps the keys on and below the diagonal, j <= i, the ones query i may see; triu keeps "
                "those on and above it, the future", _slip(triangle="upper"), name="upper-triangle",
                section="05-causal-masking: The idea: block the scores above the diagonal"),
        Mistake("fill the masked scores with -inf: a score of 0 still gets the weight exp(0) / sum in the "
                "softmax, so the masked keys are still read", _slip(fill=0.0), name="filled-with-zero",
                section="05-causal-masking: The idea: block the scores above the diagonal"),
        Mistake("mask the scores before the softmax (fill them with -inf): zeroing the weights after it leaves "
                "rows that no longer sum to 1", _slip(masked="after"), name="masked-after-softmax",
                section="05-causal-masking: Pitfall 2: the row with nothing allowed"),
        Mistake("the softmax runs over the keys, the last dimension of the (B, h, T, T) scores: dim=-2 "
                "normalises over the queries", _slip(dim=-2), name="softmax-over-queries",
                section="01-one-head: From tokens to queries, keys and values"),
        Mistake("merge the heads back by transposing (B, h, T, d) to (B, T, h, d) before the reshape to "
                "(B, T, C); a direct reshape mixes tokens across heads", _slip(merge="direct"),
                name="direct-merge", section="03-dimension-math: Why view first, then transpose"),
        Mistake("out_proj_weight is stored as nn.Linear stores it, (out_features, in_features): multiply by "
                "out_proj_weight.T", _slip(w_out_t=False), name="w-o-not-transposed"),
        Mistake("add the biases when they are given: nn.Linear computes x @ weight.T + bias, in the fused "
                "projection and in the output projection", _slip(biases=False), name="no-biases"),
    ),
    forbidden=NO_MHA, explain=_layer_explain,
)

EXERCISES = (CONCAT, SPLIT_QKV_GQA, DROPOUT, FUSE, DROPOUT_SPREAD, LAYER)
