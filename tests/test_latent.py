"""mha.MultiHeadLatentAttention and mha.LatentCache (DeepSeek-V2's multi-head latent attention).

Two float64 computations agree within the worst-case rounding of their steps, carried from
the weights and the input through every projection, RoPE and the attention
(tests/precision.py; `rounding_of` below); a float32 one is as accurate as the explicit
form in float32, within 2x, against the float64 module.
"""

import copy
import math

import pytest
import torch

import mha
from precision import Rounding, assert_as_accurate_as, assert_within, attention, attention_backward, rope

CONFIGS = {  # name: keyword arguments after (embed_dim=32, num_heads=4)
    "no query compression": dict(kv_latent_dim=16, rope_dim=4),
    "query compression": dict(kv_latent_dim=16, rope_dim=4, q_latent_dim=12),
    "wide heads": dict(kv_latent_dim=24, rope_dim=6, head_dim=10, q_latent_dim=20),
    "latent norm": dict(kv_latent_dim=16, rope_dim=4, q_latent_dim=12, latent_norm=True),   # DeepSeek-V2's
}


def make(dtype=torch.float32, seed=0, **kwargs):
    torch.manual_seed(seed)
    kwargs = kwargs or CONFIGS["query compression"]
    m = mha.MultiHeadLatentAttention(32, 4, dtype=dtype, **kwargs)
    with torch.no_grad():                       # norms' weights start at 1: make them count
        for norm in (m.q_norm, m.kv_norm):
            if norm is not None:
                norm.weight.uniform_(0.5, 1.5)
    return m


