"""Model answers to lesson 14's exercises, as the statements ask for them: Triton kernels and
the functions that launch them.

The exercises' references (``mha.exercises.lesson14_flash_attention_in_triton``) are plain torch, so that the grader
computes expected values without Triton; a plain-torch answer loses the points, since the
statements ask for a kernel. These are the answers that ``Exercise.model`` names: the answer
key (``mha.grading.answer_key``) and the tests grade them. Each is written differently from
the lesson's own solution, which the page shows.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_rows_kernel(x_ptr, out_ptr, n_rows, n_cols, ROWS: tl.constexpr, COLS: tl.constexpr):
    """ROWS whole rows per program, as one (ROWS, COLS) tile."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, COLS)
    inside = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    at = rows[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + at, mask=inside, other=float("-inf")).to(tl.float32)
    top = tl.max(x, axis=1)
    e = tl.exp(x - tl.where(top > float("-inf"), top, 0.0)[:, None])
    total = tl.sum(e, axis=1)
    y = e / tl.maximum(total, 1e-30)[:, None]           # an all -inf row: 0 / 1e-30 = 0
    tl.store(out_ptr + at, y.to(out_ptr.dtype.element_ty), mask=inside)


def row_softmax(x):
    """Softmax of each row of x (R, C), four rows per program."""
    x = x.contiguous()
    out = torch.empty_like(x)
    R, C = x.shape
    softmax_rows_kernel[(triton.cdiv(R, 4),)](x, out, R, C, ROWS=4, COLS=triton.next_power_of_2(C))
    return out


@triton.jit
def lse_rows_kernel(q_ptr, k_ptr, lse_ptr, Tq, Tk, scale2, CAUSAL: tl.constexpr, D: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """BLOCK_M query rows per program; keys in blocks of BLOCK_N, scores in base-2 units
    (scale2 = log2(e) / sqrt(d)), a running max m and sum l of exp2(s - m) per row."""
    i = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.arange(0, D)
    q = tl.load(q_ptr + i[:, None] * D + c[None, :], mask=i[:, None] < Tq, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    for n in range(0, Tk, BLOCK_N):
        j = n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + j[:, None] * D + c[None, :], mask=j[:, None] < Tk, other=0.0)
        seen = j[None, :] < Tk
        if CAUSAL:
            seen = seen & (j[None, :] - i[:, None] <= Tk - Tq)
        s = tl.where(seen, tl.dot(q, tl.trans(k), input_precision="ieee") * scale2, float("-inf"))
        m_next = tl.maximum(m, tl.max(s, axis=1))
        shift = tl.where(m_next > float("-inf"), m_next, 0.0)
        l = l * tl.exp2(m - shift) + tl.sum(tl.exp2(s - shift[:, None]), axis=1)
        m = m_next
    lse = tl.where(l > 0.0, m + tl.log2(tl.maximum(l, 1e-30)), float("inf"))   # +inf: a row with no key
    tl.store(lse_ptr + i, lse, mask=i < Tq)


def row_lse(q, k, is_causal):
    """The base-2 log-sum-exp of each query row's allowed scores, q k^T / sqrt(d): (Tq, d), (Tk, d)
    -> (Tq,) float32, +inf for a row with no key; 16 rows and 32 keys at a time."""
    Tq, d = q.shape
    lse = torch.empty(Tq, dtype=torch.float32, device=q.device)
    lse_rows_kernel[(triton.cdiv(Tq, 16),)](q.contiguous(), k.contiguous(), lse, Tq, k.shape[0],
                                            1.4426950408889634 / d ** 0.5, CAUSAL=is_causal, D=d,
                                            BLOCK_M=16, BLOCK_N=32)
    return lse


@triton.jit
def masked_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, Tq, Tk, scale, CAUSAL: tl.constexpr,
                            D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """BLOCK_M query rows per program, keys in blocks of BLOCK_N with an online softmax; a
    score counts where its key exists and, when causal, lies at or left of the bottom-right
    diagonal (j - i <= Tk - Tq)."""
    i = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.arange(0, D)
    q = tl.load(q_ptr + i[:, None] * D + c[None, :], mask=i[:, None] < Tq, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for n in range(0, Tk, BLOCK_N):
        j = n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + j[:, None] * D + c[None, :], mask=j[:, None] < Tk, other=0.0)
        v = tl.load(v_ptr + j[:, None] * D + c[None, :], mask=j[:, None] < Tk, other=0.0)
        seen = j[None, :] < Tk
        if CAUSAL:
            seen = seen & (j[None, :] - i[:, None] <= Tk - Tq)
        s = tl.where(seen, tl.dot(q, tl.trans(k), input_precision="ieee") * scale, float("-inf"))
        m_next = tl.maximum(m, tl.max(s, axis=1))
        shift = tl.where(m_next > float("-inf"), m_next, 0.0)
        p = tl.exp(s - shift[:, None])
        keep = tl.exp(m - shift)
        l = l * keep + tl.sum(p, axis=1)
        acc = acc * keep[:, None] + tl.dot(p, v, input_precision="ieee")
        m = m_next
    tl.store(o_ptr + i[:, None] * D + c[None, :], acc / tl.maximum(l, 1e-30)[:, None], mask=i[:, None] < Tq)


def fixed_attention(q, k, v, is_causal):
    """Single-head attention with both masks right: q (Tq, d), k and v (Tk, d) -> (Tq, d)."""
    Tq, d = q.shape
    out = torch.empty_like(q)
    masked_attention_kernel[(triton.cdiv(Tq, 16),)](q.contiguous(), k.contiguous(), v.contiguous(), out, Tq,
                                                    k.shape[0], 1 / d ** 0.5, CAUSAL=is_causal, D=d,
                                                    BLOCK_M=16, BLOCK_N=32)
    return out
