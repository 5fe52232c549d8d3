"""FlashAttention's forward pass in plain torch: tiles and an online softmax.

    out = softmax(q @ k^T * scale) @ v,   computed without ever holding the (Tq, Tk) scores

The keys and values are cut into blocks of `block_size` rows, and the queries into blocks
too. For one query block the key blocks are visited in order, and three running quantities
are kept for each query row:

    m    the largest score seen so far                          (running max)
    l    the sum of exp(score - m) over the keys seen so far     (running sum)
    acc  the sum of exp(score - m) * v over the keys seen so far (unnormalised output)

When a new key block raises the max from m to m_new, the old l and acc were computed
relative to m, so both are multiplied by exp(m - m_new) before the block's own terms are
added (the online softmax of Milakov and Gimelshein, 2018). After the last key block,
out = acc / l.

A query block has `block_size` rows, or a multiple of it when that would cut the queries
into more than MAX_QUERY_BLOCKS blocks (`query_block_size`). Every torch operation costs a
few microseconds whatever its size, and a loop over (16384 / 64)^2 = 65,536 tiles of 64 x 64
would spend its time on that; at most 16 query blocks keep the loop short while a tile,
(rows, block_size), stays a small fraction of the (Tq, Tk) matrix. (FlashAttention's own
query and key blocks differ in size too; a GPU kernel runs the query blocks in parallel.)

is_causal aligns the mask bottom-right, as everywhere in `mha`: query i sees the keys
j <= i + Tk - Tq. Key blocks that no query of the block may see are skipped, and only the
tiles that straddle the diagonal are masked. A query row with nothing to attend to (Tq > Tk
and causal) ends with l = 0 and returns zeros, never NaN.

This is the algorithm of FlashAttention (Dao et al., 2022) written for reading, not speed:
a GPU kernel keeps the tiles in fast on-chip memory, and in the backward pass recomputes
them from the saved log-sum-exp m + log(l) per query row. Here autograd differentiates
through the loop, so a backward pass keeps every tile it visited.
"""

from __future__ import annotations

import math
import numbers

import torch

from ._checks import check_int, check_tensor

MAX_QUERY_BLOCKS = 16   # the queries are cut into at most this many blocks


