"""Exercises of lesson 04, parameter counts: MHA, GQA, and how many K/V heads a memory budget
allows."""

from __future__ import annotations

from ._core import Case, Exercise, Mistake
from .heads import _int


# ---------------------------------------------------------------- 7. MHA parameters

def mha_params(embed_dim: int, num_heads: int, bias: bool) -> int:
    """W_Q, W_K, W_V, W_O are each C x C (plus C biases each): 4C^2 (+ 4C), whatever h is."""
    C = embed_dim
    return 4 * C * C + (4 * C if bias else 0)


def _mha_public(g):
    return [Case((4, 2, False)), Case((512, 8, False)), Case((768, 12, True))]


def _mha_hidden(g):
    # at least one case with several heads (dividing by h shows) and one with biases
    return [Case((h * _int(g, 1, 96), h, b)) for h, b in ((_int(g, 2, 16), True), (_int(g, 1, 16), False),
                                                          (_int(g, 1, 16), True))]


MHA_PARAMS = Exercise(
    id="params.mha_params", title="Count the parameters", lesson="04-parameter-counts",
    function="mha_params", params=("embed_dim", "num_heads", "bias"), points=2,
    reference=mha_params, public=_mha_public, hidden=_mha_hidden, answer="int", public_seed=301,
    mistakes=(
        Mistake("with bias=True each of the four projections also has C biases",
                lambda C, h, b: 4 * C * C),
        Mistake("there are four matrices: W_Q, W_K, W_V and the output projection W_O",
                lambda C, h, b: 3 * C * C + (3 * C if b else 0)),
        Mistake("the count does not depend on the number of heads: h heads of width C/h "
                "together are as wide as one head of width C",
                lambda C, h, b: 4 * C * C // h + (4 * C if b else 0)),
    ),
    forbidden=("mha",), dtypes=(),
)


# ---------------------------------------------------------------- 8. GQA parameters

def gqa_params(embed_dim: int, num_heads: int, num_kv_heads: int, bias: bool) -> int:
    """W_Q and W_O are C x C; W_K and W_V are C x (g * d_h), with d_h = C // h."""
    C, g = embed_dim, num_kv_heads
    kv = g * (C // num_heads)
    return 2 * C * C + 2 * C * kv + ((2 * C + 2 * kv) if bias else 0)


def _gqa_public(g):
    return [Case((8, 4, 2, False)), Case((4096, 32, 8, False)), Case((512, 8, 2, True))]


def _gqa_hidden(g):
    # The first case has biases and 2 to 4 KV heads shared by 2 to 4 query heads each, so
    # that every listed mistake changes the count, each differently (with one KV head,
    # K/V of width num_kv_heads * C would count as much as four C x C matrices).
    cases = []
    for b, least in ((True, 2), (False, 1), (True, 1)):
        groups, per = _int(g, least, 4), _int(g, least, 4)
        h = groups * per
        cases.append(Case((h * _int(g, 1, 32), h, groups, b)))
    return cases


def _gqa(C, h, g, b, *, kv_width=None, bias=True):
    kv = kv_width if kv_width is not None else g * (C // h)
    return 2 * C * C + 2 * C * kv + ((2 * C + 2 * kv) if (b and bias) else 0)


GQA_PARAMS = Exercise(
    id="params.gqa_params", title="Parameters with grouped-query attention", lesson="04-parameter-counts",
    function="gqa_params", params=("embed_dim", "num_heads", "num_kv_heads", "bias"), points=3,
    reference=gqa_params, public=_gqa_public, hidden=_gqa_hidden, answer="int", public_seed=302,
    mistakes=(
        Mistake("only W_K and W_V shrink: they map C to num_kv_heads * d_h",
                lambda C, h, g, b: 4 * C * C + (4 * C if b else 0)),
        Mistake("the K and V projections are num_kv_heads * d_h wide, with d_h = C // num_heads, "
                "not num_kv_heads * C", lambda C, h, g, b: _gqa(C, h, g, b, kv_width=g * C)),
        Mistake("with bias=True add C + 2 * num_kv_heads * d_h + C biases",
                lambda C, h, g, b: _gqa(C, h, g, b, bias=False)),
        Mistake("the K and V biases are as wide as their projections, num_kv_heads * d_h each, "
                "not C: the biases add up to C + 2 * num_kv_heads * d_h + C",
                lambda C, h, g, b: _gqa(C, h, g, False) + (4 * C if b else 0)),
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
            Case((15 * 2 ** 19, 1, 24, 64, 1024, 2, 4), note="1 layer, float32, 24 query heads"),
            Case((1000, 1, 8, 64, 4, 1, 2), note="not even one K/V head fits")]


def _mkv_hidden(g):
    # Cases 1 and 2: 2**m heads and room for k K/V heads, strictly between two divisors
    # d0 < k < 2 d0: the answer is d0 and the divisibility mistake gives k. In case 1 (5 to 9
    # layers, 1 byte) forgetting the 2 gives 2 d0 and forgetting the layers 4 d0 or more; in
    # case 2 (1 layer, 4 bytes) forgetting the bytes gives 4 d0. Case 3: the budget is exactly
    # what g heads take (<= is right, < is not). Case 4: any shape.
    cases = []
    for layers, nbytes in ((_int(g, 5, 9), 1), (1, 4)):
        m = _int(g, 5, 7)
        d0 = 2 ** _int(g, 1, m - 4)
        k = d0 + _int(g, 1, d0 - 1)
        d, T, B = 16 * _int(g, 1, 8), _int(g, 1, 8192), _int(g, 1, 16)
        unit = _kv_unit(layers, d, T, B, nbytes)
        cases.append(Case((unit * k + _int(g, 0, unit - 1), layers, 2 ** m, d, T, B, nbytes)))
    h = (12, 16, 24, 32, 40, 48)[_int(g, 0, 5)]
    divisors = [x for x in range(2, h + 1) if h % x == 0]
    g2 = divisors[_int(g, 0, len(divisors) - 1)]
    L, d, T, B, e = _int(g, 1, 40), 16 * _int(g, 1, 8), _int(g, 1, 8192), _int(g, 1, 16), _int(g, 1, 4)
    cases.append(Case((_kv_unit(L, d, T, B, e) * g2, L, h, d, T, B, e)))
    h = _int(g, 1, 64)
    L, d, T, B, e = _int(g, 1, 80), 16 * _int(g, 1, 8), _int(g, 1, 32768), _int(g, 1, 16), _int(g, 1, 4)
    cases.append(Case((_int(g, 0, _kv_unit(L, d, T, B, e) * h), L, h, d, T, B, e)))
    return cases


def _mkv(M, L, h, d, T, B, e, *, unit=None, divisors=True, strict=False):
    unit = _kv_unit(L, d, T, B, e) if unit is None else unit
    fits = [x for x in range(1, h + 1) if (not divisors or h % x == 0) and (x * unit < M if strict else x * unit <= M)]
    return max(fits, default=0)


MAX_KV_HEADS = Exercise(
    id="params.max_kv_heads", title="How many K/V heads fit?", lesson="04-parameter-counts",
    function="max_kv_heads",
    params=("memory_bytes", "layers", "num_heads", "head_dim", "seq_len", "batch", "bytes_per_element"),
    points=3, reference=max_kv_heads, public=_mkv_public, hidden=_mkv_hidden, answer="int", public_seed=304,
    mistakes=(
        Mistake("the number of K/V heads must divide num_heads (each K/V head serves num_heads // g "
                "query heads): take the largest divisor that fits, not the largest count",
                lambda M, L, h, d, T, B, e: _mkv(M, L, h, d, T, B, e, divisors=False)),
        Mistake("the cache stores two tensors, keys and values: each K/V head costs 2 * layers * head_dim "
                "* seq_len * batch * bytes_per_element bytes",
                lambda M, L, h, d, T, B, e: _mkv(M, L, h, d, T, B, e, unit=L * d * T * B * e)),
        Mistake("every layer has its own cache: multiply by layers",
                lambda M, L, h, d, T, B, e: _mkv(M, L, h, d, T, B, e, unit=2 * d * T * B * e)),
        Mistake("count bytes, not elements: multiply by bytes_per_element",
                lambda M, L, h, d, T, B, e: _mkv(M, L, h, d, T, B, e, unit=2 * L * d * T * B)),
        Mistake("a cache of exactly memory_bytes fits: compare with <=, not <",
                lambda M, L, h, d, T, B, e: _mkv(M, L, h, d, T, B, e, strict=True)),
    ),
    forbidden=("mha",), dtypes=(),
)

EXERCISES = (MHA_PARAMS, GQA_PARAMS, MAX_KV_HEADS)
