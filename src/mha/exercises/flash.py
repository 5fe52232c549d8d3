"""Exercises of lesson 10, FlashAttention: the online softmax's running statistics, merging
two partial results, counting the tiles of causal attention, and the tiled forward."""

from __future__ import annotations

import math

import torch

from ._core import Case, Exercise, Mistake
from .heads import _int, _randn

NEG_INF = float("-inf")


# ---------------------------------------------------------------- 1. online softmax statistics

def online_softmax_stats(chunks: torch.Tensor) -> torch.Tensor:
    """chunks (n, c): one score row, seen c scores at a time. Row t of the (n, 2) result is
    (m, l) after chunks 0..t: m the running max, l the sum of exp(score - m) so far. While
    only -inf has been seen, m = -inf and l = 0."""
    m = torch.tensor(NEG_INF, dtype=chunks.dtype)
    l = torch.zeros((), dtype=chunks.dtype)
    trace = []
    for x in chunks:
        m_new = torch.maximum(m, x.max())
        if not torch.isneginf(m_new):                   # nothing to add while all is -inf
            l = l * torch.exp(m - m_new) + torch.exp(x - m_new).sum()
            m = m_new
        trace.append(torch.stack([m, l]))
    return torch.stack(trace)                           # (n, 2)


def _stats_no_rescale(chunks):
    m, l, trace = torch.tensor(NEG_INF, dtype=chunks.dtype), torch.zeros((), dtype=chunks.dtype), []
    for x in chunks:
        m_new = torch.maximum(m, x.max())
        if not torch.isneginf(m_new):
            l = l + torch.exp(x - m_new).sum()
            m = m_new
        trace.append(torch.stack([m, l]))
    return torch.stack(trace)


def _stats_rescale_upwards(chunks):
    m, l, trace = torch.tensor(NEG_INF, dtype=chunks.dtype), torch.zeros((), dtype=chunks.dtype), []
    for x in chunks:
        m_new = torch.maximum(m, x.max())
        if not torch.isneginf(m_new):
            up = torch.exp(m_new - m) if torch.isfinite(m) else torch.zeros((), dtype=chunks.dtype)
            l = l * up + torch.exp(x - m_new).sum()
            m = m_new
        trace.append(torch.stack([m, l]))
    return torch.stack(trace)


def _stats_unguarded(chunks):
    m, l, trace = torch.tensor(NEG_INF, dtype=chunks.dtype), torch.zeros((), dtype=chunks.dtype), []
    for x in chunks:
        m_new = torch.maximum(m, x.max())
        l = l * torch.exp(m - m_new) + torch.exp(x - m_new).sum()
        m = m_new
        trace.append(torch.stack([m, l]))
    return torch.stack(trace)


def _ramp(g, n, c, dtype=torch.float32):
    """Chunks whose max grows from one chunk to the next: the rescaling matters."""
    return (_randn(g, n, c, dtype=torch.float64) + 2.0 * torch.arange(n, dtype=torch.float64)[:, None]).to(dtype)


def _masked_start(g, n, c, dtype=torch.float32):
    """A row whose first chunk is all -inf (masked keys), then growing scores."""
    x = _ramp(g, n, c, dtype)
    x[0] = NEG_INF
    return x


def _stats_public(g):
    return [Case((torch.tensor([[0.0, 1.0], [3.0, 2.0], [-1.0, 0.5]]),), note="the max grows in chunk 1"),
            Case((_randn(g, 4, 3, scale=3.0),), note="random scores"),
            Case((_masked_start(g, 3, 2, torch.float64),), note="the first chunk is all -inf (masked)")]


def _stats_hidden(g):
    return [Case((_ramp(g, _int(g, 3, 6), _int(g, 2, 5)),)),
            Case((_masked_start(g, _int(g, 3, 5), _int(g, 1, 4), torch.float64),)),
            Case((_randn(g, _int(g, 2, 6), _int(g, 1, 6), scale=4.0),))]


