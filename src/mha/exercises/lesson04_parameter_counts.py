"""Exercises of lesson 04, parameter counts: MHA, grouped-query cross-attention, and how many K/V
heads a memory budget allows."""

from __future__ import annotations

import torch

from mha.autograde import Case, Exercise, Mistake
from mha.autograde.draw import randint, separating


# ---------------------------------------------------------------- 7. MHA parameters

def mha_params(embed_dim: int, num_heads: int, bias: bool) -> int:
    """W_Q, W_K, W_V, W_O are each C x C (plus C biases each): 4C^2 (+ 4C), whatever h is."""
    C = embed_dim
    return 4 * C * C + (4 * C if bias else 0)


def _mha_public(g):
    return [Case((4, 2, False)), Case((512, 8, False)), Case((768, 12, True))]


def _mha_hidden(g):
    # at least one case with several heads (dividing by h shows) and one with biases
    return [Case((h * randint(g, 1, 96), h, b)) for h, b in ((randint(g, 2, 16), True), (randint(g, 1, 16), False),
                                                          (randint(g, 1, 16), True))]


MHA_PARAMS = Exercise(
    id="params.mha_params", title="Count the parameters", lesson="04-parameter-counts",
    function="mha_params", params=("embed_dim", "num_heads", "bias"), points=2,
    reference=mha_params, public=_mha_public, hidden=_mha_hidden, answer="int", public_seed=301,
    section="The count does not depend on h",
    mistakes=(
        Mistake("with bias=True each of the four projections also has C biases",
                lambda C, h, b: 4 * C * C, name="no-biases"),
        Mistake("there are four matrices: W_Q, W_K, W_V and the output projection W_O",
                lambda C, h, b: 3 * C * C + (3 * C if b else 0), name="three-matrices"),
        Mistake("the count does not depend on the number of heads: h heads of width C/h "
                "together are as wide as one head of width C",
                lambda C, h, b: 4 * C * C // h + (4 * C if b else 0), name="divided-by-heads"),
        Mistake("a bias has one entry per output feature: C for each projection, 4C in all, not one per head",
                lambda C, h, b: 4 * C * C + (4 * h if b else 0), name="bias-per-head"),
        Mistake("the count does not grow with the number of heads either: h heads of width C/h make one "
                "C x C matrix per projection, not h of them", lambda C, h, b: 4 * C * C * h + (4 * C if b else 0),
                name="times-heads"),
    ),
    forbidden=("mha",), dtypes=(),
)


# ---------------------------------------------------------------- 8. grouped-query cross-attention

def cross_gqa_params(embed_dim: int, num_heads: int, num_kv_heads: int, kdim: int, bias: bool) -> int:
    """A grouped-query cross-attention layer: queries from a decoder of width C = embed_dim, keys
    and values from an encoder of width kdim. W_Q and W_O are C x C; W_K and W_V map the
    encoder's kdim features to the g * d_h features of the key/value heads, d_h = C // h."""
    C, g = embed_dim, num_kv_heads
    kv = g * (C // num_heads)                        # g * d_h: the width of all key (or value) heads
    return 2 * C * C + 2 * kdim * kv + ((2 * C + 2 * kv) if bias else 0)


def _cross_gqa_public(g):
    return [Case((8, 4, 2, 6, False), note="a decoder of width 8 reads an encoder of width 6"),
            Case((4096, 32, 8, 1024, False), note="a wide decoder, 8 key/value heads, a narrower encoder"),
            Case((1024, 16, 4, 768, True), note="a narrower encoder, with biases")]


def _cross_gqa_hidden(g):
    # h = groups * per with 2 to 4 key/value heads shared by 2 to 4 query heads each, so that
    # g * d_h differs from C; kdim differs from C, from g * d_h, from h * g * d_h, from C * h / g,
    # from 2 C - g * d_h and from C + 2 g * d_h (where the biases counted twice give the count of
    # K and V biases kdim wide), so that every listed mistake changes the count, each differently.
    def draw(b):
        groups, per = randint(g, 2, 4), randint(g, 2, 4)
        h = groups * per
        d = randint(g, 2, 32)
        C, kv = h * d, groups * d
        kdim = randint(g, 8, 4 * C)
        while kdim in (C, kv, h * kv, C * per, 2 * C - kv, C + 2 * kv, 2 * kv):
            kdim += 1
        return Case((C, h, groups, kdim, b))
    # the first case redrawn until every listed mistake gives a count of its own there
    return [separating(lambda: draw(True), CROSS_GQA_PARAMS), draw(False), draw(bool(randint(g, 0, 1)))]


def _cross_gqa(C, h, g, kdim, b, *, kv_in=None, kv_out=None, q_in=None, o_small=False, o_out=None, kv_bias=None,
               bias=True, twice=False):
    kv = g * (C // h) if kv_out is None else kv_out
    kv_in = kdim if kv_in is None else kv_in
    q_in = C if q_in is None else q_in
    o_out = C if o_out is None else o_out
    weights = C * q_in + (o_out * kv if o_small else o_out * C) + 2 * kv_in * kv
    kv_b = kv if kv_bias is None else kv_bias
    biases = (C + o_out + 2 * kv_b) if (b and bias) else 0
    return weights + biases * (2 if twice else 1)


# Two slips give one count without biases (C x kdim, in W_Q or in W_O): one hint says both.
_DECODER_SIDE = ("the queries come from the decoder and the output goes back to it: W_Q reads embed_dim features "
                 "and W_O writes embed_dim features, whatever kdim is; only W_K and W_V read the encoder's kdim")

CROSS_GQA_PARAMS = Exercise(
    id="params.cross_gqa_params", title="Parameters of grouped-query cross-attention", lesson="04-parameter-counts",
    function="cross_gqa_params", params=("embed_dim", "num_heads", "num_kv_heads", "kdim", "bias"), points=3,
    reference=cross_gqa_params, public=_cross_gqa_public, hidden=_cross_gqa_hidden, answer="int", public_seed=302,
    section="Grouped-query and multi-query attention: fewer key and value weights",
    mistakes=(
        Mistake("the keys and values are made from the ENCODER's vectors: W_K and W_V read kdim features, "
                "not embed_dim", lambda C, h, g, k, b: _cross_gqa(C, h, g, k, b, kv_in=C), name="kv-read-embed-dim",
                section="07-cross-attention: Inside cross-attention: `kdim` and `vdim`"),
        Mistake(_DECODER_SIDE, lambda C, h, g, k, b: _cross_gqa(C, h, g, k, b, q_in=k), name="q-reads-kdim",
                section="07-cross-attention: Inside cross-attention: `kdim` and `vdim`"),
        Mistake(_DECODER_SIDE, lambda C, h, g, k, b: _cross_gqa(C, h, g, k, b, o_out=k), name="o-writes-kdim",
                section="07-cross-attention: Inside cross-attention: `kdim` and `vdim`"),
        Mistake("with grouped-query attention W_K and W_V make only the num_kv_heads key/value heads, "
                "num_kv_heads * d_h features, not embed_dim",
                lambda C, h, g, k, b: _cross_gqa(C, h, g, k, b, kv_out=C), name="kv-not-grouped"),
        Mistake("the key/value heads are as wide as the query heads, d_h = embed_dim // num_heads: W_K and W_V "
                "make num_kv_heads * d_h features, not num_kv_heads * embed_dim",
                lambda C, h, g, k, b: _cross_gqa(C, h, g, k, b, kv_out=g * C), name="kv-heads-full-width"),
        Mistake("W_K and W_V change the width from kdim to num_kv_heads * d_h: their outputs are the key/value "
                "heads, not kdim wide", lambda C, h, g, k, b: _cross_gqa(C, h, g, k, b, kv_out=k),
                name="kv-keep-kdim",
                section="07-cross-attention: Inside cross-attention: `kdim` and `vdim`"),
        Mistake("only W_K and W_V shrink with fewer key/value heads: W_O maps the h query heads' outputs, "
                "embed_dim features, to embed_dim", lambda C, h, g, k, b: _cross_gqa(C, h, g, k, b, o_small=True),
                name="w-o-shrinks"),
        Mistake("with bias=True every projection has one bias per output feature: add C + 2 * num_kv_heads "
                "* d_h + C", lambda C, h, g, k, b: _cross_gqa(C, h, g, k, b, bias=False), name="no-biases"),
        Mistake("a bias has one entry per OUTPUT feature: the K and V biases are num_kv_heads * d_h wide, "
                "not kdim (their input) nor embed_dim",
                lambda C, h, g, k, b: _cross_gqa(C, h, g, k, b, kv_bias=k), name="kv-bias-input-width",
                section="07-cross-attention: Inside cross-attention: `kdim` and `vdim`"),
        Mistake("the K and V biases are as wide as their outputs, num_kv_heads * d_h each, not embed_dim",
                lambda C, h, g, k, b: _cross_gqa(C, h, g, k, b, kv_bias=C), name="kv-bias-embed-dim"),
        Mistake("each projection has its own bias, one entry per output feature: C + 2 * num_kv_heads * d_h + C "
                "in all, not one vector of C for the layer",
                lambda C, h, g, k, b: _cross_gqa(C, h, g, k, b, bias=False) + (C if b else 0), name="one-bias-vector"),
        Mistake("count each bias once: a projection of in features to out features has in x out weights and out "
                "biases, (in + 1) x out in all; adding the biases again on their own counts them twice",
                lambda C, h, g, k, b: _cross_gqa(C, h, g, k, b, twice=True), name="biases-twice"),
        Mistake("there are num_kv_heads key/value heads, each d_h wide: W_K and W_V make num_kv_heads * d_h features, "
                "not (num_heads // num_kv_heads) * d_h (that is how many query heads share each of them)",
                lambda C, h, g, k, b: _cross_gqa(C, h, g, k, b, kv_out=(h // g) * (C // h)), name="group-size-for-groups"),
    ),
    forbidden=("mha",), dtypes=(),
)


# ---------------------------------------------------------------- 9. how many K/V heads fit

def max_kv_heads(memory_bytes: int, layers: int, num_heads: int, head_dim: int, seq_len: int, batch: int,
                 bytes_per_element: int) -> int:
    """The largest number g of K/V heads, a divisor of num_heads, whose KV cache for
    ``batch`` sequences of ``seq_len`` tokens fits in ``memory_bytes``; 0 if none does."""
    per_kv_head = 2 * layers * head_dim * seq_len * batch * bytes_per_element   # keys and values
    fits = [g for g in range(1, num_heads + 1) if num_heads % g == 0 and g * per_kv_head <= memory_bytes]
    return max(fits, default=0)


def _kv_unit(L, d, T, B, e):
    return 2 * L * d * T * B * e


def _mkv_public(g):
    llama = (80, 64, 128, 4096, 8, 2)                       # Llama-2-70B's shape, 8 sequences, 16-bit
    return [Case((40 * 2 ** 30, *llama), note="40 GiB for 8 sequences of 4096 tokens"),
            Case((3 * 327_680 + 1000, 5, 32, 64, 512, 1, 1), note="5 layers, one byte per number"),
            Case((45 * 2 ** 18, 1, 48, 64, 1024, 3, 4), note="1 layer, float32, 48 query heads, a batch of 3"),
            Case((200, 1, 8, 64, 4, 1, 2), note="not even one K/V head fits"),
            Case((3 * 2 ** 20, 16, 64, 32, 64, 8, 4), note="16 layers, 8 sequences of 64 tokens, head_dim 32")]


def _mkv_hidden(g):
    # Cases 1 and 2: 2**m heads and room for k K/V heads, strictly between two divisors
    # d0 < k < 2 d0: the answer is d0 and the divisibility mistake gives k. In case 1 (5 to 9
    # layers, 1 byte) forgetting the 2 gives 2 d0 and forgetting the layers 4 d0 or more; in
    # case 2 (1 layer, 4 bytes) forgetting the bytes gives 4 d0. Case 3: the budget is exactly
    # what g heads take (<= is right, < is not). Case 4: any shape.
    cases = []
    for layers, nbytes in ((randint(g, 5, 9), 1), (1, 4)):
        m = randint(g, 5, 7)
        d0 = 2 ** randint(g, 1, m - 4)
        k = d0 + randint(g, 1, d0 - 1)
        d, T, B = 16 * randint(g, 1, 8), randint(g, 1, 8192), randint(g, 1, 16)
        unit = _kv_unit(layers, d, T, B, nbytes)
        cases.append(Case((unit * k + randint(g, 0, unit - 1), layers, 2 ** m, d, T, B, nbytes)))
    h = (12, 16, 24, 32, 40, 48)[randint(g, 0, 5)]
    divisors = [x for x in range(2, h + 1) if h % x == 0 and x & (x - 1) == 0]   # powers of two: so that
    g2 = divisors[randint(g, 0, len(divisors) - 1)]                                 # "powers only" is right here
    L, d, T, B, e = randint(g, 1, 40), 16 * randint(g, 1, 8), randint(g, 1, 8192), randint(g, 1, 16), randint(g, 1, 4)
    cases.append(Case((_kv_unit(L, d, T, B, e) * g2, L, h, d, T, B, e)))
    h = randint(g, 1, 64)
    L, d, T, B, e = randint(g, 1, 80), 16 * randint(g, 1, 8), randint(g, 1, 32768), randint(g, 1, 16), randint(g, 1, 4)
    cases.append(Case((randint(g, 0, _kv_unit(L, d, T, B, e) * h), L, h, d, T, B, e)))
    # Case 5: a head count with divisors that are not powers of two (12 has 3 and 6), and room for
    # exactly t of them plus a remainder, t such a divisor: only the powers-of-two slip misses it.
    h = (12, 20, 24, 40, 48)[randint(g, 0, 4)]
    t = [x for x in range(3, h + 1) if h % x == 0 and x & (x - 1)][0]
    L, d, T, B, e = randint(g, 1, 40), 16 * randint(g, 1, 8), randint(g, 1, 8192), randint(g, 1, 16), randint(g, 1, 4)
    unit = _kv_unit(L, d, T, B, e)
    cases.append(Case((unit * t + randint(g, 1, unit - 1), L, h, d, T, B, e)))
    # Case 6: not even one key/value head fits, not even in a count that forgets one factor of a
    # head's cache (so that only "never zero" answers 1 there).
    cases.append(Case((randint(g, 0, unit // max(2, L, d, T, B, e) - 1), L, h, d, T, B, e)))
    # Case 7: 64 heads, room for r heads with 1 < r < 2, and the factors of a head's cache 2, 4 (the
    # bytes) and 8, 16, 32, 64 (the batch, the layers, head_dim and seq_len, in a random order): a
    # count that forgets one factor f finds room for f r heads, the power of two f, each its own.
    B, L, d, T = (int(i) for i in torch.tensor([8, 16, 32, 64])[torch.randperm(4, generator=g)])
    unit = _kv_unit(L, d, T, B, 4)
    cases.append(Case((unit + randint(g, 1, unit - 1), L, 64, d, T, B, 4)))
    return cases


def _mkv(M, L, h, d, T, B, e, *, unit=None, divisors=True, strict=False, powers=False):
    unit = _kv_unit(L, d, T, B, e) if unit is None else unit
    fits = [x for x in range(1, h + 1) if (not divisors or h % x == 0) and (x * unit < M if strict else x * unit <= M)
            and (not powers or x & (x - 1) == 0)]
    return max(fits, default=0)


MAX_KV_HEADS = Exercise(
    id="params.max_kv_heads", title="How many K/V heads fit?", lesson="04-parameter-counts",
    function="max_kv_heads",
    params=("memory_bytes", "layers", "num_heads", "head_dim", "seq_len", "batch", "bytes_per_element"),
    points=3, reference=max_kv_heads, public=_mkv_public, hidden=_mkv_hidden, answer="int", public_seed=304,
    section="A first look at the KV cache",
    mistakes=(
        Mistake("the number of K/V heads must divide num_heads (each K/V head serves num_heads // g "
                "query heads): take the largest divisor that fits, not the largest count",
                lambda M, L, h, d, T, B, e: _mkv(M, L, h, d, T, B, e, divisors=False), name="not-a-divisor",
                section="Grouped-query and multi-query attention: fewer key and value weights"),
        Mistake("the cache stores two tensors, keys and values: each K/V head costs 2 * layers * head_dim "
                "* seq_len * batch * bytes_per_element bytes",
                lambda M, L, h, d, T, B, e: _mkv(M, L, h, d, T, B, e, unit=L * d * T * B * e),
                name="keys-only"),
        Mistake("every layer has its own cache: multiply by layers",
                lambda M, L, h, d, T, B, e: _mkv(M, L, h, d, T, B, e, unit=2 * d * T * B * e), name="one-layer"),
        Mistake("count bytes, not elements: multiply by bytes_per_element",
                lambda M, L, h, d, T, B, e: _mkv(M, L, h, d, T, B, e, unit=2 * L * d * T * B),
                name="elements-not-bytes"),
        Mistake("every sequence of the batch has its own cache: multiply by batch",
                lambda M, L, h, d, T, B, e: _mkv(M, L, h, d, T, B, e, unit=2 * L * d * T * e), name="no-batch"),
        Mistake("a K/V head caches a vector of head_dim numbers per token: multiply by head_dim",
                lambda M, L, h, d, T, B, e: _mkv(M, L, h, d, T, B, e, unit=2 * L * T * B * e), name="no-head-dim"),
        Mistake("the cache holds every token of the sequence: multiply by seq_len",
                lambda M, L, h, d, T, B, e: _mkv(M, L, h, d, T, B, e, unit=2 * L * d * B * e), name="no-seq-len"),
        Mistake("a cache of exactly memory_bytes fits: compare with <=, not <",
                lambda M, L, h, d, T, B, e: _mkv(M, L, h, d, T, B, e, strict=True), name="strict-less"),
        Mistake("any divisor of num_heads is a valid number of key/value heads, 3, 6 or 12 too, not only the "
                "powers of two", lambda M, L, h, d, T, B, e: _mkv(M, L, h, d, T, B, e, powers=True),
                name="powers-of-two-only"),
        Mistake("when not even one key/value head fits, the answer is 0: no grouped-query layout fits",
                lambda M, L, h, d, T, B, e: max(1, _mkv(M, L, h, d, T, B, e)), name="never-zero"),
    ),
    forbidden=("mha",), dtypes=(),
)

EXERCISES = (MHA_PARAMS, CROSS_GQA_PARAMS, MAX_KV_HEADS)
