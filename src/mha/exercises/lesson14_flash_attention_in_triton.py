"""Exercises of lesson 14, FlashAttention in Triton: a row-softmax kernel, a kernel for the
base-2 log-sum-exp that the forward pass saves for the backward, and a causal attention
kernel with masking bugs to find and fix.

The answers are Triton kernels with a launcher (a Python function that allocates the
output and launches the kernel); the grader calls the launcher, and a call that launches
no kernel loses its check (``kernel=True``). The references below are plain torch, so that
the expected values need no Triton and come quickly; the model answers
(``mha.kernels.answers``) and the correct answers in tests/alternatives/kernels.py are
kernels, run by Triton's interpreter. Cases are small: the interpreter runs every program
of a grid one after another. Every kernel exercise also records the torch operations of its
launcher outside the launches (``_launcher_audit``): a kernel that does nothing, launched
beside a torch computation, loses the check.
"""

from __future__ import annotations

import math

import torch

from mha.autograde import Case, Exercise, Mistake
from mha.autograde.draw import randint, randn, returned_nan, separating

from .common import NO_MHA, NO_SOFTMAX


NEG_INF = float("-inf")

# A kernel exercise computes in its kernel; numpy would be a way around it, out of the
# recorder's sight (mha.autograde.calls records torch operations only).
NO_NUMPY = ("numpy",)


# What a launcher may do with torch around its kernels: allocate, take views, copy and convert,
# and ask tensors about their sizes (attribute reads are recorded as "__get__"). Any arithmetic
# on the answer belongs in the kernel: a kernel that does nothing, launched beside a torch
# computation, must not earn a kernel exercise's points.
LAUNCHER_OPS = frozenset((
    "__get__", "__len__", "__getitem__", "__setitem__", "size", "stride", "dim", "ndimension", "numel",
    "nelement", "element_size", "data_ptr", "storage_offset", "is_contiguous", "is_floating_point",
    "untyped_storage", "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like",
    "full", "full_like", "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "zero_",
    "fill_", "contiguous", "clone", "copy_", "detach", "to", "float", "half", "bfloat16", "double", "type",
    "type_as", "cpu", "cuda", "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "squeeze",
    "unsqueeze", "transpose", "permute", "t", "expand", "expand_as", "movedim", "narrow", "select",
    "as_strided", "unbind", "split", "chunk"))


def _launcher_audit(case, ops):
    """The torch operations of a call outside its kernel launches: allocation, views, copies
    and conversions only (the launches themselves are not recorded, see mha.autograde.calls)."""
    for op in ops:
        if op.name not in LAUNCHER_OPS:
            return (f"{op.name} computed with torch outside the kernel; the kernel must compute the result, "
                    "and around its launch the function may only allocate, reshape, copy or convert tensors")
    return None


def _not_power_of_two(g, low: int, high: int) -> int:
    """A random int in [low, high] that is not a power of two (a block must be padded)."""
    while True:
        n = randint(g, low, high)
        if n & (n - 1):
            return n


def _next_power_of_two(n: int) -> int:
    return 1 << (n - 1).bit_length()


# ---------------------------------------------------------------- 1. a row-softmax kernel

def row_softmax(x: torch.Tensor) -> torch.Tensor:
    """x (R, C) -> softmax of each row, in x's dtype; -inf entries get weight 0, and a row
    that is all -inf gives zeros (nothing to attend to), never NaN."""
    x32 = x.float()
    top = x32.amax(dim=-1, keepdim=True)                        # (R, 1)
    top = torch.where(torch.isneginf(top), torch.zeros_like(top), top)
    e = torch.exp(x32 - top)                                    # (R, C), 0 where x = -inf
    total = e.sum(dim=-1, keepdim=True)
    return (e / torch.where(total == 0, torch.ones_like(total), total)).to(x.dtype)


def _softmax_no_max(x):
    e = torch.exp(x.float())
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def _softmax_padding_counts(x):
    """Masked columns loaded as 0 instead of -inf: they count as scores of 0."""
    R, C = x.shape
    padded = torch.zeros(R, _next_power_of_two(C), dtype=torch.float32)
    padded[:, :C] = x.float()
    return row_softmax(padded)[:, :C].to(x.dtype)


