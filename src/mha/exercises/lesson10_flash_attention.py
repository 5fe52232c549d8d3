"""Exercises of lesson 10, FlashAttention: the online softmax's running statistics (one chunk
at a time, which the checks watch), merging two partial results, the scores causal tiling
computes for nothing, and a tiled forward with a sliding window that never builds the
(Tq, Tk) scores."""

from __future__ import annotations

import math

import torch

from mha.autograde import Case, Exercise, Mistake
from mha.autograde.draw import other_than, randint, randn, returned_nan


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
    return (randn(g, n, c, dtype=torch.float64) + 2.0 * torch.arange(n, dtype=torch.float64)[:, None]).to(dtype)


def _masked_start(g, n, c, dtype=torch.float32):
    """A row whose first chunk is all -inf (masked keys), then growing scores."""
    x = _ramp(g, n, c, dtype)
    x[0] = NEG_INF
    return x


def _stats_public(g):
    return [Case((torch.tensor([[0.0, 1.0], [3.0, 2.0], [-1.0, 0.5]]),), note="the max grows in chunk 1"),
            Case((randn(g, 4, 3, scale=3.0),), note="random scores"),
            Case((_masked_start(g, 3, 2, torch.float64),), note="the first chunk is all -inf (masked)")]


def _stats_hidden(g):
    return [Case((_ramp(g, randint(g, 3, 6), randint(g, 2, 5)),)),
            Case((_masked_start(g, randint(g, 3, 5), randint(g, 1, 4), torch.float64),)),
            Case((randn(g, randint(g, 2, 6), randint(g, 1, 6), scale=4.0),))]


def _numel(shape) -> int:
    return math.prod(shape)


# Operations that read part of a tensor, copy it, or only take its dtype and size: whatever
# the size of their input, they compute nothing over several chunks.
_NOT_A_REDUCTION = ("__getitem__", "__get__", "__iter__", "index", "gather", "take", "narrow", "select", "slice",
                    "unbind", "split", "tensor_split", "chunk", "diagonal", "masked_select", "clone", "copy", "to",
                    "type", "double", "float", "half", "contiguous", "detach", "view", "reshape", "flatten",
                    "unflatten", "squeeze", "unsqueeze", "permute", "transpose", "expand", "new_", "empty", "zeros",
                    "ones", "full", "_like", "dim", "size", "numel", "item", "tolist", "numpy", "__len__")


def _stats_audit(case, ops):
    """Go through the chunks in order: no operation may reduce (or scan) the scores of more
    than one chunk at once, the way a max over all the chunks seen so far, or over the whole
    input, does. One chunk together with the running (m, l) is one chunk's worth: an answer may
    take the max of the running max and the chunk's scores in one call (c + 2 values at most)."""
    (chunks,) = case.args
    c = chunks.shape[-1]
    for op in ops:
        name = op.name
        if op.view or any(name.startswith(n) or name.endswith(n) for n in _NOT_A_REDUCTION):
            continue
        biggest = max((_numel(s) for s in op.inputs), default=0)
        if biggest > c + 2 and (name.startswith(("cum", "logcum")) or any(_numel(o) < biggest for o in op.outputs)):
            return (f"{name} reduced the scores of more than one chunk at once: keep only the running "
                    "(m, l) and look at one chunk at a time, in order")
    return None


