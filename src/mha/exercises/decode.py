"""Exercises of lesson 11, decoding at scale: one decoding step with a cache, K/V heads for
GQA, RoPE, the MLA cache."""

from __future__ import annotations

import math

import torch

from ._core import Case, Exercise, Mistake
from .heads import _int, _randn

LESSON = "11-kv-cache-gqa-mla"


# ---------------------------------------------------------------- expand K/V heads (GQA)

def expand_kv_heads(kv: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, g, T, d) -> (B, num_heads, T, d): query head i reads K/V head i // (num_heads // g)."""
    g = kv.shape[1]
    if num_heads % g:
        raise ValueError(f"num_heads={num_heads} must be a multiple of the {g} K/V heads")
    return kv.repeat_interleave(num_heads // g, dim=1)


def _kv(g, b, groups, t, d, dtype=torch.float32):
    return _randn(g, b, groups, t, d, dtype=dtype)


def _expand_public(g):
    return [Case((_kv(g, 1, 2, 3, 4), 4), note="2 K/V heads for 4 query heads"),
            Case((_kv(g, 2, 3, 2, 2, torch.float64), 6), note="3 K/V heads for 6 query heads"),
            Case((_kv(g, 1, 1, 4, 3), 4), note="multi-query: one K/V head"),
            Case((_kv(g, 1, 4, 2, 2), 6), raises="ValueError", note="6 query heads cannot share 4 K/V heads")]


def _expand_hidden(g):
    groups, per = _int(g, 2, 4), _int(g, 2, 4)          # g >= 2 and h / g >= 2: `repeat` differs
    groups2, per2 = _int(g, 2, 3), _int(g, 2, 3)
    groups3 = _int(g, 2, 6)
    return [Case((_kv(g, _int(g, 1, 3), groups, _int(g, 1, 5), _int(g, 1, 6)), groups * per)),
            Case((_kv(g, _int(g, 1, 2), groups2, _int(g, 2, 4), _int(g, 2, 5), torch.float64), groups2 * per2)),
            Case((_kv(g, 1, groups3, _int(g, 1, 3), 2), groups3 * _int(g, 1, 3) + 1), raises="ValueError")]


def _expand_explain(case, outcome):
    if case.raises is None and outcome.status == "value" and outcome.value.kind == "tensor":
        kv, h = case.args
        if tuple(outcome.value.data.shape) == (kv.shape[0], kv.shape[1], kv.shape[2] * (h // kv.shape[1]),
                                               kv.shape[3]):
            return "repeat along dim=1, the head axis of (B, g, T, d), not along the time axis"
    return None


EXPAND = Exercise(
    id="decode.expand_kv_heads", title="Share K/V heads between query heads", lesson=LESSON,
    function="expand_kv_heads", params=("kv", "num_heads"), points=3,
    reference=expand_kv_heads, public=_expand_public, hidden=_expand_hidden, public_seed=1101,
    mistakes=(
        Mistake("kv.repeat(...) tiles the heads as [0, 1, 0, 1, ...], so query head i reads K/V head "
                "i % g: consecutive query heads share a K/V head, [0, 0, 1, 1, ...], which is "
                "repeat_interleave",
                lambda kv, h: kv.repeat(1, h // kv.shape[1], 1, 1)),
    ),
    forbidden=("mha",), explain=_expand_explain,
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


def _rope_public(g):
    return [Case((_randn(g, 4, 4), torch.arange(4), 10000.0), note="positions 0..3, d = 4"),
            Case((_randn(g, 3, 8, dtype=torch.float64), torch.tensor([5, 6, 7]), 100.0),
                 note="positions that start at 5 (tokens after a cache)"),
            Case((_randn(g, 5, 6), torch.arange(5), 10.0), note="base 10")]


def _rope_hidden(g):
    cases = []
    for dtype in (torch.float32, torch.float64, torch.float32):
        t, d = _int(g, 2, 7), 2 * _int(g, 2, 6)                  # d >= 4: both layouts and exponents differ
        start = _int(g, 1, 50)                                   # positions never start at 0
        base = (10.0, 100.0, 10000.0)[_int(g, 0, 2)]
        cases.append(Case((_randn(g, t, d, dtype=dtype), torch.arange(start, start + t), base)))
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
    mistakes=(
        Mistake("that is the 'half' layout, pairs (i, i + d/2); this exercise asks for the interleaved "
                "layout, pairs (2i, 2i + 1): x[:, 0::2] and x[:, 1::2]",
                lambda x, p, b: _rope_general(x, p, b, layout="half")),
        Mistake("pair i turns at theta_i = base ** (-2i / d): the exponent is 2i/d (i counts pairs), "
                "not i/d", lambda x, p, b: _rope_general(x, p, b, exponent=1.0)),
        Mistake("the rotation goes the other way: (x1 cos a - x2 sin a, x1 sin a + x2 cos a)",
                lambda x, p, b: _rope_general(x, p, b, sign=-1.0)),
        Mistake("rotate row t by the position given in positions[t], not by t",
                lambda x, p, b: rope_rotate(x, torch.arange(x.shape[0]), b)),
    ),
    forbidden=("mha",), explain=_rope_explain,
)


# ---------------------------------------------------------------- bytes of an MLA cache

def mla_cache_bytes(layers: int, num_heads: int, head_dim: int, kv_latent_dim: int, rope_dim: int,
                    seq_len: int, bytes_per_element: int) -> int:
    """Per token and layer MLA caches the latent (kv_latent_dim) and ONE RoPE key (rope_dim)
    shared by all heads; num_heads and head_dim do not enter."""
    return layers * (kv_latent_dim + rope_dim) * seq_len * bytes_per_element


def _mla_public(g):
    return [Case((60, 128, 128, 512, 64, 1, 2), note="DeepSeek-V2, one token, 16-bit"),
            Case((2, 4, 16, 32, 8, 10, 4), note="a small model in float32"),
            Case((60, 128, 128, 512, 64, 4096, 2), note="DeepSeek-V2, 4096 tokens")]


def _mla_hidden(g):
    cases = []
    for _ in range(3):
        d_h = 16 * _int(g, 1, 8)
        cases.append(Case((_int(g, 1, 64), _int(g, 2, 64), d_h, d_h * _int(g, 1, 6), 2 * _int(g, 1, 32),
                           _int(g, 1, 20000), _int(g, 1, 4))))
    return cases


MLA_BYTES = Exercise(
    id="decode.mla_cache_bytes", title="Size of an MLA cache", lesson=LESSON,
    function="mla_cache_bytes",
    params=("layers", "num_heads", "head_dim", "kv_latent_dim", "rope_dim", "seq_len", "bytes_per_element"),
    points=2, reference=mla_cache_bytes, public=_mla_public, hidden=_mla_hidden, answer="int",
    public_seed=1103, dtypes=(),
    mistakes=(
        Mistake("the decoupled RoPE key is cached too: kv_latent_dim + rope_dim values per token and layer",
                lambda L, h, d, dc, dr, T, e: L * dc * T * e),
        Mistake("one RoPE key is shared by all heads: add rope_dim once, not num_heads * rope_dim",
                lambda L, h, d, dc, dr, T, e: L * (dc + h * dr) * T * e),
        Mistake("keys and values are both rebuilt from the same latent: store it once, no factor 2",
                lambda L, h, d, dc, dr, T, e: L * (2 * dc + dr) * T * e),
        Mistake("that is the cache of plain multi-head attention, 2 * num_heads * head_dim per token: "
                "MLA stores the latent instead",
                lambda L, h, d, dc, dr, T, e: 2 * L * h * d * T * e),
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


def _step_case(g, b, h, tc, tn, d, dtype=torch.float32):
    return Case(tuple(_randn(g, b, h, t, d, dtype=dtype, scale=1.5) for t in (tn, tc, tc, tn, tn)))


def _step_public(g):
    return [_step_case(g, 1, 2, 5, 1, 4), _step_case(g, 2, 1, 3, 3, 4, torch.float64), _step_case(g, 1, 2, 4, 2, 8)]


def _step_hidden(g):
    return [_step_case(g, _int(g, 1, 2), _int(g, 1, 3), _int(g, 1, 6), _int(g, 2, 4), _int(g, 2, 8), dtype)
            for dtype in (torch.float32, torch.float64, torch.float32)]   # Tc >= 1, Tn >= 2


STEP = Exercise(
    id="decode.decode_step", title="One decoding step with a cache", lesson=LESSON,
    function="decode_step", params=("q", "k_cache", "v_cache", "k_new", "v_new"), points=4,
    reference=decode_step, public=_step_public, hidden=_step_hidden, public_seed=1104,
    mistakes=(
        Mistake("align the causal mask bottom-right: new token i sits at position Tc + i and may see "
                "every cached key; a top-left mask (what is_causal=True of torch's fused attention does "
                "when Tq != Tk) hides most of the cache", _step_top_left),
        Mistake("the new tokens must not see each other's future: new token i sees the cache and new "
                "tokens 0..i only", _step_no_mask),
        Mistake("attend over the cached keys and values too: concatenate the cache before the new ones",
                _step_no_cache),
        Mistake("the cached tokens come first: concatenate [cache, new] along the time axis, not [new, cache]",
                _step_wrong_order),
    ),
    forbidden=("mha", "torch.nn.attention.bias", "causal_lower_right", "causal_upper_left"),
)

EXERCISES = (STEP, EXPAND, ROPE, MLA_BYTES)   # in the lesson's order