def _softmax_unguarded(x):
    x32 = x.float()
    e = torch.exp(x32 - x32.amax(dim=-1, keepdim=True))       # -inf - (-inf) = NaN on an all -inf row
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def _softmax_base_two(x):
    x32 = x.float()
    top = x32.amax(dim=-1, keepdim=True)
    e = torch.exp2(x32 - torch.where(torch.isneginf(top), torch.zeros_like(top), top))
    total = e.sum(dim=-1, keepdim=True)
    return (e / torch.where(total == 0, torch.ones_like(total), total)).to(x.dtype)


def _softmax_64_lanes(x):
    """A block of 64 lanes whatever C: the softmax of the first 64 columns, 0 past them."""
    out = torch.zeros_like(x)
    out[:, :64] = row_softmax(x[:, :64])
    return out


def _softmax_down_columns(x):
    """The softmax of each column over the rows (the cases fit in one tile of rows)."""
    return row_softmax(x.T.contiguous()).T.contiguous()


def _softmax_shared_max(x):
    """Every row shifted by the largest score of all the rows (the cases have at most 2 rows,
    one tile); a row whose exponentials all underflow returns zeros."""
    x32 = x.float()
    top = x32.max()
    e = torch.exp(x32 - (top if torch.isfinite(top) else 0.0))
    total = e.sum(dim=-1, keepdim=True)
    return (e / torch.where(total == 0, torch.ones_like(total), total)).to(x.dtype)


def _kernel_explain(outcome):
    """What a kernel answer's NaN or error usually means."""
    if returned_nan(outcome):
        return ("NaN in a kernel's output comes from -inf - (-inf) (the max of a row or tile that saw only "
                "-inf: shift by 0 instead), from 0 / 0, or from a lane loaded as -inf and then multiplied "
                "(load it as 0 and mask its score instead)")
    return None


def _softmax_case(g, C, dtype=torch.float32, *, last="random", note=""):
    """Two rows of C scores: row 0 near +1000 or -1000 (exp overflows or underflows without
    the max), row 1 random with a few -inf entries (last="random") or all -inf
    (last="masked"). With C not a power of two, the padded lanes of a block matter."""
    x = randn(g, 2, C, dtype=torch.float64, scale=2.0)
    big = 1000.0 * (1 if randint(g, 0, 1) else -1)
    x[0] += big
    x[torch.rand(2, C, generator=g) < 0.2] = NEG_INF
    x[:, 0] = torch.tensor([big, 0.5], dtype=torch.float64)    # each row keeps a finite score
    if last == "masked":
        x[1] = NEG_INF
    return Case((x.to(dtype),), note=note)


def _softmax_public(g):
    # row 1 starts with a score that is not 0: a lane past C that reads the next row's first
    # score (a mask one lane too wide) then differs from a lane that reads a padded 0
    return [Case((torch.tensor([[1.0, 2.0, 3.0], [0.5, NEG_INF, 0.0]]),), note="3 columns, one masked entry"),
            _softmax_case(g, 20, last="masked", note="row 0 near +-1000, row 1 all -inf"),
            _softmax_case(g, 37, torch.float16, note="float16, 37 columns"),
            _softmax_case(g, 100, note="100 columns: wider than a block of 64 lanes")]


def _softmax_hidden(g):
    return [_softmax_case(g, _not_power_of_two(g, 3, 60)),
            _softmax_case(g, _not_power_of_two(g, 3, 40), torch.float16, last="masked"),
            _softmax_case(g, _not_power_of_two(g, 65, 160))]   # wider than a block of 64 lanes


