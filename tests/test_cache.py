"""mha.KVCache: incremental decoding gives the same outputs as one causal forward pass.

Decoding in float32 must be as accurate as the full float32 pass, within 2x, against the
float64 module (tests/precision.py): the cache changes the order of the work, not its
accuracy.
"""

import copy

import pytest
import torch

import mha
from precision import assert_as_accurate_as

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


def exact(m, x, **kwargs):
    """m's forward in float64 on the same inputs (the weights and x converted exactly)."""
    with torch.no_grad():
        return copy.deepcopy(m).double()(x.double(), **kwargs)


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
    assert_as_accurate_as(decode(m, x, [1] * 7), m(x, is_causal=True), exact(m, x, is_causal=True))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_prompt_chunk_then_tokens_equals_the_full_causal_forward(variant, backend):
    m = make(VARIANTS[variant], backend)
    x = rand(2, 7, 16)
    assert_as_accurate_as(decode(m, x, [4, 1, 1, 1]), m(x, is_causal=True), exact(m, x, is_causal=True))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_chunk_after_cached_tokens_sees_the_cache_and_earlier_chunk_tokens(variant, backend):
    m = make(VARIANTS[variant], backend)
    x = rand(2, 8, 16)
    assert_as_accurate_as(decode(m, x, [3, 3, 1, 1]), m(x, is_causal=True), exact(m, x, is_causal=True))


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
    assert_as_accurate_as(torch.cat(outs, 1), full, exact(m, x, mask=mha.padding_mask(lengths, 5), is_causal=True))


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
    assert_as_accurate_as(out, m(x, is_causal=True), exact(m, x, is_causal=True))


# --- how the caches store their tensors: in place, in a buffer that grows geometrically ---

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402


class Allocations(TorchDispatchMode):
    """Records the number of elements of every tensor an operation creates (views excluded)."""

    def __init__(self):
        super().__init__()
        self.sizes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in torch.utils._pytree.tree_leaves((args, kwargs))
                  if isinstance(a, torch.Tensor)}
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.sizes.append(t.numel())
        return out


def kv(T, seed=0, dtype=torch.float32, B=1, g=2, d=4):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(B, g, T, d, generator=gen, dtype=torch.float64).to(dtype),
            torch.randn(B, g, T, d, generator=gen, dtype=torch.float64).to(dtype))


def fill(cache, steps, **kw):
    """Append one token per step; return the (k, v) given and the views returned."""
    given, returned = [], []
    for t in range(steps):
        k, v = kv(1, seed=t, **kw)
        given.append((k, v))
        returned.append(cache.update(k, v))
    return given, returned


def test_update_returns_views_of_one_buffer_holding_every_token_in_order():
    cache = mha.KVCache()
    given, returned = fill(cache, 10)
    k_all, v_all = returned[-1]
    assert torch.equal(k_all, torch.cat([k for k, _ in given], dim=-2))     # copied, not computed
    assert torch.equal(v_all, torch.cat([v for _, v in given], dim=-2))
    assert k_all.untyped_storage().data_ptr() == returned[1][0].untyped_storage().data_ptr()   # the same buffer
    assert cache.k.shape == (1, 2, 10, 4) and cache.k.data_ptr() == k_all.data_ptr()


def test_appending_a_token_allocates_nothing_the_size_of_the_cache():
    cache = mha.KVCache(capacity=64)
    fill(cache, 40)
    with Allocations() as seen:
        fill(cache, 1)
    assert max(seen.sizes, default=0) < 40 * 2 * 4          # no copy of the 40 cached (g, d) rows


def test_the_buffer_doubles_so_n_appends_make_only_log2_n_buffers():
    cache = mha.KVCache()
    buffers, reserved = set(), []
    for t in range(1000):
        k, v = cache.update(*kv(1, seed=t))
        buffers.add(k.untyped_storage().data_ptr())
        reserved.append(cache.reserved)
    assert len(cache) == 1000 and 1000 <= cache.reserved < 2000
    assert len(buffers) <= 8                                   # 16, 32, ..., 1024: 7 buffers
    assert all(b in (a, 2 * a) for a, b in zip(reserved, reserved[1:]))


def test_a_capacity_allocates_once_and_refuses_more_tokens_leaving_the_cache_unchanged():
    cache = mha.KVCache(capacity=5)
    k, _ = cache.update(*kv(3))
    assert cache.reserved == 5
    cache.update(*kv(2, seed=1))
    assert cache.k.data_ptr() == k.data_ptr() and len(cache) == 5
    before = cache.k.clone()
    with pytest.raises(ValueError, match=r"capacity=5.*5 positions.*1 more"):
        cache.update(*kv(1, seed=2))
    assert len(cache) == 5 and torch.equal(cache.k, before)


@pytest.mark.parametrize("capacity, error", [(0, ValueError), (-1, ValueError), (2.5, TypeError), ("8", TypeError)])
def test_a_bad_capacity_raises_naming_it(capacity, error):
    with pytest.raises(error, match="capacity"):
        mha.KVCache(capacity=capacity)
    with pytest.raises(error, match="capacity"):
        mha.LatentCache(capacity=capacity)


def test_views_returned_earlier_keep_their_values_through_growth_and_reset():
    cache = mha.KVCache()
    _, returned = fill(cache, 20)                    # the buffer grew from 16 to 32 positions
    early_k = returned[4][0]
    snapshot = early_k.clone()
    fill(cache, 30)
    cache.reset()
    cache.update(*kv(5, seed=99))
    assert torch.equal(early_k, snapshot) and early_k.shape[-2] == 5


