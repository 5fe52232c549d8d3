"""Answers to the kernel exercises (lesson 14), each a Triton kernel with a launcher, run
here by Triton's interpreter: correct ones written differently from each other, classic
wrong ones (a launcher or a kernel with the bug a first kernel often has), and shortcuts
through what the statements forbid."""

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


# ================================================================ classic wrong kernels

# ---------------------------------------------------------------- row_softmax

def softmax_float32_out(x):
    """The output made with torch.empty(x.shape), float32 whatever x's dtype: a float16 x
    gets a float32 answer."""
    x = x.contiguous()
    out = torch.empty(x.shape)
    softmax_row_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return out


@triton.jit
def softmax_exp2_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    """The exp2 of the page's forward kernel, without its factor log2(e): a softmax in base 2."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
    top = tl.max(x, 0)
    e = tl.exp2(x - tl.where(top == float("-inf"), 0.0, top))
    total = tl.sum(e, 0)
    tl.store(out_ptr + row * n_cols + cols, (e / tl.where(total == 0.0, 1.0, total)).to(out_ptr.dtype.element_ty),
             mask=cols < n_cols)


def softmax_exp2_without_log2e(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    softmax_exp2_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return out


@triton.jit
def softmax_tile_kernel(x_ptr, out_ptr, n_rows, n_cols, ROWS: tl.constexpr, COLS: tl.constexpr):
    """ROWS rows per program as a (ROWS, COLS) tile, reduced over axis 0, the tile's rows,
    instead of axis 1, its columns: a softmax down each column of the tile."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, COLS)
    ok = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    at = rows[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + at, mask=ok, other=float("-inf")).to(tl.float32)
    top = tl.max(x, axis=0)
    e = tl.exp(x - tl.where(top == float("-inf"), 0.0, top)[None, :])
    total = tl.sum(e, axis=0)
    tl.store(out_ptr + at, (e / tl.where(total == 0.0, 1.0, total)[None, :]).to(out_ptr.dtype.element_ty), mask=ok)


