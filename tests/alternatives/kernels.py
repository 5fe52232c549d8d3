"""Correct solutions of the kernel exercises (lesson 14): Triton kernels, each with a
launcher, written differently from each other; the interpreter runs them here."""

import mha.kernels  # noqa: F401  (first: it switches Triton's interpreter on where there is no GPU)
import torch
import triton
import triton.language as tl


# ---------------------------------------------------------------- row_softmax

@triton.jit
def softmax_row_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    """One program per row, the whole row in one tile."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
    top = tl.max(x, 0)
    top = tl.where(top == float("-inf"), 0.0, top)
    e = tl.exp(x - top)
    total = tl.sum(e, 0)
    total = tl.where(total == 0.0, 1.0, total)
    tl.store(out_ptr + row * n_cols + cols, (e / total).to(out_ptr.dtype.element_ty), mask=cols < n_cols)


def softmax_one_row_per_program(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    softmax_row_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return out


@triton.jit
def softmax_chunks_kernel(x_ptr, out_ptr, n_rows, n_cols, ROWS: tl.constexpr, CHUNK: tl.constexpr):
    """ROWS rows per program, read CHUNK columns at a time: an online max and sum in a
    first pass, then the normalised exponentials in a second."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    m = tl.full([ROWS], float("-inf"), tl.float32)
    s = tl.zeros([ROWS], tl.float32)
    for start in range(0, n_cols, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        ok = row_ok[:, None] & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + rows[:, None] * n_cols + cols[None, :], mask=ok, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, 1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift[:, None]), 1)
        m = m_new
    shift = tl.where(m == float("-inf"), 0.0, m)
    inv = tl.where(s > 0.0, 1.0 / tl.where(s > 0.0, s, 1.0), 0.0)     # an all -inf row: 0, not 1 / 0
    for start in range(0, n_cols, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        ok = row_ok[:, None] & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + rows[:, None] * n_cols + cols[None, :], mask=ok, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - shift[:, None]) * inv[:, None]
        tl.store(out_ptr + rows[:, None] * n_cols + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=ok)


