"""Exercises of lesson 07, cross-attention: its shapes, the mask of each role, an alignment score
that leaves the padded queries out."""

from __future__ import annotations

import torch

from mha.autograde import Case, Exercise, Mistake
from mha.autograde.draw import randint, randn, separating


def _other_than(g: torch.Generator, low: int, high: int, avoid: int) -> int:
    """A random int in [low, high] different from ``avoid`` (the range must hold another)."""
    value = randint(g, low, high - 1)
    return value + 1 if value >= avoid else value


# ---------------------------------------------------------------- 1. shapes

def cross_attention_shapes(batch: int, tgt_len: int, src_len: int, embed_dim: int, kdim: int,
                           num_heads: int) -> dict:
    """The shapes inside MultiHeadAttention(embed_dim, num_heads, kdim=kdim, vdim=kdim)
    called with a query (batch, tgt_len, embed_dim) and key = value (batch, src_len, kdim)."""
    if embed_dim % num_heads != 0:
        raise ValueError(f"embed_dim={embed_dim} is not divisible by num_heads={num_heads}")
    B, Tq, Tk, C, h = batch, tgt_len, src_len, embed_dim, num_heads
    d = C // h
    return {"k_proj": (C, kdim), "q": (B, h, Tq, d), "k": (B, h, Tk, d), "v": (B, h, Tk, d),
            "scores": (B, h, Tq, Tk), "out": (B, Tq, C)}


