"""Correct solutions of the FlashAttention exercises, each written differently from the reference."""

import math

import numpy as np
import torch


# ---------------------------------------------------------------- online_softmax_stats

def stats_vectorised(chunks):
    """Running max by cummax over the chunk maxima; each prefix sum recomputed against it."""
    m = chunks.amax(dim=1).cummax(dim=0).values                        # (n,)
    shift = torch.where(torch.isneginf(m), torch.zeros_like(m), m)     # no -inf - (-inf)
    e = torch.exp(chunks - shift[:, None, None])                       # (n, n, c): row t against max t
    upto = torch.ones(len(m), len(m), dtype=torch.bool).tril()         # chunk s counts for t when s <= t
    l = torch.where(upto[:, :, None], e, 0.0).sum(dim=(1, 2))
    return torch.stack([m, l], dim=1)


def stats_python_floats(chunks):
    """Plain Python floats, in float64, chunk by chunk."""
    m, l, rows = -math.inf, 0.0, []
    for chunk in chunks.double().tolist():
        top = max(chunk)
        if top > m:
            l = l * math.exp(m - top) if l > 0 else 0.0
            m = top
        if m > -math.inf:
            l += sum(math.exp(x - m) for x in chunk)
        rows.append([m, l])
    return torch.tensor(rows, dtype=torch.float64).to(chunks.dtype)


# ---------------------------------------------------------------- merge_partials

def merge_via_lse(a, b):
    """Through log-sum-exps: lse_i = m_i + log l_i, lse = logaddexp(lse_1, lse_2)."""
    o1, o2 = a[:, :-2], b[:, :-2]
    lse1 = a[:, -2] + torch.log(a[:, -1])                  # -inf for a partial with no key
    lse2 = b[:, -2] + torch.log(b[:, -1])
    lse = torch.logaddexp(lse1, lse2)                      # (Tq,)
    o = torch.exp(lse1 - lse)[:, None] * o1 + torch.exp(lse2 - lse)[:, None] * o2
    m = torch.maximum(a[:, -2], b[:, -2])
    return torch.cat([o, m[:, None], torch.exp(lse - m)[:, None]], dim=1)


def merge_row_by_row(a, b):
    """One query at a time, in numpy float64."""
    x, y = a.double().numpy(), b.double().numpy()
    rows = []
    for ra, rb in zip(x, y):
        m = max(ra[-2], rb[-2])
        wa = ra[-1] * np.exp(ra[-2] - m) if ra[-1] > 0 else 0.0
        wb = rb[-1] * np.exp(rb[-2] - m) if rb[-1] > 0 else 0.0
        o = (wa * ra[:-2] + wb * rb[:-2]) / (wa + wb)
        rows.append(np.concatenate([o, [m, wa + wb]]))
    return torch.from_numpy(np.array(rows)).to(a.dtype)


# ---------------------------------------------------------------- causal_tiles

def tiles_by_mask(q_len, k_len, block_size):
    """Build the whole bottom-right mask and count the tiles that hold an allowed entry."""
    i = torch.arange(q_len)[:, None]
    j = torch.arange(k_len)[None, :]
    allowed = j <= i + (k_len - q_len)                     # (q_len, k_len)
    count = 0
    for r in range(0, q_len, block_size):
        for c in range(0, k_len, block_size):
            count += int(allowed[r:r + block_size, c:c + block_size].any())
    return count


def tiles_by_formula(q_len, k_len, block_size):
    """Per query block: the key blocks up to the one holding its last query's last key."""
    total = 0
    n_q = -(-q_len // block_size)
    for qb in range(n_q):
        last_query = min((qb + 1) * block_size, q_len) - 1
        last_key = min(last_query + k_len - q_len, k_len - 1)
        total += 0 if last_key < 0 else last_key // block_size + 1
    return total


# ---------------------------------------------------------------- tiled_forward

def forward_with_lse(q, k, v, block_size):
    """Keep the running log-sum-exp instead of (m, l); the output is a running weighted mean."""
    scores_scale = 1.0 / math.sqrt(q.shape[1])
    lse = torch.full((q.shape[0],), -math.inf, dtype=q.dtype)          # (Tq,)
    out = torch.zeros(q.shape[0], v.shape[1], dtype=q.dtype)           # (Tq, d_v), normalised so far
    for start in range(0, k.shape[0], block_size):
        s = (q @ k[start:start + block_size].T) * scores_scale         # (Tq, bk)
        block_lse = torch.logsumexp(s, dim=1)
        new_lse = torch.logaddexp(lse, block_lse)
        block_out = torch.exp(s - block_lse[:, None]) @ v[start:start + block_size]
        out = torch.exp(lse - new_lse)[:, None] * out + torch.exp(block_lse - new_lse)[:, None] * block_out
        lse = new_lse
    return out


def forward_einsum_loop(q, k, v, block_size):
    """Per block: einsum for the scores, a max over the block, and explicit rescaling."""
    d = q.shape[-1]
    run_max = None
    for start in range(0, k.shape[0], block_size):
        kb, vb = k[start:start + block_size], v[start:start + block_size]
        s = torch.einsum("id,jd->ij", q, kb) / d ** 0.5
        bmax = s.max(dim=1, keepdim=True).values
        if run_max is None:
            run_max = bmax
            w = torch.exp(s - run_max)
            num, den = w @ vb, w.sum(dim=1, keepdim=True)
            continue
        new_max = torch.maximum(run_max, bmax)
        old, w = torch.exp(run_max - new_max), torch.exp(s - new_max)
        num = old * num + w @ vb
        den = old * den + w.sum(dim=1, keepdim=True)
        run_max = new_max
    return num / den


CORRECT = {
    "flash.online_softmax_stats": [stats_vectorised, stats_python_floats],
    "flash.merge_partials": [merge_via_lse, merge_row_by_row],
    "flash.causal_tiles": [tiles_by_mask, tiles_by_formula],
    "flash.tiled_forward": [forward_with_lse, forward_einsum_loop],
}
