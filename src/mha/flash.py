"""flash_attention: FlashAttention-2's forward and backward as Triton kernels, for autograd.

    out = flash_attention(q, k, v, is_causal=True)      # (B, h, Tq, d) -> (B, h, Tq, d)
    out.sum().backward()                                # the backward kernels run here

The kernels are in ``mha/kernels/attention.py``; this file checks the input, launches them
and ties them to autograd:

- forward: one program per (query block, head) runs lesson 10's online softmax over the
  key blocks it may see, and saves per query row what ``row_stats`` names (``ROW_STATS``):
  by default FlashAttention-2's one log-sum-exp; or the row's largest score and the
  inverse of its sum of exponentials, more accurate with large scores in float32;
- backward: D_i = rowsum(dO_i * O_i) first (a small kernel), then one program per key
  block visits the query blocks that see it, recomputes P tile by tile from the saved
  numbers, accumulates dK and dV, and adds its share of dQ into a float32 buffer with
  atomic additions: FlashAttention-2's five matrix products per tile. Neither direction
  holds a (Tq, Tk) matrix; the extra memory is O(Tq) per head (the row statistics and D),
  plus dQ in float32 while the backward runs.

Derivatives of every order: when autograd builds a graph of the backward
(``create_graph=True``: a gradient penalty, a Hessian-vector product, torch.func.grad),
the gradients are computed by differentiable torch operations instead of the kernels, so
that second derivatives are right; torch.func's vmap, jvp and jacfwd have rules of their
own (``FlashAttention``).

Semantics are those of ``mha.scaled_dot_product_attention``: scale default 1 / sqrt(d),
causal masks aligned bottom-right (query i sees keys j <= i + Tk - Tq), and a query row
with no key to see (Tq > Tk, causal) gives zeros in the output and in every gradient.

Where the kernels run: on a CUDA GPU when there is one, compiled by Triton; otherwise in
Triton's interpreter on the CPU, chosen by ``mha.kernels`` when it is first needed (no
step for the user, and ``import mha`` does not import Triton). The interpreter checks
correctness, not speed. Its ``tl.dot`` on bfloat16 multiplies the raw bit patterns, so
there bfloat16 inputs are computed in float32 and the result is returned as bfloat16.

Precision of float32 inputs on a GPU: ``tl.dot`` would use TF32 (10-bit mantissa) by
default. Here it follows torch's own switch for matmuls,
``torch.backends.cuda.matmul.allow_tf32`` (False by default): IEEE float32 unless TF32
was asked for. float16 and bfloat16 tiles are multiplied as such, with float32
accumulation everywhere.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from ._checks import check_tensor

HEAD_DIMS = (16, 128)                                   # supported head widths, inclusive
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def flash_attention(q, k, v, *, is_causal=False, scale=None, row_stats="log_sum_exp"):
    """softmax(q k^T * scale) v by Triton kernels, forward and backward.

    Args:
        q: (B, h, Tq, d) queries.  k: (B, h, Tk, d) keys.  v: (B, h, Tk, d) values.
            One dtype for all three: float16, bfloat16 or float32; one head width d with
            16 <= d <= 128; the same B and h (no broadcasting). Non-contiguous inputs are
            copied to contiguous ones.
        is_causal: block later keys, aligned bottom-right (query i sees keys
            j <= i + Tk - Tq). Rows with no key allowed (Tq > Tk) return zeros, and
            their gradients are zeros.
        scale: multiplier of the scores, default 1 / sqrt(d).
        row_stats: what the forward saves per query row for the backward: "log_sum_exp"
            (FlashAttention-2's one number, the default) or "max_and_sum" (two numbers;
            with scores of several tens, float32 gradients closer to the plain maths').

    Returns:
        out (B, h, Tq, d) in q's dtype: the same numbers as
        ``mha.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)[0]``
        up to rounding, differentiable with respect to q, k and v to any order (see
        ``FlashAttention`` for the routes each derivative takes).

    Where Triton is not installed (it publishes wheels for Linux only: macOS and Windows),
    it warns once and returns ``mha.tiled_attention(q, k, v, is_causal=..., scale=...)``, the
    same algorithm in plain torch: the same numbers up to rounding, with gradients by autograd
    through its torch operations (which keep each tile of scores for the backward).

    Raises:
        TypeError / ValueError naming the argument for bad input; ImportError if Triton was
        imported before its interpreter could be switched on (the message says what to do).
    """
    scale = _check(q, k, v, is_causal, scale)
    _check_row_stats(row_stats)
    if not triton_installed():
        _warn_no_triton()
        from .tiled import tiled_attention

        return tiled_attention(q, k, v, is_causal=is_causal, scale=scale)
    return _FlashAttention.apply(q, k, v, is_causal, scale, row_stats)[0]


def triton_installed() -> bool:
    """Whether Triton can be imported here (without importing it)."""
    import importlib.util

    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):      # sys.modules["triton"] = None, as on a machine without it
        return False


_warned = []


def _warn_no_triton():
    if not _warned:
        import sys
        import warnings

        _warned.append(True)
        warnings.warn(f"Triton is not installed here ({sys.platform}; it publishes wheels for Linux only): "
                      "flash_attention runs mha.tiled_attention instead, the same algorithm in plain torch, "
                      "with the same numbers up to rounding", stacklevel=3)


# ----------------------------------------------------------------------------- checks

def _check(q, k, v, is_causal, scale, dims: int | None = 4) -> float:
    """The scale to use, after checking the inputs: (B, h, T, d) each when ``dims`` is 4, any
    number (at least 2) of dimensions with the same leading ones when it is None."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, dims=dims, floating=True)
        if t.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., length, head width), "
                             f"got shape {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise TypeError(f"{name} must be float16, bfloat16 or float32 for flash_attention, got {t.dtype} "
                            "(mha.scaled_dot_product_attention takes float64)")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, got {t.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name} must be on q's device {q.device}, got {t.device}")
    d = q.shape[-1]
    for name, t in (("k", k), ("v", v)):
        if t.shape[-1] != d:
            raise ValueError(f"{name} must have q's head width d = {d} (last dimension), got {t.shape[-1]}: "
                             "flash_attention needs one head width for q, k and v")
    if not HEAD_DIMS[0] <= d <= HEAD_DIMS[1]:
        raise ValueError(f"q, k and v have head width d = {d}; flash_attention supports "
                         f"{HEAD_DIMS[0]} <= d <= {HEAD_DIMS[1]} (use mha.tiled_attention for others)")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same length Tk (dim -2), got {k.shape[-2]} and {v.shape[-2]}")
    what = "batch and head dimensions" if dims == 4 else "leading dimensions"
    for name, t in (("k", k), ("v", v)):
        if t.shape[:-2] != q.shape[:-2]:
            raise ValueError(f"{name} must have q's {what} {tuple(q.shape[:-2])}, got "
                             f"{tuple(t.shape[:-2])} (shape {tuple(t.shape)}); flash_attention does not broadcast")
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"q, k and v are on {q.device}: flash_attention runs on cpu (in Triton's interpreter) "
                         "or on cuda")
    if not isinstance(is_causal, bool):
        kind = type(is_causal)
        name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        raise TypeError(f"is_causal must be a bool (True or False), got {name} ({is_causal!r})")
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not math.isfinite(scale):
        raise TypeError(f"scale must be a finite real number or None (for 1 / sqrt(d)), got {scale!r}")
    return float(scale)


