"""Answers to the decoding exercises (lesson 11): correct ones written differently from the
references, and classic wrong ones."""

import math

import numpy as np
import torch


# ---------------------------------------------------------------- gqa_from_mha

def pool_loop(w, num_heads, num_kv_heads):
    """Each key head from its group's row blocks, averaged, then stacked."""
    if num_heads % num_kv_heads:
        raise ValueError(f"num_kv_heads={num_kv_heads} does not divide num_heads={num_heads}")
    d = w.shape[0] // num_heads
    per = num_heads // num_kv_heads
    blocks = [sum(w[(j * per + r) * d:(j * per + r + 1) * d] for r in range(per)) / per
              for j in range(num_kv_heads)]
    return torch.cat(blocks)


def pool_matrix(w, num_heads, num_kv_heads):
    """A (g d, h d) averaging matrix applied to w."""
    if num_heads % num_kv_heads != 0:
        raise ValueError("num_kv_heads must divide num_heads")
    d = w.shape[0] // num_heads
    per = num_heads // num_kv_heads
    group_of_head = torch.arange(num_heads) // per                          # (h,)
    pool = (torch.arange(num_kv_heads)[:, None] == group_of_head[None, :]).to(w.dtype) / per   # (g, h)
    return torch.kron(pool, torch.eye(d, dtype=w.dtype)) @ w


def pool_avg_pool(w, num_heads, num_kv_heads):
    """avg_pool1d over the heads, with the features as channels."""
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}")
    d, C = w.shape[0] // num_heads, w.shape[1]
    per = num_heads // num_kv_heads
    x = w.view(num_heads, d * C).T[None]                                     # (1, d C, h)
    pooled = torch.nn.functional.avg_pool1d(x, per)                          # (1, d C, g)
    return pooled[0].T.reshape(num_kv_heads * d, C)


