"""flash_attention: FlashAttention-2's forward and backward as Triton kernels, for autograd.

    out = flash_attention(q, k, v, is_causal=True)      # (B, h, Tq, d) -> (B, h, Tq, d)
    out.sum().backward()                                # the backward kernels run here

The kernels are in ``mha/kernels/attention.py``; this file checks the input, launches them
and ties them to autograd:

- forward: one program per (query block, head) runs lesson 10's online softmax over the
  key blocks it may see, and saves two numbers per query row (``RowStats``): the row's
  largest score and the inverse of its sum of exponentials;
- backward: D_i = rowsum(dO_i * O_i) first (a small kernel), then one program per key
  block visits the query blocks that see it, recomputes P tile by tile from the saved
  numbers, accumulates dK and dV, and adds its share of dQ into a float32 buffer with
  atomic additions: FlashAttention-2's five matrix products per tile. Neither direction
  holds a (Tq, Tk) matrix; the extra memory is O(Tq) per head (the row statistics and D),
  plus dQ in float32 while the backward runs.

The backward is differentiable once: asking for a second derivative through it (a gradient
penalty, a Hessian-vector product) raises an error, rather than silently dropping the
second-order terms.

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
from typing import NamedTuple

import torch
from torch.autograd.function import once_differentiable

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
        up to rounding, differentiable (once) with respect to q, k and v.

    Where Triton is not installed (it publishes wheels for Linux only: macOS and Windows),
    it warns once and returns ``mha.tiled_attention(q, k, v, is_causal=..., scale=...)``, the
    same algorithm in plain torch: the same numbers up to rounding, with gradients by autograd
    through its torch operations (which keep each tile of scores for the backward).

    Raises:
        TypeError / ValueError naming the argument for bad input; ImportError if Triton was
        imported before its interpreter could be switched on (the message says what to do).
    """
    scale = _check(q, k, v, is_causal, scale)
    if not triton_installed():
        _warn_no_triton()
        from .tiled import tiled_attention

        return tiled_attention(q, k, v, is_causal=is_causal, scale=scale)
    return _FlashAttention.apply(q, k, v, is_causal, scale)


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


class RowStats(NamedTuple):
    """What the forward keeps per query row for the backward, float32 (B, h, Tq) each:
    ``row_max``, the row's largest score in base-2 units (scale * q.k * log2 e), and
    ``inv_sum``, 1 / the sum of 2^(s - row_max) over the row's keys; +inf and 0 for a row
    with no key to see. P = 2^(s - row_max) * inv_sum."""

    row_max: torch.Tensor
    inv_sum: torch.Tensor

    def log_sum_exp(self) -> torch.Tensor:
        """The base-2 log-sum-exp of each row, row_max + log2(sum): the one number per row that
        FlashAttention-2 saves instead (+inf for an empty row)."""
        return self.row_max - torch.log2(self.inv_sum)


def _heads(t: torch.Tensor, work: torch.dtype) -> torch.Tensor:
    """(B, h, T, d) -> a contiguous (B * h, T, d) stack of heads in the work dtype."""
    return t.to(work).contiguous().view(-1, *t.shape[2:])


def forward(q, k, v, is_causal: bool, scale: float, blocks: Blocks | None = None):
    """(out, stats): the forward kernel's output in q's dtype, and its RowStats. Inputs
    already checked."""
    dtype, work = q.dtype, _work_dtype(q.dtype)
    B, H, Tq, d = q.shape
    Tk = k.shape[2]
    q, k, v = (_heads(t, work) for t in (q, k, v))
    out = torch.empty_like(q)
    row_max, inv_sum = torch.empty((2, B * H, Tq), dtype=torch.float32, device=q.device)
    _launch(kernels().flash_forward_kernel, Tq, "BLOCK_M",
            (q, k, v, out, row_max, inv_sum, Tq, Tk, scale, _len_bucket(Tq, Tk)),
            dict(HEAD_DIM=d, BLOCK_D=_block_d(d), IS_CAUSAL=is_causal, PRECISION=_precision(work)), blocks)
    return out.view(B, H, Tq, d).to(dtype), RowStats(row_max.view(B, H, Tq), inv_sum.view(B, H, Tq))


def backward(q, k, v, out, stats: RowStats, grad_out, is_causal: bool, scale: float,
             blocks: Blocks | None = None, want=(True, True, True)):
    """(dq, dk, dv) in the inputs' dtype, from the forward's out and stats; ``want`` says
    which of the three are needed (None is returned for the others)."""
    dtype, work = q.dtype, _work_dtype(q.dtype)
    B, H, Tq, d = q.shape
    Tk = k.shape[2]
    q, k, v, out, grad_out = (_heads(t, work) for t in (q, k, v, out, grad_out))
    row_max, inv_sum = (t.reshape(B * H, Tq) for t in stats)
    consts = dict(HEAD_DIM=d, BLOCK_D=_block_d(d))
    delta = torch.empty_like(row_max)                                  # (B * h, Tq) float32
    rows = (_fixed_blocks(blocks) or Blocks(m=64)).m                   # D: a light kernel, no tuning
    _launch(kernels().flash_backward_delta_kernel, Tq, "BLOCK_M", (out, grad_out, delta, Tq), consts,
            Blocks(m=rows))
    want_dq, want_dkv = want[0], want[1] or want[2]
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)   # the kernel adds into it
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    consts.update(IS_CAUSAL=is_causal, PRECISION=_precision(work), WANT_DQ=want_dq, WANT_DKV=want_dkv)
    _launch(kernels().flash_backward_kernel, Tk, "BLOCK_N",
            (q, k, v, grad_out, row_max, inv_sum, delta, dq, dk, dv, Tq, Tk, scale, _len_bucket(Tq, Tk)),
            consts, blocks)
    shape = lambda t, T: t.view(B, H, T, d).to(dtype)  # noqa: E731
    return (shape(dq, Tq) if want[0] else None, shape(dk, Tk) if want[1] else None,
            shape(dv, Tk) if want[2] else None)


class _FlashAttention(torch.autograd.Function):
    """Forward and backward by the Triton kernels; saves q, k, v, out and the RowStats. The
    backward is not itself differentiable (no graph is built through the kernels): a second
    derivative raises instead of coming back silently without its second-order terms."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal, scale):
        if q.numel() == 0 or k.shape[2] == 0:           # nothing to launch: no rows, or no keys
            out = q.new_zeros(q.shape)
            stats = RowStats(torch.full(q.shape[:3], float("inf"), dtype=torch.float32, device=q.device),
                             torch.zeros(q.shape[:3], dtype=torch.float32, device=q.device))
        else:
            _on_device(q, k, v)
            out, stats = forward(q, k, v, is_causal, scale)
        ctx.save_for_backward(q, k, v, out, *stats)
        ctx.is_causal, ctx.scale = is_causal, scale
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        q, k, v, out, row_max, inv_sum = ctx.saved_tensors
        want = ctx.needs_input_grad[:3]
        if q.numel() == 0 or k.shape[2] == 0:
            zeros = [torch.zeros_like(t) if w else None for t, w in zip((q, k, v), want)]
            return (*zeros, None, None)
        dq, dk, dv = backward(q, k, v, out, RowStats(row_max, inv_sum), grad_out, ctx.is_causal, ctx.scale,
                              want=want)
        return dq, dk, dv, None, None


__all__ = ["flash_attention"]
