"""Exercises of lesson 12, PyTorch's built-ins: torch's masks converted, a mask for packed
documents, ALiBi's slopes for any number of heads."""

from __future__ import annotations

import math

import torch

from mha.autograde import Case, Exercise, Mistake
from mha.autograde.draw import randint


def _bools(g: torch.Generator, *shape: int, p_true: float) -> torch.Tensor:
    return torch.rand(*shape, generator=g) < p_true


# ---------------------------------------------------------------- 1. torch's masks -> one mask

def torch_masks_to_allowed(attn_mask: torch.Tensor, key_padding_mask: torch.Tensor) -> torch.Tensor:
    """attn_mask (Tq, Tk) and key_padding_mask (B, Tk), bool with True = blocked (the convention
    of nn.MultiheadAttention) -> bool (B, 1, Tq, Tk) with True = may attend (SDPA, mha)."""
    blocked = attn_mask[None, None, :, :] | key_padding_mask[:, None, None, :]   # (B, 1, Tq, Tk)
    return ~blocked


def _padding(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """(B, max_len) bool, True at the padding (torch's key_padding_mask)."""
    return torch.arange(max_len)[None, :] >= lengths[:, None]


def _tm_public(g):
    return [
        Case((torch.ones(4, 4, dtype=torch.bool).triu(1), _padding(torch.tensor([4, 2]), 4)),
             note="torch's causal mask (True above the diagonal) and two sequences of lengths 4 and 2"),
        Case((torch.zeros(2, 5, dtype=torch.bool), _padding(torch.tensor([3]), 5)),
             note="2 queries, 5 keys: padding only"),
        Case((_bools(g, 3, 3, p_true=0.4), _bools(g, 3, 3, p_true=0.3)), note="arbitrary masks"),
    ]


def _tm_hidden(g):
    # Case 1 is square, with a causal mask, a full sequence and a padded one: every mistake
    # (the query-axis one included, which needs Tq == Tk to run) gives a wrong answer there.
    t, b = randint(g, 3, 7), randint(g, 2, 4)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    lengths[0], lengths[-1] = t, randint(g, 1, t - 1)
    cases = [Case((torch.ones(t, t, dtype=torch.bool).triu(1), _padding(lengths, t)))]
    tq = randint(g, 1, 4)
    tk = randint(g, tq + 1, 8)
    cases.append(Case((_bools(g, tq, tk, p_true=0.4), _bools(g, randint(g, 1, 3), tk, p_true=0.3))))
    t = randint(g, 2, 6)
    cases.append(Case((_bools(g, t, t, p_true=0.4), _bools(g, randint(g, 1, 3), t, p_true=0.3))))
    return cases


def _tm_explain(case, outcome):
    attn_mask, key_padding_mask = case.args
    want = (key_padding_mask.shape[0], attn_mask.shape[0], attn_mask.shape[1])
    if outcome.status == "value" and outcome.value.kind == "tensor" and tuple(outcome.value.data.shape) == want:
        return "add the head axis: return (B, 1, Tq, Tk) so that the mask broadcasts over the heads"
    return None


TORCH_MASKS = Exercise(
    id="builtins.torch_masks_to_allowed", title="From torch's masks to one mask",
    lesson="12-pytorch-built-ins", function="torch_masks_to_allowed",
    params=("attn_mask", "key_padding_mask"), points=3,
    reference=torch_masks_to_allowed, public=_tm_public, hidden=_tm_hidden, public_seed=1201,
    section="Masks: `True` means *blocked*",
    mistakes=(
        Mistake("nn.MultiheadAttention's masks say True = blocked, the answer says True = may attend: "
                "invert them (~)",
                lambda a, p: (a[None, None] | p[:, None, None, :]), name="not-inverted"),
        Mistake("key_padding_mask is True at the padding, that is where attention is blocked: invert "
                "it as well as attn_mask",
                lambda a, p: ~a[None, None] & p[:, None, None, :], name="padding-not-inverted"),
        Mistake("attn_mask is True where attention is blocked: invert it as well as key_padding_mask",
                lambda a, p: a[None, None] & ~p[:, None, None, :], name="attn-mask-not-inverted"),
        Mistake("key_padding_mask marks padded keys, the last axis: shape it (B, 1, 1, Tk), not "
                "(B, 1, Tq, 1) over the queries",
                lambda a, p: ~a[None, None] & ~p[:, None, :, None], name="padding-on-queries"),
        Mistake("a key is allowed only when neither mask blocks it: combine the inverted masks with "
                "& (and), not | (or)",
                lambda a, p: ~a[None, None] | ~p[:, None, None, :], name="or-not-and"),
        Mistake("nn.MultiheadAttention's attn_mask is (Tq, Tk), rows = queries: use it as it is, not "
                "transposed", lambda a, p: ~(a.T[None, None] | p[:, None, None, :]) if a.shape[0] == a.shape[1]
                else ~(a[None, None] | p[:, None, None, :]).transpose(-2, -1), name="attn-mask-transposed"),
    ),
    forbidden=("mha",), explain=_tm_explain, dtypes=(),
)


# ---------------------------------------------------------------- 2. a document mask

def document_mask(doc_ids: torch.Tensor) -> torch.Tensor:
    """doc_ids (B, T) int: the document of each position of B rows of packed documents (each
    document a contiguous run of one id) -> bool (B, 1, T, T), True = may attend: key j is in
    query i's document and j <= i."""
    T = doc_ids.shape[-1]
    same = doc_ids[:, :, None] == doc_ids[:, None, :]                 # (B, T, T): rows = queries
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    return (same & causal)[:, None]


def _packed(g: torch.Generator, b: int, t: int, docs: int) -> torch.Tensor:
    """(b, t) ids of ``docs`` or more documents per row, each at least one token long, with ids
    that need not start at 0."""
    rows = []
    for _ in range(b):
        cuts = sorted(torch.randperm(t - 1, generator=g)[: docs - 1].add(1).tolist())
        lengths = [e - s for s, e in zip([0] + cuts, cuts + [t])]
        first = randint(g, 0, 5)
        rows.append(torch.cat([torch.full((n,), first + 2 * k) for k, n in enumerate(lengths)]))
    return torch.stack(rows)


def _dm_public(g):
    return [Case((torch.tensor([[0, 0, 0, 1, 1, 2]]),), note="three documents of 3, 2 and 1 tokens"),
            Case((torch.tensor([[5, 5, 9, 9], [1, 1, 1, 1]]),), note="two rows; the second is one document"),
            Case((_packed(g, 2, 7, 3),), note="random documents")]


def _dm_hidden(g):
    # at least two documents of which one has two tokens or more, so that every mistake shows
    t = randint(g, 5, 10)
    return [Case((_packed(g, randint(g, 1, 3), t, randint(g, 2, 3)),)),
            Case((_packed(g, 1, randint(g, 4, 9), 2),)),
            Case((_packed(g, randint(g, 2, 4), randint(g, 6, 12), randint(g, 3, 4)),))]


def _dm_explain(case, outcome):
    (ids,) = case.args
    if outcome.status == "value" and outcome.value.kind == "tensor":
        B, T = ids.shape
        if tuple(outcome.value.data.shape) == (B, T, T):
            return "add the head axis: (B, 1, T, T), so that the mask broadcasts over the heads"
    return None


def _dm_wrong(kind):
    def wrong(ids):
        T = ids.shape[-1]
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        same = ids[:, :, None] == ids[:, None, :]
        if kind == "no-causal":
            return same[:, None]
        if kind == "no-documents":
            return causal.expand(ids.shape[0], 1, T, T)
        if kind == "no-diagonal":
            return (same & torch.ones(T, T, dtype=torch.bool).tril(-1))[:, None]
        if kind == "first-row":
            first = ids[0][:, None] == ids[0][None, :]
            return (first & causal).expand(ids.shape[0], 1, T, T).clone()
        if kind == "upper":
            return (same & torch.ones(T, T, dtype=torch.bool).triu())[:, None]
        return ~(same & causal)[:, None]
    return wrong


DOCUMENT_MASK = Exercise(
    id="builtins.document_mask", title="A mask for packed documents",
    lesson="12-pytorch-built-ins", function="document_mask", params=("doc_ids",), points=4,
    reference=document_mask, public=_dm_public, hidden=_dm_hidden, public_seed=1204,
    section="`flex_attention`: attention you describe in Python",
    mistakes=(
        Mistake("the documents are still read left to right: combine the document mask with the causal "
                "mask (j <= i)", _dm_wrong("no-causal"), name="no-causal"),
        Mistake("a token must not see the tokens of the documents before its own: allow only keys with "
                "the same document id", _dm_wrong("no-documents"), name="no-documents"),
        Mistake("a token may attend to itself: keep the diagonal (j <= i, not j < i)", _dm_wrong("no-diagonal"),
                name="no-diagonal"),
        Mistake("True = may attend (the convention of SDPA and mha); your mask has True = blocked",
                _dm_wrong("inverted"), name="true-means-blocked",
                section="Masks: `True` means *blocked*"),
        Mistake("each row of doc_ids is its own packed sequence: compare the ids within each row (b), not the "
                "first row's ids for every row", _dm_wrong("first-row"), name="first-row-for-all"),
        Mistake("a causal mask keeps the keys j <= i, on and below the diagonal (rows are queries); the keys "
                "above it are the future", _dm_wrong("upper"), name="upper-triangle"),
    ),
    forbidden=("mha", "torch.nn.attention"), explain=_dm_explain, dtypes=(),
)


# ---------------------------------------------------------------- 3. ALiBi slopes for any number of heads

def alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi's head slopes, float64 (num_heads,): for n a power of two, 2 ** (-8 k / n) for
    k = 1..n; otherwise those of the closest power of two below, n, followed by every other
    slope of 2 n (the first, the third, ...) until there are num_heads."""
    n = 2 ** math.floor(math.log2(num_heads))
    slopes = 2.0 ** (-8.0 * torch.arange(1, n + 1, dtype=torch.float64) / n)
    if n == num_heads:
        return slopes
    finer = 2.0 ** (-8.0 * torch.arange(1, 2 * n + 1, dtype=torch.float64) / (2 * n))
    return torch.cat([slopes, finer[0::2][: num_heads - n]])


def _geometric(n: int) -> torch.Tensor:
    return 2.0 ** (-8.0 * torch.arange(1, n + 1, dtype=torch.float64) / n)


def _as_slopes_public(g):
    return [Case((128,), note="a power of two: 2 ** (-8 k / 128)"), Case((6,), note="6 heads: 4, then 2 of 8's"),
            Case((12,), note="12 heads: 8, then 4 of 16's")]


def _as_slopes_hidden(g):
    # num_heads = n + k with n a power of two and 2 <= k < n, so that "every other" and "the
    # first k" of the finer sequence differ (never 6 or 12, the public ones); and one power of two
    cases = []
    for _ in range(2):
        n = 2 ** randint(g, 2, 5)
        h = n + randint(g, 2, n - 1)
        cases.append(Case((h + 1 if h in (6, 12) else h,)))
    cases.append(Case((2 ** randint(g, 1, 6),)))
    return cases


def _as_wrong(kind):
    def wrong(h):
        n = 2 ** math.floor(math.log2(h))
        if kind == "formula":
            return _geometric(h)
        if kind == "sorted":
            return alibi_slopes(h).sort(descending=True).values
        if kind == "from-zero":      # the coarse exponents -8 k / n taken for k = 0..n-1
            return torch.cat([2.0 ** (-8.0 * torch.arange(0, n, dtype=torch.float64) / n), alibi_slopes(h)[n:]])
        if kind == "round-up":       # the slopes of the power of two above, cut to num_heads
            return _geometric(2 ** math.ceil(math.log2(h)))[:h]
        if n == h:
            return _geometric(h)
        finer = _geometric(2 * n)
        extra = {"first": finer[: h - n], "odd": finer[1::2][: h - n]}.get(kind, finer[0::2][: h - n])
        if kind == "extra-first":
            return torch.cat([extra, _geometric(n)])
        return torch.cat([_geometric(n), extra])
    return wrong


ALIBI_SLOPES = Exercise(
    id="builtins.alibi_slopes", title="ALiBi slopes for any number of heads", lesson="12-pytorch-built-ins",
    function="alibi_slopes", params=("num_heads",), points=4,
    reference=alibi_slopes, public=_as_slopes_public, hidden=_as_slopes_hidden, public_seed=1205,
    section="`flex_attention`: attention you describe in Python",
    mistakes=(
        Mistake("2 ** (-8 k / num_heads) is the rule for a power of two only: for other head counts, "
                "start from the closest power of two below and fill up from the next one",
                _as_wrong("formula"), name="power-of-two-rule"),
        Mistake("take every other slope of the finer sequence (the first, third, fifth, ...), not its "
                "first num_heads - n slopes: those would crowd the top of the range", _as_wrong("first"),
                name="first-not-every-other"),
        Mistake("every other slope starting with the first one, [0::2], not the second, [1::2] (which "
                "repeats the coarse sequence's slopes)", _as_wrong("odd"), name="odd-ones"),
        Mistake("the coarse sequence comes from the closest power of two BELOW num_heads; the slopes "
                "of the power of two above, cut short, are a different set", _as_wrong("round-up"),
                name="power-above"),
        Mistake("the slopes of the closest power of two come first, then the extra ones from the finer "
                "sequence", _as_wrong("extra-first"), name="extra-first"),
        Mistake("keep the order of the rule: the closest power of two's slopes first, then the extra ones; "
                "sorting them changes which head gets which slope", _as_wrong("sorted"), name="sorted"),
        Mistake("the exponents are -8 k / n for k = 1..n: evenly spaced from -8 / n down to -8, not from 0",
                _as_wrong("from-zero"), name="k-from-zero"),
    ),
    forbidden=("mha",), dtypes=(),
)

EXERCISES = (TORCH_MASKS, DOCUMENT_MASK, ALIBI_SLOPES)
