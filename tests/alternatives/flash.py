"""Answers to the FlashAttention exercises: correct ones written differently from the references,
and classic wrong ones (some with the right values, computed in a way the statement rules out)."""

import math

import numpy as np
import torch


# ---------------------------------------------------------------- online_softmax_stats

def stats_running_max_with_the_chunk(chunks):
    """Each new max taken over the running max and the chunk's scores together (one call), and
    each new sum over the old sum, rescaled, and the chunk's terms, stacked: still one chunk and
    the running (m, l) at a time."""
    m = torch.tensor(float("-inf"), dtype=chunks.dtype)
    l = torch.zeros((), dtype=chunks.dtype)
    rows = []
    for x in chunks:
        m_new = torch.cat([m.reshape(1), x]).max()
        if torch.isfinite(m_new):
            old = l * torch.exp(m - m_new) if torch.isfinite(m) else l
            l = torch.cat([old.reshape(1), torch.exp(x - m_new)]).sum()
            m = m_new
        rows.append(torch.stack([m, l]))
    return torch.stack(rows)


def stats_max_of_two(chunks):
    """The running max and the chunk's own max, stacked, then their max: with chunks of width 1
    that stack has as many values as two chunks."""
    m = torch.tensor(float("-inf"), dtype=chunks.dtype)
    l = torch.zeros((), dtype=chunks.dtype)
    rows = []
    for x in chunks:
        m_new = torch.stack([m, x.max()]).max()
        if not torch.isneginf(m_new):
            l = l * torch.exp(m - m_new) + torch.exp(x - m_new).sum()
            m = m_new
        rows.append(torch.stack([m, l]))
    return torch.stack(rows)


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


def stats_logsumexp_per_chunk(chunks):
    """Each chunk's own log-sum-exp, folded into a running one with logaddexp."""
    m = torch.tensor(-math.inf, dtype=chunks.dtype)
    lse = torch.tensor(-math.inf, dtype=chunks.dtype)
    out = []
    for t in range(chunks.shape[0]):
        x = chunks[t]
        m = torch.maximum(m, x.max())
        lse = torch.logaddexp(lse, torch.logsumexp(x, dim=0))
        l = torch.exp(lse - m) if torch.isfinite(m) else torch.zeros_like(m)
        out.append(torch.stack([m, l]))
    return torch.stack(out)


def stats_preallocated(chunks):
    """Writes each row of the result in place, into a tensor made up front."""
    out = torch.empty(chunks.shape[0], 2, dtype=chunks.dtype)
    m, l = -math.inf, 0.0
    for t, x in enumerate(chunks.unbind(0)):
        top = float(x.max())
        new = max(m, top)
        if new > -math.inf:
            l = l * math.exp(m - new) + float(torch.exp(x.double() - new).sum())
            m = new
        out[t, 0], out[t, 1] = m, l
    return out


def stats_wrong_vectorised(chunks):
    """Right values, but every prefix recomputed from all its chunks: not online."""
    m = chunks.amax(dim=1).cummax(dim=0).values                        # (n,)
    shift = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    e = torch.exp(chunks - shift[:, None, None])                       # (n, n, c): row t against max t
    upto = torch.ones(len(m), len(m), dtype=torch.bool).tril()
    l = torch.where(upto[:, :, None], e, 0.0).sum(dim=(1, 2))
    return torch.stack([m, l], dim=1)


def stats_wrong_logcumsumexp(chunks):
    """Right values through a scan over all the chunks at once: not in order, chunk by chunk."""
    m = chunks.amax(dim=1).cummax(dim=0).values
    lse = torch.logcumsumexp(torch.logsumexp(chunks, dim=1), dim=0)
    l = torch.where(torch.isneginf(m), torch.zeros_like(m), torch.exp(lse - m))
    return torch.stack([m, l], dim=1)


def stats_wrong_prefix(chunks):
    """Right values, but each step looks at all the chunks so far again: the max and the sum
    of the whole prefix, recomputed."""
    rows = []
    for t in range(chunks.shape[0]):
        seen = chunks[:t + 1]
        m = seen.max()
        l = torch.exp(seen - m).sum() if torch.isfinite(m) else torch.zeros((), dtype=chunks.dtype)
        rows.append(torch.stack([m, l]))
    return torch.stack(rows)


def stats_wrong_mean_max(chunks):
    """Rescales by the mean of the maxima instead of their max."""
    m, l, rows, tops = None, torch.zeros((), dtype=chunks.dtype), [], []
    for x in chunks:
        tops.append(x.max())
        m_new = torch.stack(tops).mean()
        l = (l * torch.exp(m - m_new) if m is not None else l) + torch.exp(x - m_new).sum()
        m = m_new
        rows.append(torch.stack([m, l]))
    return torch.stack(rows)


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