ROW_SOFTMAX = Exercise(
    id="kernels.row_softmax", title="A row-softmax kernel", lesson="14-flash-attention-in-triton",
    function="row_softmax", params=("x",), points=4,
    reference=row_softmax, public=_softmax_public, hidden=_softmax_hidden, public_seed=1401,
    section="Programs, blocks and masks",
    mistakes=(
        Mistake("exp of a score near 1000 overflows to inf (inf / inf = NaN): subtract the row's "
                "max before tl.exp, so every exponent is <= 0", _softmax_no_max, name="no-max-shift"),
        Mistake("the columns past C that the mask leaves out must read as -inf (other=float('-inf')), "
                "not 0: a 0 counts as one more score, exp(0 - max), in every row's sum", _softmax_padding_counts,
                name="padding-read-as-zero"),
        Mistake("a row that is all -inf has max -inf, and -inf - (-inf) is NaN: shift such a row by 0 "
                "instead (tl.where), so that its exponentials are 0 and it returns zeros", _softmax_unguarded,
                name="all-minus-inf-row"),
        Mistake("tl.exp2(x) is 2 ** x, not e ** x: a softmax with exp2 needs the scores in base-2 units, "
                "x * log2(e) (the page's kernel folds log2(e) into the scale)", _softmax_base_two,
                name="exp2-without-log2e"),
        Mistake("one max per row (tl.max(x, axis=1) for a tile of rows): a max shared by all the rows of a "
                "tile makes a row far below it underflow to 0", _softmax_shared_max, name="one-max-per-tile"),
        Mistake("a block of lanes must cover the whole row: BLOCK = triton.next_power_of_2(C); a fixed block of "
                "64 lanes never reads (or writes) the columns past 64", _softmax_64_lanes, name="fixed-64-lanes"),
        Mistake("reduce each row over its columns (axis=1 of a (ROWS, COLS) tile); axis=0 runs down the "
                "tile's rows, a softmax over the rows of each column", _softmax_down_columns, name="down-columns"),
    ),
    # dtypes=(): each case keeps the dtype it is drawn in (float32 and float16 cases); the
    # interpreter's time per kernel launch makes casting every case to every dtype costly.
    forbidden=NO_SOFTMAX + NO_NUMPY, dtypes=(), kernel=True, model="mha.kernels.answers.row_softmax",
    audit=_launcher_audit, explain=lambda case, outcome: _kernel_explain(outcome),
)


# ---------------------------------------------------------------- 2. the log-sum-exp the forward saves

LN2 = math.log(2.0)
INF = float("inf")


def row_lse(q: torch.Tensor, k: torch.Tensor, is_causal: bool) -> torch.Tensor:
    """q (Tq, d), k (Tk, d) float32 -> (Tq,) float32: L_i = log2 of sum_j exp(s_ij) over the keys
    query i may see, s = q k^T / sqrt(d), the base-2 log-sum-exp the forward kernel saves for the
    backward pass; causal masks aligned bottom-right; +inf for a row that sees no key."""
    return _lse(q, k, is_causal)


def _lse(q, k, is_causal, *, scale=None, offset=None, strict=False, base=2.0, empty=INF, score_base=None):
    Tq, Tk = q.shape[0], k.shape[0]
    s = (q.double() @ k.double().T) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)   # (Tq, Tk)
    if is_causal:
        i, j = torch.arange(Tq)[:, None], torch.arange(Tk)[None, :]
        limit = i + (Tk - Tq if offset is None else offset)
        s = s.masked_fill(j >= limit if strict else j > limit, NEG_INF)
    if score_base is not None:                       # exponentials of base score_base: sum score_base ** s
        s = s * math.log(score_base)
    top = s.amax(dim=-1)                             # written out: the statement forbids torch's logsumexp
    shift = torch.where(torch.isneginf(top), torch.zeros_like(top), top)
    total = torch.exp(s - shift[:, None]).sum(dim=-1)
    lse = (shift + torch.log(total)) / math.log(base)    # log(0) = -inf for a row with no key
    return torch.where(torch.isneginf(lse), torch.full_like(lse, empty), lse).float()


def _lse_no_rescale(q, k, is_causal, block):
    """The online log-sum-exp in blocks of ``block`` keys without rescaling the running sum when
    the running max grows: each block's terms stay relative to the max of their own time."""
    Tq, Tk = q.shape[0], k.shape[0]
    s = (q.double() @ k.double().T) / math.sqrt(q.shape[-1]) / LN2                 # base-2 units
    if is_causal:
        s = s.masked_fill(torch.arange(Tk)[None, :] > torch.arange(Tq)[:, None] + Tk - Tq, NEG_INF)
    m = torch.full((Tq,), NEG_INF, dtype=torch.float64)
    l = torch.zeros(Tq, dtype=torch.float64)
    for j0 in range(0, Tk, block):
        tile = s[:, j0:j0 + block]
        m_new = torch.maximum(m, tile.amax(dim=-1))
        shift = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        l = l + torch.exp2(tile - shift[:, None]).sum(dim=-1)
        m = m_new
    return torch.where(l > 0, m + torch.log2(l), torch.full_like(l, INF)).float()


def _lse_case(g, Tq, Tk, is_causal, d=16, *, late_max=False, note=""):
    """q (Tq, d), k (Tk, d); with ``late_max`` the last 16 keys are three times as long, so that
    every row's largest scores come late and a running max that stops growing shows."""
    q, k = randn(g, Tq, d), randn(g, Tk, d)
    if late_max:
        k[-16:] *= 3.0
    return Case((q, k, is_causal), note=note)