def test_nbytes_counts_cached_positions_not_the_reserved_room():
    cache = mha.KVCache()
    fill(cache, 17)
    assert cache.reserved == 32
    assert cache.nbytes() == 2 * 17 * 2 * 4 * 4           # k and v, 17 tokens, g = 2, d = 4, float32


def test_new_keys_of_another_dtype_are_refused_naming_both_dtypes():
    cache = mha.KVCache()
    cache.update(*kv(2, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"float16.*float32"):
        cache.update(*kv(1))
    assert len(cache) == 2 and cache.k.dtype == torch.float16


def test_new_keys_on_another_device_are_refused_naming_both_devices():
    cache = mha.KVCache()
    cache.update(*kv(2))
    with pytest.raises(ValueError, match=r"cpu.*meta"):
        cache.update(torch.empty(1, 2, 1, 4, device="meta"), torch.empty(1, 2, 1, 4, device="meta"))
    assert len(cache) == 2


def test_keys_and_values_of_different_lengths_are_refused_naming_both_shapes():
    cache = mha.KVCache()
    with pytest.raises(ValueError, match=r"k and v.*\(1, 2, 3, 4\).*\(1, 2, 5, 4\)"):
        cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 5, 4))
    assert len(cache) == 0


def test_keys_and_values_of_different_dtypes_are_refused():
    with pytest.raises(ValueError, match=r"float32.*float64"):
        mha.KVCache().update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4, dtype=torch.float64))


@pytest.mark.parametrize("k, v, error", [
    ([0.0], torch.zeros(1, 1, 1, 1), TypeError),
    (torch.zeros(2, 3, 4), torch.zeros(2, 3, 4), ValueError),
])
def test_update_rejects_non_tensors_and_wrong_ranks(k, v, error):
    with pytest.raises(error, match=r"\bk\b"):
        mha.KVCache().update(k, v)


def test_values_of_another_width_than_before_are_refused():
    cache = mha.KVCache()
    cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="head_dim"):
        cache.update(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 8))


def test_a_half_precision_layer_with_a_float32_cache_gets_an_error_naming_the_cache():
    layer = mha.MultiHeadAttention(8, 2).eval()
    cache = mha.KVCache()
    with torch.no_grad():
        layer(torch.randn(1, 3, 8), is_causal=True, cache=cache)
        with pytest.raises(ValueError, match=r"cache holds keys and values of dtype torch.float32"):
            layer.double()(torch.randn(1, 1, 8, dtype=torch.float64), cache=cache)


def test_training_through_a_cache_gives_the_gradients_of_the_full_causal_pass():
    m = make(2, "sdpa")
    x = rand(2, 6, 16)
    x_full, x_steps = x.clone().requires_grad_(), x.clone().requires_grad_()
    m(x_full, is_causal=True).square().sum().backward()
    grads_full = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    cache = mha.KVCache()
    out = torch.cat([m(x_steps[:, :3], is_causal=True, cache=cache)]
                    + [m(x_steps[:, t:t + 1], cache=cache) for t in range(3, 6)], dim=1)
    out.square().sum().backward()                                 # would fail if a step overwrote a saved tensor
    m64, x64 = copy.deepcopy(m).double(), x.double().requires_grad_()
    m64(x64, is_causal=True).square().sum().backward()
    names = ["x", *(name for name, _ in m.named_parameters())]
    assert_as_accurate_as([x_steps.grad, *(p.grad for p in m.parameters())], [x_full.grad, *grads_full],
                          [x64.grad, *(p.grad for p in m64.parameters())], names=names)


def test_a_cache_filled_in_inference_mode_can_be_extended_outside_it():
    m = make(2, "sdpa")
    x = rand(1, 5, 16)
    cache = mha.KVCache()
    with torch.inference_mode():
        first = m(x[:, :4], is_causal=True, cache=cache)
    with torch.no_grad():
        last = m(x[:, 4:], cache=cache)
    assert_as_accurate_as(torch.cat([first, last], 1), m(x, is_causal=True), exact(m, x, is_causal=True))


def test_latent_cache_keeps_each_tokens_latent_and_rope_key_side_by_side_in_one_row():
    cache = mha.LatentCache()
    c1, r1 = torch.randn(2, 3, 6), torch.randn(2, 3, 2)
    c_all, r_all = cache.update(c1, r1)
    cache.update(torch.randn(2, 1, 6), torch.randn(2, 1, 2))
    assert cache.entries.shape == (2, 4, 8)
    assert torch.equal(cache.entries[:, :3], torch.cat([c1, r1], -1))
    assert cache.c_kv.data_ptr() == cache.entries.data_ptr() == c_all.data_ptr()   # views, not copies
    assert cache.k_rope.shape == (2, 4, 2) and torch.equal(cache.k_rope, cache.entries[..., 6:])


def test_latent_cache_refuses_another_dtype_and_a_full_capacity():
    cache = mha.LatentCache(capacity=3)
    cache.update(torch.randn(1, 3, 6), torch.randn(1, 3, 2))
    with pytest.raises(ValueError, match="capacity=3"):
        cache.update(torch.randn(1, 1, 6), torch.randn(1, 1, 2))
    other = mha.LatentCache()
    other.update(torch.randn(1, 3, 6), torch.randn(1, 3, 2))
    with pytest.raises(ValueError, match=r"float32.*float64"):
        other.update(torch.randn(1, 1, 6, dtype=torch.float64), torch.randn(1, 1, 2, dtype=torch.float64))
    assert len(cache) == len(other) == 3
