"""Real models' attention layers, rebuilt from mha's blocks, exactly (float64).

For GPT-2, LLaMA, Qwen2, Mistral and DeepSeek-V2/V3, a small configuration gets random
weights stored as those models store them (GPT-2's fused (in, out) Conv1D matrices, LLaMA's
separate projections, DeepSeek's concatenated down- and up-projections with each head's
parts side by side). The model's layer is transcribed here from its equations, as its
published code computes them (rotate-half RoPE for LLaMA, Qwen2 and Mistral, RoPE on
interleaved pairs for DeepSeek, grouped K/V heads repeated in order, Mistral's window of W
keys ending at the query, DeepSeek's RMSNorm after each latent), and the same weights are
loaded into mha's modules or composed from its functions: both must agree to float64's
rounding, for a prefill and for a decode through mha.KVCache or mha.LatentCache.

No model is downloaded and transformers is not a test dependency: the transcriptions are
independent code, written for this course, so that a change in mha that breaks the mapping
of real weights shows here.
"""

from __future__ import annotations

import math

import pytest
import torch

import mha
from precision import assert_within_rounding

B, T, PREFILL = 2, 9, 5          # 9 tokens: a prefill of 5, then 4 decoding steps of one token


def randn(*shape, g):
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def assert_exact(got, want, terms):
    """float64 agreement to the rounding of sums of ``terms`` terms (about 1e-14 here)."""
    assert_within_rounding(got, want, terms=terms)


def softmax_attention(q, k, v, allowed, scale):
    """Their attention: q (B, h, Tq, e), k (B, h, Tk, e), v (B, h, Tk, e_v), allowed (Tq, Tk)."""
    scores = (q @ k.transpose(-2, -1)) * scale
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v


def lower_triangle(n):
    return torch.ones(n, n, dtype=torch.bool).tril()


# ----------------------------------------------------------------------------- GPT-2

GPT2 = dict(n_embd=32, n_head=4)


def gpt2_weights(g):
    C = GPT2["n_embd"]
    return {"c_attn.weight": randn(C, 3 * C, g=g), "c_attn.bias": randn(3 * C, g=g),   # Conv1D: (in, out)
            "c_proj.weight": randn(C, C, g=g), "c_proj.bias": randn(C, g=g)}