def softmax_online_in_chunks(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    softmax_chunks_kernel[(triton.cdiv(x.shape[0], 4),)](x, out, x.shape[0], x.shape[1], ROWS=4, CHUNK=64)
    return out


# ---------------------------------------------------------------- attention_delta

@triton.jit
def delta_tile_kernel(o_ptr, do_ptr, d_ptr, n_rows, HEAD_DIM: tl.constexpr, BLOCK_ROWS: tl.constexpr,
                      BLOCK_D: tl.constexpr):
    """A (BLOCK_ROWS, BLOCK_D) tile of the (B * h * T, d) rows per program."""
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    dims = tl.arange(0, BLOCK_D)
    ok = (rows[:, None] < n_rows) & (dims[None, :] < HEAD_DIM)
    at = rows[:, None] * HEAD_DIM + dims[None, :]
    o = tl.load(o_ptr + at, mask=ok, other=0.0).to(tl.float32)
    do = tl.load(do_ptr + at, mask=ok, other=0.0).to(tl.float32)
    tl.store(d_ptr + rows, tl.sum(o * do, axis=1), mask=rows < n_rows)


def delta_flat_rows(o, do):
    B, H, T, d = o.shape
    out = torch.empty(B, H, T, dtype=torch.float32)
    n = B * H * T
    rows = min(128, triton.next_power_of_2(n))
    delta_tile_kernel[(triton.cdiv(n, rows),)](o.contiguous(), do.contiguous(), out, n, HEAD_DIM=d,
                                               BLOCK_ROWS=rows, BLOCK_D=triton.next_power_of_2(d))
    return out


@triton.jit
def delta_per_head_kernel(o_ptr, do_ptr, d_ptr, T, stride_head, stride_row, HEAD_DIM: tl.constexpr,
                          BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """One program per (batch, head): all its rows in one tile, read through the strides of
    the inputs (no copy)."""
    head = tl.program_id(0)
    t = tl.arange(0, BLOCK_T)
    c = tl.arange(0, BLOCK_D)
    at = head * stride_head + t[:, None] * stride_row + c[None, :]
    ok = (t[:, None] < T) & (c[None, :] < HEAD_DIM)
    prod = tl.load(o_ptr + at, mask=ok, other=0.0).to(tl.float32) * tl.load(do_ptr + at, mask=ok, other=0.0).to(tl.float32)
    tl.store(d_ptr + head * T + t, tl.sum(prod, axis=1), mask=t < T)


def delta_per_head(o, do):
    B, H, T, d = o.shape
    o, do = o.reshape(B * H, T, d), do.reshape(B * H, T, d)
    if o.stride() != do.stride() or o.stride(2) != 1:
        o, do = o.contiguous(), do.contiguous()
    out = torch.empty(B * H, T, dtype=torch.float32)
    delta_per_head_kernel[(B * H,)](o, do, out, T, o.stride(0), o.stride(1), HEAD_DIM=d,
                                    BLOCK_T=triton.next_power_of_2(T), BLOCK_D=triton.next_power_of_2(d))
    return out.reshape(B, H, T)


# ---------------------------------------------------------------- fixed_attention

@triton.jit
def attention_blocks_kernel(q_ptr, k_ptr, v_ptr, o_ptr, Tq, Tk, scale, IS_CAUSAL: tl.constexpr,
                            D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The page's kernel with both bugs fixed: keys past Tk masked, the mask bottom-right."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    q = tl.load(q_ptr + rows[:, None] * D + dims[None, :], mask=rows[:, None] < Tq, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for start in range(0, Tk, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + keys[:, None] * D + dims[None, :], mask=keys[:, None] < Tk, other=0.0)
        v = tl.load(v_ptr + keys[:, None] * D + dims[None, :], mask=keys[:, None] < Tk, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        ok = keys[None, :] < Tk
        if IS_CAUSAL:
            ok = ok & (keys[None, :] <= rows[:, None] + (Tk - Tq))
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        m_new = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m = m_new
    out = acc / tl.where(l == 0.0, 1.0, l)[:, None]
    tl.store(o_ptr + rows[:, None] * D + dims[None, :], out, mask=rows[:, None] < Tq)


def attention_fixed_blocks(q, k, v, is_causal):
    Tq, d = q.shape
    out = torch.empty_like(q)
    attention_blocks_kernel[(triton.cdiv(Tq, 32),)](q.contiguous(), k.contiguous(), v.contiguous(), out, Tq,
                                                    k.shape[0], 1.0 / d ** 0.5, IS_CAUSAL=is_causal, D=d,
                                                    BLOCK_M=32, BLOCK_N=16)
    return out


@triton.jit
def attention_one_tile_kernel(q_ptr, k_ptr, v_ptr, o_ptr, Tq, Tk, scale, offset,
                              D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr):
    """All the keys in one tile (Tk <= BLOCK_K): a plain masked softmax, no online
    rescaling. ``offset`` is Tk - Tq when causal, and Tk (nothing blocked) when not."""
    i = tl.program_id(0) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    j = tl.arange(0, BLOCK_K)
    c = tl.arange(0, D)
    q = tl.load(q_ptr + i[:, None] * D + c[None, :], mask=i[:, None] < Tq, other=0.0)
    k = tl.load(k_ptr + j[:, None] * D + c[None, :], mask=j[:, None] < Tk, other=0.0)
    v = tl.load(v_ptr + j[:, None] * D + c[None, :], mask=j[:, None] < Tk, other=0.0)
    visible = (j[None, :] < Tk) & (j[None, :] <= i[:, None] + offset)
    s = tl.where(visible, tl.dot(q, tl.trans(k)) * scale, float("-inf"))
    top = tl.max(s, 1)
    w = tl.exp(s - tl.where(top == float("-inf"), 0.0, top)[:, None])
    total = tl.sum(w, 1)
    w = w / tl.where(total > 0.0, total, 1.0)[:, None]
    tl.store(o_ptr + i[:, None] * D + c[None, :], tl.dot(w, v), mask=i[:, None] < Tq)


def attention_single_tile(q, k, v, is_causal):
    Tq, Tk = q.shape[0], k.shape[0]
    out = torch.empty_like(q)
    offset = Tk - Tq if is_causal else Tk
    attention_one_tile_kernel[(triton.cdiv(Tq, 32),)](q, k, v, out, Tq, Tk, q.shape[1] ** -0.5, offset,
                                                      D=q.shape[1], BLOCK_Q=32,
                                                      BLOCK_K=max(16, triton.next_power_of_2(Tk)))
    return out


CORRECT = {
    "kernels.row_softmax": [softmax_one_row_per_program, softmax_online_in_chunks],
    "kernels.attention_delta": [delta_flat_rows, delta_per_head],
    "kernels.fixed_attention": [attention_fixed_blocks, attention_single_tile],
}