def rand(*shape, seed=1, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def reference(m, x, is_causal):
    """MLA written out head by head from the paper's equations, with explicit loops (float64),
    and the RMSNorm after each latent that DeepSeek-V2 adds (section 3.1.2) when m has them."""
    W = {name: p.detach().double() for name, p in m.named_parameters()}
    x = x.double()
    B, T, _ = x.shape
    h, d, d_r = m.num_heads, m.head_dim, m.rope_dim
    pos = torch.arange(T)

    def rms_norm(c, name):                                                     # c / RMS(c) * weight
        if f"{name}.weight" not in W:
            return c
        return c / torch.sqrt(c.pow(2).mean(dim=-1, keepdim=True) + m.norm_eps) * W[f"{name}.weight"]

    c_q = rms_norm(x @ W["w_dq.weight"].T, "q_norm") if m.w_dq is not None else x
    c_kv = rms_norm(x @ W["w_dkv.weight"].T, "kv_norm")                        # (B, T, d_c)
    k_r = mha.apply_rope(x @ W["w_kr.weight"].T, pos)                          # (B, T, d_r), shared
    heads = []
    for i in range(h):
        rows, rows_r = slice(i * d, (i + 1) * d), slice(i * d_r, (i + 1) * d_r)
        q = torch.cat([c_q @ W["w_uq.weight"][rows].T,
                       mha.apply_rope(c_q @ W["w_qr.weight"][rows_r].T, pos)], dim=-1)
        k = torch.cat([c_kv @ W["w_uk.weight"][rows].T, k_r], dim=-1)
        v = c_kv @ W["w_uv.weight"][rows].T
        scores = q @ k.transpose(1, 2) / math.sqrt(d + d_r)                    # (B, T, T)
        if is_causal:
            scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        heads.append(torch.softmax(scores, dim=-1) @ v)
    return torch.cat(heads, dim=-1) @ W["w_o.weight"].T


def _layers(m):
    """The weights of m as exact inputs, (h, d, d_c) views of W_UK and W_UV for the absorbed
    form, and the linear maps of x (B, T, C) -> (B, h, T, width) or (B, T, width)."""
    h, d, d_c = m.num_heads, m.head_dim, m.kv_latent_dim
    W = {name: p.detach() for name, p in m.named_parameters()}

    def lin(r, name):
        return r.linear(W[f"{name}.weight"], W.get(f"{name}.bias"))

    def split(r):
        return r.map(lambda t: mha.split_heads(t, h))

    return W, W["w_uk.weight"].view(h, d, d_c), W["w_uv.weight"].view(h, d, d_c), lin, split


def _forward(m, x, is_causal, absorb):
    """m's forward, step by step on Roundings; returns its steps for the backward."""
    _, uk, uv, lin, split = _layers(m)
    d_c, d_r = m.kv_latent_dim, m.rope_dim
    pos = torch.arange(x.shape[1])
    f = dict(x=Rounding.of(x))
    W = {name: p.detach() for name, p in m.named_parameters()}
    norm = lambda r, name: r.rms_norm(W[f"{name}.weight"], m.norm_eps) if f"{name}.weight" in W else r  # noqa: E731
    f["c_q"] = f["x"] if m.w_dq is None else norm(lin(f["x"], "w_dq"), "q_norm")
    f["q_c"] = split(lin(f["c_q"], "w_uq"))
    f["q_r"] = rope(split(lin(f["c_q"], "w_qr")), pos)
    f["c_kv"] = norm(lin(f["x"], "w_dkv"), "kv_norm")
    f["k_r"] = rope(lin(f["x"], "w_kr"), pos)
    f["scale"] = 1.0 / math.sqrt(m.head_dim + d_r)
    if absorb:
        f["q"] = Rounding.cat([f["q_c"] @ uk, f["q_r"]])                       # (B, h, T, d_c + d_r)
        f["k"] = Rounding.cat([f["c_kv"], f["k_r"]])[:, None]                  # (B, 1, T, d_c + d_r): one head
        f["v"] = f["k"][..., :d_c]
        f["lat"] = attention(f["q"], f["k"], f["v"], scale=f["scale"], is_causal=is_causal)[1]
        f["o"] = f["lat"] @ uv.mT
    else:
        f["q"] = Rounding.cat([f["q_c"], f["q_r"]])
        k_r = f["k_r"][:, None].map(lambda t: t.expand(-1, m.num_heads, -1, -1))
        f["k"] = Rounding.cat([split(lin(f["c_kv"], "w_uk")), k_r])
        f["v"] = split(lin(f["c_kv"], "w_uv"))
        f["o"] = attention(f["q"], f["k"], f["v"], scale=f["scale"], is_causal=is_causal)[1]
    f["merged"] = f["o"].map(mha.merge_heads)
    f["out"] = lin(f["merged"], "w_o")
    return f


def rounding_of(m, x, is_causal, absorb=False):
    """The bound of the rounding of m(x) in float64, computed by m's steps in either form (or
    by the paper's, head by head: the same sums). A causal query's row over fewer keys, as
    in decoding, is within its row's bound: the same steps, no longer sums."""
    return _forward(m, x, is_causal, absorb)["out"]


def rounding_of_gradients(m, x, is_causal, absorb):
    """The bound of the rounding of the gradients of m(x).sum() with respect to m's weights,
    by autograd's steps: the chain rule through each projection (a weight's gradient sums
    over the B T positions), RoPE (the rotation back) and attention (precision.attention_backward)."""
    W, uk, uv, lin, split = _layers(m)
    d, d_c, h = m.head_dim, m.kv_latent_dim, m.num_heads
    f = _forward(m, x, is_causal, absorb)
    pos = torch.arange(x.shape[1])
    flat = lambda r: r.map(lambda t: t.flatten(0, -2))                                   # noqa: E731
    by_head = lambda r: r.map(lambda t: t.transpose(0, 1).flatten(1, 2))                 # (h, B T, w)  # noqa: E731
    merge = lambda r: r.map(mha.merge_heads)                                             # noqa: E731
    weight_grad = lambda dy, y: flat(dy).mT @ flat(y)                                    # noqa: E731
    g = {}
    d_out = Rounding.of(torch.ones(f["out"].shape, dtype=torch.float64))
    g["w_o"] = weight_grad(d_out, f["merged"])
    d_o = split(d_out @ W["w_o.weight"])
    if absorb:
        d_lat = d_o @ uv
        g["w_uv"] = (by_head(d_o).mT @ by_head(f["lat"])).map(lambda t: t.reshape(h * d, d_c))
        dq, dk, dv = attention_backward(f["q"], f["k"], f["v"], d_lat, scale=f["scale"], is_causal=is_causal)
        d_keys = (dk + Rounding.cat([dv, Rounding.of(torch.zeros_like(dk.value[..., d_c:]))]))[:, 0]
        d_c_kv, d_k_r = d_keys[..., :d_c], d_keys[..., d_c:]
        d_q_c = dq[..., :d_c] @ uk.mT
        g["w_uk"] = (by_head(f["q_c"]).mT @ by_head(dq[..., :d_c])).map(lambda t: t.reshape(h * d, d_c))
    else:
        dq, dk, dv = attention_backward(f["q"], f["k"], f["v"], d_o, scale=f["scale"], is_causal=is_causal)
        d_q_c, d_k_c = dq[..., :d], dk[..., :d]
        d_k_r = dk[..., d:].sum(1)                                                     # one RoPE key for every head
        g["w_uk"], g["w_uv"] = weight_grad(merge(d_k_c), f["c_kv"]), weight_grad(merge(dv), f["c_kv"])
        d_c_kv = merge(d_k_c) @ W["w_uk.weight"] + merge(dv) @ W["w_uv.weight"]
    d_q_r = merge(rope(dq[..., -m.rope_dim:], -pos))                                   # the rotation back
    d_k_r = rope(d_k_r, -pos)
    g["w_uq"], g["w_qr"] = weight_grad(merge(d_q_c), f["c_q"]), weight_grad(d_q_r, f["c_q"])
    g["w_dkv"], g["w_kr"] = weight_grad(d_c_kv, f["x"]), weight_grad(d_k_r, f["x"])
    if m.w_dq is not None:
        d_c_q = merge(d_q_c) @ W["w_uq.weight"] + d_q_r @ W["w_qr.weight"]
        g["w_dq"] = weight_grad(d_c_q, f["x"])
    return {f"{name}.weight": bound for name, bound in g.items()}


def in_float64(m):
    return copy.deepcopy(m).double()


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("is_causal", [False, True])
def test_forward_equals_the_papers_equations_head_by_head(config, is_causal):
    m = make(torch.float64, **CONFIGS[config])
    x = rand(2, 7, 32, dtype=torch.float64)
    assert_within(m(x, is_causal=is_causal), reference(m, x, is_causal), rounding_of(m, x, is_causal))


@pytest.mark.parametrize("config", CONFIGS)
def test_absorbed_form_equals_the_explicit_form_in_float64(config):
    m = make(torch.float64, **CONFIGS[config])
    x = rand(2, 9, 32, dtype=torch.float64)
    for is_causal in (False, True):
        assert_within(m(x, is_causal=is_causal, absorb=True), m(x, is_causal=is_causal),
                      rounding_of(m, x, is_causal, absorb=True), rounding_of(m, x, is_causal))


@pytest.mark.parametrize("config", CONFIGS)
def test_absorbed_form_is_close_to_the_explicit_form_in_float32(config):
    m = make(**CONFIGS[config])
    x = rand(2, 9, 32)
    with torch.no_grad():
        exact = in_float64(m)(x.double(), is_causal=True)
        assert_as_accurate_as(m(x, is_causal=True, absorb=True), m(x, is_causal=True), exact)


def decode(m, x, chunks, absorb):
    cache, outs, start = mha.LatentCache(), [], 0
    for n in chunks:
        outs.append(m(x[:, start:start + n], is_causal=n > 1, cache=cache, absorb=absorb))
        start += n
    assert len(cache) == start == x.shape[1]
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("absorb", [False, True])
@pytest.mark.parametrize("config", CONFIGS)
def test_token_by_token_decoding_with_a_latent_cache_equals_the_full_causal_forward(config, absorb):
    m = make(torch.float64, **CONFIGS[config])
    x = rand(2, 8, 32, dtype=torch.float64)
    assert_within(decode(m, x, [1] * 8, absorb), m(x, is_causal=True),
                  rounding_of(m, x, True, absorb), rounding_of(m, x, True))


@pytest.mark.parametrize("absorb", [False, True])
def test_chunks_after_cached_tokens_continue_the_positions_and_align_bottom_right(absorb):
    m = make(torch.float64)
    x = rand(1, 10, 32, dtype=torch.float64)
    assert_within(decode(m, x, [4, 3, 1, 2], absorb), m(x, is_causal=True),
                  rounding_of(m, x, True, absorb), rounding_of(m, x, True))


def test_decoding_in_float32_matches_the_full_forward():
    m = make()
    x = rand(2, 6, 32)
    with torch.no_grad():
        exact = in_float64(m)(x.double(), is_causal=True)
        assert_as_accurate_as(decode(m, x, [1] * 6, True), m(x, is_causal=True), exact)


@pytest.mark.parametrize("num_heads", [1, 4, 8])
def test_the_cache_holds_kv_latent_dim_plus_rope_dim_values_per_token_whatever_the_heads(num_heads):
    m = mha.MultiHeadLatentAttention(32, num_heads, kv_latent_dim=16, rope_dim=4)
    cache = mha.LatentCache()
    with torch.no_grad():
        m(rand(3, 5, 32), is_causal=True, cache=cache)
        m(rand(3, 1, 32, seed=2), cache=cache)
    assert len(cache) == 6 and m.cache_width == 20
    assert cache.c_kv.shape == (3, 6, 16) and cache.k_rope.shape == (3, 6, 4)
    assert cache.nbytes() == (16 + 4) * 6 * 3 * 4                  # float32
    assert cache.nbytes() == mha.latent_cache_bytes(1, 16, 4, 6, batch=3, bytes_per_element=4)


def test_deepseek_v2_shape_caches_576_values_per_token_against_32768_for_mha():
    m = mha.MultiHeadLatentAttention(256, 2, head_dim=128, kv_latent_dim=512, rope_dim=64)  # V2's widths, 2 heads
    cache = mha.LatentCache()
    with torch.no_grad():
        m(rand(1, 3, 256), is_causal=True, cache=cache)
    per_token = cache.nbytes() // (len(cache) * 4)
    assert per_token == m.cache_width == 576
    assert 2 * 128 * 128 == 32768 and 32768 / 576 > 56                 # MHA with V2's 128 heads of 128


def test_the_cached_rope_key_is_already_rotated_and_shared_by_all_heads():
    m = make(torch.float64)
    x = rand(1, 5, 32, dtype=torch.float64)
    cache = mha.LatentCache()
    m(x, is_causal=True, cache=cache)
    assert m.w_kr.weight.shape == (m.rope_dim, 32)                   # one RoPE key, not one per head
    assert torch.equal(cache.k_rope, mha.apply_rope(m.w_kr(x)))       # the same steps: bit for bit
    assert torch.equal(cache.c_kv, m.w_dkv(x))


def test_causal_forward_ignores_later_tokens_and_the_plain_forward_does_not():
    m = make(torch.float64)
    x = rand(1, 6, 32, dtype=torch.float64)
    x2 = x.clone()
    x2[:, 4:] = rand(1, 2, 32, seed=5, dtype=torch.float64)
    assert torch.equal(m(x, is_causal=True)[:, :4], m(x2, is_causal=True)[:, :4])
    assert not torch.allclose(m(x)[:, :4], m(x2)[:, :4])


def test_scores_are_scaled_by_one_over_sqrt_head_dim_plus_rope_dim():
    m = make(torch.float64, kv_latent_dim=8, rope_dim=2, head_dim=6)
    x = rand(1, 4, 32, dtype=torch.float64)
    ref = reference(m, x, False)
    assert_within(m(x), ref, rounding_of(m, x, False))
    with torch.no_grad():                                    # a scale of 1/sqrt(head_dim) is measurably different
        m.w_uq.weight.mul_(math.sqrt(8 / 6))
        m.w_qr.weight.mul_(math.sqrt(8 / 6))
    assert not torch.allclose(m(x), ref, atol=1e-6)


@pytest.mark.parametrize("config", ["query compression", "latent norm"])
@pytest.mark.parametrize("absorb", [False, True])
def test_gradients_reach_every_parameter(absorb, config):
    m = make(torch.float64, **CONFIGS[config])
    x = rand(2, 5, 32, dtype=torch.float64).requires_grad_()
    m(x, is_causal=True, absorb=absorb).pow(2).sum().backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.isfinite().all() and p.grad.abs().sum() > 0, name
    assert x.grad.abs().sum() > 0


def test_gradients_of_both_forms_agree():
    grads, bounds = [], []
    x = rand(1, 5, 32, dtype=torch.float64)
    for absorb in (False, True):
        m = make(torch.float64)
        m(x, is_causal=True, absorb=absorb).sum().backward()
        grads.append({n: p.grad for n, p in m.named_parameters()})
        bounds.append(rounding_of_gradients(m, x, True, absorb))
    assert grads[0].keys() == bounds[0].keys() == bounds[1].keys()
    for name in grads[0]:
        assert_within(grads[1][name], grads[0][name], bounds[1][name], bounds[0][name], msg=name)


def test_same_seed_same_weights():
    a, b = make(seed=3), make(seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_bias_true_runs_explicitly_and_refuses_the_absorbed_form():
    m = mha.MultiHeadLatentAttention(32, 4, kv_latent_dim=16, rope_dim=4, bias=True)
    assert m.w_uk.bias is not None
    assert m(rand(1, 3, 32)).shape == (1, 3, 32)
    with pytest.raises(ValueError, match="absorb"):
        m(rand(1, 3, 32), absorb=True)


@pytest.mark.parametrize("kwargs, error, word", [
    (dict(kv_latent_dim=16, rope_dim=3), ValueError, "rope_dim"),
    (dict(kv_latent_dim=16, rope_dim=0), ValueError, "rope_dim"),
    (dict(kv_latent_dim=0, rope_dim=4), ValueError, "kv_latent_dim"),
    (dict(kv_latent_dim=16.0, rope_dim=4), TypeError, "kv_latent_dim"),
    (dict(kv_latent_dim=16, rope_dim=4, q_latent_dim=0), ValueError, "q_latent_dim"),
    (dict(kv_latent_dim=16, rope_dim=4, head_dim=0), ValueError, "head_dim"),
    (dict(kv_latent_dim=16, rope_dim=4, rope_base=1.0), ValueError, "rope_base"),
    (dict(kv_latent_dim=16, rope_dim=4, rope_base="1e4"), TypeError, "rope_base"),
    (dict(kv_latent_dim=16, rope_dim=4, latent_norm=1), TypeError, "latent_norm"),
    (dict(kv_latent_dim=16, rope_dim=4, latent_norm=True, norm_eps=0.0), ValueError, "norm_eps"),
])
def test_bad_configuration_raises(kwargs, error, word):
    with pytest.raises(error, match=word):
        mha.MultiHeadLatentAttention(32, 4, **kwargs)


def test_head_dim_defaults_to_embed_dim_floor_divided_by_num_heads():
    assert mha.MultiHeadLatentAttention(32, 4, kv_latent_dim=16, rope_dim=4).head_dim == 8
    m = mha.MultiHeadLatentAttention(30, 4, kv_latent_dim=16, rope_dim=4)   # h * d = 28 != 30: fine in MLA
    assert m.head_dim == 7 and m(rand(1, 3, 30)).shape == (1, 3, 30)
    assert mha.MultiHeadLatentAttention(30, 4, kv_latent_dim=16, rope_dim=4, head_dim=8).head_dim == 8
    with pytest.raises(ValueError, match="head_dim"):
        mha.MultiHeadLatentAttention(3, 4, kv_latent_dim=16, rope_dim=4)      # 3 // 4 = 0


def test_bad_input_raises():
    m = make()
    with pytest.raises(ValueError, match="x"):
        m(rand(3, 32))
    with pytest.raises(ValueError, match="32"):
        m(rand(1, 3, 16))
    with pytest.raises(TypeError, match="floating"):
        m(torch.ones(1, 3, 32, dtype=torch.long))


def test_a_kv_cache_is_refused():
    with pytest.raises(TypeError, match="LatentCache"):
        make()(rand(1, 1, 32), cache=mha.KVCache())


def test_several_new_tokens_with_a_cache_need_is_causal_and_leave_the_cache_unchanged():
    cache = mha.LatentCache()
    with pytest.raises(ValueError, match="is_causal"):
        make()(rand(1, 3, 32), cache=cache)
    assert len(cache) == 0 and cache.nbytes() == 0


def test_latent_cache_update_checks_shapes_and_reset_empties_it():
    cache = mha.LatentCache()
    c, k = cache.update(torch.zeros(2, 3, 16), torch.zeros(2, 3, 4))
    assert c.shape == (2, 3, 16) and len(cache) == 3
    with pytest.raises(ValueError, match="LatentCache"):
        cache.update(torch.zeros(1, 1, 16), torch.zeros(1, 1, 4))        # other batch size
    with pytest.raises(ValueError, match="LatentCache"):
        cache.update(torch.zeros(2, 1, 8), torch.zeros(2, 1, 4))         # other latent width
    with pytest.raises(ValueError, match="agree"):
        cache.update(torch.zeros(2, 2, 16), torch.zeros(2, 1, 4))
    assert len(cache) == 3
    cache.reset()
    assert len(cache) == 0 and cache.nbytes() == 0


# --- the absorbed form as the decoding form: nothing precomputed, the cache read in place ---

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402


class LargestNewTensor(TorchDispatchMode):
    """The number of elements of the largest tensor any operation creates (views excluded)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in torch.utils._pytree.tree_leaves((args, kwargs))
                  if isinstance(a, torch.Tensor)}
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.largest = max(self.largest, t.numel())
        return out


def test_an_absorbed_decoding_step_reads_the_cache_in_place_and_builds_no_keys():
    m = mha.MultiHeadLatentAttention(32, 2, kv_latent_dim=48, rope_dim=8, head_dim=16).eval()
    cache, T = mha.LatentCache(), 200
    with torch.no_grad():
        m(rand(1, T, 32), is_causal=True, cache=cache)
        m(rand(1, 1, 32, seed=4), cache=cache)          # the buffer grows here, to 400 positions
        with LargestNewTensor() as absorbed:
            m(rand(1, 1, 32, seed=2), cache=cache, absorb=True)
        with LargestNewTensor() as explicit:
            m(rand(1, 1, 32, seed=3), cache=cache)
    assert absorbed.largest < T * 8             # the scores, 2 heads x T; no copy of T x (48 + 8)
    assert explicit.largest >= T * 2 * 16       # the explicit form rebuilds every cached key


@pytest.mark.parametrize("change", ["fused Adam step", "write through .data", "load_state_dict"])
def test_the_absorbed_form_follows_every_change_of_the_weights(change):
    m = make(torch.float64)
    x = rand(1, 6, 32, dtype=torch.float64)
    with torch.no_grad():
        before = m(x, is_causal=True, absorb=True)
    if change == "fused Adam step":              # fused Adam does not bump the tensors' version counters
        opt = torch.optim.Adam(m.parameters(), lr=0.1, fused=True)
        m(x, is_causal=True, absorb=True).sum().backward()
        opt.step()
    elif change == "write through .data":        # .data has a version counter of its own
        m.w_uv.weight.data.mul_(2)
        m.w_o.weight.data.add_(0.1)
    else:
        m.load_state_dict(make(torch.float64, seed=5).state_dict())
    with torch.no_grad():
        after, explicit = m(x, is_causal=True, absorb=True), m(x, is_causal=True)
    assert not torch.allclose(after, before)
    assert_within(after, explicit, rounding_of(m, x, True, absorb=True), rounding_of(m, x, True))


@pytest.mark.parametrize("absorb", [False, True])
def test_decoding_past_the_first_buffers_growth_equals_the_full_causal_forward(absorb):
    m = make(torch.float64)
    x = rand(1, 40, 32, dtype=torch.float64)               # 40 tokens: the buffer grows 16 -> 32 -> 64
    assert_within(decode(m, x, [1] * 40, absorb), m(x, is_causal=True),
                  rounding_of(m, x, True, absorb), rounding_of(m, x, True))


def test_with_latent_norm_the_cache_holds_the_normalised_latents():
    """As in DeepSeek's code, the latent is normalised before it is cached: the absorbed form
    then reads the same c_KV as the explicit one."""
    m = make(torch.float64, **CONFIGS["latent norm"])
    x = rand(1, 4, 32, dtype=torch.float64)
    cache = mha.LatentCache()
    with torch.no_grad():
        m(x, is_causal=True, cache=cache)
        assert torch.equal(cache.c_kv, m.kv_norm(m.w_dkv(x)))
        assert not torch.allclose(cache.c_kv, m.w_dkv(x))
