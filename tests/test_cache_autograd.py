"""Caches and autograd: the in-place caches must not break a backward pass that runs through
them while the cached tensors themselves need no gradient (frozen projections, or keys and
values of an earlier segment fed in detached), and the views they return are views."""

from __future__ import annotations

import torch

import mha
from precision import assert_within_rounding


def test_backward_through_a_kv_cache_of_detached_keys_and_values():
    """A memory of earlier segments, fed in detached, and a trainable query: SDPA saves the
    cached K and V to compute dq, and the next update must not invalidate them."""
    g = torch.Generator().manual_seed(0)
    B, H, T, d = 1, 2, 5, 8
    keys, values = (torch.randn(B, H, T, d, generator=g, dtype=torch.float64) for _ in range(2))
    w = torch.randn(d, d, generator=g, dtype=torch.float64, requires_grad=True)
    x = torch.randn(B, H, T, d, generator=g, dtype=torch.float64)
    cache, loss = mha.KVCache(), 0
    for t in range(T):
        k_all, v_all = cache.update(keys[:, :, t:t + 1], values[:, :, t:t + 1])   # no grad needed
        q = x[:, :, t:t + 1] @ w
        loss = loss + torch.nn.functional.scaled_dot_product_attention(q, k_all, v_all).square().sum()
    loss.backward()
    got = w.grad.clone()
    w.grad = None
    q = x @ w
    full = torch.nn.functional.scaled_dot_product_attention(q, keys, values, is_causal=True)
    full.square().sum().backward()
    assert_within_rounding(got, w.grad, terms=T + d)   # dq sums over T keys, dw over T rows of d


def test_backward_through_a_latent_cache_with_frozen_compression_weights():
    """MLA in training with W_DKV and W_KR frozen: the cached latents need no gradient, but the
    explicit form's W_UK(c_kv) saves them for its backward."""
    torch.manual_seed(0)
    mla = mha.MultiHeadLatentAttention(32, 4, kv_latent_dim=16, rope_dim=8).double().train()
    for p in (*mla.w_dkv.parameters(), *mla.w_kr.parameters()):
        p.requires_grad_(False)
    x = torch.randn(1, 5, 32, dtype=torch.float64)
    cache = mha.LatentCache()
    out = torch.cat([mla(x[:, t:t + 1], cache=cache) for t in range(5)], dim=1)
    out.square().sum().backward()           # raised "modified by an inplace operation" before
    steps = {name: p.grad.clone() for name, p in mla.named_parameters() if p.requires_grad}
    mla.zero_grad()
    mla(x, is_causal=True).square().sum().backward()
    for name, p in mla.named_parameters():
        if p.requires_grad:
            assert_within_rounding(steps[name], p.grad, terms=5 + 32 + 16, msg=name)


def test_returned_views_share_the_cache_memory_until_it_grows():
    """What the docstring says: the returned tensors are views of the cache's buffer, so a
    write into one changes the cache (until the buffer next grows); clone to modify."""
    cache = mha.KVCache()
    k, _ = cache.update(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4))
    k[0, 0, 0, 0] = 5.0
    assert cache.k[0, 0, 0, 0] == 5.0
    assert "clone" in mha.KVCache.__doc__ and "clone" in mha.LatentCache.__doc__
