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


def stats_logcumsumexp(chunks):
    """Running max by cummax; running log-sum-exp by logcumsumexp over the chunks' own log-sum-exps."""
    m = chunks.amax(dim=1).cummax(dim=0).values                        # (n,)
    lse = torch.logcumsumexp(torch.logsumexp(chunks, dim=1), dim=0)    # (n,): log of the sum of exp so far
    l = torch.where(torch.isneginf(m), torch.zeros_like(m), torch.exp(lse - m))
    return torch.stack([m, l], dim=1)


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


def merge_sigmoid(a, b):
    """The first partial's share of the merged output is sigmoid(lse_1 - lse_2)."""
    m1, l1, m2, l2 = a[:, -2], a[:, -1], b[:, -2], b[:, -1]
    share = torch.sigmoid((m1 + torch.log(l1)) - (m2 + torch.log(l2)))[:, None]   # (Tq, 1)
    m = torch.maximum(m1, m2)
    l = l1 * torch.exp(m1 - m) + l2 * torch.exp(m2 - m)
    return torch.cat([share * a[:, :-2] + (1 - share) * b[:, :-2], m[:, None], l[:, None]], dim=1)


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


def tiles_by_corner(q_len, k_len, block_size):
    """A tile holds an allowed entry iff its bottom-left corner (last query, first key) is allowed."""
    return sum(1 for i0 in range(0, q_len, block_size) for j0 in range(0, k_len, block_size)
               if j0 <= min(i0 + block_size, q_len) - 1 + k_len - q_len)


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


def forward_row_by_row(q, k, v, block_size):
    """One query row at a time, with Python floats for the running max and sum."""
    rows = []
    for i in range(q.shape[0]):
        m, l, acc = -math.inf, 0.0, torch.zeros(v.shape[1], dtype=q.dtype)
        for j in range(0, k.shape[0], block_size):
            s = k[j:j + block_size] @ q[i] / math.sqrt(q.shape[1])    # (bk,)
            m_new = max(m, float(s.max()))
            p = torch.exp(s - m_new)
            shrink = math.exp(m - m_new)
            l, acc, m = l * shrink + float(p.sum()), acc * shrink + p @ v[j:j + block_size], m_new
        rows.append(acc / l)
    return torch.stack(rows)


CORRECT = {
    "flash.online_softmax_stats": [stats_vectorised, stats_python_floats, stats_logcumsumexp],
    "flash.merge_partials": [merge_via_lse, merge_row_by_row, merge_sigmoid],
    "flash.causal_tiles": [tiles_by_mask, tiles_by_formula, tiles_by_corner],
    "flash.tiled_forward": [forward_with_lse, forward_einsum_loop, forward_row_by_row],
}