def _shapes_wrong(*, head_from_kdim=False, scores_swapped=False, out_from_source=False,
                  kv_from_target=False, proj_transposed=False, out_kdim=False):
    def wrong(B, Tq, Tk, C, kdim, h):
        right = cross_attention_shapes(B, Tq, Tk, C, kdim, h)
        if head_from_kdim:
            right["k"] = right["v"] = (B, h, Tk, kdim // h)
        if scores_swapped:
            right["scores"] = (B, h, Tk, Tq)
        if out_from_source:
            right["out"] = (B, Tk, C)
        if kv_from_target:
            right["k"] = right["v"] = (B, h, Tq, C // h)
            right["scores"] = (B, h, Tq, Tq)
        if proj_transposed:
            right["k_proj"] = (kdim, C)
        if out_kdim:
            right["out"] = (B, Tq, kdim)
        return right
    return wrong


def _shapes_public(g):
    return [Case((2, 5, 7, 32, 24, 2), note="a decoder of width 32 reads an encoder of width 24"),
            Case((1, 3, 10, 512, 768, 8), note="a wider encoder"),
            Case((2, 4, 6, 12, 10, 4), note="kdim=10 is not a multiple of num_heads=4, and need not be"),
            Case((2, 4, 6, 10, 8, 3), raises="ValueError", note="embed_dim=10 is not divisible by num_heads=3")]


def _shapes_hidden(g):
    cases = []
    for _ in range(2):  # tgt_len != src_len and kdim // h != embed_dim // h: every mistake shows
        h, d = randint(g, 2, 8), randint(g, 2, 32)
        kdim = h * _other_than(g, 1, 48, d) + randint(g, 0, h - 1)
        tq = randint(g, 1, 20)
        cases.append(Case((randint(g, 1, 8), tq, _other_than(g, 1, 40, tq), h * d, kdim, h)))
    h = randint(g, 3, 7)
    cases.append(Case((randint(g, 1, 8), randint(g, 1, 20), randint(g, 1, 20), h * randint(g, 2, 30) + 1, randint(g, 4, 64), h),
                      raises="ValueError", note="embed_dim not divisible by num_heads"))
    return cases


CROSS_SHAPES = Exercise(
    id="cross.cross_attention_shapes", title="The shapes of cross-attention", lesson="07-cross-attention",
    function="cross_attention_shapes",
    params=("batch", "tgt_len", "src_len", "embed_dim", "kdim", "num_heads"), points=3,
    reference=cross_attention_shapes, public=_shapes_public, hidden=_shapes_hidden, answer="shapes",
    public_seed=701, dtypes=(),
    section="Inside cross-attention: `kdim` and `vdim`",
    mistakes=(
        Mistake("the keys are projected from kdim to embed_dim before the split, so every head has "
                "width embed_dim // num_heads, for the keys and values too", _shapes_wrong(head_from_kdim=True),
                name="heads-from-kdim"),
        Mistake("the scores have one row per query (target position) and one column per key "
                "(source position): (batch, h, tgt_len, src_len)", _shapes_wrong(scores_swapped=True),
                name="scores-swapped"),
        Mistake("the output has one vector per query: its length is the target's, not the source's",
                _shapes_wrong(out_from_source=True), name="out-source-length"),
        Mistake("in cross-attention the keys and values come from the encoder, so they have the "
                "source's length", _shapes_wrong(kv_from_target=True), name="kv-target-length"),
        Mistake("nn.Linear stores its weight as (out_features, in_features): the key projection maps "
                "kdim features to embed_dim, so its weight is (embed_dim, kdim)", _shapes_wrong(proj_transposed=True),
                name="k-proj-transposed"),
        Mistake("the output is as wide as the decoder, embed_dim: W_O maps the merged heads back to the "
                "decoder's width, whatever kdim is", _shapes_wrong(out_kdim=True), name="out-kdim-wide"),
    ),
    forbidden=("mha",),
)


# ---------------------------------------------------------------- 2. the mask of each role

ROLES = ("encoder", "decoder", "cross")


def mask_for_role(role: str, src_lengths: torch.Tensor, tgt_lengths: torch.Tensor, src_len: int,
                  tgt_len: int) -> torch.Tensor:
    """Bool (B, 1, Tq, Tk), True = may attend, for one attention of an encoder-decoder.

    "encoder": (B, 1, src_len, src_len), key j is a real source token (j < src_lengths[b]).
    "decoder": (B, 1, tgt_len, tgt_len), key j <= query i and j < tgt_lengths[b].
    "cross":   (B, 1, tgt_len, src_len), key j < src_lengths[b]; no causal part.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    B = len(src_lengths)
    src_real = torch.arange(src_len)[None, :] < src_lengths[:, None]     # (B, S): real source keys
    if role == "encoder":
        return src_real[:, None, None, :].expand(B, 1, src_len, src_len)
    if role == "cross":
        return src_real[:, None, None, :].expand(B, 1, tgt_len, src_len)
    pos = torch.arange(tgt_len)
    not_future = pos[None, :] <= pos[:, None]                            # (T, T), rows = queries
    tgt_real = pos[None, :] < tgt_lengths[:, None]                       # (B, T): real target keys
    return (not_future[None] & tgt_real[:, None, :])[:, None]            # (B, 1, T, T)


def _causal_on_cross(align):
    def wrong(role, src_lengths, tgt_lengths, S, T):
        right = mask_for_role(role, src_lengths, tgt_lengths, S, T)
        if role != "cross":
            return right
        offset = S - T if align == "bottom-right" else 0
        return right & torch.ones(T, S, dtype=torch.bool).tril(diagonal=offset)
    return wrong


def _padding_on_queries(role, src_lengths, tgt_lengths, S, T):
    """Padding applied to the query rows instead of the key columns."""
    if role not in ROLES:
        raise ValueError(role)
    q_len, k_len = (S, S) if role == "encoder" else (T, S if role == "cross" else T)
    lengths = src_lengths if role == "encoder" else tgt_lengths
    rows = torch.arange(q_len)[None, :] < lengths[:, None]               # (B, Tq)
    out = rows[:, None, :, None].expand(len(lengths), 1, q_len, k_len)
    if role == "decoder":
        out = out & torch.ones(T, T, dtype=torch.bool).tril()
    return out


def _padding_on_both_axes(role, src_lengths, tgt_lengths, S, T):
    """Padding applied to the key columns (right) and to the query rows as well (wrong)."""
    right = mask_for_role(role, src_lengths, tgt_lengths, S, T)
    if role not in ROLES:
        raise ValueError(role)
    q_len = S if role == "encoder" else T
    q_lengths = src_lengths if role == "encoder" else tgt_lengths
    rows = torch.arange(q_len)[None, :] < q_lengths[:, None]               # (B, Tq): real queries
    return right & rows[:, None, :, None]


def _decoder_not_causal(role, src_lengths, tgt_lengths, S, T):
    right = mask_for_role(role, src_lengths, tgt_lengths, S, T)
    if role != "decoder":
        return right
    real = torch.arange(T)[None, :] < tgt_lengths[:, None]
    return real[:, None, None, :].expand(len(tgt_lengths), 1, T, T)


def _decoder_without_padding(role, src_lengths, tgt_lengths, S, T):
    right = mask_for_role(role, src_lengths, tgt_lengths, S, T)
    if role != "decoder":
        return right
    return torch.ones(T, T, dtype=torch.bool).tril().expand(len(tgt_lengths), 1, T, T)


def _decoder_upper(role, src_lengths, tgt_lengths, S, T):
    right = mask_for_role(role, src_lengths, tgt_lengths, S, T)
    if role != "decoder":
        return right
    real = torch.arange(T)[None, :] < tgt_lengths[:, None]
    return (torch.ones(T, T, dtype=torch.bool).triu()[None] & real[:, None, :])[:, None]


def _decoder_no_diagonal(role, src_lengths, tgt_lengths, S, T):
    right = mask_for_role(role, src_lengths, tgt_lengths, S, T)
    if role != "decoder":
        return right
    real = torch.arange(T)[None, :] < tgt_lengths[:, None]
    return (torch.ones(T, T, dtype=torch.bool).tril(-1)[None] & real[:, None, :])[:, None]


def _cross_with_target_lengths(role, src_lengths, tgt_lengths, S, T):
    right = mask_for_role(role, src_lengths, tgt_lengths, S, T)
    if role != "cross":
        return right
    real = torch.arange(S)[None, :] < tgt_lengths[:, None]
    return real[:, None, None, :].expand(len(tgt_lengths), 1, T, S)


def _role_cases(src_lengths, tgt_lengths, S, T):
    return [Case(("encoder", src_lengths, tgt_lengths, S, T), note="encoder self-attention"),
            Case(("decoder", src_lengths, tgt_lengths, S, T), note="decoder self-attention"),
            Case(("cross", src_lengths, tgt_lengths, S, T), note="cross-attention")]


def _role_public(g):
    cases = _role_cases(torch.tensor([5, 3]), torch.tensor([4, 2]), 5, 4)
    cases += _role_cases(torch.tensor([2, 6, 4]), torch.tensor([7, 3, 1]), 6, 7)[2:]
    cases.append(Case(("self", torch.tensor([5, 3]), torch.tensor([4, 2]), 5, 4), raises="ValueError",
                      note="an unknown role"))
    cases.append(Case(("Decoder", torch.tensor([5, 3]), torch.tensor([4, 2]), 5, 4), raises="ValueError",
                      note="roles are exact lower-case names: 'Decoder' is not one"))
    return cases


def _role_hidden(g):
    # Sequence 0 has a full source and a padded target, sequence 1 a padded source and a
    # padded target of length >= 2, tgt_len != src_len: each listed mistake changes some entry.
    S, T = randint(g, 3, 9), randint(g, 3, 9)
    if S == T:
        T += 1
    B = randint(g, 2, 4)
    src = torch.randint(1, S + 1, (B,), generator=g)
    tgt = torch.randint(1, T + 1, (B,), generator=g)
    src[0], tgt[0] = S, randint(g, 1, min(S, T) - 1)
    src[1], tgt[1] = randint(g, 1, S - 1), randint(g, 2, T - 1)
    cases = _role_cases(src, tgt, S, T)
    bad = ("self", "causal", "", "enc")[randint(g, 0, 3)]
    cases.append(Case((bad, src, tgt, S, T), raises="ValueError", note="an unknown role"))
    capitals = ("Encoder", "DECODER", "Cross", " cross")[randint(g, 0, 3)]    # in every grading, not by chance
    cases.append(Case((capitals, src, tgt, S, T), raises="ValueError", note="a role in other letters"))
    return cases


def _role_explain(case, outcome):
    role, src_lengths, tgt_lengths, S, T = case.args
    if outcome.status == "value" and outcome.value.kind == "tensor" and role in ROLES:
        q_len, k_len = (S, S) if role == "encoder" else (T, S if role == "cross" else T)
        shape = tuple(outcome.value.data.shape)
        if shape == (len(src_lengths), 1, 1, k_len):
            return f"expand the mask to (B, 1, Tq, Tk) = {(len(src_lengths), 1, q_len, k_len)}, one row per query"
        if shape == (len(src_lengths), q_len, k_len):
            return "add the head axis: the mask is (B, 1, Tq, Tk) so that it broadcasts over heads"
    return None


ROLE_MASK = Exercise(
    id="cross.mask_for_role", title="The mask of each role", lesson="07-cross-attention",
    function="mask_for_role", params=("role", "src_lengths", "tgt_lengths", "src_len", "tgt_len"), points=5,
    reference=mask_for_role, public=_role_public, hidden=_role_hidden, public_seed=702, dtypes=(),
    section="Which mask for which role",
    mistakes=(
        Mistake("True = may attend: a key is allowed when the mask is True",
                lambda *a: ~mask_for_role(*a), name="true-means-blocked",
                section="The same masks in PyTorch's modules"),
        Mistake("cross-attention takes no causal mask: the whole source is known before decoding "
                "starts, so every target position may read every real source token",
                _causal_on_cross("top-left"), name="causal-cross",
                section="Pitfall: a causal mask on cross-attention"),
        Mistake("cross-attention takes no causal mask: the whole source is known before decoding "
                "starts, so every target position may read every real source token",
                _causal_on_cross("bottom-right"), name="causal-cross-aligned",
                section="Pitfall: a causal mask on cross-attention"),
        Mistake("padding hides keys, the columns (last axis): a real query must never read a padded "
                "key, whereas hiding query rows lets it", _padding_on_queries, name="padding-on-queries",
                section="Pitfall: padding on the query axis"),
        Mistake("padding hides keys only: a padded query row keeps the keys it may read (its output is "
                "simply not used), so do not hide the rows of padded queries as well", _padding_on_both_axes,
                name="padding-on-both-axes",
                section="Pitfall: padding on the query axis"),
        Mistake("the decoder's self-attention is causal: target position i may not read target "
                "positions after i", _decoder_not_causal, name="decoder-not-causal"),
        Mistake("keep the target's padding in the decoder's mask too: every padded key must be hidden "
                "(with padding at the end the causal part hides it from the real rows, but not from the "
                "padded rows, and with padding at the start not even from the real rows)",
                _decoder_without_padding, name="decoder-without-padding"),
        Mistake("the keys of cross-attention are source tokens: hide the source's padding "
                "(src_lengths), not the target's", _cross_with_target_lengths, name="cross-target-padding"),
        Mistake("a causal mask hides the future of a query: key j <= i, on and below the diagonal; the decoder's "
                "mask here keeps the keys above it", _decoder_upper, name="decoder-upper-triangle"),
        Mistake("a target position may read itself: the decoder's causal part keeps the diagonal, j <= i",
                _decoder_no_diagonal, name="decoder-no-diagonal"),
    ),
    forbidden=("mha",), explain=_role_explain,
)


# ---------------------------------------------------------------- 3. alignment score, padding left out

def alignment_accuracy(weights: torch.Tensor, ideal: torch.Tensor, tgt_lengths: torch.Tensor) -> torch.Tensor:
    """weights (B, h, Tq, Tk), ideal (Tq,) int, tgt_lengths (B,) int -> (h,): per head, the
    fraction of the REAL (sequence, query) pairs, query i < tgt_lengths[b], whose largest weight
    sits on key ideal[i]; padded queries count for nothing. Same dtype as weights."""
    Tq = weights.shape[-2]
    hits = weights.argmax(dim=-1) == ideal                           # (B, h, Tq)
    real = torch.arange(Tq)[None, :] < tgt_lengths[:, None]          # (B, Tq): the queries that count
    return (hits & real[:, None, :]).sum(dim=(0, 2)).to(weights.dtype) / real.sum().to(weights.dtype)


def _planted(g, B, h, Tq, Tk, ideal, dtype, sharp=4.0):
    """Weights whose rows peak at key ideal[i] in head 0, in head 1 for the odd queries only (a
    fraction strictly between 0 and 1, which no slip that floors or rounds keeps), and random
    rows in the other heads."""
    scores = randn(g, B, h, Tq, Tk, dtype=torch.float64)
    scores[:, 0, torch.arange(Tq), ideal] += sharp
    if h > 1:
        odd = torch.arange(1, Tq, 2)
        scores[:, 1, odd, ideal[odd]] += sharp
    return torch.softmax(scores, dim=-1).to(dtype)


def _shift(T, s):
    return (torch.arange(T) + s) % T


def _lengths(g, B, T):
    """(B,) real target lengths: the first sequence full, the second padded by two or more, the
    rest random, so that counting the padded queries, or averaging per sequence, shows."""
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0], lengths[1] = T, randint(g, 1, T - 2)
    return lengths


def _align_public(g):
    T = 6
    return [Case((_planted(g, 3, 2, T, T, _shift(T, 1), torch.float32), _shift(T, 1), torch.tensor([6, 4, 6])),
                 note="key i + 1 for query i, a peaked head and a random one; one sequence padded"),
            Case((_planted(g, 2, 3, 4, 7, torch.tensor([6, 4, 2, 0]), torch.float64), torch.tensor([6, 4, 2, 0]),
                  torch.tensor([4, 1])), note="fewer queries than keys, float64, a sequence of one real token"),
            Case((_planted(g, 4, 1, 5, 5, torch.arange(4, -1, -1), torch.float32, sharp=1.0),
                  torch.arange(4, -1, -1), torch.tensor([5, 3, 2, 5])), note="reversal, one head")]


def _align_hidden(g):
    # Case 0 plants a cyclic shift that is not its own inverse (2s != T mod T): the argmax over
    # queries then disagrees with the argmax over keys in the peaked head.
    T = randint(g, 4, 9)
    s = randint(g, 1, T - 1)
    if 2 * s == T:
        s = 1
    B, h = randint(g, 2, 5), randint(g, 2, 4)
    tq, tk = randint(g, 3, 8), randint(g, 2, 10)
    ideal = torch.randint(0, tk, (tq,), generator=g)
    ideal_t = torch.randint(0, T, (T,), generator=g)
    b2, b3 = randint(g, 2, 4), randint(g, 2, 4)
    # the first case redrawn until every listed mistake answers differently from the others there
    first = separating(lambda: Case((_planted(g, B, h, T, T, _shift(T, s), torch.float32), _shift(T, s),
                                     _lengths(g, B, T))), ALIGNMENT)
    return [first,
            Case((_planted(g, b2, randint(g, 1, 3), tq, tk, ideal, torch.float64), ideal, _lengths(g, b2, tq))),
            Case((_planted(g, b3, randint(g, 2, 3), T, T, ideal_t, torch.float32, sharp=2.0), ideal_t,
                  _lengths(g, b3, T)))]


def _align_wrong(kind):
    def wrong(w, ideal, lengths):
        Tq = w.shape[-2]
        best = w.argmax(dim=-2 if kind == "over-queries" else -1)
        hits = best == ideal                                                   # (B, h, Tq)
        real = torch.arange(Tq)[None, :] < (lengths + {"inclusive": 1, "minus-one": -1}.get(kind, 0))[:, None]
        if kind == "mass":                                                     # mean weight on the ideal key
            on_ideal = w[:, :, torch.arange(Tq), ideal]                            # (B, h, Tq)
            return (on_ideal * real[:, None, :]).sum(dim=(0, 2)) / real.sum().to(w.dtype)
        if kind == "first-sequence":
            n = int(lengths[0])
            return (best[0, :, :n] == ideal[:n]).to(w.dtype).mean(dim=-1)
        if kind == "all-queries":                                              # the page's hits
            return hits.to(w.dtype).mean(dim=(0, 2))
        counted = (hits & real[:, None, :]).to(w.dtype)
        if kind == "divide-by-all":
            return counted.mean(dim=(0, 2))
        if kind == "per-sequence":
            return (counted.sum(dim=2) / real.sum(dim=1, keepdim=True).to(w.dtype)).mean(dim=0)
        if kind == "count":
            return counted.sum(dim=(0, 2))
        if kind == "one-number":
            return counted.sum() / (real.sum() * w.shape[1]).to(w.dtype)
        if kind == "floor":                                                    # hits // pairs: 0, or 1
            return (counted.sum(dim=(0, 2)) // real.sum()).to(w.dtype)
        return counted.sum(dim=(0, 2)) / real.sum().to(w.dtype)
    return wrong


ALIGNMENT = Exercise(
    id="cross.alignment_accuracy", title="How close to the ideal alignment, padding left out",
    lesson="07-cross-attention", function="alignment_accuracy", params=("weights", "ideal", "tgt_lengths"),
    points=4, reference=alignment_accuracy, public=_align_public, hidden=_align_hidden, public_seed=703,
    section="Where does the decoder look?",
    mistakes=(
        Mistake("a padded query is not a real (sequence, query) pair: leave out the queries i >= "
                "tgt_lengths[b], in the count of hits and in what you divide by", _align_wrong("all-queries"),
                name="padded-queries-counted"),
        Mistake("divide by the number of REAL (sequence, query) pairs, not by every query: the padded ones "
                "cannot score, and must not count against a head either", _align_wrong("divide-by-all"),
                name="divide-by-all-queries"),
        Mistake("pool every real (sequence, query) pair before dividing: a mean of per-sequence fractions "
                "gives a short sequence's queries more weight than a long one's", _align_wrong("per-sequence"),
                name="mean-of-sequences"),
        Mistake("sequence b has the real queries 0 .. tgt_lengths[b] - 1: i < tgt_lengths[b], not <=",
                _align_wrong("inclusive"), name="length-inclusive"),
        Mistake("sequence b has the real queries 0 .. tgt_lengths[b] - 1, all of them: i < tgt_lengths[b], not "
                "i < tgt_lengths[b] - 1", _align_wrong("minus-one"), name="length-minus-one"),
        Mistake("take the argmax over the keys, the last axis: for each query, the source position "
                "with the largest weight", _align_wrong("over-queries"), name="argmax-over-queries"),
        Mistake("one score per head: pool the sequences and the queries (dims 0 and 2), not the heads",
                _align_wrong("one-number"), name="heads-pooled"),
        Mistake("return a fraction between 0 and 1: divide the number of hits by the number of real "
                "(sequence, query) pairs", _align_wrong("count"), name="count-not-fraction"),
        Mistake("score the ARGMAX: a hit is a query whose largest weight sits on key ideal[i], whatever that "
                "weight is; the mean weight on the ideal key is another measure", _align_wrong("mass"),
                name="weight-not-argmax"),
        Mistake("pool every sequence of the batch, not only the first one", _align_wrong("first-sequence"),
                name="first-sequence-only"),
        Mistake("the fraction is a division of numbers, hits / pairs: integer division (//) floors it to 0, "
                "or to 1 when every pair is a hit", _align_wrong("floor"), name="integer-division"),
    ),
    forbidden=("mha",),
)

EXERCISES = (CROSS_SHAPES, ROLE_MASK, ALIGNMENT)
