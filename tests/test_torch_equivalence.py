"""MultiHeadAttention.from_torch / .to_torch compute what torch.nn.MultiheadAttention computes.

Bounds (tests/precision.py): in float32, mha is as accurate as torch's own module, within
2x, against torch's module in float64; in float64, the two agree within the worst-case
rounding of the projections and the attention (`rounding_of`). Masks are given to torch in
its own convention (True = blocked) and to mha in ours (True = may attend).
"""

import copy

import pytest
import torch
from torch import nn

import mha
from precision import Rounding, assert_as_accurate_as, assert_within, attention, attention_backward

BACKENDS = ["sdpa", "naive"]
DTYPES = [torch.float32, torch.float64]
B, TQ, TK, C, H = 2, 5, 6, 8, 2


def torch_module(*, bias=True, kdim=None, vdim=None, dtype=torch.float32, seed=0):
    """A torch.nn.MultiheadAttention with random biases (torch initialises them to 0)."""
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(C, H, bias=bias, kdim=kdim, vdim=vdim, batch_first=True, dtype=dtype)
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if "bias" in name:
                p.uniform_(-0.5, 0.5)
    return ref.eval()


def rand(*shape, seed=1, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _projections(ref):
    """torch's in-projection weights and biases for q, k and v (packed or separate), the whole
    packed weight (or None), and the output projection's."""
    if ref._qkv_same_embed_dim:
        w = ref.in_proj_weight.chunk(3)
    else:
        w = (ref.q_proj_weight, ref.k_proj_weight, ref.v_proj_weight)
    b = ref.in_proj_bias.chunk(3) if ref.in_proj_bias is not None else (None,) * 3
    packed = ref.in_proj_weight if ref._qkv_same_embed_dim else None
    return [t.detach() for t in w], [None if t is None else t.detach() for t in b], packed, ref.out_proj


def _forward(ref, query, key, value, mask=None, is_causal=False):
    split = lambda r: r.map(lambda t: mha.split_heads(t, ref.num_heads))                  # noqa: E731
    w, b, _, out_proj = _projections(ref)
    q, k, v = (split(Rounding.of(x).linear(wi, bi)) for x, wi, bi in zip((query, key, value), w, b))
    o = attention(q, k, v, mask=mask, is_causal=is_causal)[1].map(mha.merge_heads)
    out_b = None if out_proj.bias is None else out_proj.bias.detach()
    return q, k, v, o, o.linear(out_proj.weight.detach(), out_b)


def rounding_of(ref, query, key, value, attn_mask=None, key_padding_mask=None):
    """The bound of the rounding of ref's forward in float64, which mha's follows step by step:
    the in-projections, each head's attention, the out-projection."""
    return _forward(ref, query, key, value, mha.mask_from_torch(attn_mask, key_padding_mask))[-1]


def exact(ref, *args, **kwargs):
    """torch's module in float64 on the same inputs (weights, tensors, float masks converted exactly)."""
    to64 = lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t   # noqa: E731
    with torch.no_grad():
        return copy.deepcopy(ref).double()(*map(to64, args), **{k: to64(v) for k, v in kwargs.items()})


def assert_matches(got, expected, ref, query, key, value, **kwargs):
    """got (mha's) against expected (ref's, torch's module, on the same inputs): float32 as
    accurate as torch's, float64 within the rounding of both."""
    if got.dtype == torch.float64:
        assert_within(got, expected, rounding_of(ref, query, key, value, **kwargs))
    else:
        assert_as_accurate_as(got, expected, exact(ref, query, key, value, need_weights=False, **kwargs)[0])


def inputs(kind, dtype):
    """(query, key, value) for torch, and the key/value arguments for mha (None = self-attention)."""
    x = rand(B, TQ, C, dtype=dtype)
    if kind == "self":
        return (x, x, x), ()
    kdim, vdim = (C, C) if kind == "cross" else (3, 5)
    k, v = rand(B, TK, kdim, seed=2, dtype=dtype), rand(B, TK, vdim, seed=3, dtype=dtype)
    return (x, k, v), (k, v)


KINDS = {"self": {}, "cross": {}, "cross-kdim-vdim": {"kdim": 3, "vdim": 5}}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", KINDS)
def test_from_torch_matches_torch_without_a_mask(kind, bias, backend, dtype):
    ref = torch_module(bias=bias, dtype=dtype, **KINDS[kind])
    ours = mha.MultiHeadAttention.from_torch(ref, backend=backend)
    (q, k, v), args = inputs(kind, dtype)
    expected, _ = ref(q, k, v, need_weights=False)
    assert_matches(ours(q, *args), expected, ref, q, k, v)


@pytest.mark.parametrize("kind", KINDS)
def test_from_torch_weights_match_torch_per_head_weights(kind):
    ref = torch_module(**KINDS[kind])
    ours = mha.MultiHeadAttention.from_torch(ref)
    (q, k, v), args = inputs(kind, torch.float32)
    _, expected = ref(q, k, v, need_weights=True, average_attn_weights=False)
    _, weights = ours(q, *args, need_weights=True)
    assert_as_accurate_as(weights, expected, exact(ref, q, k, v, need_weights=True, average_attn_weights=False)[1])


def masks(case, tq, tk, dtype):
    """(torch attn_mask, torch key_padding_mask, mha mask, mha is_causal) for one case."""
    lengths = [tk, tk - 2]
    torch_pad = ~mha.padding_mask(lengths, tk)[:, 0, 0]          # (B, Tk) True = padding
    torch_causal = ~mha.causal_mask(tq, tk, align="top-left")     # (Tq, Tk) True = blocked
    if case == "causal":
        return torch_causal, None, None, True
    if case == "padding":
        return None, torch_pad, mha.padding_mask(lengths, tk), False
    if case == "causal+padding":
        return torch_causal, torch_pad, mha.padding_mask(lengths, tk), True
    if case == "combined-bool":
        return torch_causal, torch_pad, mha.combine_masks(mha.causal_mask(tq, tk), mha.padding_mask(lengths, tk)), False
    if case == "float":  # additive float masks, with -inf entries but no empty row
        bias = rand(tq, tk, seed=5, dtype=dtype)
        bias[0, 1:] = float("-inf")
        pad = torch.zeros(B, tk, dtype=dtype).masked_fill(torch_pad, float("-inf"))
        return bias, pad, mha.combine_masks(bias, pad[:, None, None, :]), False
    raise AssertionError(case)


MASK_CASES = ["causal", "padding", "causal+padding", "combined-bool", "float"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", MASK_CASES)
def test_from_torch_matches_torch_with_masks_in_self_attention(case, backend, dtype):
    ref = torch_module(dtype=dtype)
    ours = mha.MultiHeadAttention.from_torch(ref, backend=backend)
    x = rand(B, TQ, C, dtype=dtype)
    attn_mask, key_padding, mask, causal = masks(case, TQ, TQ, dtype)
    expected, _ = ref(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding, need_weights=False)
    torch_masks = dict(attn_mask=attn_mask, key_padding_mask=key_padding)
    assert_matches(ours(x, mask=mask, is_causal=causal), expected, ref, x, x, x, **torch_masks)
    converted = mha.mask_from_torch(attn_mask, key_padding)
    assert_matches(ours(x, mask=converted), expected, ref, x, x, x, **torch_masks)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["padding", "float"])
def test_from_torch_matches_torch_with_masks_in_cross_attention(case, backend, dtype):
    ref = torch_module(dtype=dtype, kdim=3, vdim=5)
    ours = mha.MultiHeadAttention.from_torch(ref, backend=backend)
    (q, k, v), args = inputs("cross-kdim-vdim", dtype)
    attn_mask, key_padding, mask, _ = masks(case, TQ, TK, dtype)
    expected, _ = ref(q, k, v, attn_mask=attn_mask, key_padding_mask=key_padding, need_weights=False)
    assert_matches(ours(q, *args, mask=mask), expected, ref, q, k, v, attn_mask=attn_mask,
                   key_padding_mask=key_padding)

def rounding_of_input_gradient(ref, x):
    """The bound of the rounding of d/dx sum(out^2) for causal self-attention, by autograd's
    steps: 2 out, back through the out-projection, each head's attention
    (precision.attention_backward) and the packed in-projection (one 3C-term sum)."""
    q, k, v, _, out = _forward(ref, x, x, x, is_causal=True)
    _, _, packed, out_proj = _projections(ref)
    d_heads = (out.scaled(2.0) @ out_proj.weight.detach()).map(lambda t: mha.split_heads(t, ref.num_heads))
    grads = attention_backward(q, k, v, d_heads, is_causal=True)
    return Rounding.cat([g.map(mha.merge_heads) for g in grads]) @ packed.detach()


@pytest.mark.parametrize("backend", BACKENDS)
def test_from_torch_matches_torch_gradients(backend):
    ref = torch_module(dtype=torch.float64)
    ours = mha.MultiHeadAttention.from_torch(ref, backend=backend)
    x = rand(B, TQ, C, dtype=torch.float64).requires_grad_()
    causal = ~mha.causal_mask(TQ)
    (g_ref,) = torch.autograd.grad(ref(x, x, x, attn_mask=causal, need_weights=False)[0].square().sum(), x)
    (g_ours,) = torch.autograd.grad(ours(x, is_causal=True).square().sum(), x)
    assert_within(g_ours, g_ref, rounding_of_input_gradient(ref, x))


def make_ours(**kwargs):
    torch.manual_seed(0)
    m = mha.MultiHeadAttention(C, H, **kwargs)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-0.5, 0.5)
    return m.eval()