def pool_wrong_no_check(w, num_heads, num_kv_heads):
    """Never raises: a non-divisor gives a wrong shape or a crash later."""
    d = w.shape[0] // num_heads
    per = max(1, num_heads // num_kv_heads)
    return w[: num_kv_heads * per * d].reshape(num_kv_heads, per, d, -1).mean(1).reshape(num_kv_heads * d, -1)


def pool_wrong_message(w, num_heads, num_kv_heads):
    """Raises, with a message that names nothing."""
    if num_heads % num_kv_heads:
        raise ValueError("bad head counts")
    return pool_loop(w, num_heads, num_kv_heads)


def pool_wrong_all_heads(w, num_heads, num_kv_heads):
    """Every key head the mean of ALL the heads."""
    if num_heads % num_kv_heads:
        raise ValueError(f"num_kv_heads={num_kv_heads}")
    d = w.shape[0] // num_heads
    return w.view(num_heads, d, -1).mean(0).repeat(num_kv_heads, 1)


def pool_wrong_in_place(w, num_heads, num_kv_heads):
    """Right numbers, but overwrites the first rows of the caller's checkpoint."""
    out = pool_loop(w, num_heads, num_kv_heads)
    w[: out.shape[0]] = out
    return w[: out.shape[0]].clone()



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


# ---------------------------------------------------------------- mla_max_context

def mla_context_per_token_first(memory_bytes, layers, num_heads, head_dim, kv_latent_dim, rope_dim, batch,
                                bytes_per_element):
    per_token = (kv_latent_dim + rope_dim) * bytes_per_element * layers * batch
    return memory_bytes // per_token


def mla_context_by_search(memory_bytes, layers, num_heads, head_dim, kv_latent_dim, rope_dim, batch,
                          bytes_per_element):
    """Doubling, then bisection, on the cache's size: never divides the budget."""
    def size(tokens):
        return layers * batch * tokens * (kv_latent_dim + rope_dim) * bytes_per_element

    lo, hi = 0, 1
    while size(hi) <= memory_bytes:
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if size(mid) <= memory_bytes else (lo, mid)
    return lo


def mla_context_float_then_floor(memory_bytes, layers, num_heads, head_dim, kv_latent_dim, rope_dim, batch,
                                 bytes_per_element):
    import math
    per_sequence_token = (kv_latent_dim + rope_dim) * layers * bytes_per_element
    return math.floor(memory_bytes / batch / per_sequence_token + 1e-9)


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


def rope_wrong_in_place(x, positions, base):
    """Right numbers, written into the caller's x."""
    d = x.shape[1]
    theta = base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    a = positions.to(x.dtype)[:, None] * theta
    x1, x2 = x[:, 0::2].clone(), x[:, 1::2].clone()
    x[:, 0::2] = x1 * a.cos() - x2 * a.sin()
    x[:, 1::2] = x1 * a.sin() + x2 * a.cos()
    return x


def rope_wrong_degrees(x, positions, base):
    """Angles taken as degrees."""
    d = x.shape[1]
    theta = base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    a = torch.deg2rad(positions.to(x.dtype)[:, None] * theta)
    x1, x2 = x[:, 0::2], x[:, 1::2]
    return torch.stack((x1 * a.cos() - x2 * a.sin(), x1 * a.sin() + x2 * a.cos()), dim=-1).flatten(1)


def rope_wrong_pairs_swapped(x, positions, base):
    """Each rotated pair written back in the other order."""
    d = x.shape[1]
    theta = base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    a = positions.to(x.dtype)[:, None] * theta
    x1, x2 = x[:, 0::2], x[:, 1::2]
    return torch.stack((x1 * a.sin() + x2 * a.cos(), x1 * a.cos() - x2 * a.sin()), dim=-1).flatten(1)


def mla_context_wrong_per_head_latent(memory_bytes, layers, num_heads, head_dim, kv_latent_dim, rope_dim, batch,
                                      bytes_per_element):
    """One latent per head."""
    return memory_bytes // (layers * num_heads * (kv_latent_dim + rope_dim) * batch * bytes_per_element)


def mla_context_wrong_bits(memory_bytes, layers, num_heads, head_dim, kv_latent_dim, rope_dim, batch,
                           bytes_per_element):
    return memory_bytes // (8 * layers * (kv_latent_dim + rope_dim) * batch * bytes_per_element)


def mla_context_wrong_rounded(memory_bytes, layers, num_heads, head_dim, kv_latent_dim, rope_dim, batch,
                              bytes_per_element):
    """Rounds to the nearest token, so sometimes one token too many."""
    return round(memory_bytes / (layers * (kv_latent_dim + rope_dim) * batch * bytes_per_element))


def mla_context_wrong_gib(memory_bytes, layers, num_heads, head_dim, kv_latent_dim, rope_dim, batch,
                          bytes_per_element):
    """The budget rounded down to whole MiB first."""
    budget = memory_bytes // 2**20 * 2**20
    return budget // (layers * (kv_latent_dim + rope_dim) * batch * bytes_per_element)


def step_wrong_top_left_sdpa(q, k_cache, v_cache, k_new, v_new):
    """torch's is_causal=True: top-left when Tq != Tk."""
    k, v = torch.cat([k_cache, k_new], dim=-2), torch.cat([v_cache, v_new], dim=-2)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def step_wrong_last_token_only(q, k_cache, v_cache, k_new, v_new):
    """Every new token attends to the whole cache and to all new tokens but the last."""
    k, v = torch.cat([k_cache, k_new[..., :-1, :]], dim=-2), torch.cat([v_cache, v_new[..., :-1, :]], dim=-2)
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


def step_wrong_cache_only(q, k_cache, v_cache, k_new, v_new):
    return torch.softmax(q @ k_cache.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v_cache


def step_forbidden_bias(q, k_cache, v_cache, k_new, v_new):
    from torch.nn.attention.bias import causal_lower_right
    k, v = torch.cat([k_cache, k_new], dim=-2), torch.cat([v_cache, v_new], dim=-2)
    mask = causal_lower_right(q.shape[-2], k.shape[-2])._materialize()
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


CORRECT = {
    "decode.gqa_from_mha": [pool_loop, pool_matrix, pool_avg_pool],
    "decode.rope_rotate": [rope_complex, rope_rotation_matrices, rope_rotate_half_trick, rope_slice_assign],
    "decode.mla_max_context": [mla_context_per_token_first, mla_context_by_search, mla_context_float_then_floor],
    "decode.decode_step": [step_einsum_float64, step_token_by_token, step_torch_sdpa, step_additive_mask],
}

WRONG = {
    "decode.gqa_from_mha": [pool_wrong_no_check, pool_wrong_message, pool_wrong_all_heads, pool_wrong_in_place],
    "decode.rope_rotate": [rope_wrong_in_place, rope_wrong_degrees, rope_wrong_pairs_swapped],
    "decode.mla_max_context": [mla_context_wrong_per_head_latent, mla_context_wrong_bits, mla_context_wrong_rounded,
                               mla_context_wrong_gib],
    "decode.decode_step": [step_wrong_top_left_sdpa, step_wrong_last_token_only, step_wrong_cache_only],
}

FORBIDDEN = {
    "decode.decode_step": [step_forbidden_bias],
}


# ---------------------------------------------------------------- more held-out wrong answers

def pool_wrong_max_of_group(w, num_heads, num_kv_heads):
    """The largest weight of the group instead of the mean."""
    if num_kv_heads < 1 or num_heads % num_kv_heads:
        raise ValueError(f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads}")
    out, C = w.shape
    d = out // num_heads
    return w.view(num_kv_heads, num_heads // num_kv_heads, d, C).amax(dim=1).reshape(num_kv_heads * d, C)


def rope_wrong_positions_from_one(x, positions, base):
    """Positions counted from 1."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    a = (positions.to(x.dtype) + 1)[:, None] * theta
    x1, x2 = x[:, 0::2], x[:, 1::2]
    return torch.stack((x1 * a.cos() - x2 * a.sin(), x1 * a.sin() + x2 * a.cos()), dim=-1).flatten(1)


def mla_context_wrong_latent_only_per_head(memory_bytes, layers, num_heads, head_dim, kv_latent_dim, rope_dim,
                                           batch, bytes_per_element):
    """The RoPE key counted per head and the latent once, and the batch forgotten."""
    return memory_bytes // (layers * (kv_latent_dim + num_heads * rope_dim) * bytes_per_element)


WRONG["decode.gqa_from_mha"] += [pool_wrong_max_of_group]
WRONG["decode.rope_rotate"] += [rope_wrong_positions_from_one]
WRONG["decode.mla_max_context"] += [mla_context_wrong_latent_only_per_head]
