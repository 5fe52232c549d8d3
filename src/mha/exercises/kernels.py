"""Exercises of lesson 14, FlashAttention in Triton: a row-softmax kernel, the D_i
preprocess kernel of the backward pass, and a causal attention kernel with masking bugs
to find and fix.

The answers are Triton kernels with a launcher (a Python function that allocates the
output and launches the kernel); the grader calls the launcher, and a call that launches
no kernel loses its check (``kernel=True``). The references below are plain torch, so that
the expected values need no Triton and come quickly; the model answers
(``mha.kernels.answers``) and the correct answers in tests/alternatives/kernels.py are
kernels, run by Triton's interpreter. Cases are small: the interpreter runs every program
of a grid one after another.
"""

from __future__ import annotations

import math

import torch

from ._core import Case, Exercise, Mistake
from .heads import NO_MHA, _int, _randn
from .onehead import NO_SOFTMAX

NEG_INF = float("-inf")


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
    and conversions only (the launches themselves are not recorded, see mha._calls)."""
    for op in ops:
        if op.name not in LAUNCHER_OPS:
            return (f"{op.name} computed with torch outside the kernel; the kernel must compute the result, "
                    "and around its launch the function may only allocate, reshape, copy or convert tensors")
    return None


def _not_power_of_two(g, low: int, high: int) -> int:
    """A random int in [low, high] that is not a power of two (a block must be padded)."""
    while True:
        n = _int(g, low, high)
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


def _softmax_case(g, C, dtype=torch.float32, *, last="random", note=""):
    """Two rows of C scores: row 0 near +1000 or -1000 (exp overflows or underflows without
    the max), row 1 random with a few -inf entries (last="random") or all -inf
    (last="masked"). With C not a power of two, the padded lanes of a block matter."""
    x = _randn(g, 2, C, dtype=torch.float64, scale=2.0)
    big = 1000.0 * (1 if _int(g, 0, 1) else -1)
    x[0] += big
    x[torch.rand(2, C, generator=g) < 0.2] = NEG_INF
    x[:, 0] = torch.tensor([big, 0.5], dtype=torch.float64)    # each row keeps a finite score
    if last == "masked":
        x[1] = NEG_INF
    return Case((x.to(dtype),), note=note)


def _softmax_public(g):
    return [Case((torch.tensor([[1.0, 2.0, 3.0], [0.0, NEG_INF, 0.0]]),), note="3 columns, one masked entry"),
            _softmax_case(g, 20, last="masked", note="row 0 near +-1000, row 1 all -inf"),
            _softmax_case(g, 37, torch.float16, note="float16, 37 columns")]


def _softmax_hidden(g):
    return [_softmax_case(g, _not_power_of_two(g, 3, 60)),
            _softmax_case(g, _not_power_of_two(g, 3, 40), torch.float16, last="masked"),
            Case((_randn(g, 1, _int(g, 1, 8), scale=3.0),))]   # one row, a handful of columns


ROW_SOFTMAX = Exercise(
    id="kernels.row_softmax", title="A row-softmax kernel", lesson="14-flash-attention-in-triton",
    function="row_softmax", params=("x",), points=4,
    reference=row_softmax, public=_softmax_public, hidden=_softmax_hidden, public_seed=1401,
    mistakes=(
        Mistake("exp of a score near 1000 overflows to inf (inf / inf = NaN): subtract the row's "
                "max before tl.exp, so every exponent is <= 0", _softmax_no_max),
        Mistake("the columns past C that the mask leaves out must read as -inf (other=float('-inf')), "
                "not 0: a 0 counts as one more score, exp(0 - max), in every row's sum", _softmax_padding_counts),
        Mistake("a row that is all -inf has max -inf, and -inf - (-inf) is NaN: shift such a row by 0 "
                "instead (tl.where), so that its exponentials are 0 and it returns zeros", _softmax_unguarded),
    ),
    # dtypes=(): each case keeps the dtype it is drawn in (float32 and float16 cases); the
    # interpreter's time per kernel launch makes casting every case to every dtype costly.
    forbidden=NO_SOFTMAX, dtypes=(), kernel=True, model="mha.kernels.answers.row_softmax",
)


# ---------------------------------------------------------------- 2. the D_i preprocess kernel

def attention_delta(o: torch.Tensor, do: torch.Tensor) -> torch.Tensor:
    """o, do (B, h, T, d) -> D (B, h, T) float32, D_i = rowsum(dO_i * O_i), summed in float32."""
    return (o.float() * do.float()).sum(dim=-1)


def _delta_sum_then_multiply(o, do):
    return o.float().sum(dim=-1) * do.float().sum(dim=-1)


def _delta_input_dtype(o, do):
    return (o.float() * do.float()).sum(dim=-1).to(o.dtype)


def _delta_mean(o, do):
    return (o.float() * do.float()).mean(dim=-1)


def _delta_case(g, B, H, T, d, dtype=torch.float32, note=""):
    return Case((_randn(g, B, H, T, d, dtype=dtype), _randn(g, B, H, T, d, dtype=dtype)), note=note)


def _delta_public(g):
    return [_delta_case(g, 1, 1, 3, 16, note="one head, 3 rows"),
            _delta_case(g, 2, 2, 21, 24, note="T = 21 and d = 24: both dimensions ragged"),
            _delta_case(g, 1, 2, 9, 32, torch.float16, note="float16 in, float32 out")]


def _delta_hidden(g):
    return [_delta_case(g, _int(g, 1, 2), 1, _int(g, 2, 40), _not_power_of_two(g, 17, 60)),
            _delta_case(g, 1, _int(g, 1, 2), _int(g, 3, 30), _not_power_of_two(g, 17, 40), torch.float16),
            _delta_case(g, 1, 1, 1, _int(g, 16, 64))]           # a single row


ATTENTION_DELTA = Exercise(
    id="kernels.attention_delta", title="The D_i preprocess kernel", lesson="14-flash-attention-in-triton",
    function="attention_delta", params=("o", "do"), points=4,
    reference=attention_delta, public=_delta_public, hidden=_delta_hidden, public_seed=1402,
    mistakes=(
        Mistake("D_i is the sum over the head dimension of the product dO_i * O_i, entry by entry; "
                "the product of the two row sums is a different number", _delta_sum_then_multiply),
        Mistake("D is a sum of d products: add them in float32 (.to(tl.float32) after loading) and "
                "return float32, whatever the dtype of o and do", _delta_input_dtype),
        Mistake("D_i = rowsum(dP * P) is a sum over the head dimension, not a mean: do not divide by d",
                _delta_mean),
    ),
    forbidden=("mha",), dtypes=(),   # float32 and float16 cases, each as drawn
    kernel=True, model="mha.kernels.answers.attention_delta",
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


def _fix_top_left_only_left(q, k, v, is_causal):
    return _attention_with(q, k, v, is_causal, shift=0)


def _fix_case(g, Tq, Tk, is_causal, d=16, note=""):
    return Case((_randn(g, Tq, d), _randn(g, Tk, d), _randn(g, Tk, d), is_causal), note=note)


def _ragged(g, low, high):
    """A length in [low, high] that is not a multiple of the buggy kernel's block."""
    while True:
        n = _int(g, low, high)
        if n % BUGGY_BLOCK:
            return n