def _lse_public(g):
    return [_lse_case(g, 5, 9, False, note="5 rows, 9 keys, no mask"),
            _lse_case(g, 20, 50, True, late_max=True, note="causal, Tq < Tk; the largest scores among the last keys"),
            _lse_case(g, 24, 11, True, d=32, note="causal, Tq > Tk: the first 13 rows see no key")]


def _lse_hidden(g):
    tk = randint(g, 5, 15)
    causal = bool(randint(g, 0, 1))
    first = separating(lambda: _lse_case(g, randint(g, 3, 20), randint(g, 40, 70), causal, late_max=True), ROW_LSE,
                       names=("natural-log", "no-scale", "exp2-without-log2e", "no-rescale", "no-rescale-32"))
    return [first,
            _lse_case(g, tk + randint(g, 1, 8), tk, True),
            _lse_case(g, randint(g, 10, 30), randint(g, 10, 40), False, d=32)]


ROW_LSE = Exercise(
    id="kernels.row_lse", title="The log-sum-exp the forward saves", lesson="14-flash-attention-in-triton",
    function="row_lse", params=("q", "k", "is_causal"), points=5,
    reference=row_lse, public=_lse_public, hidden=_lse_hidden, public_seed=1402,
    section="The forward kernel, read against lesson 10's loop",
    mistakes=(
        Mistake("the kernels save the log-sum-exp in base 2: log2 of the sum, which is the natural one divided "
                "by ln 2 (with the scores in base-2 units, s log2(e), it is m + log2(l))",
                lambda q, k, c: _lse(q, k, c, base=math.e), name="natural-log"),
        Mistake("a row that sees no key saves +inf, not -inf: the backward pass computes exp2(s - L) for it, "
                "and with L = +inf that is 0, where -inf would give inf", lambda q, k, c: _lse(q, k, c, empty=NEG_INF),
                name="minus-inf-for-empty-row"),
        Mistake("a row that sees no key saves +inf, not 0: exp2(s - 0) would give its masked scores weight in "
                "the backward pass", lambda q, k, c: _lse(q, k, c, empty=0.0), name="zero-for-empty-row"),
        Mistake("the scores are q k^T / sqrt(d): scale them before the exponentials",
                lambda q, k, c: _lse(q, k, c, scale=1.0), name="no-scale"),
        Mistake("align the causal mask bottom-right: query i sees keys j <= i + Tk - Tq, not j <= i",
                lambda q, k, c: _lse(q, k, c, offset=0), name="top-left",
                section="Causal attention: which blocks run, and which need a mask"),
        Mistake("query i may see key j = i + Tk - Tq itself: block only j > i + Tk - Tq",
                lambda q, k, c: _lse(q, k, c, strict=True), name="strict-diagonal",
                section="Causal attention: which blocks run, and which need a mask"),
        Mistake("tl.exp2(x) is 2 ** x: sum exp2 of the scores in base-2 units, s * log2(e), not of the "
                "scores themselves", lambda q, k, c: _lse(q, k, c, score_base=2.0), name="exp2-without-log2e"),
        Mistake("when the running max grows, the sum so far was taken relative to the old max: multiply it by "
                "exp2(m_old - m_new) before adding the new block's terms", lambda q, k, c: _lse_no_rescale(q, k, c, 16),
                name="no-rescale"),
        Mistake("when the running max grows, the sum so far was taken relative to the old max: multiply it by "
                "exp2(m_old - m_new) before adding the new block's terms", lambda q, k, c: _lse_no_rescale(q, k, c, 32),
                name="no-rescale-32"),
    ),
    forbidden=tuple(dict.fromkeys(NO_SOFTMAX + NO_MHA + ("torch.nn.attention",) + NO_NUMPY)), dtypes=("float32",),
    kernel=True, model="mha.kernels.answers.row_lse", audit=_launcher_audit,
    explain=lambda case, outcome: _kernel_explain(outcome),
)


# ---------------------------------------------------------------- 3. a kernel with masking bugs

BUGGY_BLOCK = 16    # the block size of the page's buggy kernel