def gpt2_theirs(w, x):
    C, h = GPT2["n_embd"], GPT2["n_head"]
    q, k, v = (x @ w["c_attn.weight"] + w["c_attn.bias"]).split(C, dim=-1)
    heads = lambda t: t.view(*t.shape[:2], h, C // h).transpose(1, 2)          # noqa: E731
    out = softmax_attention(heads(q), heads(k), heads(v), lower_triangle(x.shape[1]), 1 / math.sqrt(C // h))
    return out.transpose(1, 2).reshape(x.shape) @ w["c_proj.weight"] + w["c_proj.bias"]


def gpt2_ours(w):
    m = mha.MultiHeadAttention(GPT2["n_embd"], GPT2["n_head"], bias=True, dtype=torch.float64)
    with torch.no_grad():
        m.in_proj.weight.copy_(w["c_attn.weight"].T)                            # (out, in), as nn.Linear
        m.in_proj.bias.copy_(w["c_attn.bias"])
        m.out_proj.weight.copy_(w["c_proj.weight"].T)
        m.out_proj.bias.copy_(w["c_proj.bias"])
    return m


def test_gpt2_attention_is_multi_head_attention_with_biases():
    g = torch.Generator().manual_seed(0)
    w, x = gpt2_weights(g), randn(B, T, GPT2["n_embd"], g=g)
    m = gpt2_ours(w)
    want = gpt2_theirs(w, x)
    with torch.no_grad():
        assert_exact(m(x, is_causal=True), want, terms=3 * GPT2["n_embd"] + T)
        cache = mha.KVCache()
        steps = [m(x[:, :PREFILL], is_causal=True, cache=cache)]
        steps += [m(x[:, i:i + 1], cache=cache) for i in range(PREFILL, T)]
    assert_exact(torch.cat(steps, dim=1), want, terms=3 * GPT2["n_embd"] + T)


# ----------------------------------------------------------------------------- LLaMA, Qwen2, Mistral

# LLaMA: grouped K/V heads, no biases. Qwen2: biases on q, k and v (not on the output).
# Mistral: LLaMA's layer with a sliding window: query i sees keys i - W < j <= i.
ROPE_MODELS = {
    "llama": dict(hidden=32, heads=4, kv_heads=2, theta=10000.0, qkv_bias=False, window=None),
    "qwen2": dict(hidden=32, heads=4, kv_heads=2, theta=1000000.0, qkv_bias=True, window=None),
    "mistral": dict(hidden=32, heads=4, kv_heads=1, theta=10000.0, qkv_bias=False, window=3),
}


def rope_model_weights(cfg, g):
    C, h, kv, d = cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["hidden"] // cfg["heads"]
    w = {"q_proj.weight": randn(h * d, C, g=g), "k_proj.weight": randn(kv * d, C, g=g),
         "v_proj.weight": randn(kv * d, C, g=g), "o_proj.weight": randn(C, h * d, g=g)}
    if cfg["qkv_bias"]:
        w.update({"q_proj.bias": randn(h * d, g=g), "k_proj.bias": randn(kv * d, g=g), "v_proj.bias": randn(kv * d, g=g)})
    return w


def rotate_half_rope(t, positions, theta):
    """Their RoPE: frequencies theta^(-2i/d), cos and sin repeated over both halves, and
    x cos + rotate_half(x) sin with rotate_half(x) = (-x2, x1)."""
    d = t.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * inv_freq[None, :]                  # (T, d/2)
    cos, sin = torch.cat([angles, angles], dim=-1).cos(), torch.cat([angles, angles], dim=-1).sin()
    rotated = torch.cat([-t[..., d // 2:], t[..., :d // 2]], dim=-1)
    return t * cos + rotated * sin


def their_allowed(n, window):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    allowed = j <= i
    return allowed & (j > i - window) if window else allowed


def rope_model_theirs(cfg, w, x):
    C, h, kv = cfg["hidden"], cfg["heads"], cfg["kv_heads"]
    d = C // h
    proj = lambda name: x @ w[f"{name}.weight"].T + w.get(f"{name}.bias", 0.0)   # noqa: E731
    heads = lambda t, n: t.view(*t.shape[:2], n, d).transpose(1, 2)            # noqa: E731
    pos = torch.arange(x.shape[1])
    q = rotate_half_rope(heads(proj("q_proj"), h), pos, cfg["theta"])
    k = rotate_half_rope(heads(proj("k_proj"), kv), pos, cfg["theta"])
    v = heads(proj("v_proj"), kv)
    k, v = (t[:, :, None].expand(-1, -1, h // kv, -1, -1).reshape(B, h, -1, d) for t in (k, v))   # repeat each
    out = softmax_attention(q, k, v, their_allowed(x.shape[1], cfg["window"]), d ** -0.5)
    return out.transpose(1, 2).reshape(B, -1, h * d) @ w["o_proj.weight"].T


def rope_model_ours(cfg, w, x, cache, start):
    """The layer from mha's blocks: split_heads, apply_rope (rotate-half layout), KVCache,
    grouped heads, mha.scaled_dot_product_attention (bottom-right causal, or a window mask)."""
    h, kv = cfg["heads"], cfg["kv_heads"]
    linear = lambda name: torch.nn.functional.linear(x, w[f"{name}.weight"], w.get(f"{name}.bias"))   # noqa: E731
    pos = torch.arange(start, start + x.shape[1])
    q = mha.apply_rope(mha.split_heads(linear("q_proj"), h), pos, base=cfg["theta"], layout="half")
    k = mha.apply_rope(mha.split_heads(linear("k_proj"), kv), pos, base=cfg["theta"], layout="half")
    k, v = cache.update(k, mha.split_heads(linear("v_proj"), kv))              # (B, kv, start + T_new, d)
    k, v = (t.repeat_interleave(h // kv, dim=1) for t in (k, v))               # query head i reads K/V head i // (h / kv)
    if cfg["window"]:
        offsets = pos[:, None] - torch.arange(k.shape[2])[None, :]           # i - j
        out = mha.scaled_dot_product_attention(q, k, v, mask=(offsets >= 0) & (offsets < cfg["window"]))[0]
    else:
        out = mha.scaled_dot_product_attention(q, k, v, is_causal=True)[0]
    return torch.nn.functional.linear(mha.merge_heads(out), w["o_proj.weight"])


@pytest.mark.parametrize("model", ROPE_MODELS)
def test_rope_models_attention_from_mha_blocks_prefill_and_decode(model):
    cfg = ROPE_MODELS[model]
    g = torch.Generator().manual_seed(1)
    w, x = rope_model_weights(cfg, g), randn(B, T, cfg["hidden"], g=g)
    want = rope_model_theirs(cfg, w, x)
    terms = 2 * cfg["hidden"] + T
    assert_exact(rope_model_ours(cfg, w, x, mha.KVCache(), 0), want, terms)    # prefill, all at once
    cache = mha.KVCache()
    steps = [rope_model_ours(cfg, w, x[:, :PREFILL], cache, 0)]
    steps += [rope_model_ours(cfg, w, x[:, i:i + 1], cache, i) for i in range(PREFILL, T)]
    assert len(cache) == T
    assert_exact(torch.cat(steps, dim=1), want, terms)


def test_mistrals_window_changes_the_result():
    """The window matters here (3 keys of up to 9): without it the layer is another one."""
    cfg = ROPE_MODELS["mistral"]
    g = torch.Generator().manual_seed(1)
    w, x = rope_model_weights(cfg, g), randn(B, T, cfg["hidden"], g=g)
    assert not torch.allclose(rope_model_theirs(cfg, w, x), rope_model_theirs({**cfg, "window": None}, w, x))


# ----------------------------------------------------------------------------- DeepSeek-V2 and V3 (MLA)

# V2-Lite compresses no queries (q_lora_rank None); V2 and V3 do. Both normalise each latent.
DEEPSEEK = {
    "v2-lite": dict(hidden=32, heads=4, q_lora_rank=None, kv_lora_rank=16, nope=8, rope=4, v=8),
    "v3": dict(hidden=32, heads=4, q_lora_rank=12, kv_lora_rank=16, nope=8, rope=4, v=8),
}
EPS = 1e-6


def deepseek_weights(cfg, g):
    C, h, r, n, v = cfg["hidden"], cfg["heads"], cfg["rope"], cfg["nope"], cfg["v"]
    w = {"kv_a_proj_with_mqa.weight": randn(cfg["kv_lora_rank"] + r, C, g=g),   # [c_KV; k_R] rows
         "kv_a_layernorm.weight": 1 + 0.3 * randn(cfg["kv_lora_rank"], g=g),
         "kv_b_proj.weight": randn(h * (n + v), cfg["kv_lora_rank"], g=g),      # per head: [k_C rows; v rows]
         "o_proj.weight": randn(C, h * v, g=g)}
    if cfg["q_lora_rank"] is None:
        w["q_proj.weight"] = randn(h * (n + r), C, g=g)                          # per head: [q_C rows; q_R rows]
    else:
        w.update({"q_a_proj.weight": randn(cfg["q_lora_rank"], C, g=g),
                  "q_a_layernorm.weight": 1 + 0.3 * randn(cfg["q_lora_rank"], g=g),
                  "q_b_proj.weight": randn(h * (n + r), cfg["q_lora_rank"], g=g)})
    return w


def rms_norm(t, weight):
    return t / torch.sqrt(t.pow(2).mean(dim=-1, keepdim=True) + EPS) * weight


def interleaved_rope(t, positions):
    """RoPE on pairs (2i, 2i + 1), theta 10000, written as a complex product."""
    d = t.shape[-1]
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    turn = torch.polar(torch.ones(len(positions), d // 2, dtype=torch.float64), positions.double()[:, None] * inv_freq)
    pairs = torch.view_as_complex(t.reshape(*t.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * turn).flatten(-2)


def deepseek_theirs(cfg, w, x):
    h, r, n, v, c = cfg["heads"], cfg["rope"], cfg["nope"], cfg["v"], cfg["kv_lora_rank"]
    pos = torch.arange(x.shape[1])
    if cfg["q_lora_rank"] is None:
        q = x @ w["q_proj.weight"].T
    else:
        q = rms_norm(x @ w["q_a_proj.weight"].T, w["q_a_layernorm.weight"]) @ w["q_b_proj.weight"].T
    q = q.view(B, -1, h, n + r).transpose(1, 2)                                 # (B, h, T, n + r)
    q_c, q_r = q[..., :n], interleaved_rope(q[..., n:], pos)
    down = x @ w["kv_a_proj_with_mqa.weight"].T                                 # (B, T, c + r)
    latent, k_r = rms_norm(down[..., :c], w["kv_a_layernorm.weight"]), interleaved_rope(down[..., c:], pos)
    kv = (latent @ w["kv_b_proj.weight"].T).view(B, -1, h, n + v).transpose(1, 2)
    k_c, values = kv[..., :n], kv[..., n:]
    keys = torch.cat([k_c, k_r[:, None].expand(-1, h, -1, -1)], dim=-1)
    out = softmax_attention(torch.cat([q_c, q_r], dim=-1), keys, values, lower_triangle(x.shape[1]),
                            (n + r) ** -0.5)
    return out.transpose(1, 2).reshape(B, -1, h * v) @ w["o_proj.weight"].T


def deepseek_ours(cfg, w):
    """Their weights in mha.MultiHeadLatentAttention(latent_norm=True): each concatenated
    projection split into the paper's matrices."""
    h, r, n, v, c = cfg["heads"], cfg["rope"], cfg["nope"], cfg["v"], cfg["kv_lora_rank"]
    assert n == v                                  # mha's MLA has one head width for k_C and v
    m = mha.MultiHeadLatentAttention(cfg["hidden"], h, kv_latent_dim=c, rope_dim=r, head_dim=n,
                                     q_latent_dim=cfg["q_lora_rank"], latent_norm=True, norm_eps=EPS,
                                     dtype=torch.float64)
    per_head = lambda name, widths: w[name].view(h, sum(widths), -1).split(widths, dim=1)   # noqa: E731
    q_up = w["q_proj.weight"] if cfg["q_lora_rank"] is None else w["q_b_proj.weight"]
    q_c, q_r = (t.reshape(h * t.shape[1], -1) for t in q_up.view(h, n + r, -1).split([n, r], dim=1))
    k_c, values = (t.reshape(h * t.shape[1], -1) for t in per_head("kv_b_proj.weight", [n, v]))
    with torch.no_grad():
        m.w_uq.weight.copy_(q_c)
        m.w_qr.weight.copy_(q_r)
        m.w_dkv.weight.copy_(w["kv_a_proj_with_mqa.weight"][:c])
        m.w_kr.weight.copy_(w["kv_a_proj_with_mqa.weight"][c:])
        m.kv_norm.weight.copy_(w["kv_a_layernorm.weight"])
        m.w_uk.weight.copy_(k_c)
        m.w_uv.weight.copy_(values)
        m.w_o.weight.copy_(w["o_proj.weight"])
        if cfg["q_lora_rank"] is not None:
            m.w_dq.weight.copy_(w["q_a_proj.weight"])
            m.q_norm.weight.copy_(w["q_a_layernorm.weight"])
    return m


@pytest.mark.parametrize("absorb", [False, True])
@pytest.mark.parametrize("model", DEEPSEEK)
def test_deepseek_attention_is_latent_attention_with_its_latent_norms(model, absorb):
    cfg = DEEPSEEK[model]
    g = torch.Generator().manual_seed(2)
    w, x = deepseek_weights(cfg, g), randn(B, T, cfg["hidden"], g=g)
    m = deepseek_ours(cfg, w)
    want = deepseek_theirs(cfg, w, x)
    terms = 2 * cfg["hidden"] + cfg["kv_lora_rank"] + T
    with torch.no_grad():
        assert_exact(m(x, is_causal=True, absorb=absorb), want, terms)
        cache = mha.LatentCache()
        steps = [m(x[:, :PREFILL], is_causal=True, cache=cache, absorb=absorb)]
        steps += [m(x[:, i:i + 1], cache=cache, absorb=absorb) for i in range(PREFILL, T)]
    assert len(cache) == T and cache.entries.shape[-1] == cfg["kv_lora_rank"] + cfg["rope"]
    assert_exact(torch.cat(steps, dim=1), want, terms)


def test_without_its_latent_norms_mla_is_not_deepseeks_layer():
    cfg = DEEPSEEK["v3"]
    g = torch.Generator().manual_seed(2)
    w, x = deepseek_weights(cfg, g), randn(B, T, cfg["hidden"], g=g)
    m = deepseek_ours(cfg, w)
    m.q_norm = m.kv_norm = None
    with torch.no_grad():
        assert not torch.allclose(m(x, is_causal=True), deepseek_theirs(cfg, w, x))