ONLINE_STATS = Exercise(
    id="flash.online_softmax_stats", title="The running max and sum", lesson="10-flash-attention",
    function="online_softmax_stats", params=("chunks",), points=4,
    reference=online_softmax_stats, public=_stats_public, hidden=_stats_hidden, public_seed=1001,
    mistakes=(
        Mistake("when the max grows from m to m_new, the sum so far was computed relative to the "
                "old max: multiply it by exp(m - m_new) before adding the new chunk", _stats_no_rescale),
        Mistake("rescale the old sum by exp(m_old - m_new), which is <= 1: the old terms shrink "
                "when the max grows, they do not grow", _stats_rescale_upwards),
        Mistake("while every score seen is -inf, m stays -inf and exp(m - m_new) is "
                "exp(-inf - (-inf)) = NaN: skip the update (l stays 0) until a finite score arrives",
                _stats_unguarded),
    ),
    forbidden=("mha",),
)


# ---------------------------------------------------------------- 2. merging two partial results

def merge_partials(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a, b (Tq, d_v + 2): attention of the same queries over two disjoint sets of keys, each
    row [o (d_v values, normalised), m (max score), l (sum of exp(score - m))]. Returns the
    same layout for the union of the key sets."""
    o1, m1, l1 = a[:, :-2], a[:, -2:-1], a[:, -1:]      # (Tq, d_v), (Tq, 1), (Tq, 1)
    o2, m2, l2 = b[:, :-2], b[:, -2:-1], b[:, -1:]
    m = torch.maximum(m1, m2)
    w1 = l1 * torch.exp(m1 - m)                        # each sum, relative to the common max
    w2 = l2 * torch.exp(m2 - m)
    l = w1 + w2
    return torch.cat([(w1 * o1 + w2 * o2) / l, m, l], dim=-1)


def _split(t):
    return t[:, :-2], t[:, -2:-1], t[:, -1:]


def _merge_no_max(a, b):
    (o1, m1, l1), (o2, m2, l2) = _split(a), _split(b)
    return torch.cat([(l1 * o1 + l2 * o2) / (l1 + l2), torch.maximum(m1, m2), l1 + l2], dim=-1)


def _merge_average(a, b):
    right = merge_partials(a, b)
    return torch.cat([(a[:, :-2] + b[:, :-2]) / 2, right[:, -2:]], dim=-1)


def _merge_unnormalised(a, b):
    right = merge_partials(a, b)
    return torch.cat([right[:, :-2] * right[:, -1:], right[:, -2:]], dim=-1)


def _merge_plain_sum(a, b):
    right = merge_partials(a, b)
    return torch.cat([right[:, :-1], a[:, -1:] + b[:, -1:]], dim=-1)


def _partial(q, k, v):
    """[o, m, l] of softmax(q k^T / sqrt(d)) v over these keys: (Tq, d_v + 2), float64."""
    s = q @ k.T / math.sqrt(q.shape[-1])               # (Tq, Tk_i)
    m = s.amax(dim=-1, keepdim=True)
    p = torch.exp(s - m)
    l = p.sum(dim=-1, keepdim=True)
    return torch.cat([p @ v / l, m, l], dim=-1)


def _merge_case(g, tq, tk, d, dv, dtype=torch.float32, empty_row=None):
    """Two partials over a random split of tk keys; row ``empty_row`` of the first saw no key."""
    q, k, v = _randn(g, tq, d, dtype=torch.float64), _randn(g, tk, d, dtype=torch.float64), \
        _randn(g, tk, dv, dtype=torch.float64)
    k = k * 2.0                                          # distinct maxima in the two halves
    order = torch.randperm(tk, generator=g)
    cut = _int(g, 1, tk - 1)
    a, b = _partial(q, k[order[:cut]], v[order[:cut]]), _partial(q, k[order[cut:]], v[order[cut:]])
    if empty_row is not None:                            # all its keys were masked
        a[empty_row] = 0.0
        a[empty_row, -2] = NEG_INF
    return Case((a.to(dtype), b.to(dtype)))


def _merge_public(g):
    return [_merge_case(g, 1, 4, 3, 2), _merge_case(g, 3, 7, 4, 3, torch.float64),
            _merge_case(g, 4, 6, 4, 2, empty_row=1)]


def _merge_hidden(g):
    return [_merge_case(g, _int(g, 2, 5), _int(g, 4, 9), _int(g, 2, 6), _int(g, 1, 4)),
            _merge_case(g, _int(g, 2, 5), _int(g, 3, 9), _int(g, 2, 6), _int(g, 1, 4), torch.float64),
            _merge_case(g, 3, _int(g, 3, 8), _int(g, 2, 6), _int(g, 1, 4), empty_row=_int(g, 0, 2))]


def _merge_note(case, outcome):
    if outcome.status == "value" and outcome.value.kind == "tensor":
        import numpy as np
        if np.isnan(outcome.value.data.astype(np.float64)).any():
            return ("a partial that saw only masked keys has m = -inf and l = 0; its weight "
                    "l * exp(m - m_max) is 0, so it must add nothing (avoid 0 * inf and -inf - (-inf))")
    return None


MERGE = Exercise(
    id="flash.merge_partials", title="Merging two partial results", lesson="10-flash-attention",
    function="merge_partials", params=("a", "b"), points=5,
    reference=merge_partials, public=_merge_public, hidden=_merge_hidden, public_seed=1002,
    mistakes=(
        Mistake("l1 and l2 are sums relative to different maxima: bring both to m = max(m1, m2) "
                "with the factors exp(m1 - m) and exp(m2 - m) before comparing or adding them",
                _merge_no_max),
        Mistake("the two outputs do not count equally: weight each by its share of the merged sum, "
                "l_i exp(m_i - m) / l", _merge_average),
        Mistake("each o_i is normalised; the weighted sum of the two must be divided by the merged "
                "l to be normalised again", _merge_unnormalised),
        Mistake("the merged sum is l = l1 exp(m1 - m) + l2 exp(m2 - m), relative to the merged "
                "max, not l1 + l2", _merge_plain_sum),
    ),
    forbidden=("mha",), explain=_merge_note,
)


# ---------------------------------------------------------------- 3. tiles of causal attention

def causal_tiles(q_len: int, k_len: int, block_size: int) -> int:
    """Tiles (query block, key block) that causal tiled attention visits, bottom-right aligned
    (query i sees keys j <= i + k_len - q_len): a tile is skipped when no query of its block
    may see any of its keys. Blocks hold block_size rows, the last one possibly fewer."""
    offset = k_len - q_len
    visited = 0
    for i0 in range(0, q_len, block_size):
        last_key = min(i0 + block_size, q_len) - 1 + offset    # the block's last query sees up to here
        if last_key >= 0:
            visited += min(last_key, k_len - 1) // block_size + 1
    return visited


def _top_left(tq, tk, b):
    visited = 0
    for i0 in range(0, tq, b):
        last_key = min(i0 + b, tq) - 1                   # offset 0: query i sees j <= i
        visited += min(last_key, tk - 1) // b + 1
    return visited


def _tiles_all(tq, tk, b):
    return -(-tq // b) * -(-tk // b)


def _tiles_floor(tq, tk, b):
    return causal_tiles(tq - tq % b, tk - tk % b, b) if tq >= b and tk >= b else 0   # drops partial blocks


def _tiles_square(tq, tk, b):
    n = -(-tk // b)
    return n * (n + 1) // 2


def _tiles_first_query(tq, tk, b):
    visited = 0
    for i0 in range(0, tq, b):
        last_key = i0 + tk - tq                          # what the block's FIRST query sees
        if last_key >= 0:
            visited += min(last_key, tk - 1) // b + 1
    return visited


def _tiles_public(g):
    return [Case((8, 8, 2)), Case((5, 13, 4)), Case((10, 4, 3)),
            Case((6, 13, 4), note="the diagonal cuts through the tiles")]


def _tiles_hidden(g):
    b = _int(g, 2, 5)
    n = _int(g, 2, 5)
    tq = _int(g, 1, 3) * b + _int(g, 1, b - 1)
    return [Case((n * b + _int(g, 1, b - 1), n * b + _int(g, 1, b - 1), b)),        # partial last blocks
            Case((b, _int(g, 3, 6) * b + _int(g, 0, b - 1), b)),                     # one query block
            Case((_int(g, 3, 6) * b, _int(g, 1, 2) * b, b)),                       # more queries
            Case((tq, tq + _int(g, 1, 3) * b + _int(g, 1, b - 1), b))]              # diagonal inside tiles


TILES = Exercise(
    id="flash.causal_tiles", title="How many tiles causal attention visits", lesson="10-flash-attention",
    function="causal_tiles", params=("q_len", "k_len", "block_size"), points=4, answer="int",
    reference=causal_tiles, public=_tiles_public, hidden=_tiles_hidden, public_seed=1003,
    mistakes=(
        Mistake("align the mask bottom-right: the queries are the last q_len positions, so query i "
                "sees keys up to i + k_len - q_len, not up to i", _top_left),
        Mistake("skip the tiles that no query of the block may see: they are entirely masked",
                _tiles_all),
        Mistake("a last, shorter block still counts: there are ceil(T / block_size) blocks, not "
                "T // block_size", _tiles_floor),
        Mistake("n (n + 1) / 2 holds for a square score matrix only; with q_len != k_len, count "
                "the key blocks each query block may see", _tiles_square),
        Mistake("a tile is visited when ANY of its entries is allowed: count up to the key that the "
                "block's last query may see (it sees the most), not its first query", _tiles_first_query),
    ),
    forbidden=("mha",), dtypes=(),
)


# ---------------------------------------------------------------- 4. the tiled forward

def tiled_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v for q (Tq, d), k (Tk, d), v (Tk, d_v), visiting the keys in
    blocks of block_size with a running max m, sum l and unnormalised output acc per query."""
    q = q / math.sqrt(q.shape[-1])
    m = torch.full((q.shape[0], 1), NEG_INF, dtype=q.dtype)          # (Tq, 1)
    l = torch.zeros(q.shape[0], 1, dtype=q.dtype)                    # (Tq, 1)
    acc = torch.zeros(q.shape[0], v.shape[-1], dtype=q.dtype)        # (Tq, d_v)
    for j0 in range(0, k.shape[0], block_size):
        s = q @ k[j0:j0 + block_size].T                              # (Tq, bk)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        p = torch.exp(s - m_new)
        rescale = torch.exp(m - m_new)
        l = l * rescale + p.sum(dim=-1, keepdim=True)
        acc = acc * rescale + p @ v[j0:j0 + block_size]
        m = m_new
    return acc / l


def _forward_no_rescale(q, k, v, block_size):
    q = q / math.sqrt(q.shape[-1])
    m = torch.full((q.shape[0], 1), NEG_INF, dtype=q.dtype)
    l, acc = torch.zeros(q.shape[0], 1, dtype=q.dtype), torch.zeros(q.shape[0], v.shape[-1], dtype=q.dtype)
    for j0 in range(0, k.shape[0], block_size):
        s = q @ k[j0:j0 + block_size].T
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        p = torch.exp(s - m_new)
        l = l * torch.exp(m - m_new) + p.sum(dim=-1, keepdim=True)
        acc = acc + p @ v[j0:j0 + block_size]                          # the old acc not rescaled
        m = m_new
    return acc / l


def _forward_per_block(q, k, v, block_size):
    outs = [torch.softmax(q @ k[j:j + block_size].T / math.sqrt(q.shape[-1]), dim=-1) @ v[j:j + block_size]
            for j in range(0, k.shape[0], block_size)]
    return torch.stack(outs).mean(dim=0)


def _forward_unscaled(q, k, v, block_size):
    return tiled_forward(q * math.sqrt(q.shape[-1]), k, v, block_size)


def _forward_no_max(q, k, v, block_size):
    s = 1.0 / math.sqrt(q.shape[-1])
    l, acc = torch.zeros(q.shape[0], 1, dtype=q.dtype), torch.zeros(q.shape[0], v.shape[-1], dtype=q.dtype)
    for j0 in range(0, k.shape[0], block_size):
        p = torch.exp(q @ k[j0:j0 + block_size].T * s)                   # overflows for large scores
        l = l + p.sum(dim=-1, keepdim=True)
        acc = acc + p @ v[j0:j0 + block_size]
    return acc / l


def _forward_max_from_zero(q, k, v, block_size):
    s = 1.0 / math.sqrt(q.shape[-1])
    m = torch.zeros(q.shape[0], 1, dtype=q.dtype)                       # should start at -inf
    l, acc = torch.zeros(q.shape[0], 1, dtype=q.dtype), torch.zeros(q.shape[0], v.shape[-1], dtype=q.dtype)
    for j0 in range(0, k.shape[0], block_size):
        scores = q @ k[j0:j0 + block_size].T * s
        m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
        p, rescale = torch.exp(scores - m_new), torch.exp(m - m_new)
        l = l * rescale + p.sum(dim=-1, keepdim=True)
        acc = acc * rescale + p @ v[j0:j0 + block_size]
        m = m_new
    return acc / l


def _extreme_scores(g, tq, tk, dv, dtype=torch.float32, note=""):
    """Scores in the thousands, d = 4. Keys point along one unit vector u with distinct lengths
    (20 to 40); query 0 is 100 u (every score of its row above 1000: exp overflows even in
    float64 without the max) and query 1 is -100 u (every score below -1000: exp underflows
    to 0 unless the max starts at -inf). The gaps between scores make both rows one-hot, so
    rounding does not matter. The other queries are ordinary."""
    d = 4
    u = _randn(g, d, dtype=torch.float64)
    u = u / u.norm()
    lengths = torch.linspace(20.0, 40.0, tk, dtype=torch.float64)[torch.randperm(tk, generator=g)]
    k = lengths[:, None] * u + 0.1 * _randn(g, tk, d, dtype=torch.float64)
    q = _randn(g, tq, d, dtype=torch.float64)
    q[0], q[1] = 100.0 * u, -100.0 * u
    return Case((q.to(dtype), k.to(dtype), _randn(g, tk, dv, dtype=dtype), _int(g, 2, 4)), note=note)


def _growing_keys(g, tq, tk, d, dv, dtype=torch.float32):
    """Positive queries and keys whose size grows with position: every row's max grows."""
    q = _randn(g, tq, d, dtype=torch.float64).abs() + 0.5
    k = (_randn(g, tk, d, dtype=torch.float64).abs() + 0.5) * torch.linspace(0.2, 2.0, tk, dtype=torch.float64)[:, None]
    return Case((q.to(dtype), k.to(dtype), _randn(g, tk, dv, dtype=dtype), _int(g, 2, 3)))


def _forward_public(g):
    return [Case((_randn(g, 3, 4), _randn(g, 5, 4), _randn(g, 5, 2), 2), note="Tk = 5, blocks of 2"),
            Case((_randn(g, 4, 8, dtype=torch.float64), _randn(g, 6, 8, dtype=torch.float64),
                  _randn(g, 6, 3, dtype=torch.float64), 1), note="blocks of one key"),
            Case((_randn(g, 2, 4), _randn(g, 3, 4), _randn(g, 3, 4), 8), note="one block larger than Tk"),
            _extreme_scores(g, 3, 6, 2, note="query 0: scores above 1000; query 1: below -1000")]


def _forward_hidden(g):
    d = _int(g, 2, 8)
    return [_growing_keys(g, _int(g, 2, 5), _int(g, 7, 12), _int(g, 2, 6), _int(g, 1, 4)),
            Case((_randn(g, _int(g, 1, 6), d, dtype=torch.float64, scale=2.0),
                  _randn(g, 9, d, dtype=torch.float64, scale=2.0), _randn(g, 9, _int(g, 1, 5), dtype=torch.float64),
                  _int(g, 2, 4))),
            Case((_randn(g, _int(g, 2, 6), 4), _randn(g, 5, 4), _randn(g, 5, 3), _int(g, 6, 9))),
            _extreme_scores(g, _int(g, 2, 5), _int(g, 5, 10), _int(g, 1, 4), torch.float64)]


TILED = Exercise(
    id="flash.tiled_forward", title="The tiled forward", lesson="10-flash-attention",
    function="tiled_forward", params=("q", "k", "v", "block_size"), points=6,
    reference=tiled_forward, public=_forward_public, hidden=_forward_hidden, public_seed=1004,
    mistakes=(
        Mistake("when the max grows, the output accumulated so far must shrink like the sum: "
                "multiply acc by exp(m - m_new) too", _forward_no_rescale),
        Mistake("a softmax per block followed by an average weights every block equally; blocks "
                "must be weighted by their share of the whole row's sum (keep running m, l, acc)",
                _forward_per_block),
        Mistake("scale the scores by 1 / sqrt(d) before the exponentials", _forward_unscaled),
        Mistake("exp of a score in the thousands overflows to inf (inf / inf = NaN): subtract the "
                "running max, so that every exponent is <= 0", _forward_no_max),
        Mistake("start the running max at -inf, not 0: when every score of a row is very negative, "
                "exp(score - 0) underflows to 0 and the row ends as 0 / 0", _forward_max_from_zero),
    ),
    forbidden=("mha", "scaled_dot_product_attention"),
)

EXERCISES = (ONLINE_STATS, MERGE, TILES, TILED)
