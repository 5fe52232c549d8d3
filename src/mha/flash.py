"""flash_attention: FlashAttention-2's forward and backward as Triton kernels, for autograd.

    out = flash_attention(q, k, v, is_causal=True)      # (B, h, Tq, d) -> (B, h, Tq, d)
    out.sum().backward()                                # the backward kernels run here

The kernels are in ``mha/kernels/attention.py``; this file checks the input, launches them
and ties them to autograd:

- forward: one program per (query block, head) runs lesson 10's online softmax over the
  key blocks it may see, and saves one number per query row, the log-sum-exp L_i;
- backward: D_i = rowsum(dO_i * O_i) first (a small kernel), then one program per key
  block accumulates dK and dV over the query blocks, and one program per query block
  accumulates dQ over the key blocks. Each recomputes the probabilities P = exp(S - L)
  tile by tile from the saved L, so neither direction ever holds a (Tq, Tk) matrix; the
  extra memory is O(Tq) per head (L and D).

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


def flash_attention(q, k, v, *, is_causal=False, scale=None):
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

    Returns:
        out (B, h, Tq, d) in q's dtype: the same numbers as
        ``mha.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)[0]``
        up to rounding, differentiable with respect to q, k and v.

    Raises:
        TypeError / ValueError naming the argument for bad input; ImportError where Triton
        is not installed (it publishes wheels for Linux only: elsewhere use
        ``mha.tiled_attention``, the same algorithm in plain torch).
    """
    scale = _check(q, k, v, is_causal, scale)
    return _FlashAttention.apply(q, k, v, is_causal, scale)


# ----------------------------------------------------------------------------- checks

def _check(q, k, v, is_causal, scale) -> float:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, dims=4, floating=True)
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
        raise ValueError(f"k and v must have the same length Tk (dim 2), got {k.shape[-2]} and {v.shape[-2]}")
    for name, t in (("k", k), ("v", v)):
        if t.shape[:2] != q.shape[:2]:
            raise ValueError(f"{name} must have q's batch and head dimensions {tuple(q.shape[:2])}, got "
                             f"{tuple(t.shape[:2])} (shape {tuple(t.shape)}); flash_attention does not broadcast")
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be a bool, got {type(is_causal).__name__} ({is_causal!r})")
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


def _launch(kernel, n_rows: int, block_name: str, heads: int, args, constants, blocks: Blocks | None):
    """Launch ``kernel`` over (blocks of ``n_rows`` rows, heads); ``block_name`` says which
    block size cuts the rows ("BLOCK_M" for queries, "BLOCK_N" for keys)."""
    fixed = _fixed_blocks(blocks)
    if fixed is not None:
        size = fixed.m if block_name == "BLOCK_M" else fixed.n
        kernel[(_cdiv(n_rows, size), heads)](*args, BLOCK_M=fixed.m, BLOCK_N=fixed.n, **constants, **FUSED)
    else:  # the grid depends on the block size the autotuner picks
        kernels().tuned(kernel)[lambda meta: (_cdiv(n_rows, meta[block_name]), heads)](*args, **constants, **FUSED)


# Multiply-adds fused on the GPU (s * scale - max is one instruction), asked for explicitly:
# Triton 3.9 warns that its default will change. (The interpreter ignores the option.)
FUSED = {"enable_fp_fusion": True}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def forward(q, k, v, is_causal: bool, scale: float, blocks: Blocks | None = None):
    """(out, lse): the forward kernel's output in q's dtype and its log-sum-exp per query
    row, float32 (B, h, Tq), in base-2 units (log2 of the sum of 2^(scale q.k log2 e));
    +inf for a row with no key to see. Inputs already checked."""
    dtype = q.dtype
    work = _work_dtype(dtype)
    q, k, v = (t.to(work).contiguous() for t in (q, k, v))
    B, H, Tq, d = q.shape
    Tk = k.shape[2]
    out = torch.empty_like(q)
    lse = torch.empty((B, H, Tq), dtype=torch.float32, device=q.device)
    _launch(kernels().flash_forward_kernel, Tq, "BLOCK_M", B * H,
            (q, k, v, out, lse, Tq, Tk, scale, _len_bucket(Tq, Tk)),
            dict(HEAD_DIM=d, BLOCK_D=_block_d(d), IS_CAUSAL=is_causal, PRECISION=_precision(work)), blocks)
    return out.to(dtype), lse


def backward(q, k, v, out, lse, grad_out, is_causal: bool, scale: float, blocks: Blocks | None = None):
    """(dq, dk, dv) in the inputs' dtype, from the forward's out and lse."""
    dtype = q.dtype
    work = _work_dtype(dtype)
    q, k, v, out, grad_out = (t.to(work).contiguous() for t in (q, k, v, out, grad_out))
    B, H, Tq, d = q.shape
    Tk = k.shape[2]
    consts = dict(HEAD_DIM=d, BLOCK_D=_block_d(d))
    delta = torch.empty_like(lse)                                       # (B, h, Tq) float32
    ker = kernels()
    rows = (_fixed_blocks(blocks) or Blocks(m=64)).m                   # D: a light kernel, no tuning
    ker.flash_backward_delta_kernel[(_cdiv(Tq, rows), B * H)](out, grad_out, delta, Tq, BLOCK_M=rows, **consts,
                                                              **FUSED)
    consts.update(IS_CAUSAL=is_causal, PRECISION=_precision(work))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    bucket = _len_bucket(Tq, Tk)
    _launch(ker.flash_backward_dk_dv_kernel, Tk, "BLOCK_N", B * H,
            (q, k, v, grad_out, lse, delta, dk, dv, Tq, Tk, scale, bucket), consts, blocks)
    _launch(ker.flash_backward_dq_kernel, Tq, "BLOCK_M", B * H,
            (q, k, v, grad_out, lse, delta, dq, Tq, Tk, scale, bucket), consts, blocks)
    return dq.to(dtype), dk.to(dtype), dv.to(dtype)


class _FlashAttention(torch.autograd.Function):
    """Forward and backward by the Triton kernels; saves q, k, v, out and the log-sum-exp."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal, scale):
        if q.numel() == 0 or k.shape[2] == 0:           # nothing to launch: no rows, or no keys
            out = q.new_zeros(q.shape)
            lse = torch.full(q.shape[:3], float("inf"), dtype=torch.float32, device=q.device)
        else:
            _on_device(q, k, v)
            out, lse = forward(q, k, v, is_causal, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.is_causal, ctx.scale = is_causal, scale
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        if q.numel() == 0 or k.shape[2] == 0:
            return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v), None, None
        dq, dk, dv = backward(q, k, v, out, lse, grad_out, ctx.is_causal, ctx.scale)
        return dq, dk, dv, None, None


__all__ = ["flash_attention"]