def fixed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v for one head, q (Tq, d), k and v (Tk, d); causal masks
    aligned bottom-right (query i sees keys j <= i + Tk - Tq); a row with no key gives 0."""
    scores = (q.float() @ k.float().T) / math.sqrt(q.shape[-1])          # (Tq, Tk)
    if is_causal:
        i = torch.arange(q.shape[0])[:, None]
        j = torch.arange(k.shape[0])[None, :]
        scores = scores.masked_fill(j > i + k.shape[0] - q.shape[0], NEG_INF)
    top = scores.amax(dim=-1, keepdim=True)
    top = torch.where(torch.isneginf(top), torch.zeros_like(top), top)
    p = torch.exp(scores - top)
    total = p.sum(dim=-1, keepdim=True)
    return (p @ v.float() / torch.where(total == 0, torch.ones_like(total), total)).to(q.dtype)


def _attention_with(q, k, v, is_causal, *, shift, strict=False, padding=False):
    """The attention of ``fixed_attention`` with a bug: the causal limit i + shift (shift
    Tk - Tq is right, 0 is top-left), ``strict`` (j < limit: the diagonal blocked), and
    ``padding`` (the keys of the last block past Tk read as zeros and are not masked)."""
    Tq, Tk, d = q.shape[0], k.shape[0], q.shape[1]
    n = -(-Tk // BUGGY_BLOCK) * BUGGY_BLOCK if padding else Tk
    kp, vp = torch.zeros(n, d), torch.zeros(n, d)
    kp[:Tk], vp[:Tk] = k.float(), v.float()
    scores = (q.float() @ kp.T) / math.sqrt(d)                           # (Tq, n)
    i = torch.arange(Tq)[:, None]
    j = torch.arange(n)[None, :]
    if is_causal:
        blocked = (j >= i + shift) if strict else (j > i + shift)
        scores = scores.masked_fill(blocked, NEG_INF)
    top = scores.amax(dim=-1, keepdim=True)
    top = torch.where(torch.isneginf(top), torch.zeros_like(top), top)
    p = torch.exp(scores - top)
    total = p.sum(dim=-1, keepdim=True)
    return (p @ vp / torch.where(total == 0, torch.ones_like(total), total)).to(q.dtype)


def _fix_strict(q, k, v, is_causal):
    return _attention_with(q, k, v, is_causal, shift=k.shape[0] - q.shape[0], strict=True)


def _fix_padding_only_left(q, k, v, is_causal):
    return _attention_with(q, k, v, is_causal, shift=k.shape[0] - q.shape[0], padding=True)


def _fix_scaled(q, k, v, is_causal, scale):
    return fixed_attention(q * (scale * math.sqrt(q.shape[1])), k, v, is_causal)


def _fix_first_keys(q, k, v, is_causal, n):
    """Attention over the first n keys only, with the causal mask of the full lengths."""
    Tq, Tk = q.shape[0], k.shape[0]
    if Tk <= n:
        return fixed_attention(q, k, v, is_causal)
    s = (q.float() @ k.float()[:n].T) / math.sqrt(q.shape[-1])
    if is_causal:
        s = s.masked_fill(torch.arange(n)[None, :] > torch.arange(Tq)[:, None] + Tk - Tq, NEG_INF)
    top = s.amax(dim=-1, keepdim=True)
    p = torch.exp(s - torch.where(torch.isneginf(top), torch.zeros_like(top), top))
    total = p.sum(dim=-1, keepdim=True)
    return (p @ v.float()[:n] / torch.where(total == 0, torch.ones_like(total), total)).to(q.dtype)


def _fix_top_left_only_left(q, k, v, is_causal):
    return _attention_with(q, k, v, is_causal, shift=0)


def _fix_no_rescale(q, k, v, is_causal):
    """The corrected kernel (blocks of 16) with acc and row_sum not rescaled when the max grows."""
    Tq, Tk, d = q.shape[0], k.shape[0], q.shape[1]
    s = (q.double() @ k.double().T) / math.sqrt(d)
    if is_causal:
        s = s.masked_fill(torch.arange(Tk)[None, :] > torch.arange(Tq)[:, None] + Tk - Tq, NEG_INF)
    m = torch.full((Tq, 1), NEG_INF, dtype=torch.float64)
    l = torch.zeros(Tq, 1, dtype=torch.float64)
    acc = torch.zeros(Tq, d, dtype=torch.float64)
    for j0 in range(0, Tk, BUGGY_BLOCK):
        tile = s[:, j0:j0 + BUGGY_BLOCK]
        m = torch.maximum(m, tile.amax(dim=-1, keepdim=True))
        p = torch.exp(tile - torch.where(torch.isneginf(m), torch.zeros_like(m), m))
        l = l + p.sum(dim=-1, keepdim=True)
        acc = acc + p @ v.double()[j0:j0 + BUGGY_BLOCK]
    return (acc / torch.where(l == 0, torch.ones_like(l), l)).to(q.dtype)


def _fix_mixed_bases(q, k, v, is_causal):
    """The corrected kernel (blocks of 16) with p in base 2 (exp2 of the scores times log2 e, maxima in
    base 2) but acc and row_sum rescaled by exp, not exp2, of the change of the base-2 maximum."""
    Tq, Tk, d = q.shape[0], k.shape[0], q.shape[1]
    s = (q.double() @ k.double().T) / math.sqrt(d) / math.log(2)          # base-2 scores
    if is_causal:
        s = s.masked_fill(torch.arange(Tk)[None, :] > torch.arange(Tq)[:, None] + Tk - Tq, NEG_INF)
    m = torch.full((Tq, 1), NEG_INF, dtype=torch.float64)
    l = torch.zeros(Tq, 1, dtype=torch.float64)
    acc = torch.zeros(Tq, d, dtype=torch.float64)
    for j0 in range(0, Tk, BUGGY_BLOCK):
        tile = s[:, j0:j0 + BUGGY_BLOCK]
        new = torch.maximum(m, tile.amax(dim=-1, keepdim=True))
        new = torch.where(torch.isneginf(new), torch.zeros_like(new), new)
        shrink = torch.exp(m - new)                                        # exp where exp2 belongs
        l = l * shrink + torch.exp2(tile - new).sum(dim=-1, keepdim=True)
        acc = acc * shrink + torch.exp2(tile - new) @ v.double()[j0:j0 + BUGGY_BLOCK]
        m = new
    return (acc / torch.where(l == 0, torch.ones_like(l), l)).to(q.dtype)


def _fix_diagonal_block_skipped(q, k, v, is_causal):
    """Each block of 16 queries loops over the key blocks its FIRST row sees, so its later rows lose
    the keys of the block the diagonal enters."""
    if not is_causal:
        return fixed_attention(q, k, v, is_causal)
    Tq, Tk = q.shape[0], k.shape[0]
    first = torch.arange(Tq) // BUGGY_BLOCK * BUGGY_BLOCK                  # (Tq,): first row of each row's block
    end = (first + 1 + Tk - Tq).clamp(0, Tk)
    seen = -(-end // BUGGY_BLOCK) * BUGGY_BLOCK                             # keys below this are loaded
    j, i = torch.arange(Tk)[None, :], torch.arange(Tq)[:, None]
    return _masked_attention(q, k, v, (j <= i + Tk - Tq) & (j < seen[:, None]))


def _fix_last_block_dropped(q, k, v, is_causal):
    """The loop over key blocks stops at Tk // 16 * 16: the keys of a last, shorter block are never seen."""
    n = k.shape[0] // BUGGY_BLOCK * BUGGY_BLOCK
    j, i = torch.arange(k.shape[0])[None, :], torch.arange(q.shape[0])[:, None]
    allowed = (j < n) & ((j <= i + k.shape[0] - q.shape[0]) if is_causal else True)
    return _masked_attention(q, k, v, allowed)