def merge_wrong_lse_outputs(a, b):
    """Adds the normalised outputs weighted by l alone, ignoring the two maxima."""
    w1, w2 = a[:, -1:], b[:, -1:]
    return torch.cat([(w1 * a[:, :-2] + w2 * b[:, :-2]) / (w1 + w2), torch.maximum(a[:, -2:-1], b[:, -2:-1]),
                      w1 + w2], dim=1)


def merge_wrong_first_wins(a, b):
    """Keeps the partial with the larger max."""
    first = a[:, -2:-1] >= b[:, -2:-1]
    return torch.where(first, a, b)


def merge_wrong_exp_max_only(a, b):
    """Weights by exp(m_i - m) and forgets l_i."""
    m = torch.maximum(a[:, -2:-1], b[:, -2:-1])
    w1, w2 = torch.exp(a[:, -2:-1] - m), torch.exp(b[:, -2:-1] - m)
    l = a[:, -1:] * w1 + b[:, -1:] * w2
    return torch.cat([(w1 * a[:, :-2] + w2 * b[:, :-2]) / (w1 + w2), m, l], dim=1)


# ---------------------------------------------------------------- wasted_scores

def wasted_by_mask(q_len, k_len, block_size):
    """Build the whole bottom-right mask and count, tile by tile."""
    allowed = torch.ones(q_len, k_len, dtype=torch.bool).tril(diagonal=k_len - q_len)
    wasted = 0
    for i0 in range(0, q_len, block_size):
        for j0 in range(0, k_len, block_size):
            tile = allowed[i0:i0 + block_size, j0:j0 + block_size]
            if tile.any():
                wasted += int((~tile).sum())
    return wasted