def softmax_reduced_over_the_wrong_axis(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    R, C = x.shape
    softmax_tile_kernel[(triton.cdiv(R, 4),)](x, out, R, C, ROWS=4, COLS=triton.next_power_of_2(C))
    return out


@triton.jit
def softmax_by_triton_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    """Triton's own softmax, which the statement forbids, with NaN rows set to 0."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
    y = tl.softmax(x)
    tl.store(out_ptr + row * n_cols + cols, tl.where(y == y, y, 0.0).to(out_ptr.dtype.element_ty), mask=cols < n_cols)


def softmax_forbidden_tl_softmax(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    softmax_by_triton_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return out


def softmax_forbidden_torch(x):
    return torch.softmax(x.float(), dim=-1).nan_to_num(0.0).to(x.dtype)


# ---------------------------------------------------------------- attention_delta

@triton.jit
def delta_input_dtype_kernel(o_ptr, do_ptr, d_ptr, n_rows, HEAD_DIM: tl.constexpr, BLOCK_ROWS: tl.constexpr,
                             BLOCK_D: tl.constexpr):
    """The products and their sum in the inputs' dtype (no .to(tl.float32) after the loads);
    only the store converts to float32."""
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    dims = tl.arange(0, BLOCK_D)
    ok = (rows[:, None] < n_rows) & (dims[None, :] < HEAD_DIM)
    at = rows[:, None] * HEAD_DIM + dims[None, :]
    o = tl.load(o_ptr + at, mask=ok, other=0.0)
    do = tl.load(do_ptr + at, mask=ok, other=0.0)
    tl.store(d_ptr + rows, tl.sum(o * do, axis=1), mask=rows < n_rows)


def delta_summed_in_half(o, do):
    B, H, T, d = o.shape
    out = torch.empty(B, H, T, dtype=torch.float32)
    n = B * H * T
    delta_input_dtype_kernel[(triton.cdiv(n, 32),)](o.contiguous(), do.contiguous(), out, n, HEAD_DIM=d,
                                                   BLOCK_ROWS=32, BLOCK_D=triton.next_power_of_2(d))
    return out


def delta_floor_division_grid(o, do):
    """n // BLOCK_ROWS programs instead of cdiv(n, BLOCK_ROWS): the last, partial block of rows
    is never computed (and fewer rows than a block get no program at all)."""
    B, H, T, d = o.shape
    out = torch.zeros(B, H, T, dtype=torch.float32)
    n = B * H * T
    delta_tile_kernel[(n // 16,)](o.contiguous(), do.contiguous(), out, n, HEAD_DIM=d, BLOCK_ROWS=16,
                                  BLOCK_D=triton.next_power_of_2(d))
    return out


def delta_block_of_d_lanes(o, do):
    """A block of d lanes: tl.arange needs a power of two, so any other d fails."""
    B, H, T, d = o.shape
    out = torch.empty(B, H, T, dtype=torch.float32)
    n = B * H * T
    delta_tile_kernel[(triton.cdiv(n, 16),)](o.contiguous(), do.contiguous(), out, n, HEAD_DIM=d, BLOCK_ROWS=16,
                                             BLOCK_D=d)
    return out


# ---------------------------------------------------------------- fixed_attention

@triton.jit
def attention_variant_kernel(q_ptr, k_ptr, v_ptr, o_ptr, Tq, Tk, scale, offset, IS_CAUSAL: tl.constexpr,
                             MASK_KEYS: tl.constexpr, K_OTHER: tl.constexpr, D: tl.constexpr,
                             BLOCK: tl.constexpr):
    """The page's kernel with a choice of fixes: the causal limit j <= i + offset (0 as given),
    MASK_KEYS (keys past Tk out of the scores' mask), K_OTHER (what a key past Tk loads as)."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    dims = tl.arange(0, D)
    q = tl.load(q_ptr + rows[:, None] * D + dims[None, :], mask=rows[:, None] < Tq, other=0.0)
    row_max = tl.full([BLOCK], float("-inf"), tl.float32)
    row_sum = tl.zeros([BLOCK], tl.float32)
    acc = tl.zeros([BLOCK, D], tl.float32)
    for first_key in range(0, Tk, BLOCK):
        keys = first_key + tl.arange(0, BLOCK)
        k = tl.load(k_ptr + keys[:, None] * D + dims[None, :], mask=keys[:, None] < Tk, other=K_OTHER)
        v = tl.load(v_ptr + keys[:, None] * D + dims[None, :], mask=keys[:, None] < Tk, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        if MASK_KEYS:
            s = tl.where(keys[None, :] < Tk, s, float("-inf"))
        if IS_CAUSAL:
            s = tl.where(keys[None, :] <= rows[:, None] + offset, s, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(s, axis=1))
        new_max = tl.where(new_max == float("-inf"), 0.0, new_max)
        p = tl.exp(s - new_max[:, None])
        shrink = tl.exp(row_max - new_max)
        row_sum = row_sum * shrink + tl.sum(p, axis=1)
        acc = acc * shrink[:, None] + tl.dot(p, v, input_precision="ieee")
        row_max = new_max
    out = acc / tl.where(row_sum == 0.0, 1.0, row_sum)[:, None]
    tl.store(o_ptr + rows[:, None] * D + dims[None, :], out, mask=rows[:, None] < Tq)


def _launch_variant(q, k, v, is_causal, offset, mask_keys, k_other):
    out = torch.empty_like(q)
    attention_variant_kernel[(triton.cdiv(q.shape[0], 16),)](q, k, v, out, q.shape[0], k.shape[0], q.shape[1] ** -0.5,
                                                             offset, IS_CAUSAL=is_causal, MASK_KEYS=mask_keys,
                                                             K_OTHER=k_other, D=q.shape[1], BLOCK=16)
    return out


def attention_as_given(q, k, v, is_causal):
    """The page's kernel, unchanged: both bugs."""
    return _launch_variant(q, k, v, is_causal, 0, False, 0.0)


def attention_offset_sign_flipped(q, k, v, is_causal):
    """Keys past Tk masked, but the diagonal shifted by Tq - Tk instead of Tk - Tq."""
    return _launch_variant(q, k, v, is_causal, q.shape[0] - k.shape[0], True, 0.0)


def attention_keys_past_tk_as_minus_inf(q, k, v, is_causal):
    """The diagonal moved, and keys past Tk "masked" by loading them as -inf rather than by
    masking their scores: q . (-inf, ...) is +-inf or NaN, not -inf."""
    return _launch_variant(q, k, v, is_causal, k.shape[0] - q.shape[0], False, float("-inf"))


def attention_forbidden_sdpa(q, k, v, is_causal):
    Tq, Tk = q.shape[0], k.shape[0]
    mask = torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq) if is_causal else None
    out = torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask)[0]
    return out.nan_to_num(0.0)


WRONG = {
    "kernels.row_softmax": [softmax_float32_out, softmax_exp2_without_log2e, softmax_reduced_over_the_wrong_axis],
    "kernels.attention_delta": [delta_summed_in_half, delta_floor_division_grid, delta_block_of_d_lanes],
    "kernels.fixed_attention": [attention_as_given, attention_offset_sign_flipped,
                                attention_keys_past_tk_as_minus_inf],
}

FORBIDDEN = {
    "kernels.row_softmax": [softmax_forbidden_tl_softmax, softmax_forbidden_torch],
    "kernels.fixed_attention": [attention_forbidden_sdpa],
}