def _masked_attention(q, k, v, allowed):
    """softmax(q k^T / sqrt(d)) v over the ``allowed`` keys (Tq, Tk); a row with none gives 0."""
    s = ((q.float() @ k.float().T) / math.sqrt(q.shape[-1])).masked_fill(~allowed, NEG_INF)
    top = s.amax(dim=-1, keepdim=True)
    p = torch.exp(s - torch.where(torch.isneginf(top), torch.zeros_like(top), top))
    total = p.sum(dim=-1, keepdim=True)
    return (p @ v.float() / torch.where(total == 0, torch.ones_like(total), total)).to(q.dtype)


def _fix_case(g, Tq, Tk, is_causal, d=16, note="", late_max=False):
    """With ``late_max`` the last 16 keys are three times as long: every row's largest scores come
    in the last key block, so the running max grows there and a missing rescale shows."""
    q, k = randn(g, Tq, d), randn(g, Tk, d)
    if late_max:
        k[-16:] *= 3.0
    return Case((q, k, randn(g, Tk, d), is_causal), note=note)


def _ragged(g, low, high):
    """A length in [low, high] that is not a multiple of the buggy kernel's block."""
    while True:
        n = randint(g, low, high)
        if n % BUGGY_BLOCK:
            return n


def _fix_public(g):
    return [_fix_case(g, 32, 32, True, note="square, 2 full blocks: the page's test"),
            _fix_case(g, 20, 27, False, note="not causal, Tk = 27: a last block of 11 keys"),
            _fix_case(g, 12, 30, True, note="causal, Tq < Tk"),
            _fix_case(g, 30, 21, True, d=32, note="causal, Tq > Tk: 9 rows see no key"),
            _fix_case(g, 20, 50, False, late_max=True, note="50 keys, the largest scores in the last ones: the "
                      "running max grows late")]


