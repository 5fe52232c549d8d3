"""Parameter counts, FLOPs, KV-cache bytes and the presets of published models."""

import pytest
import torch
from torch import nn

import mha


def numel(module):
    return sum(p.numel() for p in module.parameters())


CONFIGS = [
    dict(embed_dim=16, num_heads=4),
    dict(embed_dim=16, num_heads=4, bias=True),
    dict(embed_dim=16, num_heads=2, kdim=6, vdim=10),
    dict(embed_dim=16, num_heads=2, kdim=6, vdim=10, bias=True),
    dict(embed_dim=16, num_heads=4, num_kv_heads=2),
    dict(embed_dim=16, num_heads=4, num_kv_heads=1, bias=True),
    dict(embed_dim=24, num_heads=6, num_kv_heads=3, kdim=5, vdim=7, bias=True),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_count_parameters_equals_the_mha_module(cfg):
    cfg = dict(cfg)
    C, h = cfg.pop("embed_dim"), cfg.pop("num_heads")
    assert mha.count_parameters(C, h, **cfg) == numel(mha.MultiHeadAttention(C, h, **cfg))


@pytest.mark.parametrize("cfg", [c for c in CONFIGS if "num_kv_heads" not in c],
                         ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_count_parameters_equals_torch_multihead_attention(cfg):
    cfg = dict(cfg)
    C, h = cfg.pop("embed_dim"), cfg.pop("num_heads")
    cfg.setdefault("bias", False)  # torch's default is bias=True, ours bias=False
    assert mha.count_parameters(C, h, **cfg) == numel(nn.MultiheadAttention(C, h, **cfg))


def test_multi_head_attention_has_4_c_squared_weights_whatever_the_number_of_heads():
    assert {mha.count_parameters(64, h) for h in (1, 2, 4, 8, 64)} == {4 * 64 * 64}
    assert mha.count_parameters(64, 8, bias=True) == 4 * 64 * 64 + 4 * 64


def test_gqa_shrinks_only_the_key_and_value_projections():
    C, h, g = 64, 8, 2
    d = C // h
    assert mha.count_parameters(C, h, num_kv_heads=g) == 2 * C * C + 2 * C * g * d


def test_attention_flops_for_self_attention_is_8btc2_plus_4bt2c():
    for B, T, C in [(1, 1, 1), (2, 10, 64), (4, 1024, 768)]:
        assert mha.attention_flops(B, T, C) == 8 * B * T * C**2 + 4 * B * T**2 * C
        assert mha.attention_flops(B, T, C, kv_len=T) == mha.attention_flops(B, T, C)


def test_attention_flops_for_cross_attention_counts_each_matmul():
    B, T, S, C = 2, 3, 5, 4
    q_proj = o_proj = 2 * B * T * C * C  # (B*T, C) @ (C, C), 2 flops per multiply-add
    k_proj = v_proj = 2 * B * S * C * C
    scores = 2 * B * T * S * C           # Q K^T summed over heads: h * (T x d) @ (d x S)
    mix = 2 * B * T * S * C              # weights @ V
    expected = q_proj + k_proj + v_proj + o_proj + scores + mix
    assert expected == 1504
    assert mha.attention_flops(B, T, C, kv_len=S) == expected


def test_kv_cache_bytes_formula():
    assert mha.kv_cache_bytes(2, 3, 5, 7) == 2 * 2 * 3 * 5 * 7 * 2
    assert mha.kv_cache_bytes(2, 3, 5, 7, batch=4, bytes_per_element=4) == 2 * 2 * 3 * 5 * 7 * 4 * 4


def test_kv_cache_bytes_of_a_preset_of_one_layer_matches_a_real_cache():
    m = mha.MultiHeadAttention(32, 8, num_kv_heads=2).to(torch.float16)
    cache = mha.KVCache()
    m(torch.randn(2, 5, 32).to(torch.float16), cache=cache, is_causal=True)
    assert cache.nbytes() == mha.kv_cache_bytes(1, 2, 4, 5, batch=2, bytes_per_element=2)


# --- presets --------------------------------------------------------------------------

def test_presets_have_the_published_head_dimensions():
    P = mha.PRESETS
    assert P["GPT-2 small"].head_dim == 64
    assert P["BERT-base"].head_dim == 64
    assert P["Transformer (base)"].head_dim == 64
    assert P["Llama-3-8B"].head_dim == 128
    assert P["Llama-3-70B"].head_dim == 128


def test_llama_3_70b_cache_is_8_times_smaller_than_with_64_kv_heads():
    cfg = mha.PRESETS["Llama-3-70B"]
    assert (cfg.num_heads, cfg.num_kv_heads) == (64, 8)
    gqa = cfg.kv_cache_bytes(8192)
    full = mha.kv_cache_bytes(cfg.num_layers, 64, cfg.head_dim, 8192)
    assert full == 8 * gqa
    assert gqa == 2 * 80 * 8 * 128 * 8192 * 2  # 2.5 GiB in 16-bit at 8K tokens


def test_llama_2_7b_is_plain_multi_head_attention():
    cfg = mha.PRESETS["Llama-2-7B"]
    assert cfg.num_kv_heads == cfg.num_heads == 32


def test_every_preset_is_a_valid_module_configuration():
    for name, cfg in mha.PRESETS.items():
        assert cfg.name == name and cfg.source
        assert cfg.d_model % cfg.num_heads == 0 and cfg.num_heads % cfg.num_kv_heads == 0
        expected = mha.count_parameters(cfg.d_model, cfg.num_heads, num_kv_heads=cfg.num_kv_heads, bias=cfg.bias)
        assert cfg.attention_parameters() == expected


def test_gpt2_small_attention_layer_has_4c2_plus_4c_parameters():
    assert mha.PRESETS["GPT-2 small"].attention_parameters() == 4 * 768**2 + 4 * 768 == 2_362_368