def query_block_size(q_len: int, block_size: int) -> int:
    """Rows per query block: block_size, or the smallest multiple of it that cuts q_len
    queries into at most MAX_QUERY_BLOCKS blocks (16384 queries in blocks of 64: 1024 rows)."""
    n_blocks = -(-q_len // block_size)                     # ceil(q_len / block_size)
    return block_size * max(1, -(-n_blocks // MAX_QUERY_BLOCKS))


def tiled_attention(q, k, v, *, is_causal=False, block_size=64, scale=None):
    """softmax(q k^T * scale) v, one tile of scores (query block, key block) at a time.

    Args:
        q: (B, h, Tq, d) queries.  k: (B, h, Tk, d) keys.  v: (B, h, Tk, d_v) values.
            The leading (B, h) dimensions broadcast; all three share one floating dtype.
        is_causal: block later keys, aligned bottom-right (query i sees keys
            j <= i + Tk - Tq). Rows with no key allowed (Tq > Tk) return zeros.
        block_size: keys per key block, an int >= 1. Query blocks have block_size rows,
            or a multiple of it so that there are at most 16 (`query_block_size`). A block
            larger than the sequence is one block.
        scale: multiplier of the scores, default 1 / sqrt(d).

    The largest buffers are the tile of scores, (query_block_size(Tq, block_size),
    block_size) per (batch, head), and the output; never a (Tq, Tk) matrix.

    Returns:
        out (B, h, Tq, d_v) in q's dtype: the same numbers as
        `mha.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)[0]`
        up to rounding. float16 and bfloat16 inputs are computed in float32.
    """
    _check(q, k, v, is_causal, block_size, scale)
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    Tq, Tk = q.shape[-2], k.shape[-2]
    lead = _broadcast(q.shape[:2], k.shape[:2], v.shape[:2])   # (B, h)
    dtype, work = q.dtype, torch.promote_types(q.dtype, torch.float32)   # float16 -> float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    offset = Tk - Tq                                       # query i sees keys j <= i + offset

    rows = query_block_size(Tq, block_size)                # queries per block
    out = torch.empty((*lead, Tq, v.shape[-1]), dtype=work, device=q.device)   # (B, h, Tq, d_v)
    for i0 in range(0, Tq, rows):
        i1 = min(i0 + rows, Tq)
        q_blk = q[..., i0:i1, :] * s                       # (B, h, bq, d), scaled once per block
        m = torch.full((*lead, i1 - i0, 1), float("-inf"), dtype=work, device=q.device)  # (B, h, bq, 1)
        l = torch.zeros((*lead, i1 - i0, 1), dtype=work, device=q.device)                # (B, h, bq, 1)
        acc = torch.zeros((*lead, i1 - i0, v.shape[-1]), dtype=work, device=q.device)    # (B, h, bq, d_v)
        # Causal: no query of this block sees a key beyond its last row's limit.
        k_end = min(Tk, i1 + offset) if is_causal else Tk
        for j0 in range(0, k_end, block_size):
            j1 = min(j0 + block_size, Tk)
            scores = q_blk @ k[..., j0:j1, :].transpose(-2, -1)              # (B, h, bq, bk)
            if is_causal and j1 - 1 > i0 + offset:         # the tile straddles the diagonal
                i = torch.arange(i0, i1, device=q.device)[:, None]          # (bq, 1) query positions
                j = torch.arange(j0, j1, device=q.device)[None, :]          # (1, bk) key positions
                scores = scores.masked_fill(j > i + offset, float("-inf"))
            # The result does not depend on m (it cancels in acc / l), so no gradient
            # needs to flow through it.
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True)).detach()   # (B, h, bq, 1)
            # A row that has seen only blocked keys keeps m = -inf; shift it by 0 instead,
            # so that exp(-inf - (-inf)) = NaN is never computed.
            shift = m_new.nan_to_num(neginf=0.0)
            p = torch.exp(scores - shift)                  # (B, h, bq, bk), 0 where blocked
            rescale = torch.exp(m - shift)                 # (B, h, bq, 1), <= 1: the old terms shrink
            l = l * rescale + p.sum(dim=-1, keepdim=True)
            acc = acc * rescale + p @ v[..., j0:j1, :]     # (B, h, bq, d_v)
            m = m_new
        empty = l == 0                                     # rows that saw no allowed key
        out[..., i0:i1, :] = acc / torch.where(empty, torch.ones_like(l), l)   # acc is 0 there
    return out.to(dtype)


def _check(q, k, v, is_causal, block_size, scale):
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, dims=4, floating=True)
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, got {t.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dimension d, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same length Tk (dim -2), got {k.shape[-2]} and {v.shape[-2]}")
    if _broadcast(q.shape[:2], k.shape[:2], v.shape[:2]) is None:
        raise ValueError(f"the (batch, heads) dimensions of q {tuple(q.shape)}, k {tuple(k.shape)} and "
                         f"v {tuple(v.shape)} must broadcast")
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be a bool, got {type(is_causal).__name__} ({is_causal!r})")
    check_int("block_size", block_size, minimum=1)
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)
                              or not math.isfinite(scale)):
        raise TypeError(f"scale must be a finite real number or None (for 1 / sqrt(d)), got {scale!r}")


def _broadcast(*shapes):
    """The broadcast of equal-length shapes, or None. (torch.broadcast_shapes would do, but its
    first call imports sympy, which takes seconds.)"""
    out = []
    for sizes in zip(*shapes):
        big = max(sizes)
        if any(n not in (1, big) for n in sizes):
            return None
        out.append(big)
    return tuple(out)
