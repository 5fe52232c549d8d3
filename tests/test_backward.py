"""mha.attention_backward: the hand-derived gradients equal autograd's, masks and empty rows
give exact zeros, and bad input raises naming the argument.

Two float64 computations of the gradients agree to the worst-case rounding of their sums,
carried through the backward's formulas (precision.attention_backward); float32 ones are as
accurate as autograd's in float32, within 2x (tests/precision.py).
"""

import math

import pytest
import torch

import mha
from precision import assert_as_accurate_as, assert_within
from precision import attention_backward as rounding_of_backward


def qkv(q_shape, k_shape, v_shape, *, dtype=torch.float64, seed=0):
    """Random q, k, v (leaf tensors that require grad) and a random grad_out of the output's shape."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(s, generator=g, dtype=dtype).requires_grad_() for s in (q_shape, k_shape, v_shape))
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    grad_out = torch.randn(*lead, q.shape[-2], v.shape[-1], generator=g, dtype=dtype)
    return q, k, v, grad_out


def autograd_grads(q, k, v, grad_out, **kwargs):
    out, _ = mha.scaled_dot_product_attention(q, k, v, **kwargs)
    return torch.autograd.grad(out, (q, k, v), grad_out)


def assert_grads_equal(got, expected, q, k, v, grad_out, **kwargs):
    """Two float64 computations of (dq, dk, dv) agree to the rounding of the backward's sums:
    a d-term score, a Tk-term softmax, then d_v-, Tk- and Tq-term products, sized by the
    terms they add, not by the gradients (which cancel)."""
    bounds = rounding_of_backward(q, k, v, grad_out, **kwargs)
    for name, a, b, bound in zip(("dq", "dk", "dv"), got, expected, bounds):
        assert a.shape == b.shape and a.dtype == b.dtype, name
        assert_within(a, b, bound, msg=name)


SHAPES = [  # q, k, v
    ((4, 8), (4, 8), (4, 8)),                          # one head, square
    ((3, 5), (7, 5), (7, 2)),                          # Tq < Tk, d_v != d
    ((2, 3, 6, 4), (2, 3, 6, 4), (2, 3, 6, 4)),        # (B, h, T, d_h)
    ((2, 2, 5, 8), (2, 2, 3, 8), (2, 2, 3, 6)),        # Tq > Tk
    ((1, 1, 1, 16), (1, 1, 9, 16), (1, 1, 9, 16)),     # one query: decoding with a cache
]


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: "x".join(map(str, s[0])) + "-" + "x".join(map(str, s[1])))
def test_matches_autograd_in_float64(shapes, is_causal):
    q, k, v, dout = qkv(*shapes)
    got = mha.attention_backward(q, k, v, dout, is_causal=is_causal)
    assert_grads_equal(got, autograd_grads(q, k, v, dout, is_causal=is_causal), q, k, v, dout, is_causal=is_causal)


@pytest.mark.parametrize("scale", [0.1, 1.0, 3.0])
def test_explicit_scale_matches_autograd(scale):
    q, k, v, dout = qkv((2, 4, 6), (2, 5, 6), (2, 5, 3), seed=1)
    got = mha.attention_backward(q, k, v, dout, is_causal=True, scale=scale)
    assert_grads_equal(got, autograd_grads(q, k, v, dout, is_causal=True, scale=scale), q, k, v, dout,
                       is_causal=True, scale=scale)


def test_broadcast_leading_dimensions_sum_the_gradient_of_every_copy():
    # one key/value head shared by 3 query heads (multi-query), and a batch-free q
    q, k, v, dout = qkv((2, 3, 4, 8), (2, 1, 6, 8), (2, 1, 6, 5), seed=2)
    got = mha.attention_backward(q, k, v, dout)
    assert got[1].shape == (2, 1, 6, 8) and got[2].shape == (2, 1, 6, 5)
    assert_grads_equal(got, autograd_grads(q, k, v, dout), q, k, v, dout)
    q, k, v, dout = qkv((4, 8), (2, 3, 6, 8), (2, 3, 6, 8), seed=3)
    assert_grads_equal(mha.attention_backward(q, k, v, dout), autograd_grads(q, k, v, dout), q, k, v, dout)


def test_matches_autograd_in_float32_and_keeps_the_dtype():
    q, k, v, dout = qkv((2, 2, 6, 8), (2, 2, 6, 8), (2, 2, 6, 8), dtype=torch.float32, seed=4)
    got = mha.attention_backward(q, k, v, dout, is_causal=True)
    assert all(t.dtype == torch.float32 for t in got)
    exact = autograd_grads(*(t.detach().double().requires_grad_() for t in (q, k, v)), dout.double(), is_causal=True)
    assert_as_accurate_as(got, autograd_grads(q, k, v, dout, is_causal=True), exact, names=("dq", "dk", "dv"))


class HandAttention(torch.autograd.Function):
    """softmax(q k^T s) v whose backward is mha.attention_backward, for gradcheck."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal):
        ctx.save_for_backward(q, k, v)
        ctx.is_causal = is_causal
        return mha.scaled_dot_product_attention(q, k, v, is_causal=is_causal)[0]

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensors
        return (*mha.attention_backward(q, k, v, grad_out, is_causal=ctx.is_causal), None)


