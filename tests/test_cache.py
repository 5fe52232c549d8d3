"""mha.KVCache: incremental decoding gives the same outputs as one causal forward pass."""

import pytest
import torch

import mha

BACKENDS = ["sdpa", "naive"]
VARIANTS = {"mha": 4, "gqa": 2, "mqa": 1}  # num_kv_heads for num_heads = 4


def make(num_kv_heads, backend, **kwargs):
    torch.manual_seed(0)
    m = mha.MultiHeadAttention(16, 4, num_kv_heads=num_kv_heads, bias=True, backend=backend, **kwargs)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-0.5, 0.5)
    return m.eval()


def rand(*shape, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def decode(m, x, chunks):
    """Feed x (B, T, C) through m with one KVCache, in chunks of the given sizes."""
    cache, outs, start = mha.KVCache(), [], 0
    for n in chunks:
        outs.append(m(x[:, start:start + n], cache=cache, is_causal=n > 1))
        start += n
    assert start == x.shape[1] and len(cache) == start
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_token_by_token_decoding_equals_the_full_causal_forward(variant, backend):
    m = make(VARIANTS[variant], backend)
    x = rand(2, 7, 16)
    torch.testing.assert_close(decode(m, x, [1] * 7), m(x, is_causal=True), rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_prompt_chunk_then_tokens_equals_the_full_causal_forward(variant, backend):
    m = make(VARIANTS[variant], backend)
    x = rand(2, 7, 16)
    torch.testing.assert_close(decode(m, x, [4, 1, 1, 1]), m(x, is_causal=True), rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_chunk_after_cached_tokens_sees_the_cache_and_earlier_chunk_tokens(variant, backend):
    m = make(VARIANTS[variant], backend)
    x = rand(2, 8, 16)
    torch.testing.assert_close(decode(m, x, [3, 3, 1, 1]), m(x, is_causal=True), rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_decoding_with_a_padding_mask_equals_the_full_masked_forward(backend):
    m = make(2, backend)
    x = rand(2, 5, 16)
    lengths = [5, 3]  # batch element 1 is padded at positions 3 and 4 (never attended to)
    full = m(x, mask=mha.padding_mask(lengths, 5), is_causal=True)
    cache, outs = mha.KVCache(), []
    outs.append(m(x[:, :3], cache=cache, is_causal=True, mask=mha.padding_mask(lengths, 5)[..., :3]))
    for t in (3, 4):
        outs.append(m(x[:, t:t + 1], cache=cache, mask=mha.padding_mask(lengths, 5)[..., :t + 1]))
    torch.testing.assert_close(torch.cat(outs, 1), full, rtol=0, atol=1e-5)


def test_cache_stores_keys_and_values_per_kv_head():
    m = make(2, "sdpa")
    cache = mha.KVCache()
    m(rand(3, 5, 16), cache=cache, is_causal=True)
    assert cache.k.shape == cache.v.shape == (3, 2, 5, 4)  # (B, g, T, d)


def test_cache_grows_by_the_number_of_new_tokens():
    m = make(4, "naive")
    cache = mha.KVCache()
    assert len(cache) == 0 and cache.nbytes() == 0
    m(rand(1, 3, 16), cache=cache, is_causal=True)
    m(rand(1, 1, 16), cache=cache)
    assert len(cache) == 4


def test_reset_empties_the_cache():
    m = make(4, "naive")
    cache = mha.KVCache()
    m(rand(1, 3, 16), cache=cache, is_causal=True)
    cache.reset()
    assert len(cache) == 0 and cache.nbytes() == 0


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_cache_nbytes_matches_kv_cache_bytes(num_kv_heads, dtype):
    m = make(num_kv_heads, "sdpa").to(dtype)
    cache = mha.KVCache()
    B, T = 3, 6
    m(rand(B, T, 16).to(dtype), cache=cache, is_causal=True)
    size = torch.finfo(dtype).bits // 8
    expected = mha.kv_cache_bytes(1, num_kv_heads, 4, T, batch=B, bytes_per_element=size)
    assert cache.nbytes() == expected == 2 * num_kv_heads * 4 * T * B * size


def test_cache_rejects_keys_with_a_different_number_of_heads():
    cache = mha.KVCache()
    cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="heads"):
        cache.update(torch.zeros(1, 4, 1, 4), torch.zeros(1, 4, 1, 4))


def test_a_call_rejected_for_max_len_leaves_the_cache_unchanged():
    m = make(2, "naive", max_len=4)
    cache = mha.KVCache()
    m(rand(1, 4, 16), cache=cache, is_causal=True)
    k_before = cache.k.clone()
    with pytest.raises(ValueError, match="max_len"):
        m(rand(1, 1, 16), cache=cache)
    assert len(cache) == 4 and torch.equal(cache.k, k_before)


def test_a_call_rejected_for_its_mask_leaves_the_cache_unchanged():
    m = make(2, "sdpa")
    cache = mha.KVCache()
    m(rand(1, 3, 16), cache=cache, is_causal=True)
    with pytest.raises(ValueError, match="mask"):
        m(rand(1, 1, 16), cache=cache, mask=torch.ones(1, 3, dtype=torch.bool))  # needs 4 keys
    assert len(cache) == 3
    # the cache still decodes correctly afterwards
    x = rand(1, 5, 16, seed=3)
    fresh = mha.KVCache()
    out = torch.cat([m(x[:, :3], cache=fresh, is_causal=True), m(x[:, 3:4], cache=fresh), m(x[:, 4:], cache=fresh)], 1)
    torch.testing.assert_close(out, m(x, is_causal=True), rtol=0, atol=1e-5)