@pytest.mark.parametrize("kwargs", [{}, {"bias": True}, {"bias": True, "kdim": 3, "vdim": 5}],
                         ids=["no-bias", "bias", "kdim-vdim"])
def test_to_torch_computes_the_same_function(kwargs):
    ours = make_ours(**kwargs)
    ref = ours.to_torch().eval()
    assert isinstance(ref, nn.MultiheadAttention) and ref.batch_first
    (q, k, v), args = inputs("cross-kdim-vdim" if "kdim" in kwargs else "self", torch.float32)
    expected, _ = ref(q, k, v, need_weights=False)
    assert_matches(ours(q, *args), expected, ref, q, k, v)


@pytest.mark.parametrize("kwargs", [{}, {"bias": True}, {"bias": True, "kdim": 3, "vdim": 5}],
                         ids=["no-bias", "bias", "kdim-vdim"])
def test_to_torch_then_from_torch_gives_back_the_same_parameters(kwargs):
    ours = make_ours(**kwargs)
    back = mha.MultiHeadAttention.from_torch(ours.to_torch())
    before, after = ours.state_dict(), back.state_dict()
    assert before.keys() == after.keys()
    for name in before:
        assert torch.equal(before[name], after[name]), name


def test_from_torch_copies_dropout_and_keeps_dtype():
    ref = nn.MultiheadAttention(C, H, dropout=0.25, batch_first=True, dtype=torch.float64)
    ours = mha.MultiHeadAttention.from_torch(ref)
    assert ours.dropout == 0.25
    assert all(p.dtype == torch.float64 for p in ours.parameters())


def test_from_torch_makes_a_copy_not_a_view_of_torch_weights():
    ref = torch_module()
    ours = mha.MultiHeadAttention.from_torch(ref)
    x = rand(B, TQ, C)
    before = ours(x)
    with torch.no_grad():
        ref.in_proj_weight.add_(1.0)
    assert torch.equal(ours(x), before)