def _fix_hidden(g):
    tk, tq = _ragged(g, 5, 15), randint(g, 17, 24)
    return [_fix_case(g, randint(g, 3, 20), _ragged(g, 5, 24), False),
            # two blocks of queries, the first one's diagonal in the second block of keys, which is
            # not the last of them for the second block: the key blocks a block of queries loops over
            # (Tk - Tq >= 2: with one key more than queries, "top-left" is "strict diagonal")
            _fix_case(g, tq, tq + randint(g, 2, 8), True, d=randint(g, 1, 2) * 16),
            # Tq - Tk >= 2: one row more than keys, and "top-left" (j <= i) is "offset + 1"
            _fix_case(g, tk + randint(g, 2, 8), tk, True),
            # more than 48 keys (one tile of 32 with no loop over key blocks misses the rest, and
            # misses more than a loop that drops the last, shorter block), the largest scores in the
            # last block
            _fix_case(g, randint(g, 17, 40), _ragged(g, 49, 64), bool(randint(g, 0, 1)), late_max=True)]


FIXED_ATTENTION = Exercise(
    id="kernels.fixed_attention", title="Find and fix the masking bugs", lesson="14-flash-attention-in-triton",
    function="fixed_attention", params=("q", "k", "v", "is_causal"), points=6,
    reference=fixed_attention, public=_fix_public, hidden=_fix_hidden, public_seed=1403,
    section="Causal attention: which blocks run, and which need a mask",
    mistakes=(
        Mistake("query i may attend to key j = i + Tk - Tq itself: block only j > i + Tk - Tq "
                "(keys <= rows + offset are allowed), not j >= it", _fix_strict, name="strict-diagonal"),
        Mistake("the keys of the last block past Tk load as 0 (other=0.0), so they score 0 and "
                "still count in the softmax: add keys < Tk to the mask of the scores",
                _fix_padding_only_left, name="keys-past-tk-counted"),
        Mistake("the causal mask is aligned top-left (j <= i); with Tq != Tk it must be "
                "bottom-right: query i sees keys j <= i + Tk - Tq", _fix_top_left_only_left, name="top-left"),
        Mistake("mind the sign of the offset: the queries are the LAST Tq positions, so query i sees the "
                "keys j <= i + (Tk - Tq), not j <= i + (Tq - Tk)",
                lambda q, k, v, c: _attention_with(q, k, v, c, shift=q.shape[0] - k.shape[0]), name="offset-sign"),
        Mistake("when the running max grows, the sum and the output accumulated so far were computed "
                "relative to the old max: multiply acc and row_sum by exp(m_old - m_new) before adding",
                _fix_no_rescale, name="no-rescale"),
        Mistake("the scores are q k^T / sqrt(d): scale by 1 / sqrt(d), not 1 / d",
                lambda q, k, v, c: _fix_scaled(q, k, v, c, 1.0 / q.shape[1]), name="scale-by-d"),
        Mistake("loop over every key block: one tile of the first 32 keys leaves the keys from 32 on out",
                lambda q, k, v, c: _fix_first_keys(q, k, v, c, 32), name="one-tile-of-32-keys"),
        Mistake("tl.exp2(x) is 2 ** x: a softmax through exp2 needs the scores in base 2, times log2(e) = 1.4427 "
                "(fold it into the scale), or tl.exp", lambda q, k, v, c: _fix_scaled(q, k, v, c, math.log(2) /
                                                                                      math.sqrt(q.shape[1])),
                name="exp2-without-log2e"),
        Mistake("one base throughout: with the maxima in base 2 (scores times log2 e) and p = exp2(...), the "
                "rescale of acc and row_sum is exp2(m_old - m_new) too, not exp(...)", _fix_mixed_bases,
                name="mixed-bases"),
        Mistake("query i sees the keys j <= i + (Tk - Tq), its own diagonal included; + (Tk - Tq + 1) lets "
                "each row see one key of its future", lambda q, k, v, c: _attention_with(
                    q, k, v, c, shift=k.shape[0] - q.shape[0] + 1), name="offset-plus-one"),
        Mistake("a block of queries must loop over the key blocks its LAST row sees: the limit of its first "
                "row leaves the later rows without the block the diagonal enters", _fix_diagonal_block_skipped,
                name="diagonal-block-skipped"),
        Mistake("loop up to Tk, not Tk // BLOCK * BLOCK: a last, shorter block of keys must be loaded too, "
                "with its lanes past Tk masked", _fix_last_block_dropped, name="last-block-dropped"),
    ),
    # The page's kernel as given is not a listed mistake: not causal, its answer is that of
    # "keys past Tk", and causal with Tq < Tk, that of "top-left", whose hints it then gets
    # (causal with Tq > Tk, its answer is its own, and gets none). A mistake of its own would
    # share the answer of "keys past Tk" on every non-causal case, and hide that hint.
    forbidden=tuple(dict.fromkeys(NO_SOFTMAX + NO_MHA + ("torch.nn.attention",) + NO_NUMPY)), dtypes=("float32",),
    kernel=True, model="mha.kernels.answers.fixed_attention", audit=_launcher_audit,
    explain=lambda case, outcome: _kernel_explain(outcome),
)

