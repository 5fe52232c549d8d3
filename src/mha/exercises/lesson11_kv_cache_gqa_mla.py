"""Exercises of lesson 11, decoding at scale: one decoding step with a cache, a grouped-query
layer made from a multi-head checkpoint, RoPE, and the longest context an MLA cache allows."""

from __future__ import annotations

import math

import torch

from mha.autograde import Case, Exercise, Mistake
from mha.autograde.draw import randint, randn, returned_nan


LESSON = "11-kv-cache-gqa-mla"


# ---------------------------------------------------------------- GQA from an MHA checkpoint

def gqa_from_mha(w: torch.Tensor, num_heads: int, num_kv_heads: int) -> torch.Tensor:
    """w (h * d, C): a key (or value) projection of multi-head attention in nn.Linear's layout,
    rows i * d .. (i + 1) * d - 1 for head i -> (g * d, C) for grouped-query attention: key head
    j is the mean of the heads j * (h // g) .. (j + 1) * (h // g) - 1 that will share it."""
    if num_kv_heads < 1 or num_heads % num_kv_heads:
        raise ValueError(f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads}")
    out, C = w.shape
    d = out // num_heads
    return w.view(num_kv_heads, num_heads // num_kv_heads, d, C).mean(dim=1).reshape(num_kv_heads * d, C)


def _pool_case(g, h, groups, d, c, dtype=torch.float32):
    return Case((randn(g, h * d, c, dtype=dtype), h, groups))


def _pool_public(g):
    return [_pool_case(g, 4, 2, 2, 3), _pool_case(g, 6, 3, 2, 4, torch.float64), _pool_case(g, 4, 1, 3, 2),
            Case((randn(g, 8, 5), 4, 3), raises="ValueError", names=("num_kv_heads",),
                 note="3 key/value heads cannot be shared by 4 query heads")]


def _pool_hidden(g):
    # g >= 2 groups of r >= 2 heads of width d >= 2, and C different from h * d: the repeat
    # grouping, a sum and pooling the wrong axis all differ
    cases = []
    for dt in (torch.float32, torch.float64):
        groups, per, d = randint(g, 2, 3), randint(g, 2, 3), randint(g, 2, 4)
        c = randint(g, 2, 9)
        while c == groups * per * d:
            c += 1
        cases.append(_pool_case(g, groups * per, groups, d, c, dt))
    h = randint(g, 2, 6) * 2
    bad = next(x for x in range(3, h + 2) if h % x)
    cases.append(Case((randn(g, h * 2, 3), h, bad), raises="ValueError", names=("num_kv_heads",),
                      note="num_kv_heads does not divide num_heads"))
    return cases


def _pool_wrong(kind):
    def wrong(w, h, groups):
        out, C = w.shape
        d = out // h
        heads = w.view(h, d, C)
        if kind == "repeat":        # key head j gets the heads j, j + g, j + 2g, ...
            return heads.view(h // groups, groups, d, C).mean(dim=0).reshape(groups * d, C)
        if kind == "sum":
            return heads.view(groups, h // groups, d, C).sum(dim=1).reshape(groups * d, C)
        if kind == "first":
            return heads[:: h // groups].reshape(groups * d, C)
        if kind == "all":
            return heads.mean(dim=0, keepdim=True).expand(groups, d, C).reshape(groups * d, C)
        # pooling along the features instead of the heads: (h, d) read as (d, h)
        return w.view(d, h, C).view(d, groups, h // groups, C).mean(dim=2).reshape(groups * d, C)
    return wrong


GQA_FROM_MHA = Exercise(
    id="decode.gqa_from_mha", title="Grouped-query attention from a multi-head checkpoint", lesson=LESSON,
    function="gqa_from_mha", params=("w", "num_heads", "num_kv_heads"), points=4,
    reference=gqa_from_mha, public=_pool_public, hidden=_pool_hidden, public_seed=1105,
    section="Fewer key/value heads: MQA and GQA",
    mistakes=(
        Mistake("key head j serves the CONSECUTIVE query heads j * (h // g) .. (j + 1) * (h // g) - 1 "
                "(repeat_interleave's grouping): average those, not the heads j, j + g, j + 2g, ...",
                _pool_wrong("repeat"), name="repeat-grouping"),
        Mistake("mean-pool the heads of a group: a sum makes the new key h // g times larger than "
                "any of the heads it replaces", _pool_wrong("sum"), name="sum-not-mean"),
        Mistake("use every head of the group: the conversion keeps their average, not the first one",
                _pool_wrong("first"), name="first-head-only"),
        Mistake("head i owns the d consecutive rows i * d .. (i + 1) * d - 1 of w (nn.Linear's "
                "(out, in) layout): group whole blocks of rows, not rows taken every h-th",
                _pool_wrong("features"), name="rows-every-h-th"),
        Mistake("each key/value head is the mean of ITS group of h // g query heads, not of all h heads: the "
                "groups keep what tells them apart", _pool_wrong("all"), name="mean-of-all-heads"),
    ),
    forbidden=("mha",),
)


# ---------------------------------------------------------------- RoPE, interleaved layout

def rope_rotate(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Interleaved RoPE: pair (x[2i], x[2i+1]) of row t rotated by positions[t] * base**(-2i/d).
    x (T, d) in float32 or float64, positions (T,) int; arithmetic in x's dtype."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)          # (d/2,)
    angle = positions.to(x.dtype)[:, None] * theta                        # (T, d/2)
    x1, x2 = x[:, 0::2], x[:, 1::2]                                       # (T, d/2) each
    return torch.stack((x1 * angle.cos() - x2 * angle.sin(),
                        x1 * angle.sin() + x2 * angle.cos()), dim=-1).flatten(1)   # (T, d)


def _rope_general(x, positions, base, *, layout="interleaved", exponent=2.0, sign=1.0):
    d = x.shape[-1]
    theta = base ** (-exponent * torch.arange(d // 2, dtype=x.dtype) / d)
    angle = sign * positions.to(x.dtype)[:, None] * theta
    cos, sin = angle.cos(), angle.sin()
    if layout == "half":
        x1, x2 = x[:, : d // 2], x[:, d // 2:]
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    x1, x2 = x[:, 0::2], x[:, 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(1)


def _rope_degrees(x, positions, base):
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    a = torch.deg2rad(positions.to(x.dtype)[:, None] * theta)
    x1, x2 = x[:, 0::2], x[:, 1::2]
    return torch.stack((x1 * a.cos() - x2 * a.sin(), x1 * a.sin() + x2 * a.cos()), dim=-1).flatten(1)


def _rope_reassembled_by_halves(x, positions, base):
    """Pairs rotated right, but put back as [all first members | all second members]."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    a = positions.to(x.dtype)[:, None] * theta
    x1, x2 = x[:, 0::2], x[:, 1::2]
    return torch.cat((x1 * a.cos() - x2 * a.sin(), x1 * a.sin() + x2 * a.cos()), dim=-1)


def _rope_sin_cos_swapped(x, positions, base):
    d = x.shape[-1]
    a = positions.to(x.dtype)[:, None] * base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    x1, x2 = x[:, 0::2], x[:, 1::2]
    return torch.stack((x1 * a.sin() - x2 * a.cos(), x1 * a.cos() + x2 * a.sin()), dim=-1).flatten(1)


def _rope_members_swapped(x, positions, base):
    """Each pair read as (x[2i+1], x[2i]): the odd member taken as the first."""
    d = x.shape[-1]
    a = positions.to(x.dtype)[:, None] * base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    x1, x2 = x[:, 1::2], x[:, 0::2]
    return torch.stack((x1 * a.cos() - x2 * a.sin(), x1 * a.sin() + x2 * a.cos()), dim=-1).flatten(1)


def _rope_public(g):
    return [Case((randn(g, 4, 4), torch.arange(4), 10000.0), note="positions 0..3, d = 4"),
            Case((randn(g, 3, 8, dtype=torch.float64), torch.tensor([5, 6, 7]), 100.0),
                 note="positions that start at 5 (tokens after a cache)"),
            Case((randn(g, 5, 6), torch.arange(5), 10.0), note="base 10")]


def _rope_hidden(g):
    cases = []
    for dtype in (torch.float32, torch.float64, torch.float32):
        t, d = randint(g, 2, 7), 2 * randint(g, 2, 6)                  # d >= 4: both layouts and exponents differ
        start = randint(g, 1, 50)                                   # positions never start at 0
        base = (10.0, 100.0, 10000.0)[randint(g, 0, 2)]
        cases.append(Case((randn(g, t, d, dtype=dtype), torch.arange(start, start + t), base)))
    return cases


def _rope_explain(case, outcome):
    """A float64 answer that is right only to float32 precision computed its angles in float32."""
    if case.raises or outcome.status != "value" or outcome.value.kind != "tensor":
        return None
    x, positions, base = case.args
    got = outcome.value.data
    if x.dtype != torch.float64 or str(got.dtype) != "float64" or tuple(got.shape) != tuple(x.shape):
        return None
    want = rope_rotate(x, positions, base).numpy()
    import numpy as np
    if np.allclose(got, want, rtol=1e-4, atol=1e-5):
        return ("right to float32 precision only: compute the frequencies and angles in x's dtype "
                "(float64 here), e.g. torch.arange(0, d, 2, dtype=x.dtype), not with .float()")
    return None


ROPE = Exercise(
    id="decode.rope_rotate", title="Rotary position embedding", lesson=LESSON,
    function="rope_rotate", params=("x", "positions", "base"), points=4,
    reference=rope_rotate, public=_rope_public, hidden=_rope_hidden, public_seed=1102,
    section="Rotary position embeddings (RoPE)",
    mistakes=(
        Mistake("that is the 'half' layout, pairs (i, i + d/2); this exercise asks for the interleaved "
                "layout, pairs (2i, 2i + 1): x[:, 0::2] and x[:, 1::2]",
                lambda x, p, b: _rope_general(x, p, b, layout="half"), name="half-layout"),
        Mistake("pair i turns at theta_i = base ** (-2i / d): the exponent is 2i/d (i counts pairs), "
                "not i/d", lambda x, p, b: _rope_general(x, p, b, exponent=1.0), name="exponent-i-over-d"),
        Mistake("the rotation goes the other way: (x1 cos a - x2 sin a, x1 sin a + x2 cos a)",
                lambda x, p, b: _rope_general(x, p, b, sign=-1.0), name="rotation-reversed"),
        Mistake("rotate row t by the position given in positions[t], not by t",
                lambda x, p, b: rope_rotate(x, torch.arange(x.shape[0]), b), name="row-index-not-position",
                section="RoPE meets the KV cache"),
        Mistake("the exponent is counted twice: torch.arange(0, d, 2) already holds 2i, so theta = "
                "base ** (-arange(0, d, 2) / d); multiplying by 2 again gives base ** (-4i / d)",
                lambda x, p, b: _rope_general(x, p, b, exponent=4.0), name="exponent-doubled"),
        Mistake("put each rotated pair back where it came from, positions 2i and 2i + 1: "
                "torch.stack((first, second), dim=-1).flatten(1), not torch.cat of the two halves",
                _rope_reassembled_by_halves, name="pairs-put-back-as-halves"),
        Mistake("each pair turns by an angle in radians, position * theta_i: torch's cos and sin take radians, "
                "so no conversion from degrees", lambda x, p, b: _rope_degrees(x, p, b), name="degrees"),
        Mistake("the frequencies fall with i: theta_i = base ** (-2i / d), a negative exponent; base ** (2i / d) "
                "makes the high pairs spin fastest", lambda x, p, b: _rope_general(x, p, b, exponent=-2.0),
                name="exponent-sign"),
        Mistake("rotate row t by positions[t] as given: the positions already count from where the sequence "
                "starts (0 for its first token); adding 1 turns every row one step too far",
                lambda x, p, b: rope_rotate(x, p + 1, b), name="positions-plus-one"),
        Mistake("a rotation by the angle a takes (x1, x2) to (x1 cos a - x2 sin a, x1 sin a + x2 cos a): cos "
                "multiplies each member itself, sin the other one", _rope_sin_cos_swapped, name="sin-cos-swapped"),
        Mistake("the first member of pair i is x[2i], the even index, and the second x[2i + 1]: x1 = x[:, 0::2], "
                "x2 = x[:, 1::2]; read the other way round, each pair turns the wrong way and lands swapped",
                _rope_members_swapped, name="pair-members-swapped"),
    ),
    forbidden=("mha",), explain=_rope_explain,
)


# ---------------------------------------------------------------- how long a context an MLA cache allows

def mla_max_context(memory_bytes: int, layers: int, num_heads: int, head_dim: int, kv_latent_dim: int,
                    rope_dim: int, batch: int, bytes_per_element: int) -> int:
    """The longest context (tokens per sequence) whose MLA cache for ``batch`` sequences fits in
    ``memory_bytes``: per token and layer MLA caches the latent (kv_latent_dim) and ONE RoPE key
    (rope_dim) shared by all heads; num_heads and head_dim do not enter."""
    per_token = layers * (kv_latent_dim + rope_dim) * batch * bytes_per_element   # every layer, every sequence
    return memory_bytes // per_token


def _mla_public(g):
    return [Case((40 * 2 ** 30, 60, 128, 128, 512, 64, 8, 2), note="DeepSeek-V2's shape: 8 sequences in 40 GiB, 16-bit"),
            Case((10_000_000, 4, 8, 16, 32, 8, 3, 4), note="a small model in float32, 3 sequences"),
            Case((196_800, 2, 4, 16, 64, 16, 5, 2), note="a budget that fits a whole number of tokens exactly")]


def _mla_hidden(g):
    # layers, batch and bytes per element all different and >= 2 (forgetting one of them then
    # gives its own count), a budget that is not a whole number of tokens (so that rounding up
    # shows), and one that is exactly a whole number
    cases = []
    for remainder in ("large", "any", "none"):
        L, B, e = randint(g, 5, 40), randint(g, 2, 16), randint(g, 2, 4)   # L > e always
        while B in (L, e):
            B += 1
        d_h = 16 * randint(g, 1, 8)
        h, dc, dr = randint(g, 2, 64), d_h * randint(g, 1, 6), 2 * randint(g, 1, 32)
        per_token = L * (dc + dr) * B * e
        tokens = randint(g, 1, 20000)
        extra = {"large": randint(g, per_token // 2 + 1, per_token - 1), "any": randint(g, 1, per_token - 1), "none": 0}
        memory = per_token * tokens + extra[remainder]     # "large": rounding to the nearest token shows
        cases.append(Case((memory, L, h, d_h, dc, dr, B, e)))
    return cases


def _mla_tokens(M, L, B, e, width, *, up=False):
    per_token = L * width * B * e
    return -(-M // per_token) if up else M // per_token


MLA_CONTEXT = Exercise(
    id="decode.mla_max_context", title="How long a context fits in an MLA cache", lesson=LESSON,
    function="mla_max_context",
    params=("memory_bytes", "layers", "num_heads", "head_dim", "kv_latent_dim", "rope_dim", "batch",
            "bytes_per_element"),
    points=3, reference=mla_max_context, public=_mla_public, hidden=_mla_hidden, answer="int",
    public_seed=1103, dtypes=(),
    section="Multi-head latent attention (MLA)",
    mistakes=(
        Mistake("the decoupled RoPE key is cached too: kv_latent_dim + rope_dim values per token and layer",
                lambda M, L, h, d, dc, dr, B, e: _mla_tokens(M, L, B, e, dc), name="no-rope-key"),
        Mistake("one RoPE key is shared by all heads: add rope_dim once, not num_heads * rope_dim",
                lambda M, L, h, d, dc, dr, B, e: _mla_tokens(M, L, B, e, dc + h * dr), name="rope-key-per-head"),
        Mistake("keys and values are both rebuilt from the same latent: store it once, no factor 2",
                lambda M, L, h, d, dc, dr, B, e: _mla_tokens(M, L, B, e, 2 * dc + dr), name="latent-twice"),
        Mistake("that is the cache of plain multi-head attention, 2 * num_heads * head_dim per token: "
                "MLA stores the latent instead",
                lambda M, L, h, d, dc, dr, B, e: _mla_tokens(M, L, B, e, 2 * h * d), name="mha-cache",
                section="The cache of published models"),
        Mistake("every layer has its own cache: multiply by layers",
                lambda M, L, h, d, dc, dr, B, e: _mla_tokens(M, 1, B, e, dc + dr), name="one-layer",
                section="The cache of published models"),
        Mistake("every sequence of the batch has its own cache: multiply by batch",
                lambda M, L, h, d, dc, dr, B, e: _mla_tokens(M, L, 1, e, dc + dr), name="one-sequence"),
        Mistake("count bytes, not numbers: multiply by bytes_per_element",
                lambda M, L, h, d, dc, dr, B, e: _mla_tokens(M, L, B, 1, dc + dr), name="elements-not-bytes"),
        Mistake("the latent and the RoPE key are each stored once, not once for K and once for V: "
                "kv_latent_dim + rope_dim per token and layer, not twice that",
                lambda M, L, h, d, dc, dr, B, e: _mla_tokens(M, L, B, e, 2 * (dc + dr)), name="k-and-v-each"),
        Mistake("round down: a context one token longer than the budget holds does not fit",
                lambda M, L, h, d, dc, dr, B, e: _mla_tokens(M, L, B, e, dc + dr, up=True), name="rounded-up"),
    ),
    forbidden=("mha",),
)


# ---------------------------------------------------------------- one decoding step

def decode_step(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, k_new: torch.Tensor,
                v_new: torch.Tensor) -> torch.Tensor:
    """Attention of Tn new tokens over the cached ones and themselves, causal (bottom-right).

    q, k_new, v_new (B, h, Tn, d); k_cache, v_cache (B, h, Tc, d) -> (B, h, Tn, d).
    """
    k = torch.cat([k_cache, k_new], dim=-2)                       # (B, h, Tc + Tn, d)
    v = torch.cat([v_cache, v_new], dim=-2)
    Tn, Tk = q.shape[-2], k.shape[-2]
    allowed = torch.ones(Tn, Tk, dtype=torch.bool).tril(diagonal=Tk - Tn)   # new token i sees keys <= Tc + i
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])   # (B, h, Tn, Tk)
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v


def _attend(q, k, v, allowed):
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _step_top_left(q, kc, vc, kn, vn):
    k, v = torch.cat([kc, kn], -2), torch.cat([vc, vn], -2)
    return _attend(q, k, v, torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril())


def _step_no_mask(q, kc, vc, kn, vn):
    return _attend(q, torch.cat([kc, kn], -2), torch.cat([vc, vn], -2), None)


def _step_no_cache(q, kc, vc, kn, vn):
    return decode_step(q, kc[..., :0, :], vc[..., :0, :], kn, vn)


def _step_wrong_order(q, kc, vc, kn, vn):
    return decode_step(q, kn, vn, kc, vc)


def _step_variant(q, kc, vc, kn, vn, *, diagonal=None, scale=True, multiply=False, inverted=False):
    k, v = torch.cat([kc, kn], -2), torch.cat([vc, vn], -2)
    Tn, Tk = q.shape[-2], k.shape[-2]
    allowed = torch.ones(Tn, Tk, dtype=torch.bool).tril(diagonal=Tk - Tn if diagonal is None else diagonal(Tn, Tk))
    allowed = ~allowed if inverted else allowed
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale else 1.0)
    scores = scores * allowed if multiply else scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _step_case(g, b, h, tc, tn, d, dtype=torch.float32):
    return Case(tuple(randn(g, b, h, t, d, dtype=dtype, scale=1.5) for t in (tn, tc, tc, tn, tn)))


def _step_public(g):
    return [_step_case(g, 1, 2, 5, 1, 4), _step_case(g, 2, 1, 3, 3, 4, torch.float64), _step_case(g, 1, 2, 4, 2, 8)]


def _step_hidden(g):
    # Tn >= 2 new tokens and Tc >= 2 cached ones, Tc not Tn or Tn + 1: every listed mask
    # mistake then gives its own answer (with Tc = Tn the offset Tn is right by chance, with
    # Tc = Tn + 1 it is the mask without the diagonal, with Tc = 1 that one is top-left)
    cases = []
    for dtype in (torch.float32, torch.float64, torch.float32):
        tn = randint(g, 2, 4)
        tc = randint(g, 2, 6)
        if tc in (tn, tn + 1):
            tc = tn + 2
        cases.append(_step_case(g, randint(g, 1, 2), randint(g, 1, 3), tc, tn, randint(g, 2, 8), dtype))
    return cases


def _step_explain(case, outcome):
    if returned_nan(outcome):
        return ("a row whose keys are all blocked is all -inf, and its softmax is 0 / 0 = NaN; every new token "
                "may see the whole cache, so no row should be empty: is your mask True = may attend, and "
                "does masked_fill get the blocked entries?")
    return None


STEP = Exercise(
    id="decode.decode_step", title="One decoding step with a cache", lesson=LESSON,
    function="decode_step", params=("q", "k_cache", "v_cache", "k_new", "v_new"), points=4,
    reference=decode_step, public=_step_public, hidden=_step_hidden, public_seed=1104,
    section="Decoding with a KV cache",
    mistakes=(
        Mistake("align the causal mask bottom-right: new token i sits at position Tc + i and may see "
                "every cached key; a top-left mask (what is_causal=True of torch's fused attention does "
                "when Tq != Tk) hides most of the cache", _step_top_left, name="top-left"),
        Mistake("the new tokens must not see each other's future: new token i sees the cache and new "
                "tokens 0..i only", _step_no_mask, name="no-mask"),
        Mistake("attend over the cached keys and values too: concatenate the cache before the new ones",
                _step_no_cache, name="cache-left-out"),
        Mistake("the cached tokens come first: concatenate [cache, new] along the time axis, not [new, cache]",
                _step_wrong_order, name="new-before-cache"),
        Mistake("scale the scores by 1 / sqrt(d) before the softmax",
                lambda *a: _step_variant(*a, scale=False), name="no-scale"),
        Mistake("a new token may attend to itself: new token i sees the keys up to position Tc + i, "
                "included (one diagonal further than a strictly-earlier mask)",
                lambda *a: _step_variant(*a, diagonal=lambda tn, tk: tk - tn - 1), name="no-diagonal"),
        Mistake("the offset of the diagonal is the number of cached tokens, Tc = Tk - Tn, not Tn",
                lambda *a: _step_variant(*a, diagonal=lambda tn, tk: tn), name="offset-tn"),
        Mistake("multiplying the scores by the mask sets a blocked score to 0, and exp(0) still gives it "
                "weight: fill blocked scores with -inf", lambda *a: _step_variant(*a, multiply=True),
                name="mask-multiplied"),
        Mistake("the mask says True = may attend: masked_fill writes -inf where its mask is True, so give it "
                "the blocked entries, ~allowed; filling the allowed ones hides everything a new token may see",
                lambda *a: _step_variant(*a, inverted=True), name="allowed-filled"),
    ),
    forbidden=("mha", "torch.nn.attention.bias", "causal_lower_right", "causal_upper_left"), explain=_step_explain,
)

EXERCISES = (STEP, GQA_FROM_MHA, ROPE, MLA_CONTEXT)   # in the lesson's order