ONLINE_STATS = Exercise(
    id="flash.online_softmax_stats", title="The running max and sum", lesson="10-flash-attention",
    function="online_softmax_stats", params=("chunks",), points=4, audit=_stats_audit,
    reference=online_softmax_stats, public=_stats_public, hidden=_stats_hidden, public_seed=1001,
    section="The online softmax",
    mistakes=(
        Mistake("when the max grows from m to m_new, the sum so far was computed relative to the "
                "old max: multiply it by exp(m - m_new) before adding the new chunk", _stats_no_rescale,
                name="no-rescale"),
        Mistake("rescale the old sum by exp(m_old - m_new), which is <= 1: the old terms shrink "
                "when the max grows, they do not grow", _stats_rescale_upwards, name="rescale-upwards"),
        Mistake("while every score seen is -inf, m stays -inf and exp(m - m_new) is "
                "exp(-inf - (-inf)) = NaN: skip the update (l stays 0) until a finite score arrives",
                _stats_unguarded, name="no-guard-for-minus-inf"),
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


def _merge_min(a, b):
    """Everything relative to the smaller maximum: a consistent pair (m, l), but not the max."""
    (o1, m1, l1), (o2, m2, l2) = _split(a), _split(b)
    m = torch.minimum(m1, m2)
    w1, w2 = l1 * torch.exp(m1 - m), l2 * torch.exp(m2 - m)
    return torch.cat([(w1 * o1 + w2 * o2) / (w1 + w2), m, w1 + w2], dim=-1)


def _merge_min_reported(a, b):
    right = merge_partials(a, b)
    return torch.cat([right[:, :-2], torch.minimum(a[:, -2:-1], b[:, -2:-1]), right[:, -1:]], dim=-1)


def _merge_larger_wins(a, b):
    return torch.where(a[:, -2:-1] >= b[:, -2:-1], a, b)


def _merge_without_l(a, b):
    (o1, m1, l1), (o2, m2, l2) = _split(a), _split(b)
    m = torch.maximum(m1, m2)
    w1, w2 = torch.exp(m1 - m), torch.exp(m2 - m)
    return torch.cat([(w1 * o1 + w2 * o2) / (w1 + w2), m, l1 * w1 + l2 * w2], dim=-1)


def _partial(q, k, v):
    """[o, m, l] of softmax(q k^T / sqrt(d)) v over these keys: (Tq, d_v + 2), float64."""
    s = q @ k.T / math.sqrt(q.shape[-1])               # (Tq, Tk_i)
    m = s.amax(dim=-1, keepdim=True)
    p = torch.exp(s - m)
    l = p.sum(dim=-1, keepdim=True)
    return torch.cat([p @ v / l, m, l], dim=-1)


def _merge_case(g, tq, tk, d, dv, dtype=torch.float32, empty_row=None):
    """Two partials over a random split of tk keys; row ``empty_row`` of the first saw no key."""
    q, k, v = randn(g, tq, d, dtype=torch.float64), randn(g, tk, d, dtype=torch.float64), \
        randn(g, tk, dv, dtype=torch.float64)
    k = k * 2.0                                          # distinct maxima in the two halves
    order = torch.randperm(tk, generator=g)
    cut = randint(g, 1, tk - 1)
    a, b = _partial(q, k[order[:cut]], v[order[:cut]]), _partial(q, k[order[cut:]], v[order[cut:]])
    if empty_row is not None:                            # all its keys were masked
        a[empty_row] = 0.0
        a[empty_row, -2] = NEG_INF
    return Case((a.to(dtype), b.to(dtype)))


def _merge_public(g):
    return [_merge_case(g, 1, 4, 3, 2), _merge_case(g, 3, 7, 4, 3, torch.float64),
            _merge_case(g, 4, 6, 4, 2, empty_row=1)]


def _merge_hidden(g):
    return [_merge_case(g, randint(g, 2, 5), randint(g, 4, 9), randint(g, 2, 6), randint(g, 1, 4)),
            _merge_case(g, randint(g, 2, 5), randint(g, 3, 9), randint(g, 2, 6), randint(g, 1, 4), torch.float64),
            _merge_case(g, 3, randint(g, 3, 8), randint(g, 2, 6), randint(g, 1, 4), empty_row=randint(g, 0, 2))]


def _merge_note(case, outcome):
    if returned_nan(outcome):
        return ("a partial that saw only masked keys has m = -inf and l = 0; its weight "
                "l * exp(m - m_max) is 0, so it must add nothing (avoid 0 * inf and -inf - (-inf))")
    return None


MERGE = Exercise(
    id="flash.merge_partials", title="Merging two partial results", lesson="10-flash-attention",
    function="merge_partials", params=("a", "b"), points=5,
    reference=merge_partials, public=_merge_public, hidden=_merge_hidden, public_seed=1002,
    section="The online softmax",
    mistakes=(
        Mistake("l1 and l2 are sums relative to different maxima: bring both to m = max(m1, m2) "
                "with the factors exp(m1 - m) and exp(m2 - m) before comparing or adding them",
                _merge_no_max, name="no-common-max"),
        Mistake("the two outputs do not count equally: weight each by its share of the merged sum, "
                "l_i exp(m_i - m) / l", _merge_average, name="plain-average"),
        Mistake("each o_i is normalised; the weighted sum of the two must be divided by the merged "
                "l to be normalised again", _merge_unnormalised, name="unnormalised"),
        Mistake("the merged sum is l = l1 exp(m1 - m) + l2 exp(m2 - m), relative to the merged "
                "max, not l1 + l2", _merge_plain_sum, name="plain-sum-of-l"),
        Mistake("the merged m is the larger of the two maxima, max(m1, m2): relative to the smaller one "
                "every exp(m_i - m) is >= 1 and can overflow", _merge_min, name="relative-to-min"),
        Mistake("the merged m is the larger of the two maxima, max(m1, m2), the one the merged l is relative "
                "to: with min(m1, m2) the pair (m, l) no longer describes the scores", _merge_min_reported,
                name="min-reported"),
        Mistake("the partial with the larger max does not hold all the weight: the other one's keys still "
                "count, each with its share l_i exp(m_i - m) / l", _merge_larger_wins, name="larger-max-wins"),
        Mistake("weigh each output by l_i exp(m_i - m), its sum brought to the common max, not by exp(m_i - m) "
                "alone: l_i says how much weight its keys hold", _merge_without_l, name="weights-without-l"),
    ),
    forbidden=("mha",), explain=_merge_note,
)


# ---------------------------------------------------------------- 3. scores computed and thrown away

def wasted_scores(q_len: int, k_len: int, block_size: int) -> int:
    """Causal tiled attention (bottom-right: query i sees keys j <= i + k_len - q_len) cuts the
    queries and keys into blocks of block_size (the last ones possibly shorter), skips the
    tiles with no allowed entry and computes every score of the others. How many of the
    computed scores does the mask throw away?"""
    offset = k_len - q_len
    computed = 0
    for i0 in range(0, q_len, block_size):
        i1 = min(i0 + block_size, q_len)
        last_key = min(i1 - 1 + offset, k_len - 1)              # the block's last query sees the most
        if last_key >= 0:
            computed += (i1 - i0) * min((last_key // block_size + 1) * block_size, k_len)
    allowed = sum(max(0, min(i + offset + 1, k_len)) for i in range(q_len))
    return computed - allowed


def _ws_general(tq, tk, b, *, offset=None, skip=True, full=False, extra_block=0, subtract=True, first_row=False,
                full_keys=False):
    off = tk - tq if offset is None else offset
    computed = 0
    for i0 in range(0, tq, b):
        i1 = min(i0 + b, tq)
        rows = b if full else i1 - i0
        deciding = i0 if first_row else i1 - 1
        last_key = min(deciding + off, tk - 1) if skip else tk - 1
        if last_key >= 0:
            blocks = last_key // b + 1 + extra_block
            computed += rows * (blocks * b if full or full_keys else min(blocks * b, tk))
    allowed = sum(max(0, min(i + off + 1, tk)) for i in range(tq))
    return computed - allowed if subtract else computed


def _ws_per_row(tq, tk, b):
    """Each query row computing only the key blocks up to its own last key."""
    off = tk - tq
    last = [min(i + off, tk - 1) for i in range(tq)]
    return sum(min((k // b + 1) * b, tk) - (k + 1) for k in last if k >= 0)


def _ws_public(g):
    return [Case((8, 8, 2)), Case((5, 13, 4)), Case((10, 4, 3)),
            Case((9, 14, 4), note="the diagonal cuts through the tiles; the last block of queries is short")]


def _ws_hidden(g):
    # blocks of 3 to 8: with blocks of 2 the counts are a few units, and an unlisted slip gives a
    # listed one's count by chance
    b = randint(g, 3, 8)
    n = randint(g, 2, 5)
    cases = [Case((n * b + randint(g, 1, b - 1), n * b + randint(g, 1, b - 1), b)),       # partial last blocks
             Case((b, randint(g, 3, 6) * b + randint(g, 1, b - 1), b)),                    # one query block
             # more queries than keys, 4 to 6 blocks against 1 or 2 (at 3 against 2, the allowed entries
             # counted top-left give the count of one key block short)
             Case((randint(g, 4, 6) * b, randint(g, 1, 2) * b, b))]
    # Fewer queries than keys, the diagonal inside the tiles; redrawn until the top-left mask
    # counts differently (by chance it can give the same number), and until deciding a block's
    # key blocks from its first query differs from counting one key block short (they agree on
    # every block whose keys cross one block boundary), so that each of these mistakes shows.
    for _ in range(200):
        tq = randint(g, 1, 3) * b + randint(g, 1, b - 1)
        tk = tq + randint(g, 1, 3) * b + randint(g, 1, b - 1)
        first, short = _ws_general(tq, tk, b, first_row=True), _ws_general(tq, tk, b, extra_block=-1)
        if _ws_general(tq, tk, b, offset=0) != wasted_scores(tq, tk, b) and first not in (short, wasted_scores(tq, tk, b)):
            break
    return cases + [Case((tq, tk, b))]


# Tiles counted whole, in both directions or along the keys only (the same count where the last
# block of queries is whole): one hint says both.
_SHORT_BLOCKS = ("the last block of queries and of keys may be shorter than block_size: a tile holds "
                 "(its query rows) x (its key columns) scores")

WASTED = Exercise(
    id="flash.wasted_scores", title="Scores computed for nothing", lesson="10-flash-attention",
    function="wasted_scores", params=("q_len", "k_len", "block_size"), points=4, answer="int",
    reference=wasted_scores, public=_ws_public, hidden=_ws_hidden, public_seed=1005,
    section="The tiles, step by step",
    mistakes=(
        Mistake("skipped tiles are never computed: count the entries of the visited tiles only",
                lambda tq, tk, b: _ws_general(tq, tk, b, skip=False), name="skipped-tiles-counted"),
        Mistake("align the mask bottom-right: the queries are the last q_len positions, so query i "
                "sees keys up to i + k_len - q_len, not up to i", lambda tq, tk, b: _ws_general(tq, tk, b, offset=0),
                name="top-left",
                section="05-causal-masking: Pitfall 4: fewer queries than keys, and where the triangle sits"),
        Mistake("count the key blocks 0 .. last_key // block_size: that is last_key // block_size + 1 "
                "blocks, one more than last_key // block_size",
                lambda tq, tk, b: _ws_general(tq, tk, b, extra_block=-1), name="one-block-short"),
        Mistake(_SHORT_BLOCKS, lambda tq, tk, b: _ws_general(tq, tk, b, full=True), name="full-tiles"),
        Mistake(_SHORT_BLOCKS, lambda tq, tk, b: _ws_general(tq, tk, b, full_keys=True), name="full-width-key-tiles"),
        Mistake("the question is how many computed scores the mask throws away: subtract the allowed "
                "entries from the entries of the visited tiles", lambda tq, tk, b: _ws_general(tq, tk, b, subtract=False),
                name="computed-not-wasted"),
        Mistake("a block of queries needs every key block that its LAST query sees, the one that sees the most: "
                "deciding from its first query skips tiles the later rows need",
                lambda tq, tk, b: _ws_general(tq, tk, b, first_row=True), name="first-query-of-block"),
        Mistake("a tile is computed whole: every row of a block of queries gets the scores of all the key blocks "
                "the block's LAST row needs, not only those its own row sees", _ws_per_row, name="key-blocks-per-row"),
    ),
    forbidden=("mha",), dtypes=(),
)


# ---------------------------------------------------------------- 4. a tiled sliding-window forward

def tiled_window_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int,
                         block_size: int) -> torch.Tensor:
    """Sliding-window causal attention, softmax(q k^T / sqrt(d)) v over the allowed keys, for q
    (Tq, d), k (Tk, d), v (Tk, d_v), one block of block_size keys at a time with a running max
    m, sum l and unnormalised output acc per query. Query i sits at p = i + Tk - Tq and sees
    the keys p - window < j <= p; a query with no key gets zeros."""
    Tq, Tk = q.shape[0], k.shape[0]
    q = q / math.sqrt(q.shape[-1])
    p = torch.arange(Tq)[:, None] + (Tk - Tq)                         # (Tq, 1) query positions
    m = torch.full((Tq, 1), NEG_INF, dtype=q.dtype)                   # (Tq, 1)
    l = torch.zeros(Tq, 1, dtype=q.dtype)
    acc = torch.zeros(Tq, v.shape[-1], dtype=q.dtype)                 # (Tq, d_v)
    for j0 in range(0, Tk, block_size):
        j = torch.arange(j0, min(j0 + block_size, Tk))[None, :]       # (1, bk) key positions
        allowed = (j <= p) & (j > p - window)                         # (Tq, bk)
        if not allowed.any():
            continue                                                  # a tile nobody may see
        s = (q @ k[j0:j0 + block_size].T).masked_fill(~allowed, NEG_INF)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        shift = torch.where(torch.isneginf(m_new), 0.0, m_new)        # rows that saw nothing yet
        e = torch.exp(s - shift)
        rescale = torch.exp(m - shift)
        l = l * rescale + e.sum(dim=-1, keepdim=True)
        acc = acc * rescale + e @ v[j0:j0 + block_size]
        m = m_new
    return torch.where(l > 0, acc / torch.where(l > 0, l, 1.0), 0.0)


def _window_variant(q, k, v, window, block_size, *, lower=None, align=True, rescale_acc=True, scale=True,
                    shared_max=False, guard=True, final_guard=True, upper_offset=0):
    Tq, Tk = q.shape[0], k.shape[0]
    q = q / math.sqrt(q.shape[-1]) if scale else q
    p = torch.arange(Tq)[:, None] + ((Tk - Tq) if align else 0)
    lower = lower or (lambda j, p, w: j > p - w)
    m = torch.full((Tq, 1), NEG_INF, dtype=q.dtype)
    l, acc = torch.zeros(Tq, 1, dtype=q.dtype), torch.zeros(Tq, v.shape[-1], dtype=q.dtype)
    for j0 in range(0, Tk, block_size):
        j = torch.arange(j0, min(j0 + block_size, Tk))[None, :]
        allowed = (j <= p + upper_offset) & lower(j, p, window)
        if not allowed.any():
            continue
        s = (q @ k[j0:j0 + block_size].T).masked_fill(~allowed, NEG_INF)
        block_max = s.max().expand(Tq, 1) if shared_max else s.amax(dim=-1, keepdim=True)
        m_new = torch.maximum(m, block_max)
        shift = torch.where(torch.isneginf(m_new), 0.0, m_new) if guard else m_new
        e = torch.exp(s - shift)
        factor = torch.exp(m - shift)
        l = l * factor + e.sum(dim=-1, keepdim=True)
        acc = (acc * factor if rescale_acc else acc) + e @ v[j0:j0 + block_size]
        m = m_new
    if final_guard:
        return torch.where(l > 0, acc / torch.where(l > 0, l, 1.0), 0.0)
    return acc / l


def _window_case(g, tq, tk, d, dv, window, block, dtype=torch.float32, extreme=False, note=""):
    """q (tq, d), k (tk, d), v (tk, dv). With ``extreme``, the keys point along one unit vector u
    with distinct lengths (20 to 40); query 0 is 100 u and query 1 is -100 u: every score of
    row 0 is above 1000 (exp overflows without the max), every score of row 1 below -1000 (a
    max shared with row 0 makes it underflow to 0 / 0)."""
    if extreme:
        u = randn(g, d, dtype=torch.float64)
        u = u / u.norm()
        lengths = torch.linspace(20.0, 40.0, tk, dtype=torch.float64)[torch.randperm(tk, generator=g)]
        k = lengths[:, None] * u + 0.1 * randn(g, tk, d, dtype=torch.float64)
        q = randn(g, tq, d, dtype=torch.float64)
        q[-1], q[-2] = 100.0 * u, -100.0 * u        # the last queries: they see keys whatever the shapes
    else:
        q, k = randn(g, tq, d, dtype=torch.float64, scale=1.5), randn(g, tk, d, dtype=torch.float64, scale=1.5)
    return Case((q.to(dtype), k.to(dtype), randn(g, tk, dv, dtype=dtype), window, block), note=note)


def _window_public(g):
    return [_window_case(g, 5, 9, 4, 2, 3, 2, note="5 queries, the last 5 of 9 positions; windows of 3 keys"),
            _window_case(g, 7, 4, 3, 2, 2, 3, torch.float64, note="more queries than keys: the first three see none"),
            _window_case(g, 6, 11, 4, 3, 5, 4, extreme=True,
                         note="the last query's scores are above 1000, the one before's below -1000")]


def _window_hidden(g):
    # Tq and Tk differ from d, d_v and block_size (and block_size < Tk), so that a tensor with a
    # dimension of Tq and one of Tk can only be the forbidden (Tq, Tk) scores or mask.
    cases = []
    for extreme, more_queries, dtype in ((True, False, torch.float32), (False, True, torch.float64),
                                         (True, False, torch.float64)):
        d, dv, block = randint(g, 2, 5), randint(g, 1, 4), randint(g, 2, 4)
        tk = other_than(g, block + 3, 14, (d, dv))
        tq = (other_than(g, tk + 2, tk + 5, (d, dv, block)) if more_queries
              else other_than(g, 3, tk, (d, dv, block)))
        window = randint(g, 2, max(2, tk - 2))
        cases.append(_window_case(g, tq, tk, d, dv, window, block, dtype, extreme=extreme))
    return cases


def _window_audit(case, ops):
    q, k = case.args[0], case.args[1]
    tq, tk = q.shape[0], k.shape[0]
    for op in ops:
        for shape in op.outputs:
            dims = list(shape)
            if tq in dims:
                dims.remove(tq)
                if tk in dims:
                    return (f"{op.name} made a tensor with a dimension of Tq and "
                            "one of Tk, as large as the whole matrix of scores (or of the mask): a tiled "
                            "forward holds one (Tq, block_size) tile at a time")
    return None


def _window_explain(case, outcome):
    if returned_nan(outcome):
        return ("a row that has seen only masked keys has m = -inf, and exp(m - m_new) = "
                "exp(-inf - (-inf)) is NaN: shift such rows by 0 instead; a query whose window "
                "holds no key at all (Tq > Tk) returns zeros, not 0 / 0")
    return None


TILED_WINDOW = Exercise(
    id="flash.tiled_window_forward", title="A tiled sliding-window forward", lesson="10-flash-attention",
    function="tiled_window_forward", params=("q", "k", "v", "window", "block_size"), points=6,
    reference=tiled_window_forward, public=_window_public, hidden=_window_hidden, public_seed=1006,
    audit=_window_audit, explain=_window_explain,
    section="The tiles, step by step",
    mistakes=(
        Mistake("the window holds `window` keys including the query's own position: p - window < j, "
                "not p - window <= j", lambda *a: _window_variant(*a, lower=lambda j, p, w: j >= p - w),
                name="window-one-too-wide"),
        Mistake("align bottom-right: with Tq != Tk, query i sits at position p = i + Tk - Tq, not at i",
                lambda *a: _window_variant(*a, align=False), name="top-left",
                section="05-causal-masking: Pitfall 4: fewer queries than keys, and where the triangle sits"),
        Mistake("a sliding window also hides the keys before p - window + 1: this is the plain causal mask",
                lambda *a: _window_variant(*a, lower=lambda j, p, w: j >= 0), name="no-window"),
        Mistake("one running max per query row: a max shared by all the rows of a tile makes the rows "
                "far below it underflow to 0 / 0", lambda *a: _window_variant(*a, shared_max=True),
                name="one-max-per-tile",
                section="The online softmax"),
        Mistake("when the max grows, the output accumulated so far must shrink like the sum: multiply "
                "acc by exp(m - m_new) too", lambda *a: _window_variant(*a, rescale_acc=False),
                name="acc-not-rescaled",
                section="The online softmax"),
        Mistake("scale the scores by 1 / sqrt(d) before the exponentials", lambda *a: _window_variant(*a, scale=False),
                name="no-scale",
                section="01-one-head: Why divide by $\\sqrt{d_h}$?"),
        Mistake("the window holds `window` keys ending at the query's own position: p - window < j <= p, not "
                "one position further back", lambda *a: _window_variant(*a, lower=lambda j, p, w: j > p - w - 1,
                                                                         upper_offset=-1), name="window-one-behind"),
    ),
    forbidden=("mha", "scaled_dot_product_attention", "torch.nn.attention"),
)

EXERCISES = (ONLINE_STATS, MERGE, WASTED, TILED_WINDOW)