# ----------------------------------------------------------------------------- launching

@dataclass(frozen=True)
class Blocks:
    """Block sizes of the interpreter's one fixed configuration (the GPU autotunes its own)."""

    m: int = 32   # query rows per block
    n: int = 16   # key rows per block


INTERPRETER_BLOCKS = Blocks()


def kernels():
    """The module of kernels, imported on first use (``mha.kernels`` chooses the
    interpreter first when there is no GPU)."""
    from .kernels import attention

    return attention


def interpreted() -> bool:
    """True when the kernels run in Triton's interpreter (imports Triton)."""
    from .kernels import INTERPRETER

    return INTERPRETER


def _on_device(*tensors):
    if interpreted():
        return
    for name, t in zip("qkv", tensors):
        if t.device.type != "cuda":
            raise ValueError(f"{name} is on {t.device}: the Triton kernels are compiled for the GPU here, "
                             "so q, k and v must be CUDA tensors (or set TRITON_INTERPRET=1 before "
                             "importing mha.kernels to run them in the interpreter)")


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """What the kernels compute with: the input's dtype, except bfloat16 in the interpreter,
    whose tl.dot multiplies bfloat16 bit patterns as integers."""
    return torch.float32 if dtype == torch.bfloat16 and interpreted() else dtype


def _precision(dtype: torch.dtype) -> str:
    if dtype == torch.float32 and not interpreted() and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"
    return "ieee"


def _block_d(d: int) -> int:
    return max(16, 1 << (d - 1).bit_length())       # d rounded up to a power of two


