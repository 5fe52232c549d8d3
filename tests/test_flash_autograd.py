"""mha.flash_attention on every autograd path: second derivatives and torch.func.

The backward kernels compute first derivatives. When autograd builds a graph of the backward
(``create_graph=True``: a gradient penalty, a Hessian-vector product, and every torch.func
transform that differentiates), the backward takes a differentiable route of torch operations
instead, and forward-mode derivatives have formulas of their own. Each result is held to
autograd through mha.scaled_dot_product_attention: as accurate as that in float32, against
float64 (tests/precision.py).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

import mha
from mha import flash
from precision import assert_as_accurate_as

if importlib.util.find_spec("triton") is None:
    pytest.skip("Triton publishes wheels for Linux only", allow_module_level=True)
import mha.kernels  # noqa: E402,F401  (chooses the interpreter before Triton is imported)

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

DEVICE = "cpu" if flash.interpreted() else "cuda"
SHAPE = (1, 2, 21, 29, 32)          # B, h, Tq, Tk, d: causal with the diagonal 8 keys in


def leaves(dtype, seed=3, shape=SHAPE):
    B, H, Tq, Tk, d = shape
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, d, generator=g).to(DEVICE, dtype).requires_grad_() for T in (Tq, Tk, Tk)]


def flash_out(q, k, v):
    return mha.flash_attention(q, k, v, is_causal=True)


def plain_out(q, k, v):
    return mha.scaled_dot_product_attention(q, k, v, is_causal=True)[0]


def assert_like_the_plain_maths(compute, names):
    """compute(attend, dtype) -> tensors: with flash_attention in float32, held to the same
    with the plain maths in float32 against float64."""
    got = compute(flash_out, torch.float32)
    same = compute(plain_out, torch.float32)
    exact = compute(plain_out, torch.float64)
    for g in got:
        assert g is not None and torch.isfinite(g).all()
    assert_as_accurate_as(got, same, exact, names=names)


def penalty_of_dq(attend, dtype, loss=lambda out: out.pow(2).sum()):
    q, k, v = leaves(dtype)
    (dq,) = torch.autograd.grad(loss(attend(q, k, v)), q, create_graph=True)
    return q, k, v, dq


# ----------------------------------------------------------------------------- which route

def test_without_create_graph_the_backward_kernels_run(monkeypatch):
    def refuse(*args):
        raise AssertionError("the differentiable route ran")
    monkeypatch.setattr(flash, "_differentiable_backward", refuse)
    q, k, v = leaves(torch.float32)
    (dq,) = torch.autograd.grad(flash_out(q, k, v).pow(2).sum(), q)
    assert dq.grad_fn is None


def test_with_create_graph_the_gradients_are_differentiable_and_the_kernels_do_not_run(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the backward kernels ran")
    monkeypatch.setattr(flash, "backward", refuse)
    q, k, v = leaves(torch.float32)
    dq, dk, dv = torch.autograd.grad(flash_out(q, k, v).pow(2).sum(), (q, k, v), create_graph=True)
    assert all(g.requires_grad and g.grad_fn is not None for g in (dq, dk, dv))


# ----------------------------------------------------------------------------- second derivatives

def test_a_loss_linear_in_the_output_then_a_gradient_penalty_by_backward():
    """L = sum(out * w), w constant: dL/dout needs no gradient, yet d/dq of |dL/dq|^2 is not 0."""
    w = torch.randn(1, 2, 21, 32, generator=torch.Generator().manual_seed(5)).to(DEVICE)

    def compute(attend, dtype):
        q, k, v, dq = penalty_of_dq(attend, dtype, loss=lambda out: (out * w.to(dtype)).sum())
        (dq.pow(2).sum() + q.sum()).backward()
        return [q.grad, k.grad, v.grad]

    assert_like_the_plain_maths(compute, names=("d/dq", "d/dk", "d/dv"))


def test_a_gradient_penalty_differentiated_in_q_by_autograd_grad():
    def compute(attend, dtype):
        q, k, v, dq = penalty_of_dq(attend, dtype)
        return list(torch.autograd.grad(dq.pow(2).sum() + q.sum(), q))

    assert_like_the_plain_maths(compute, names=("d/dq",))


def test_a_gradient_penalty_differentiated_in_k_by_autograd_grad():
    """A penalty on dL/dq differentiated with respect to k, as for a weight that makes k."""
    def compute(attend, dtype):
        q, k, v, dq = penalty_of_dq(attend, dtype)
        return list(torch.autograd.grad(dq.pow(2).sum(), k))

    assert_like_the_plain_maths(compute, names=("d/dk",))


def test_a_hessian_vector_product():
    u = torch.randn(1, 2, 21, 32, generator=torch.Generator().manual_seed(7)).to(DEVICE)

    def compute(attend, dtype):
        q, k, v, dq = penalty_of_dq(attend, dtype)
        return list(torch.autograd.grad(dq, q, grad_outputs=u.to(dtype)))

    assert_like_the_plain_maths(compute, names=("H u",))


def test_second_derivatives_with_no_keys_are_zeros():
    q, k, v = leaves(torch.float32, shape=(1, 1, 4, 0, 16))
    (dq,) = torch.autograd.grad(mha.flash_attention(q, k, v).sum(), q, create_graph=True)
    (h,) = torch.autograd.grad(dq.sum() + q.sum(), q)
    assert torch.equal(dq, torch.zeros_like(q)) and torch.equal(h, torch.ones_like(q))


# ----------------------------------------------------------------------------- torch.func

SMALL = (2, 2, 9, 13, 16)


def test_torch_func_vmap_runs_the_kernels_on_the_mapped_dimension_folded_in():
    q, k, v = (t.detach() for t in leaves(torch.float32, shape=SMALL))
    mapped = torch.func.vmap(flash_out, in_dims=(0, None, None))(q[:, None], k[:1], v[:1])   # (2, 1, 2, 9, 16)
    folded = flash.FlashAttention.apply(q[:, None], k[:1].expand(2, 1, 2, 13, 16), v[:1].expand(2, 1, 2, 13, 16),
                                        True)        # any leading dimensions: (2, 1, 2) heads
    assert torch.equal(mapped, folded)


@pytest.mark.parametrize("transform", ["grad", "vjp", "jacrev", "jvp", "jacfwd", "vmap of grad"])
def test_torch_func_transforms(transform):
    def compute(attend, dtype):
        q, k, v = (t.detach() for t in leaves(dtype, shape=SMALL))
        loss = lambda q, k, v: attend(q, k, v).pow(2).sum()             # noqa: E731
        row = lambda q: attend(q, k, v).sum((0, 1, 2))                   # noqa: E731  (d,) -> a small Jacobian
        if transform == "grad":
            return list(torch.func.grad(loss, argnums=(0, 1, 2))(q, k, v))
        if transform == "vjp":
            _, pullback = torch.func.vjp(attend, q, k, v)
            return list(pullback(torch.ones_like(q)))
        if transform == "jacrev":
            return [torch.func.jacrev(row)(q)]
        if transform == "jacfwd":
            return [torch.func.jacfwd(row)(q)]
        if transform == "jvp":
            tangents = tuple(torch.ones_like(t) for t in (q, k, v))
            return [torch.func.jvp(attend, (q, k, v), tangents)[1]]
        return [torch.func.vmap(torch.func.grad(loss))(q[:, None], k[:, None], v[:, None])]

    assert_like_the_plain_maths(compute, names=None)


def test_torch_func_hessian():
    def compute(attend, dtype):
        q, k, v = (t.detach() for t in leaves(dtype, shape=(1, 1, 3, 4, 16)))
        return [torch.func.hessian(lambda q: attend(q, k, v).pow(2).sum())(q[..., :2, :])]

    assert_like_the_plain_maths(compute, names=("hessian",))
