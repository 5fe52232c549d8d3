"""Exercises of lesson 04, parameter counts: MHA, GQA and the KV cache."""

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


# ---------------------------------------------------------------- 9. KV-cache bytes

def kv_cache_bytes(layers: int, kv_heads: int, head_dim: int, seq_len: int, batch: int,
                   bytes_per_element: int) -> int:
    """Keys and values (the 2) for every layer, KV head, position and sequence."""
    return 2 * layers * kv_heads * head_dim * seq_len * batch * bytes_per_element


def _kv_public(g):
    return [Case((2, 4, 64, 100, 3, 4)), Case((32, 8, 128, 8192, 1, 2)), Case((80, 8, 128, 4096, 4, 2))]


def _kv_hidden(g):
    # bytes_per_element is 3 or 4 in the first case, so that forgetting it shows, and shows
    # differently from forgetting the 2 (with 2 bytes both mistakes give the same count)
    return [Case((_int(g, 1, 96), _int(g, 1, 64), 16 * _int(g, 1, 16), _int(g, 1, 32768),
                  _int(g, 1, 64), _int(g, least, 4))) for least in (3, 1, 1)]


KV_BYTES = Exercise(
    id="params.kv_cache_bytes", title="Size of the KV cache", lesson="04-parameter-counts",
    function="kv_cache_bytes", params=("layers", "kv_heads", "head_dim", "seq_len", "batch",
                                       "bytes_per_element"), points=2,
    reference=kv_cache_bytes, public=_kv_public, hidden=_kv_hidden, answer="int", public_seed=303,
    mistakes=(
        Mistake("the cache stores two tensors, keys and values: multiply by 2",
                lambda L, g, d, T, B, e: L * g * d * T * B * e),
        Mistake("multiply by bytes_per_element to get bytes, not elements",
                lambda L, g, d, T, B, e: 2 * L * g * d * T * B),
    ),
    forbidden=("mha",), dtypes=(),
)

EXERCISES = (MHA_PARAMS, GQA_PARAMS, KV_BYTES)
