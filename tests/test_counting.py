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


def test_transformer_base_has_no_fixed_context():
    cfg = mha.PRESETS["Transformer (base)"]
    assert cfg.context is None
    assert "25,000" in cfg.source and "sinusoidal" in cfg.source


def test_kv_cache_bytes_of_a_preset_without_context_needs_a_length():
    cfg = mha.PRESETS["Transformer (base)"]
    with pytest.raises(ValueError, match="seq_len"):
        cfg.kv_cache_bytes()
    assert cfg.kv_cache_bytes(100) == mha.kv_cache_bytes(6, 8, 64, 100)


def test_mistral_7b_is_gqa_with_8_kv_heads_of_128():
    cfg = mha.PRESETS["Mistral-7B"]
    assert (cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.num_layers) == (4096, 32, 8, 128, 32)
    assert "Jiang et al. 2023" in cfg.source
    assert cfg.kv_cache_bytes(4096) == 2 * 32 * 8 * 128 * 4096 * 2   # 512 MiB at its 4096-token window
    assert cfg.kv_cache_bytes(1) == mha.PRESETS["Llama-3-8B"].kv_cache_bytes(1)


def test_deepseek_v2_caches_576_elements_per_token_and_layer():
    cfg = mha.LATENT_PRESETS["DeepSeek-V2"]
    assert (cfg.num_layers, cfg.num_heads, cfg.head_dim, cfg.kv_latent_dim, cfg.rope_dim) == (60, 128, 128, 512, 64)
    assert cfg.cache_elements_per_token() == 576 == 9 * cfg.head_dim // 2   # the paper's 9/2 d_h
    assert "DeepSeek-AI 2024" in cfg.source
    mha_elements = 2 * cfg.num_heads * cfg.head_dim                          # 2 n_h d_h = 32768
    assert mha_elements == 32768 and mha_elements / 576 == pytest.approx(56.9, abs=0.05)


def test_latent_cache_bytes_formula_and_preset():
    assert mha.latent_cache_bytes(60, 512, 64, 1000, batch=2, bytes_per_element=2) == 576 * 60 * 1000 * 2 * 2
    cfg = mha.LATENT_PRESETS["DeepSeek-V2"]
    assert cfg.kv_cache_bytes(1) == 576 * 60 * 2
    assert cfg.kv_cache_bytes() == 576 * 60 * 128 * 1024 * 2


def test_latent_cache_bytes_of_one_layer_matches_a_real_latent_cache():
    layer = mha.MultiHeadLatentAttention(64, 2, head_dim=16, kv_latent_dim=24, rope_dim=8)
    cache = mha.LatentCache()
    with torch.no_grad():
        layer(torch.randn(3, 5, 64), is_causal=True, cache=cache)
    assert cache.nbytes() == mha.latent_cache_bytes(1, 24, 8, 5, batch=3, bytes_per_element=4)


@pytest.mark.parametrize("arg", ["layers", "kv_latent_dim", "rope_dim", "seq_len", "batch", "bytes_per_element"])
def test_latent_cache_bytes_rejects_non_positive_ints(arg):
    kwargs = dict(layers=1, kv_latent_dim=8, rope_dim=2, seq_len=4, batch=1, bytes_per_element=2)
    kwargs[arg] = 0
    with pytest.raises(ValueError, match=arg):
        mha.latent_cache_bytes(**kwargs)


@pytest.mark.parametrize("h, g", [(4, 4), (4, 2), (8, 1)])
def test_attention_flops_with_num_kv_heads_equals_the_flop_counter_on_the_naive_layer(h, g):
    from torch.utils.flop_counter import FlopCounterMode
    B, T, C = 2, 12, 32
    layer = mha.MultiHeadAttention(C, h, num_kv_heads=g, backend="naive")
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        layer(torch.randn(B, T, C))
    assert mha.attention_flops(B, T, C, num_heads=h, num_kv_heads=g) == counter.get_total_flops()


def test_attention_flops_with_as_many_kv_heads_as_heads_is_the_multi_head_count():
    assert mha.attention_flops(2, 7, 16, num_heads=4, num_kv_heads=4) == mha.attention_flops(2, 7, 16)
    assert mha.attention_flops(2, 7, 16, kv_len=3, num_heads=4, num_kv_heads=1) < mha.attention_flops(2, 7, 16, kv_len=3)


@pytest.mark.parametrize("kwargs, error, word", [
    (dict(num_kv_heads=2), ValueError, "num_heads"),
    (dict(num_heads=4), ValueError, "num_kv_heads"),
    (dict(num_heads=4, num_kv_heads=3), ValueError, "divide"),
    (dict(num_heads=5, num_kv_heads=1), ValueError, "divide"),
    (dict(num_heads=4, num_kv_heads=0), ValueError, "num_kv_heads"),
    (dict(num_heads=4, num_kv_heads=2.0), TypeError, "num_kv_heads"),
])
def test_attention_flops_rejects_bad_head_counts_naming_them(kwargs, error, word):
    with pytest.raises(error, match=word):
        mha.attention_flops(1, 8, 16, **kwargs)


def test_llama3_8b_attention_crosses_over_at_5120_tokens():
    cfg = mha.PRESETS["Llama-3-8B"]
    kw = dict(num_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads)

    def core_share(T):
        return 4 * T * T * cfg.d_model / mha.attention_flops(1, T, cfg.d_model, **kw)

    assert core_share(5120) == 0.5 and core_share(5119) < 0.5 < core_share(5121)
