"""FlashAttention-2 (Dao, 2023) as Triton kernels: the forward pass and the backward pass.

Every tensor is one contiguous (B * h, T, d) stack of heads: head ``head`` of a (Tq, d)
tensor starts ``head * Tq * d`` elements after its first element, and row ``i`` of it
``i * d`` elements after that. A program is one block of rows of one head; blocks are
``BLOCK_M`` query rows or ``BLOCK_N`` key rows, and a tile is ``(rows, BLOCK_D)`` where
BLOCK_D is d rounded up to a power of two (``tl.arange`` needs one). Rows past the end of a
sequence and columns past d are masked: they read as 0 and are never written.

Scores are kept in base-2 units: s = (q . k) * scale * log2(e), so that
exp(scale * q . k - m) = exp2(s - m'), and the kernels call exp2 (one instruction on a GPU)
instead of exp.

What the forward saves for the backward is, by default, FlashAttention-2's one number per
query row, the log-sum-exp L of its scores (in natural units, as torch.logsumexp gives it);
the backward recomputes P = 2^(s - L log2 e) from S, which it computes exactly as the forward
did (the same operands in the same order: q k^T, never k q^T). L is rounded to float32 at
the size of the scores: near 60, float32 numbers are 2^-18 apart, so every recomputed entry
of a row, the largest included, moves by about 2^-19 relative, where the same-precision
reference's softmax gets its largest entry right to about 2^-24. With MAX_AND_SUM the
forward saves two numbers per row instead, the row's largest score m (base 2) and 1 / l,
the inverse of its sum of 2^(s - m), and the backward recomputes P = 2^(s - m) / l: as
accurate as that reference's softmax, for 4 bytes more per row. Both are O(T), not O(T^2).

Causal masking is aligned bottom-right, as everywhere in the course: query ``i`` sees key
``j`` when ``j <= i + offset`` with ``offset = Tk - Tq``. Every loop over key blocks (or
query blocks) runs in two phases: the blocks every row of the program may see entirely,
with no mask, then the band of blocks that the diagonal or the end of the sequence cuts,
with the mask. Blocks that no row may see are not visited at all.

The backward is FlashAttention-2's: one program per block of keys, looping over the query
blocks that see them, five matrix products per tile (S, dP, dV, dK, dQ). dK and dV are the
program's own rows; dQ's rows are shared by every key block, so each program adds its share
into a float32 buffer with atomic additions (in a different order from run to run on a GPU,
so dQ's last bits may differ between runs; the interpreter runs programs in order).

The plain-torch loop that the forward kernel implements is lesson 10's
``mha.tiled_attention``; the gradients that the backward kernel computes are lesson 08's
``mha.attention_backward``. Both are held equal to these kernels by the tests.

Import this module through ``mha.kernels`` (it chooses the interpreter first, when needed).
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)   # log2(e), exp(x) = exp2(x * log2(e)); a kernel may read only constexpr globals
LN2 = tl.constexpr(0.6931471805599453)     # ln(2) = 1 / log2(e)


# ----------------------------------------------------------------------------- helpers

@triton.jit
def load_rows(head, rows, n_rows, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr):
    """Rows ``rows`` of the (n_rows, HEAD_DIM) matrix at ``head`` as a (len(rows), BLOCK_D)
    tile; rows past n_rows and columns past HEAD_DIM read as 0."""
    dims = tl.arange(0, BLOCK_D)                                          # (BLOCK_D,)
    inside = (rows[:, None] < n_rows) & (dims[None, :] < HEAD_DIM)       # (rows, BLOCK_D)
    return tl.load(head + rows[:, None] * HEAD_DIM + dims[None, :], mask=inside, other=0.0)


@triton.jit
def store_rows(head, tile, rows, n_rows, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr):
    """Write a (len(rows), BLOCK_D) tile into rows ``rows`` of the (n_rows, HEAD_DIM) matrix
    at ``head``, except what lies past its end."""
    dims = tl.arange(0, BLOCK_D)
    inside = (rows[:, None] < n_rows) & (dims[None, :] < HEAD_DIM)
    tl.store(head + rows[:, None] * HEAD_DIM + dims[None, :], tile.to(head.dtype.element_ty), mask=inside)


@triton.jit
def key_range(first_row, Tq, Tk, IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """For the query rows first_row .. first_row + BLOCK_M - 1: (full, end), where the
    key blocks starting below ``full`` are seen entirely by every row (no mask needed) and
    the blocks from ``full`` up to ``end`` are cut by the diagonal or by Tk (masked).
    Keys from ``end`` on are seen by no row of the block."""
    if IS_CAUSAL:
        offset = Tk - Tq                      # query i sees keys j <= i + offset
        # The last row sees the most keys, the first row the fewest. Clamp at 0 before
        # dividing: Triton's integer division rounds towards zero on a GPU.
        end = tl.maximum(tl.minimum(first_row + BLOCK_M + offset, Tk), 0)
        full = tl.maximum(tl.minimum(first_row + 1 + offset, Tk), 0) // BLOCK_N * BLOCK_N
    else:
        end = Tk
        full = Tk // BLOCK_N * BLOCK_N        # every block but a last, shorter one
    return full, end


@triton.jit
def query_range(first_key, Tq, Tk, IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """For the keys first_key .. first_key + BLOCK_N - 1: (start, full), where the query
    blocks from ``start`` up to ``full`` see only some of these keys (masked) and the
    blocks from ``full`` on see all of them (no mask needed). Queries before ``start``
    see none of them."""
    if IS_CAUSAL:
        offset = Tk - Tq                      # key j is seen by queries i >= j - offset
        last_key = tl.minimum(first_key + BLOCK_N, Tk) - 1
        start = tl.maximum(first_key - offset, 0) // BLOCK_M * BLOCK_M
        full = tl.cdiv(tl.maximum(last_key - offset, 0), BLOCK_M) * BLOCK_M
        full = tl.minimum(full, tl.cdiv(Tq, BLOCK_M) * BLOCK_M)
    else:
        start = 0
        full = 0
    return start, full


@triton.jit
def allowed(rows, keys, Tq, Tk, IS_CAUSAL: tl.constexpr):
    """(len(rows), len(keys)): True where query ``rows[a]`` may attend to key ``keys[b]``."""
    ok = keys[None, :] < Tk
    if IS_CAUSAL:
        ok = ok & (keys[None, :] <= rows[:, None] + (Tk - Tq))
    return ok


# ----------------------------------------------------------------------------- forward

@triton.jit
def attend_to_keys(acc, row_sum, row_max, q, k_head, v_head, rows, lo, hi, Tq, Tk, qk_scale,
                   HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
                   MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    """The online softmax over the key blocks from ``lo`` to ``hi``: lesson 10's inner loop.

    acc (BLOCK_M, BLOCK_D) float32: sum of exp2(s - row_max) * v over the keys seen so far
    row_sum (BLOCK_M,) float32:     sum of exp2(s - row_max)
    row_max (BLOCK_M,) float32:     the largest score seen so far (-inf before any)
    q (BLOCK_M, BLOCK_D):           the queries of the block
    qk_scale:                       scale * log2(e), for scores in base-2 units
    """
    for first_key in range(lo, hi, BLOCK_N):
        keys = first_key + tl.arange(0, BLOCK_N)                                  # (BLOCK_N,)
        k = load_rows(k_head, keys, Tk, HEAD_DIM, BLOCK_D)                        # (BLOCK_N, BLOCK_D)
        v = load_rows(v_head, keys, Tk, HEAD_DIM, BLOCK_D)                        # (BLOCK_N, BLOCK_D)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale          # (BLOCK_M, BLOCK_N)
        if MASKED:
            s = tl.where(allowed(rows, keys, Tq, Tk, IS_CAUSAL), s, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(s, 1))                               # (BLOCK_M,)
        if MASKED:
            # A row that has seen only blocked keys still has max -inf: shift it by 0,
            # so that -inf - (-inf) = NaN is never computed.
            new_max = tl.where(new_max == float("-inf"), 0.0, new_max)
        p = tl.math.exp2(s - new_max[:, None])                                    # (BLOCK_M, BLOCK_N)
        shrink = tl.math.exp2(row_max - new_max)                                  # (BLOCK_M,), <= 1
        row_sum = row_sum * shrink + tl.sum(p, 1)
        acc = acc * shrink[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        row_max = new_max
    return acc, row_sum, row_max


@triton.jit
def flash_forward_kernel(Q, K, V, Out, RowStat, InvSum, Tq, Tk, scale, len_bucket,
                         HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         IS_CAUSAL: tl.constexpr, PRECISION: tl.constexpr, MAX_AND_SUM: tl.constexpr):
    """Out = softmax(scale * Q K^T) V for one block of BLOCK_M query rows of one head, and per
    row for the backward: into RowStat the log-sum-exp L (natural units), so that
    P = 2^(s - L log2 e); or, MAX_AND_SUM, the row's largest score m in base-2 units, and into
    InvSum 1 / sum of 2^(s - m), so that P = 2^(s - m) * InvSum (+inf, and 0, for a row with
    no key to see). Grid: (cdiv(Tq, BLOCK_M), B * h). ``len_bucket`` is read by the GPU
    autotuner only."""
    tl.static_assert(BLOCK_D >= HEAD_DIM)
    block = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)          # 64-bit: B * h * T * d may pass 2**31
    q_head = Q + head * Tq * HEAD_DIM
    k_head = K + head * Tk * HEAD_DIM
    v_head = V + head * Tk * HEAD_DIM

    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)                                # (BLOCK_M,)
    q = load_rows(q_head, rows, Tq, HEAD_DIM, BLOCK_D)                            # (BLOCK_M, BLOCK_D)
    qk_scale = scale * LOG2E

    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    row_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    row_max = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)

    full, end = key_range(block * BLOCK_M, Tq, Tk, IS_CAUSAL, BLOCK_M, BLOCK_N)
    acc, row_sum, row_max = attend_to_keys(acc, row_sum, row_max, q, k_head, v_head, rows, 0, full,
                                           Tq, Tk, qk_scale, HEAD_DIM, BLOCK_D, BLOCK_N, False, IS_CAUSAL, PRECISION)
    acc, row_sum, row_max = attend_to_keys(acc, row_sum, row_max, q, k_head, v_head, rows, full, end,
                                           Tq, Tk, qk_scale, HEAD_DIM, BLOCK_D, BLOCK_N, True, IS_CAUSAL, PRECISION)

    empty = row_sum == 0.0                     # rows that saw no key: output 0, never 0 / 0
    row_sum = tl.where(empty, 1.0, row_sum)
    store_rows(Out + head * Tq * HEAD_DIM, acc / row_sum[:, None], rows, Tq, HEAD_DIM, BLOCK_D)
    # For the backward, per row: L = ln(sum of e^(scale q.k)), the log-sum-exp in natural units
    # (as torch.logsumexp gives it); or, MAX_AND_SUM, the largest base-2 score and 1 / sum.
    # +inf (and 0) for an empty row: the backward's 2^(s - L) is then 0 for every key.
    if MAX_AND_SUM:
        tl.store(RowStat + head * Tq + rows, tl.where(empty, float("inf"), row_max), mask=rows < Tq)
        tl.store(InvSum + head * Tq + rows, tl.where(empty, 0.0, 1.0 / row_sum), mask=rows < Tq)
    else:
        lse = (row_max + tl.math.log2(row_sum)) * LN2
        tl.store(RowStat + head * Tq + rows, tl.where(empty, float("inf"), lse), mask=rows < Tq)


# ----------------------------------------------------------------------------- backward

@triton.jit
def flash_backward_delta_kernel(Out, dOut, Delta, Tq,
                                HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr):
    """Delta_i = rowsum(dO_i * O_i) for one block of query rows of one head: the
    rowsum(dP * P) of the softmax's gradient, from tensors of size d instead of Tk.
    Grid: (cdiv(Tq, BLOCK_M), B * h)."""
    block = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    o = load_rows(Out + head * Tq * HEAD_DIM, rows, Tq, HEAD_DIM, BLOCK_D).to(tl.float32)
    do = load_rows(dOut + head * Tq * HEAD_DIM, rows, Tq, HEAD_DIM, BLOCK_D).to(tl.float32)
    tl.store(Delta + head * Tq + rows, tl.sum(o * do, 1), mask=rows < Tq)


@triton.jit
def gradients_from_queries(dk, dv, k, v, q_head, do_head, stat_head, inv_sum_head, delta_head, dq_head,
                           keys, lo, hi, Tq, Tk, scale, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                           BLOCK_M: tl.constexpr, MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr,
                           PRECISION: tl.constexpr, WANT_DQ: tl.constexpr, WANT_DKV: tl.constexpr,
                           MAX_AND_SUM: tl.constexpr):
    """The query blocks from lo to hi, against this program's keys: add their terms to dk and
    dv (BLOCK_N, BLOCK_D), and add each block's dQ = scale dS K to the float32 buffer at
    dq_head with atomic additions (other programs add their keys' share to the same rows).
    Five matrix products per tile: S, dP, dV, dK and dQ."""
    for first_row in range(lo, hi, BLOCK_M):
        rows = first_row + tl.arange(0, BLOCK_M)                                  # (BLOCK_M,)
        q = load_rows(q_head, rows, Tq, HEAD_DIM, BLOCK_D)                        # (BLOCK_M, BLOCK_D)
        do = load_rows(do_head, rows, Tq, HEAD_DIM, BLOCK_D)                      # (BLOCK_M, BLOCK_D)
        delta = tl.load(delta_head + rows, mask=rows < Tq, other=0.0)             # (BLOCK_M,)
        # S as the forward computed it, bit for bit: same operands, same order (see below).
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale          # (BLOCK_M, BLOCK_N)
        if MASKED:
            s = tl.where(allowed(rows, keys, Tq, Tk, IS_CAUSAL), s, float("-inf"))
        if MAX_AND_SUM:                                                           # P = 2^(s - m) / l
            row_max = tl.load(stat_head + rows, mask=rows < Tq, other=float("inf"))       # (BLOCK_M,)
            inv_sum = tl.load(inv_sum_head + rows, mask=rows < Tq, other=0.0)             # (BLOCK_M,)
            p = tl.math.exp2(s - row_max[:, None]) * inv_sum[:, None]             # 0 where blocked
        else:                                                                     # P = 2^(s - L log2 e)
            lse = tl.load(stat_head + rows, mask=rows < Tq, other=float("inf")) * LOG2E   # (BLOCK_M,)
            p = tl.math.exp2(s - lse[:, None])                                    # 0 where blocked
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)                   # dP = dO V^T
        ds = p * (dp - delta[:, None])                                            # dS = P * (dP - D)
        if WANT_DKV:
            dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PRECISION)   # dV = P^T dO
            dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION)    # dK = dS^T Q (times scale)
        if WANT_DQ:
            dq = tl.dot(ds.to(k.dtype), k, input_precision=PRECISION) * scale      # dQ = scale dS K
            dims = tl.arange(0, BLOCK_D)
            inside = (rows[:, None] < Tq) & (dims[None, :] < HEAD_DIM)
            tl.atomic_add(dq_head + rows[:, None] * HEAD_DIM + dims[None, :], dq, mask=inside, sem="relaxed")
    return dk, dv


@triton.jit
def flash_backward_kernel(Q, K, V, dOut, RowStat, InvSum, Delta, dQ, dK, dV, Tq, Tk, scale, len_bucket,
                          HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
                          PRECISION: tl.constexpr, WANT_DQ: tl.constexpr, WANT_DKV: tl.constexpr,
                          MAX_AND_SUM: tl.constexpr):
    """dK and dV for one block of BLOCK_N keys of one head, and this block's share of dQ
    (added into dQ, float32, zeroed by the caller), visiting the query blocks that see these
    keys. Grid: (cdiv(Tk, BLOCK_N), B * h)."""
    block = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    keys = block * BLOCK_N + tl.arange(0, BLOCK_N)                                # (BLOCK_N,)
    k = load_rows(K + head * Tk * HEAD_DIM, keys, Tk, HEAD_DIM, BLOCK_D)          # (BLOCK_N, BLOCK_D)
    v = load_rows(V + head * Tk * HEAD_DIM, keys, Tk, HEAD_DIM, BLOCK_D)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)

    q_head, do_head, dq_head = Q + head * Tq * HEAD_DIM, dOut + head * Tq * HEAD_DIM, dQ + head * Tq * HEAD_DIM
    stat_head, inv_sum_head, delta_head = RowStat + head * Tq, InvSum + head * Tq, Delta + head * Tq
    qk_scale = scale * LOG2E                      # as the forward computes it
    start, full = query_range(block * BLOCK_N, Tq, Tk, IS_CAUSAL, BLOCK_M, BLOCK_N)
    dk, dv = gradients_from_queries(dk, dv, k, v, q_head, do_head, stat_head, inv_sum_head, delta_head, dq_head,
                                    keys, start, full, Tq, Tk, scale, qk_scale, HEAD_DIM, BLOCK_D, BLOCK_M,
                                    True, IS_CAUSAL, PRECISION, WANT_DQ, WANT_DKV, MAX_AND_SUM)
    # Past `full`, every query sees every key of this block, except keys past Tk in a last,
    # shorter block: their rows of dk and dv are never written, and their columns of dS are
    # 0 because k and v read as 0 there (s = 0 is not masked, but dS K adds 0 * 0).
    dk, dv = gradients_from_queries(dk, dv, k, v, q_head, do_head, stat_head, inv_sum_head, delta_head, dq_head,
                                    keys, full, Tq, Tq, Tk, scale, qk_scale, HEAD_DIM, BLOCK_D, BLOCK_M,
                                    False, IS_CAUSAL, PRECISION, WANT_DQ, WANT_DKV, MAX_AND_SUM)
    if WANT_DKV:
        store_rows(dK + head * Tk * HEAD_DIM, dk * scale, keys, Tk, HEAD_DIM, BLOCK_D)
        store_rows(dV + head * Tk * HEAD_DIM, dv, keys, Tk, HEAD_DIM, BLOCK_D)


# ----------------------------------------------------------------------------- GPU tuning

def _configs(blocks_m, blocks_n, stages, warps):
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_stages=s, num_warps=w)
            for m in blocks_m for n in blocks_n for s in stages for w in warps]


# Forward: large query blocks (each program keeps its q tile and accumulator on chip while
# it streams keys); backward: smaller query blocks, since each program also holds dk and dv.
CONFIGS = {
    "flash_forward_kernel": _configs((64, 128), (32, 64, 128), (2, 3, 4), (4, 8)),
    "flash_backward_kernel": _configs((32, 64), (64, 128), (2, 3), (4, 8)),
}
# The backward adds into dQ: every configuration the autotuner times must start from zeros.
RESET = {"flash_backward_kernel": ["dQ"]}
_TUNED = {}


def tuned(kernel):
    """``kernel`` wrapped in Triton's autotuner (GPU only): one tuning per head width, causal
    flag, row statistics, power-of-two length (``len_bucket``) and, for the backward, gradients
    wanted.
    Configurations that need more shared memory than the GPU has fail to compile and are
    dropped by the autotuner."""
    name = kernel.fn.__name__ if hasattr(kernel, "fn") else kernel.__name__
    if name not in _TUNED:
        key = ["HEAD_DIM", "IS_CAUSAL", "MAX_AND_SUM", "len_bucket"]
        key += ["WANT_DQ", "WANT_DKV"] if name in RESET else []
        _TUNED[name] = triton.autotune(CONFIGS[name], key=key, reset_to_zero=RESET.get(name))(kernel)
    return _TUNED[name]