@pytest.mark.parametrize("is_causal", [False, True])
def test_gradcheck_of_the_reference_forward_in_float64(is_causal):
    q, k, v, _ = qkv((2, 4, 3), (2, 5, 3), (2, 5, 2), seed=5)
    fn = lambda q, k, v: mha.scaled_dot_product_attention(q, k, v, is_causal=is_causal)[0]  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v))


@pytest.mark.parametrize("is_causal", [False, True])
def test_gradcheck_of_the_hand_backward_against_finite_differences(is_causal):
    q, k, v, _ = qkv((2, 5, 3), (2, 4, 3), (2, 4, 2), seed=6)   # Tq > Tk: causal has an empty row
    assert torch.autograd.gradcheck(lambda q, k, v: HandAttention.apply(q, k, v, is_causal), (q, k, v))


def test_an_empty_row_gives_finite_zero_gradients():
    # causal with Tq = 5 > Tk = 3: bottom-right alignment leaves queries 0 and 1 with no key
    q, k, v, dout = qkv((5, 4), (3, 4), (3, 4), seed=7)
    dq, dk, dv = mha.attention_backward(q, k, v, dout, is_causal=True)
    assert all(t.isfinite().all() for t in (dq, dk, dv))
    assert torch.all(dq[:2] == 0)
    # query 2 sees key 0 alone: its weight is 1 whatever the score, so its gradient is 0 too
    assert torch.all(dq[2] == 0) and torch.all(dq[3:] != 0)
    # the empty rows' grad_out reaches nothing: changing it leaves dk and dv as they were
    dout2 = dout.clone()
    dout2[:2] = 1e6
    _, dk2, dv2 = mha.attention_backward(q, k, v, dout2, is_causal=True)
    assert torch.equal(dk2, dk) and torch.equal(dv2, dv)
    assert_grads_equal((dq, dk, dv), autograd_grads(q, k, v, dout, is_causal=True), q, k, v, dout, is_causal=True)


def test_masked_keys_receive_only_the_gradient_of_the_queries_that_see_them():
    # causal, square: the last key is seen by the last query alone
    q, k, v, dout = qkv((6, 4), (6, 4), (6, 3), seed=8)
    _, dk, dv = mha.attention_backward(q, k, v, dout, is_causal=True)
    _, w = mha.scaled_dot_product_attention(q, k, v, is_causal=True)
    # dV = P^T dO bounds the one product w dO too (a weight, then a 6-term sum)
    assert_within(dv[-1], w[-1, -1] * dout[-1], rounding_of_backward(q, k, v, dout, is_causal=True)[2][-1])
    # change every grad_out row except the last one: the last key's gradients do not move
    dout2 = dout.clone()
    dout2[:-1] = torch.randn(5, 3, dtype=torch.float64)
    _, dk2, dv2 = mha.attention_backward(q, k, v, dout2, is_causal=True)
    assert torch.equal(dk2[-1], dk[-1]) and torch.equal(dv2[-1], dv[-1])