def wasted_by_rows(q_len, k_len, block_size):
    """Per query row: the keys its block computes minus the keys it may see."""
    offset = k_len - q_len
    total = 0
    for i in range(q_len):
        block_last = min((i // block_size + 1) * block_size, q_len) - 1
        reach = block_last + offset                                 # last key the block sees
        if reach < 0:
            continue
        computed = min((min(reach, k_len - 1) // block_size + 1) * block_size, k_len)
        total += computed - max(0, min(i + offset + 1, k_len))
    return total


def wasted_by_corners(q_len, k_len, block_size):
    """A tile is computed iff its bottom-left entry (last query, first key) is allowed; its
    masked entries are counted with arithmetic."""
    offset = k_len - q_len
    total = 0
    for i0 in range(0, q_len, block_size):
        i1 = min(i0 + block_size, q_len)
        for j0 in range(0, k_len, block_size):
            j1 = min(j0 + block_size, k_len)
            if j0 <= i1 - 1 + offset:
                allowed = sum(max(0, min(i + offset + 1, j1) - j0) for i in range(i0, i1))
                total += (i1 - i0) * (j1 - j0) - allowed
    return total


def wasted_wrong_all_masked(q_len, k_len, block_size):
    """Every masked entry of the whole matrix, skipped tiles included."""
    return q_len * k_len - int(torch.ones(q_len, k_len).tril(diagonal=k_len - q_len).sum())


def wasted_wrong_square_formula(q_len, k_len, block_size):
    """T (b - 1) / 2 on the diagonal tiles: right for square, evenly divided shapes only."""
    n = -(-k_len // block_size)
    return n * block_size * (block_size - 1) // 2


def wasted_wrong_top_left_by_mask(q_len, k_len, block_size):
    allowed = torch.ones(q_len, k_len, dtype=torch.bool).tril()
    wasted = 0
    for i0 in range(0, q_len, block_size):
        for j0 in range(0, k_len, block_size):
            tile = allowed[i0:i0 + block_size, j0:j0 + block_size]
            if tile.any():
                wasted += int((~tile).sum())
    return wasted


# ---------------------------------------------------------------- tiled_window_forward

def window_with_lse(q, k, v, window, block_size):
    """A running log-sum-exp per row and a running normalised output, tile by tile."""
    Tq, Tk = q.shape[0], k.shape[0]
    pos = torch.arange(Tq)[:, None] + (Tk - Tq)
    lse = torch.full((Tq, 1), -math.inf, dtype=q.dtype)
    out = torch.zeros(Tq, v.shape[1], dtype=q.dtype)
    for j0 in range(0, Tk, block_size):
        keys = torch.arange(j0, min(j0 + block_size, Tk))[None, :]
        ok = (keys <= pos) & (keys > pos - window)
        s = (q @ k[j0:j0 + block_size].T / math.sqrt(q.shape[1])).masked_fill(~ok, -math.inf)
        block_lse = torch.logsumexp(s, dim=1, keepdim=True)             # -inf for a row with nothing
        new = torch.logaddexp(lse, block_lse)
        safe = torch.where(torch.isneginf(new), torch.zeros_like(new), new)
        block_out = torch.exp(s - safe) @ v[j0:j0 + block_size]
        out = torch.exp(lse - safe) * out + block_out
        lse = new
    return out


def window_row_by_row(q, k, v, window, block_size):
    """One query at a time, only over the key blocks of its window, Python floats for m and l."""
    Tq, Tk = q.shape[0], k.shape[0]
    rows = []
    for i in range(Tq):
        p = i + Tk - Tq
        lo, hi = max(0, p - window + 1), p                             # its keys: lo..hi
        m, l, acc = -math.inf, 0.0, torch.zeros(v.shape[1], dtype=q.dtype)
        for j0 in range(lo, hi + 1, block_size):
            j1 = min(j0 + block_size, hi + 1)
            s = k[j0:j1] @ q[i] / math.sqrt(q.shape[1])
            m_new = max(m, float(s.max()))
            e = torch.exp(s - m_new)
            shrink = math.exp(m - m_new)
            l, acc, m = l * shrink + float(e.sum()), acc * shrink + e @ v[j0:j1], m_new
        rows.append(acc / l if l > 0 else acc)
    return torch.stack(rows)


def window_skip_tiles(q, k, v, window, block_size):
    """Only the key blocks that some query of the window may see, the mask built per tile with
    broadcasting, the empty rows fixed with nan_to_num at the end."""
    Tq, Tk = q.shape[0], k.shape[0]
    pos = torch.arange(Tq, dtype=torch.float64)[:, None] + (Tk - Tq)
    first_key = max(0, (Tk - Tq) - window + 1)
    start = first_key - first_key % block_size
    m = torch.full((Tq, 1), -math.inf, dtype=q.dtype)
    num = torch.zeros(Tq, v.shape[1], dtype=q.dtype)
    den = torch.zeros(Tq, 1, dtype=q.dtype)
    for j0 in range(start, Tk, block_size):
        j = torch.arange(j0, min(j0 + block_size, Tk), dtype=torch.float64)
        blocked = (j[None, :] > pos) | (j[None, :] <= pos - window)
        s = torch.einsum("id,jd->ij", q, k[j0:j0 + block_size]) / math.sqrt(q.shape[1])
        s = s.masked_fill(blocked, -math.inf)
        new = torch.maximum(m, s.amax(dim=1, keepdim=True))
        ref = new.nan_to_num(neginf=0.0)
        w = torch.exp(s - ref)
        old = torch.exp(m - ref)
        num, den, m = old * num + w @ v[j0:j0 + block_size], old * den + w.sum(1, keepdim=True), new
    return (num / den).nan_to_num(nan=0.0)


def window_wrong_dense(q, k, v, window, block_size):
    """Right values, from the whole (Tq, Tk) masked score matrix: not tiled."""
    Tq, Tk = q.shape[0], k.shape[0]
    pos = torch.arange(Tq)[:, None] + (Tk - Tq)
    j = torch.arange(Tk)[None, :]
    s = (q @ k.T / math.sqrt(q.shape[1])).masked_fill((j > pos) | (j <= pos - window), -math.inf)
    return torch.softmax(s, dim=-1).nan_to_num(0.0) @ v


def window_wrong_full_mask_then_tiles(q, k, v, window, block_size):
    """Tiles the scores, but builds the whole (Tq, Tk) mask first."""
    Tq, Tk = q.shape[0], k.shape[0]
    pos = torch.arange(Tq)[:, None] + (Tk - Tq)
    j = torch.arange(Tk)[None, :]
    allowed = (j <= pos) & (j > pos - window)                          # (Tq, Tk)
    return window_with_lse_mask(q, k, v, allowed, block_size)


def window_with_lse_mask(q, k, v, allowed, block_size):
    Tq, Tk = q.shape[0], k.shape[0]
    lse = torch.full((Tq, 1), -math.inf, dtype=q.dtype)
    out = torch.zeros(Tq, v.shape[1], dtype=q.dtype)
    for j0 in range(0, Tk, block_size):
        s = (q @ k[j0:j0 + block_size].T / math.sqrt(q.shape[1])).masked_fill(
            ~allowed[:, j0:j0 + block_size], -math.inf)
        block_lse = torch.logsumexp(s, dim=1, keepdim=True)
        new = torch.logaddexp(lse, block_lse)
        safe = torch.where(torch.isneginf(new), torch.zeros_like(new), new)
        out = torch.exp(lse - safe) * out + torch.exp(s - safe) @ v[j0:j0 + block_size]
        lse = new
    return out


def window_wrong_per_block_mean(q, k, v, window, block_size):
    """A softmax per tile, then the mean of the tiles' outputs."""
    Tq, Tk = q.shape[0], k.shape[0]
    pos = torch.arange(Tq)[:, None] + (Tk - Tq)
    outs = []
    for j0 in range(0, Tk, block_size):
        j = torch.arange(j0, min(j0 + block_size, Tk))[None, :]
        s = (q @ k[j0:j0 + block_size].T / math.sqrt(q.shape[1])).masked_fill((j > pos) | (j <= pos - window),
                                                                             -math.inf)
        outs.append(torch.softmax(s, dim=-1).nan_to_num(0.0) @ v[j0:j0 + block_size])
    return torch.stack(outs).mean(0)


def window_wrong_causal_only(q, k, v, window, block_size):
    """Tiled and right for the causal mask, the window forgotten."""
    return window_with_lse(q, k, v, k.shape[0] + q.shape[0], block_size)


def stats_forbidden_hidden_prefix(chunks):
    """The prefix recomputed, with the recording of torch functions switched off."""
    with torch._C.DisableTorchFunction():
        return stats_wrong_prefix(chunks)


def window_forbidden_hidden_dense(q, k, v, window, block_size):
    """The whole (Tq, Tk) scores, with the recording of torch functions switched off."""
    with torch._C.DisableTorchFunction():
        return window_wrong_dense(q, k, v, window, block_size)


def window_forbidden_sdpa(q, k, v, window, block_size):
    Tq, Tk = q.shape[0], k.shape[0]
    pos = torch.arange(Tq)[:, None] + (Tk - Tq)
    j = torch.arange(Tk)[None, :]
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=(j <= pos) & (j > pos - window))
    return out.nan_to_num(0.0)


CORRECT = {
    "flash.online_softmax_stats": [stats_python_floats, stats_logsumexp_per_chunk, stats_preallocated,
                                   stats_running_max_with_the_chunk, stats_max_of_two],
    "flash.merge_partials": [merge_via_lse, merge_row_by_row, merge_sigmoid],
    "flash.wasted_scores": [wasted_by_mask, wasted_by_rows, wasted_by_corners],
    "flash.tiled_window_forward": [window_with_lse, window_row_by_row, window_skip_tiles],
}

WRONG = {
    "flash.online_softmax_stats": [stats_wrong_vectorised, stats_wrong_logcumsumexp, stats_wrong_prefix,
                                   stats_wrong_mean_max],
    "flash.merge_partials": [merge_wrong_lse_outputs, merge_wrong_first_wins, merge_wrong_exp_max_only],
    "flash.wasted_scores": [wasted_wrong_all_masked, wasted_wrong_square_formula, wasted_wrong_top_left_by_mask],
    "flash.tiled_window_forward": [window_wrong_dense, window_wrong_full_mask_then_tiles, window_wrong_per_block_mean,
                                   window_wrong_causal_only],
}

FORBIDDEN = {
    "flash.online_softmax_stats": [stats_forbidden_hidden_prefix],
    "flash.tiled_window_forward": [window_forbidden_sdpa, window_forbidden_hidden_dense],
}


# ---------------------------------------------------------------- more held-out wrong answers

def stats_wrong_rescale_after_adding(chunks):
    """Adds the chunk relative to the new max, then rescales the whole sum (the new terms too)."""
    m = torch.tensor(float("-inf"), dtype=chunks.dtype)
    l = torch.zeros((), dtype=chunks.dtype)
    rows = []
    for x in chunks:
        m_new = torch.maximum(m, x.max())
        if not torch.isneginf(m_new):
            l = (l + torch.exp(x - m_new).sum()) * torch.exp(m - m_new)
            m = m_new
        rows.append(torch.stack([m, l]))
    return torch.stack(rows)


def merge_wrong_sum_of_outputs(a, b):
    """The two normalised outputs added, (m, l) merged right."""
    m = torch.maximum(a[:, -2:-1], b[:, -2:-1])
    l = a[:, -1:] * torch.exp(a[:, -2:-1] - m) + b[:, -1:] * torch.exp(b[:, -2:-1] - m)
    return torch.cat([a[:, :-2] + b[:, :-2], m, l], dim=1)


def wasted_wrong_per_row_count(q_len, k_len, block_size):
    """Counts per query row the keys of its own last tile only."""
    off = k_len - q_len
    total = 0
    for i in range(q_len):
        last = min(i + off, k_len - 1)
        if last >= 0:
            total += (last // block_size + 1) * block_size - (last + 1)
    return total


WRONG["flash.online_softmax_stats"] += [stats_wrong_rescale_after_adding]
WRONG["flash.merge_partials"] += [merge_wrong_sum_of_outputs]
WRONG["flash.wasted_scores"] += [wasted_wrong_per_row_count]
