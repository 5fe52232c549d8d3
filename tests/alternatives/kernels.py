"""Answers to the kernel exercises (lesson 14), each a Triton kernel with a launcher, run
here by Triton's interpreter: correct ones written differently from each other, classic
wrong ones (a launcher or a kernel with the bug a first kernel often has), and shortcuts
through what the statements forbid."""

import math

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


# ---------------------------------------------------------------- row_lse

@triton.jit
def lse_one_row_kernel(q_ptr, k_ptr, lse_ptr, Tq, Tk, scale, CAUSAL: tl.constexpr, D: tl.constexpr,
                       BLOCK_N: tl.constexpr):
    """One program per query row, natural exponentials, keys in blocks; the base-2 value at the
    end, ln(l) / ln 2 + m / ln 2."""
    i = tl.program_id(0)
    c = tl.arange(0, D)
    q = tl.load(q_ptr + i * D + c)                                          # (D,)
    m = float("-inf")
    l = 0.0
    last = Tk - Tq + i if CAUSAL else Tk - 1                               # the last key row i sees
    for n in range(0, Tk, BLOCK_N):
        j = n + tl.arange(0, BLOCK_N)
        ok = (j < Tk) & (j <= last)
        k = tl.load(k_ptr + j[:, None] * D + c[None, :], mask=ok[:, None], other=0.0)   # (BLOCK_N, D)
        s = tl.where(ok, tl.sum(k * q[None, :], axis=1) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        shift = tl.where(m_new > float("-inf"), m_new, 0.0)
        l = l * tl.exp(m - shift) + tl.sum(tl.exp(s - shift), axis=0)
        m = m_new
    ln2 = 0.6931471805599453
    tl.store(lse_ptr + i, tl.where(l > 0.0, (m + tl.log(tl.maximum(l, 1e-30))) / ln2, float("inf")))


def lse_one_row_per_program(q, k, is_causal):
    Tq, d = q.shape
    out = torch.empty(Tq, dtype=torch.float32)
    lse_one_row_kernel[(Tq,)](q.contiguous(), k.contiguous(), out, Tq, k.shape[0], d ** -0.5, CAUSAL=is_causal,
                              D=d, BLOCK_N=16)
    return out


@triton.jit
def lse_two_pass_kernel(q_ptr, k_ptr, lse_ptr, Tq, Tk, scale2, CAUSAL: tl.constexpr, D: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Two passes over the keys: the row max first, then the sum relative to it (no rescale)."""
    i = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.arange(0, D)
    q = tl.load(q_ptr + i[:, None] * D + c[None, :], mask=i[:, None] < Tq, other=0.0)
    top = tl.full([BLOCK_M], float("-inf"), tl.float32)
    for n in range(0, Tk, BLOCK_N):
        j = n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + j[:, None] * D + c[None, :], mask=j[:, None] < Tk, other=0.0)
        ok = (j[None, :] < Tk) & ((j[None, :] <= i[:, None] + Tk - Tq) | (not CAUSAL))
        s = tl.where(ok, tl.dot(q, tl.trans(k), input_precision="ieee") * scale2, float("-inf"))
        top = tl.maximum(top, tl.max(s, axis=1))
    shift = tl.where(top > float("-inf"), top, 0.0)
    total = tl.zeros([BLOCK_M], tl.float32)
    for n in range(0, Tk, BLOCK_N):
        j = n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + j[:, None] * D + c[None, :], mask=j[:, None] < Tk, other=0.0)
        ok = (j[None, :] < Tk) & ((j[None, :] <= i[:, None] + Tk - Tq) | (not CAUSAL))
        s = tl.where(ok, tl.dot(q, tl.trans(k), input_precision="ieee") * scale2, float("-inf"))
        total += tl.sum(tl.exp2(s - shift[:, None]), axis=1)
    tl.store(lse_ptr + i, tl.where(total > 0.0, shift + tl.log2(tl.maximum(total, 1e-30)), float("inf")),
             mask=i < Tq)


def lse_two_passes(q, k, is_causal):
    Tq, d = q.shape
    out = torch.empty(Tq, dtype=torch.float32)
    lse_two_pass_kernel[(triton.cdiv(Tq, 32),)](q.contiguous(), k.contiguous(), out, Tq, k.shape[0],
                                                math.log2(math.e) / math.sqrt(d), CAUSAL=is_causal, D=d,
                                                BLOCK_M=32, BLOCK_N=16)
    return out


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


def tiles_by_rows():
    """Row by row: the last key each row sees, then, per block of 64 rows, the key blocks of its
    last row."""
    Tq, Tk, b = 600, 1000, 64
    return sum((min(i0 + b, Tq) - 1 + Tk - Tq) // b + 1 for i0 in range(0, Tq, b))


def tiles_written_down():
    """Blocks 0..8 of 64 rows see 8..16 key blocks; the short tenth block, 16: 8 + 9 + ... + 16 + 16."""
    return sum(range(8, 17)) + 16


def tiles_wrong_half_of_all():
    """Half the grid, as for a square causal mask."""
    return 10 * 16 // 2


def tiles_wrong_masked_only():
    """Only the tiles the diagonal cuts, one per block of rows (or two)."""
    return 10


CORRECT = {
    "kernels.row_softmax": [softmax_one_row_per_program, softmax_online_in_chunks],
    "kernels.row_lse": [lse_one_row_per_program, lse_two_passes],
    "kernels.fixed_attention": [attention_fixed_blocks, attention_single_tile],
    "kernels.tiles_visited": [tiles_by_rows, tiles_written_down],
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


# ---------------------------------------------------------------- row_lse

@triton.jit
def lse_variant_kernel(q_ptr, k_ptr, lse_ptr, Tq, Tk, scale, EMPTY: tl.constexpr, NATURAL: tl.constexpr,
                       RESCALE: tl.constexpr, CAUSAL: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr):
    """The log-sum-exp with a choice of slips: EMPTY (what a row with no key saves), NATURAL (the
    natural logarithm, not base 2), RESCALE (False: the running sum never rescaled)."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    c = tl.arange(0, D)
    q = tl.load(q_ptr + i[:, None] * D + c[None, :], mask=i[:, None] < Tq, other=0.0)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK], tl.float32)
    for n in range(0, Tk, BLOCK):
        j = n + tl.arange(0, BLOCK)
        k = tl.load(k_ptr + j[:, None] * D + c[None, :], mask=j[:, None] < Tk, other=0.0)
        ok = j[None, :] < Tk
        if CAUSAL:
            ok = ok & (j[None, :] <= i[:, None] + Tk - Tq)
        s = tl.where(ok, tl.dot(q, tl.trans(k), input_precision="ieee") * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        shift = tl.where(m_new > float("-inf"), m_new, 0.0)
        if RESCALE:
            l = l * tl.exp(m - shift)
        l = l + tl.sum(tl.exp(s - shift[:, None]), axis=1)
        m = m_new
    lse = m + tl.log(tl.maximum(l, 1e-30))
    if not NATURAL:
        lse = lse * 1.4426950408889634
    tl.store(lse_ptr + i, tl.where(l > 0.0, lse, EMPTY), mask=i < Tq)


def _lse_variant(q, k, is_causal, *, empty=float("inf"), natural=False, rescale=True):
    Tq, d = q.shape
    out = torch.empty(Tq, dtype=torch.float32)
    lse_variant_kernel[(triton.cdiv(Tq, 16),)](q.contiguous(), k.contiguous(), out, Tq, k.shape[0], d ** -0.5,
                                               EMPTY=empty, NATURAL=natural, RESCALE=rescale, CAUSAL=is_causal,
                                               D=d, BLOCK=16)
    return out


def lse_wrong_minus_inf_for_empty_rows(q, k, is_causal):
    return _lse_variant(q, k, is_causal, empty=float("-inf"))


def lse_wrong_natural_log(q, k, is_causal):
    return _lse_variant(q, k, is_causal, natural=True)


def lse_wrong_no_rescale(q, k, is_causal):
    return _lse_variant(q, k, is_causal, rescale=False)


def lse_wrong_noop_kernel_beside_torch(q, k, is_causal):
    """A kernel that does nothing, launched, and the answer computed with torch around it."""
    out = torch.empty(q.shape[0], dtype=torch.float32)
    nothing_kernel[(1,)](out)
    s = q @ k.T / q.shape[1] ** 0.5
    if is_causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).tril(k.shape[0] - q.shape[0]).logical_not(),
                          float("-inf"))
    top = s.amax(dim=-1, keepdim=True).clamp_min(-1e30)
    lse = (top.squeeze(-1) + torch.exp(s - top).sum(dim=-1).log()) * 1.4426950408889634
    return torch.where(torch.isneginf(lse), torch.full_like(lse, float("inf")), lse)


