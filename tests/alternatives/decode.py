"""Correct solutions of the decoding exercises (lesson 11), each written differently from the reference."""

import math

import numpy as np
import torch


# ---------------------------------------------------------------- expand_kv_heads

def expand_index_select(kv, num_heads):
    """Gather K/V head i // r for every query head i."""
    g = kv.shape[1]
    if num_heads % g:
        raise ValueError("num_heads must be a multiple of the number of K/V heads")
    owner = torch.arange(num_heads) // (num_heads // g)          # [0, 0, 1, 1, ...]
    return kv.index_select(1, owner)


def expand_broadcast_reshape(kv, num_heads):
    """Insert a group axis, broadcast it, then fold it into the head axis."""
    B, g, T, d = kv.shape
    if num_heads % g:
        raise ValueError("num_heads must be a multiple of the number of K/V heads")
    r = num_heads // g
    return kv[:, :, None].expand(B, g, r, T, d).reshape(B, g * r, T, d)   # (B, g, r, T, d) -> (B, h, T, d)


def expand_cat_loop(kv, num_heads):
    g = kv.shape[1]
    if num_heads % g:
        raise ValueError("num_heads must be a multiple of the number of K/V heads")
    return torch.cat([kv[:, j:j + 1] for j in range(g) for _ in range(num_heads // g)], dim=1)


# ---------------------------------------------------------------- rope_rotate

def rope_complex(x, positions, base):
    """Pairs as complex numbers multiplied by exp(i * angle)."""
    T, d = x.shape
    i = torch.arange(d // 2, dtype=x.dtype)
    angle = positions.to(x.dtype)[:, None] * base ** (-2 * i / d)            # (T, d/2)
    z = torch.view_as_complex(x.reshape(T, d // 2, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angle), angle)).reshape(T, d)


def rope_rotation_matrices(x, positions, base):
    """One 2 x 2 rotation matrix per (row, pair), in numpy float64, then back to x's dtype."""
    a = x.double().numpy()
    T, d = a.shape
    out = np.empty_like(a)
    for t in range(T):
        for i in range(d // 2):
            ang = int(positions[t]) * base ** (-2.0 * i / d)
            c, s = math.cos(ang), math.sin(ang)
            out[t, 2 * i:2 * i + 2] = np.array([[c, -s], [s, c]]) @ a[t, 2 * i:2 * i + 2]
    return torch.from_numpy(out).to(x.dtype)


def rope_rotate_half_trick(x, positions, base):
    """x * cos + rotate(x) * sin, with each frequency repeated for both features of its pair."""
    d = x.shape[-1]
    theta = torch.exp(-math.log(base) * torch.arange(0, d, 2, dtype=x.dtype) / d)
    angle = (positions.to(x.dtype)[:, None] * theta).repeat_interleave(2, dim=-1)   # (T, d)
    rotated = torch.stack((-x[:, 1::2], x[:, 0::2]), dim=-1).flatten(1)             # (-x2, x1) per pair
    return x * angle.cos() + rotated * angle.sin()


def rope_slice_assign(x, positions, base):
    """Frequencies from Python floats (in x's dtype), written into the even and odd slots."""
    d = x.shape[1]
    theta = torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=x.dtype)   # (d/2,)
    a = positions.to(x.dtype)[:, None] * theta                                          # (T, d/2)
    out = torch.empty_like(x)
    out[:, 0::2] = x[:, 0::2] * a.cos() - x[:, 1::2] * a.sin()
    out[:, 1::2] = x[:, 0::2] * a.sin() + x[:, 1::2] * a.cos()
    return out


# ---------------------------------------------------------------- mla_cache_bytes

def mla_bytes_per_token_first(layers, num_heads, head_dim, kv_latent_dim, rope_dim, seq_len, bytes_per_element):
    per_token = (kv_latent_dim + rope_dim) * bytes_per_element * layers
    return per_token * seq_len


def mla_bytes_sum_of_parts(layers, num_heads, head_dim, kv_latent_dim, rope_dim, seq_len, bytes_per_element):
    latent = layers * seq_len * kv_latent_dim * bytes_per_element
    rope_key = layers * seq_len * rope_dim * bytes_per_element
    return int(latent + rope_key)


# ---------------------------------------------------------------- decode_step

def step_einsum_float64(q, k_cache, v_cache, k_new, v_new):
    """einsum in float64 with an explicit position comparison, then back to q's dtype."""
    k = torch.cat([k_cache, k_new], dim=-2).double()
    v = torch.cat([v_cache, v_new], dim=-2).double()
    Tc, Tn = k_cache.shape[-2], q.shape[-2]
    q_pos = Tc + torch.arange(Tn)                                 # absolute positions of the new tokens
    k_pos = torch.arange(Tc + Tn)
    scores = torch.einsum("bhid,bhjd->bhij", q.double(), k) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
    return torch.einsum("bhij,bhjd->bhid", torch.softmax(scores, dim=-1), v).to(q.dtype)


def step_token_by_token(q, k_cache, v_cache, k_new, v_new):
    """New token i attends to the cache and new tokens 0..i, one token at a time."""
    outs = []
    for i in range(q.shape[-2]):
        k = torch.cat([k_cache, k_new[..., :i + 1, :]], dim=-2)
        v = torch.cat([v_cache, v_new[..., :i + 1, :]], dim=-2)
        w = torch.softmax(q[..., i:i + 1, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        outs.append(w @ v)
    return torch.cat(outs, dim=-2)


def step_torch_sdpa(q, k_cache, v_cache, k_new, v_new):
    """torch's fused attention with an explicit bottom-right mask (True = may attend)."""
    k, v = torch.cat([k_cache, k_new], dim=-2), torch.cat([v_cache, v_new], dim=-2)
    Tn, Tk = q.shape[-2], k.shape[-2]
    mask = torch.ones(Tn, Tk, dtype=torch.bool).tril(diagonal=Tk - Tn)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def step_additive_mask(q, k_cache, v_cache, k_new, v_new):
    """An additive float mask: -inf above the shifted diagonal (blocked), 0 elsewhere."""
    k, v = torch.cat([k_cache, k_new], dim=-2), torch.cat([v_cache, v_new], dim=-2)
    Tc, Tn = k_cache.shape[-2], q.shape[-2]
    bias = torch.full((Tn, Tc + Tn), float("-inf"), dtype=q.dtype).triu(diagonal=Tc + 1)   # (Tn, Tk)
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias, dim=-1) @ v


CORRECT = {
    "decode.expand_kv_heads": [expand_index_select, expand_broadcast_reshape, expand_cat_loop],
    "decode.rope_rotate": [rope_complex, rope_rotation_matrices, rope_rotate_half_trick, rope_slice_assign],
    "decode.mla_cache_bytes": [mla_bytes_per_token_first, mla_bytes_sum_of_parts],
    "decode.decode_step": [step_einsum_float64, step_token_by_token, step_torch_sdpa, step_additive_mask],
}