def _fix_public(g):
    return [_fix_case(g, 32, 32, True, note="square, 2 full blocks: the page's test"),
            _fix_case(g, 20, 27, False, note="not causal, Tk = 27: a last block of 11 keys"),
            _fix_case(g, 12, 30, True, note="causal, Tq < Tk"),
            _fix_case(g, 30, 21, True, d=32, note="causal, Tq > Tk: 9 rows see no key")]


def _fix_hidden(g):
    tk = _ragged(g, 5, 15)
    return [_fix_case(g, _int(g, 3, 20), _ragged(g, 5, 24), False),
            _fix_case(g, _int(g, 3, 12), _int(g, 13, 24), True, d=_int(g, 1, 2) * 16),
            _fix_case(g, tk + _int(g, 1, 8), tk, True)]


FIXED_ATTENTION = Exercise(
    id="kernels.fixed_attention", title="Find and fix the masking bugs", lesson="14-flash-attention-in-triton",
    function="fixed_attention", params=("q", "k", "v", "is_causal"), points=6,
    reference=fixed_attention, public=_fix_public, hidden=_fix_hidden, public_seed=1403,
    mistakes=(
        Mistake("query i may attend to key j = i + Tk - Tq itself: block only j > i + Tk - Tq "
                "(keys <= rows + offset are allowed), not j >= it", _fix_strict),
        Mistake("the keys of the last block past Tk load as 0 (other=0.0), so they score 0 and "
                "still count in the softmax: add keys < Tk to the mask of the scores",
                _fix_padding_only_left),
        Mistake("the causal mask is aligned top-left (j <= i); with Tq != Tk it must be "
                "bottom-right: query i sees keys j <= i + Tk - Tq", _fix_top_left_only_left),
    ),
    # The page's kernel as given is not a listed mistake: not causal, its answer is that of
    # "keys past Tk", and causal with Tq < Tk, that of "top-left", whose hints it then gets
    # (causal with Tq > Tk, its answer is its own, and gets none). A mistake of its own would
    # share the answer of "keys past Tk" on every non-causal case, and hide that hint.
    forbidden=tuple(dict.fromkeys(NO_SOFTMAX + NO_MHA + ("torch.nn.attention",))), dtypes=("float32",),
    kernel=True, model="mha.kernels.answers.fixed_attention",
)

EXERCISES = (ROW_SOFTMAX, ATTENTION_DELTA, FIXED_ATTENTION)