def _len_bucket(*lengths: int) -> int:
    return 1 << (max(lengths) - 1).bit_length()     # the autotuner tunes once per power of two


def _fixed_blocks(blocks: Blocks | None) -> Blocks | None:
    """The blocks to launch with: those given (tests), the interpreter's one configuration,
    or None on a GPU, where the autotuner chooses."""
    if blocks is not None:
        return blocks
    return INTERPRETER_BLOCKS if interpreted() else None


# CUDA allows at most 65,535 programs along grid axes 1 and 2; the heads go on axis 1, so a
# launch takes at most this many heads at a time (the interpreter has no such limit).
MAX_HEADS_PER_LAUNCH = 65535


def _launch(kernel, n_rows: int, block_name: str, args, constants, blocks: Blocks | None):
    """Launch ``kernel`` over (blocks of ``n_rows`` rows, heads); ``block_name`` says which
    block size cuts the rows ("BLOCK_M" for queries, "BLOCK_N" for keys). Every tensor in
    ``args`` has the heads as its first dimension; they are launched in slices of at most
    MAX_HEADS_PER_LAUNCH."""
    heads = next(a for a in args if isinstance(a, torch.Tensor)).shape[0]
    fixed = _fixed_blocks(blocks)
    for first in range(0, heads, MAX_HEADS_PER_LAUNCH):
        part = [a[first:first + MAX_HEADS_PER_LAUNCH] if isinstance(a, torch.Tensor) else a for a in args]
        n = part[0].shape[0]
        if fixed is not None:
            size = fixed.m if block_name == "BLOCK_M" else fixed.n
            sizes = {name: value for name, value in (("BLOCK_M", fixed.m), ("BLOCK_N", fixed.n))
                     if name in kernel.arg_names}
            kernel[(_cdiv(n_rows, size), n)](*part, **sizes, **constants, **FUSED)
        else:  # the grid depends on the block size the autotuner picks
            grid = lambda meta, n=n: (_cdiv(n_rows, meta[block_name]), n)  # noqa: E731
            kernels().tuned(kernel)[grid](*part, **constants, **FUSED)


# Multiply-adds fused on the GPU (s * scale - max is one instruction), asked for explicitly:
# Triton 3.9 warns that its default will change. (The interpreter ignores the option.)
FUSED = {"enable_fp_fusion": True}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _heads(t: torch.Tensor, work: torch.dtype) -> torch.Tensor:
    """(..., T, d) -> a contiguous (N, T, d) stack of heads in the work dtype, N the product of
    the leading dimensions."""
    return t.to(work).contiguous().view(-1, *t.shape[-2:])


# What the forward saves per query row for the backward, float32 (..., Tq) each:
# "log_sum_exp": L = log of the sum of e^(scale q.k) over the row's keys, in natural units (as
#     torch.logsumexp gives it), +inf for a row with no key; the backward's P = exp(S - L).
#     FlashAttention-2's choice, and what CS336's tests look for.
# "max_and_sum": the row's largest score m in base-2 units (scale q.k log2 e) and 1 / l, the
#     inverse of its sum of 2^(s - m) (+inf and 0 for an empty row); P = 2^(s - m) / l. One
#     number more per row, and the backward keeps each row's largest P right to float32's
#     rounding whatever the size of the scores (lesson 14 measures both).
ROW_STATS = ("log_sum_exp", "max_and_sum")


def forward(q, k, v, is_causal: bool, scale: float, blocks: Blocks | None = None, row_stats: str = "log_sum_exp"):
    """(out, stats): the forward kernel's output (..., Tq, d) in q's dtype, and the tuple of
    what it saves per row (see ROW_STATS): (lse,) or (row_max, inv_sum), float32 (..., Tq).
    q (..., Tq, d), k and v (..., Tk, d), already checked."""
    dtype, work = q.dtype, _work_dtype(q.dtype)
    lead, Tq, d = q.shape[:-2], q.shape[-2], q.shape[-1]
    Tk = k.shape[-2]
    q, k, v = (_heads(t, work) for t in (q, k, v))
    out = torch.empty_like(q)
    two = row_stats == "max_and_sum"
    stats = torch.empty((1 + two, *q.shape[:2]), dtype=torch.float32, device=q.device)   # (1 or 2, N, Tq)
    _launch(kernels().flash_forward_kernel, Tq, "BLOCK_M",
            (q, k, v, out, stats[0], stats[-1], Tq, Tk, scale, _len_bucket(Tq, Tk)),
            dict(HEAD_DIM=d, BLOCK_D=_block_d(d), IS_CAUSAL=is_causal, PRECISION=_precision(work),
                 MAX_AND_SUM=two), blocks)
    return out.view(*lead, Tq, d).to(dtype), tuple(t.view(*lead, Tq) for t in stats)