def test_saturated_softmax_has_a_vanishing_but_finite_gradient():
    q, k, v, dout = (t.detach() for t in qkv((64, 16, 16), (64, 16, 16), (64, 16, 16), seed=9))
    # dq = s dS K: divide by s to see the gradient that reaches the scores, dS K
    norms = [float(mha.attention_backward(q, k, v, dout, scale=s)[0].norm()) / s for s in (1.0, 100.0, 1e4)]
    assert all(math.isfinite(n) for n in norms)
    assert norms[1] < 0.2 * norms[0] and norms[2] < 1e-3 * norms[0]


def test_does_not_modify_its_inputs():
    q, k, v, dout = qkv((3, 4), (3, 4), (3, 4), seed=10)
    before = [t.detach().clone() for t in (q, k, v, dout)]
    mha.attention_backward(q, k, v, dout, is_causal=True)
    assert all(torch.equal(a, b) for a, b in zip(before, (q, k, v, dout)))


# ----------------------------------------------------------------------------- bad input

def good():
    return [t.detach() for t in qkv((2, 3, 4), (2, 5, 4), (2, 5, 6))]


@pytest.mark.parametrize("position,name", [(0, "q"), (1, "k"), (2, "v"), (3, "grad_out")])
def test_non_tensors_and_integer_tensors_raise_type_error_naming_the_argument(position, name):
    args = good()
    args[position] = args[position].tolist()
    with pytest.raises(TypeError, match=rf"^{name} must be a torch.Tensor"):
        mha.attention_backward(*args)
    args = good()
    args[position] = args[position].long()
    with pytest.raises(TypeError, match=rf"^{name} must be a floating-point tensor"):
        mha.attention_backward(*args)


def test_one_dimensional_input_raises_value_error():
    q, k, v, dout = good()
    with pytest.raises(ValueError, match=r"^q must have at least 2 dimensions"):
        mha.attention_backward(q[0, 0], k, v, dout)


def test_mixed_dtypes_raise_type_error():
    q, k, v, dout = good()
    with pytest.raises(TypeError, match=r"^grad_out must have q's dtype torch.float64, got torch.float32"):
        mha.attention_backward(q, k, v, dout.float())
    with pytest.raises(TypeError, match=r"^k must have q's dtype"):
        mha.attention_backward(q, k.float(), v, dout)


def test_mismatched_widths_and_lengths_raise_value_error():
    q, k, v, dout = good()
    with pytest.raises(ValueError, match=r"q and k must have the same last dimension, got 4 and 3"):
        mha.attention_backward(q, k[..., :3], v, dout)
    with pytest.raises(ValueError, match=r"k and v must have the same length \(dim -2\), got 5 and 4"):
        mha.attention_backward(q, k, v[..., :4, :], dout)
    with pytest.raises(ValueError, match=r"leading dimensions .* must broadcast"):
        mha.attention_backward(q, torch.cat([k, k, k]), torch.cat([v, v, v]), dout)


def test_grad_out_of_the_wrong_shape_raises_value_error():
    q, k, v, dout = good()
    with pytest.raises(ValueError, match=r"^grad_out must have the output's shape \(2, 3, 6\)"):
        mha.attention_backward(q, k, v, dout[..., :5])
    with pytest.raises(ValueError, match=r"^grad_out must have the output's shape"):
        mha.attention_backward(q, k, v, dout[0])


@pytest.mark.parametrize("scale", [True, "0.5", float("nan"), float("inf"), torch.tensor(0.5)])
def test_bad_scale_raises_type_error(scale):
    with pytest.raises(TypeError, match=r"^scale must be a finite real number or None"):
        mha.attention_backward(*good(), scale=scale)


def test_non_bool_is_causal_raises_type_error():
    with pytest.raises(TypeError, match=r"^is_causal must be a bool, got str"):
        mha.attention_backward(*good(), is_causal="yes")