# ---------------------------------------------------------------- 4. a prediction: the tiles a causal program visits

def _tiles(Tq, Tk, block, *, offset=None, first_row=False, rows=None):
    """The (query block, key block) tiles a causal forward visits (with a mask or without): for
    each block of query rows, the key blocks up to the one its last row sees."""
    off = Tk - Tq if offset is None else offset
    rows = Tq if rows is None else rows
    visited = 0
    for i0 in range(0, rows, block):
        deciding = i0 if first_row else min(i0 + block, rows) - 1
        last_key = min(deciding + off, Tk - 1)
        if last_key >= 0:
            visited += last_key // block + 1
    return visited


def _tiles_capped(blocks: int) -> int:
    """The tiles visited with the key blocks of a block of rows capped at ``blocks``."""
    total = 0
    for i0 in range(0, 600, 64):
        last_key = min(min(i0 + 64, 600) - 1 + 400, 999)
        total += min(last_key // 64 + 1, blocks)
    return total


def tiles_visited() -> int:
    """The causal forward kernel, blocks of 64 query rows and 64 keys, on Tq = 600 queries and
    Tk = 1000 keys (bottom-right): how many tiles does it visit, masked or not?"""
    return _tiles(600, 1000, 64)


TILES_VISITED = Exercise(
    id="kernels.tiles_visited", title="Predict: the tiles a causal kernel visits", lesson="14-flash-attention-in-triton",
    function="tiles_visited", params=(), points=2, reference=tiles_visited, answer="number", tolerance=0.0,
    public=lambda g: [Case((), note="Tq = 600, Tk = 1000, blocks of 64 x 64, causal")], hidden=lambda g: [],
    public_seed=1404,
    section="Causal attention: which blocks run, and which need a mask",
    mistakes=(
        Mistake("align the causal mask bottom-right: with 400 more keys than queries, query i sees keys up to "
                "i + 400, so even the first block of rows needs 8 key blocks", lambda: _tiles(600, 1000, 64, offset=0),
                name="top-left"),
        Mistake("the skipped tiles, above the diagonal, are never visited: count only the key blocks up to the one "
                "each block's last row sees", lambda: 10 * 16, name="every-tile"),
        Mistake("a block of rows needs the key blocks its LAST row sees, the one that sees the most: deciding "
                "from its first row misses a tile in most blocks", lambda: _tiles(600, 1000, 64, first_row=True),
                name="first-row-of-block"),
        Mistake("600 rows make ten blocks of 64, the last one of 24 rows: it is visited too",
                lambda: _tiles(600, 1000, 64, rows=576), name="short-block-left-out"),
        Mistake("a block of rows visits the key blocks 0 .. last_key // 64: that is last_key // 64 + 1 of them",
                lambda: _tiles(600, 1000, 64) - 10, name="one-key-block-short"),
        Mistake("1000 keys make 16 blocks of 64, the last one of 40 keys: a block of rows whose last row sees key "
                "960 or beyond visits it too", lambda: _tiles_capped(15), name="last-key-block-left-out"),
    ),
    forbidden=("mha",), dtypes=(),
)

EXERCISES = (ROW_SOFTMAX, ROW_LSE, FIXED_ATTENTION, TILES_VISITED)