def backward(q, k, v, out, stats, grad_out, is_causal: bool, scale: float,
             blocks: Blocks | None = None, want=(True, True, True)):
    """(dq, dk, dv) in the inputs' dtype, from the forward's out and stats (one tensor per row
    statistic, as ``forward`` returns them); ``want`` says which of the three are needed (None
    is returned for the others)."""
    dtype, work = q.dtype, _work_dtype(q.dtype)
    Tq, Tk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    shapes = q.shape, k.shape, v.shape
    q, k, v, out, grad_out = (_heads(t, work) for t in (q, k, v, out, grad_out))
    stats = [t.contiguous().view(-1, Tq) for t in stats]              # (N, Tq) float32 each
    consts = dict(HEAD_DIM=d, BLOCK_D=_block_d(d))
    delta = torch.empty_like(stats[0])                                # (N, Tq) float32
    rows = (_fixed_blocks(blocks) or Blocks(m=64)).m                  # D: a light kernel, no tuning
    _launch(kernels().flash_backward_delta_kernel, Tq, "BLOCK_M", (out, grad_out, delta, Tq), consts,
            Blocks(m=rows))
    want_dq, want_dkv = want[0], want[1] or want[2]
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)   # the kernel adds into it
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    consts.update(IS_CAUSAL=is_causal, PRECISION=_precision(work), WANT_DQ=want_dq, WANT_DKV=want_dkv,
                  MAX_AND_SUM=len(stats) == 2)
    _launch(kernels().flash_backward_kernel, Tk, "BLOCK_N",
            (q, k, v, grad_out, stats[0], stats[-1], delta, dq, dk, dv, Tq, Tk, scale, _len_bucket(Tq, Tk)),
            consts, blocks)
    return tuple(t.view(shape).to(dtype) if w else None for t, shape, w in zip((dq, dk, dv), shapes, want))


def _empty(q, row_stats):
    """out and stats when there is nothing to launch (no rows, or no keys): zeros, and what
    an empty row saves (+inf, and 0 for 1 / l)."""
    first = torch.full(q.shape[:-1], float("inf"), dtype=torch.float32, device=q.device)
    return q.new_zeros(q.shape), (first,) if row_stats == "log_sum_exp" else (first, torch.zeros_like(first))


class _FlashAttention(torch.autograd.Function):
    """The kernels tied to autograd: forward(q, k, v, is_causal, scale, row_stats) returns
    (out, *stats), the stats not differentiable. ``FlashAttention`` is its public face."""

    @staticmethod
    def forward(q, k, v, is_causal=False, scale=None, row_stats="log_sum_exp"):
        if q.numel() == 0 or k.shape[-2] == 0:          # nothing to launch: no rows, or no keys
            out, stats = _empty(q, row_stats)
        else:
            _on_device(q, k, v)
            out, stats = forward(q, k, v, is_causal, scale, row_stats=row_stats)
        return (out, *stats)

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, is_causal, scale, _ = inputs
        ctx.save_for_backward(q, k, v, *output)
        ctx.save_for_forward(q, k, v)
        ctx.mark_non_differentiable(*output[1:])
        ctx.is_causal, ctx.scale, ctx.n_stats = is_causal, scale, len(output) - 1

    @staticmethod
    def backward(ctx, grad_out, *_):
        q, k, v, out, *stats = ctx.saved_tensors
        want = ctx.needs_input_grad[:3]
        if torch.is_grad_enabled():       # create_graph=True: the gradients must be differentiable
            grads = _differentiable_backward(q, k, v, grad_out, ctx.is_causal, ctx.scale)
        elif q.numel() == 0 or k.shape[-2] == 0:
            grads = [torch.zeros_like(t) for t in (q, k, v)]
        else:
            grads = backward(q, k, v, out, stats, grad_out, ctx.is_causal, ctx.scale, want=want)
        return (*(g if w else None for g, w in zip(grads, want)), None, None, None)

    @staticmethod
    def jvp(ctx, q_t, k_t, v_t, *_):
        q, k, v = ctx.saved_tensors
        out_t = _forward_derivative(q, k, v, q_t, k_t, v_t, ctx.is_causal, ctx.scale)
        return (out_t, *[None] * ctx.n_stats)                               # the stats have none

    @staticmethod
    def vmap(info, in_dims, q, k, v, is_causal, scale, row_stats):
        """torch.func.vmap: the mapped dimension becomes one more leading dimension."""
        q, k, v = (t.movedim(dim, 0) if dim is not None else t.expand(info.batch_size, *t.shape)
                   for t, dim in zip((q, k, v), in_dims[:3]))
        outputs = _FlashAttention.apply(q, k, v, is_causal, scale, row_stats)
        return outputs, (0,) * len(outputs)