@triton.jit
def nothing_kernel(x_ptr):
    """Does nothing: the launch counts, the work does not."""
    pass


def softmax_wrong_noop_kernel_beside_torch(x):
    out = torch.empty_like(x)
    nothing_kernel[(1,)](out)
    x32 = x.float()
    top = x32.amax(dim=-1, keepdim=True)
    e = torch.exp(x32 - torch.where(torch.isneginf(top), torch.zeros_like(top), top))
    out.copy_((e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)).to(x.dtype))
    return out


def softmax_wrong_64_lanes(x):
    """Always a block of 64 lanes: the columns past 64 are never read."""
    x = x.contiguous()
    out = torch.zeros_like(x)
    softmax_row_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=64)
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


def attention_wrong_noop_kernel_beside_torch(q, k, v, is_causal):
    out = torch.empty_like(q)
    nothing_kernel[(1,)](out)
    s = q @ k.T / q.shape[1] ** 0.5
    if is_causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).tril(k.shape[0] - q.shape[0]).logical_not(),
                          float("-inf"))
    w = torch.exp(s - s.amax(-1, keepdim=True).clamp_min(-1e30))
    return (w / w.sum(-1, keepdim=True).clamp_min(1e-30)) @ v


@triton.jit
def attention_one_tile_of_32_kernel(q_ptr, k_ptr, v_ptr, o_ptr, Tq, Tk, scale, CAUSAL: tl.constexpr,
                                    D: tl.constexpr):
    """16 rows and one tile of 32 keys, no loop over key blocks: the keys from 32 on are never read."""
    i = tl.program_id(0) * 16 + tl.arange(0, 16)
    j = tl.arange(0, 32)
    c = tl.arange(0, D)
    q = tl.load(q_ptr + i[:, None] * D + c[None, :], mask=i[:, None] < Tq, other=0.0)
    k = tl.load(k_ptr + j[:, None] * D + c[None, :], mask=j[:, None] < Tk, other=0.0)
    v = tl.load(v_ptr + j[:, None] * D + c[None, :], mask=j[:, None] < Tk, other=0.0)
    ok = j[None, :] < Tk
    if CAUSAL:
        ok = ok & (j[None, :] <= i[:, None] + Tk - Tq)
    s = tl.where(ok, tl.dot(q, tl.trans(k), input_precision="ieee") * scale, float("-inf"))
    top = tl.max(s, axis=1)
    p = tl.exp(s - tl.where(top > float("-inf"), top, 0.0)[:, None])
    total = tl.sum(p, axis=1)
    out = tl.dot(p, v, input_precision="ieee") / tl.where(total > 0.0, total, 1.0)[:, None]
    tl.store(o_ptr + i[:, None] * D + c[None, :], out, mask=i[:, None] < Tq)