class FlashAttention(_FlashAttention):
    """The autograd.Function behind ``flash_attention``, for code that expects one (the adapter
    of Stanford CS336's assignment 2, say):

        out = FlashAttention.apply(q, k, v, is_causal=False, scale=None, row_stats="log_sum_exp")

    q (..., Tq, d), k and v (..., Tk, d): any leading dimensions, the same for all three (they
    are heads to the kernels). It saves for the backward q, k, v, the output and, per query
    row, what ``row_stats`` names (ROW_STATS): by default what FlashAttention-2 saves, ONE
    log-sum-exp L (..., Tq), float32, in natural units.

    Derivatives, on every path:

    - ``.backward()``, ``torch.autograd.grad``: the backward kernels.
    - With ``create_graph=True`` (a gradient penalty, a Hessian-vector product), autograd
      runs the backward with grad mode on; it then computes the gradients with differentiable
      torch operations instead (``mha.attention_backward``'s formulas), so that second and
      higher derivatives are right. That route holds (Tq, Tk) matrices, as autograd through
      the plain maths does.
    - ``torch.func``: ``vmap`` folds the mapped dimension into the leading ones and runs the
      kernels; ``grad``, ``vjp`` and ``jacrev`` always build graphs, so their backward takes
      the differentiable route; ``jvp`` and ``jacfwd`` use forward-mode formulas in torch
      operations (``_forward_derivative``), so ``torch.func.hessian`` works too.

    The output's ``grad_fn`` is the node of the inner Function, ``_FlashAttention``, whose
    ``saved_tensors`` are those listed above.
    """

    @classmethod
    def apply(cls, q, k, v, is_causal=False, scale=None, row_stats="log_sum_exp"):
        """out (..., Tq, d); the inputs are checked as ``flash_attention`` checks them."""
        scale = _check(q, k, v, is_causal, scale, dims=None)
        _check_row_stats(row_stats)
        return _FlashAttention.apply(q, k, v, is_causal, scale, row_stats)[0]


def _check_row_stats(row_stats):
    if row_stats not in ROW_STATS:
        raise ValueError(f"row_stats must be one of {ROW_STATS}, got {row_stats!r}")


def _scores(q, k, is_causal, scale):
    """S = scale q k^T, -inf where the causal mask blocks a key (..., Tq, Tk)."""
    from .masks import causal_mask

    s = (q @ k.transpose(-2, -1)) * scale
    if is_causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], device=q.device), float("-inf"))
    return s


def _differentiable_backward(q, k, v, grad_out, is_causal, scale):
    """(dq, dk, dv) by torch operations that autograd can differentiate again (lesson 08's
    formulas, mha.attention_backward's steps), in the inputs' dtype."""
    from .attention import safe_softmax

    P = safe_softmax(_scores(q, k, is_causal, scale))                 # (..., Tq, Tk)
    dV = P.transpose(-2, -1) @ grad_out
    dP = grad_out @ v.transpose(-2, -1)
    dS = P * (dP - (dP * P).sum(-1, keepdim=True))
    return (dS @ k) * scale, (dS.transpose(-2, -1) @ q) * scale, dV


def _forward_derivative(q, k, v, q_t, k_t, v_t, is_causal, scale):
    """out_t: the directional derivative of the output along the tangents q_t, k_t, v_t (None
    for none), by torch operations: S_t = scale (q_t k^T + q k_t^T), P_t = P (S_t - rowsum(P S_t)),
    out_t = P_t v + P v_t."""
    from .attention import safe_softmax

    P = safe_softmax(_scores(q, k, is_causal, scale))                 # (..., Tq, Tk)
    s_t = torch.zeros_like(P)
    if q_t is not None:
        s_t = s_t + (q_t @ k.transpose(-2, -1)) * scale
    if k_t is not None:
        s_t = s_t + (q @ k_t.transpose(-2, -1)) * scale
    out_t = (P * (s_t - (P * s_t).sum(-1, keepdim=True))) @ v
    if v_t is not None:
        out_t = out_t + P @ v_t
    return out_t


__all__ = ["FlashAttention", "flash_attention"]