def attention_wrong_one_tile_of_32_keys(q, k, v, is_causal):
    out = torch.empty_like(q)
    attention_one_tile_of_32_kernel[(triton.cdiv(q.shape[0], 16),)](q.contiguous(), k.contiguous(), v.contiguous(),
                                                                    out, q.shape[0], k.shape[0], q.shape[1] ** -0.5,
                                                                    CAUSAL=is_causal, D=q.shape[1])
    return out


def lse_forbidden_torch_logsumexp(q, k, is_causal):
    out = torch.empty(q.shape[0], dtype=torch.float32)
    nothing_kernel[(1,)](out)
    s = q @ k.T / q.shape[1] ** 0.5
    if is_causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).tril(k.shape[0] - q.shape[0]).logical_not(),
                          float("-inf"))
    lse = torch.logsumexp(s, dim=-1) / math.log(2)
    return torch.where(torch.isneginf(lse), torch.full_like(lse, float("inf")), lse)


def attention_forbidden_sdpa(q, k, v, is_causal):
    Tq, Tk = q.shape[0], k.shape[0]
    mask = torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq) if is_causal else None
    out = torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask)[0]
    return out.nan_to_num(0.0)


WRONG = {
    "kernels.row_softmax": [softmax_float32_out, softmax_exp2_without_log2e, softmax_reduced_over_the_wrong_axis,
                            softmax_wrong_noop_kernel_beside_torch, softmax_wrong_64_lanes],
    "kernels.row_lse": [lse_wrong_minus_inf_for_empty_rows, lse_wrong_natural_log, lse_wrong_no_rescale,
                        lse_wrong_noop_kernel_beside_torch],
    "kernels.fixed_attention": [attention_as_given, attention_offset_sign_flipped,
                                attention_keys_past_tk_as_minus_inf, attention_wrong_noop_kernel_beside_torch,
                                attention_wrong_one_tile_of_32_keys],
    "kernels.tiles_visited": [tiles_wrong_half_of_all, tiles_wrong_masked_only],
}

FORBIDDEN = {
    "kernels.row_softmax": [softmax_forbidden_tl_softmax, softmax_forbidden_torch],
    "kernels.fixed_attention": [attention_forbidden_sdpa],
    "kernels.row_lse": [lse_forbidden_torch_logsumexp],
}
