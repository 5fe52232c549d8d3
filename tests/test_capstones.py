"""The two capstones write the whole thing: lesson 06 the multi-head attention layer, lesson 08
the backward pass of grouped-query attention. Their public checks say "the same as
torch.nn.MultiheadAttention" and "autograd's gradients": the references are written from
scratch (the grader refuses a reference that calls what the exercise forbids), so these tests
hold them to PyTorch on every public case and on many hidden draws, in every dtype the
exercises accept."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from mha.exercises import get

SEEDS = range(60)

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def cases(ex, dtype):
    """The public cases and the hidden draws of SEEDS, floating tensors cast to ``dtype``."""
    drawn = ex.public_cases() + [c for seed in SEEDS for c in ex.hidden_cases(seed)]
    to = getattr(torch, dtype)
    return [replace(c, args=tuple(a.to(to) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                                  for a in c.args)) for c in drawn]


def torch_layer(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads, key_mask, is_causal):
    """torch.nn.MultiheadAttention holding the weights (zero biases where there are none), in eval()."""
    B, T, C = x.shape
    layer = torch.nn.MultiheadAttention(C, num_heads, batch_first=True, dtype=x.dtype).eval()
    with torch.no_grad():
        layer.in_proj_weight.copy_(in_proj_weight)
        layer.in_proj_bias.copy_(torch.zeros(3 * C) if in_proj_bias is None else in_proj_bias)
        layer.out_proj.weight.copy_(out_proj_weight)
        layer.out_proj.bias.copy_(torch.zeros(C) if out_proj_bias is None else out_proj_bias)
        blocked = torch.ones(T, T, dtype=torch.bool).triu(1) if is_causal else None     # True = blocked
        padding = None if key_mask is None else ~key_mask                               # True = padding
        return layer(x, x, x, key_padding_mask=padding, attn_mask=blocked, need_weights=False)[0]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_layer_capstone_computes_what_torch_s_multihead_attention_computes(dtype):
    ex = get("layer.multi_head_attention")
    drawn = cases(ex, dtype)
    kinds = {(c.args[6] is not None, c.args[7], c.args[2] is not None, c.args[4] is not None) for c in drawn}
    assert len(kinds) >= 6, kinds          # with and without padding, causality, each bias
    for case in drawn:
        torch.testing.assert_close(ex.reference(*case.args), torch_layer(*case.args))


def autograd_gqa(q, k, v, grad_out, is_causal):
    """Autograd's gradients through torch's attention on the expanded keys and values."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    copies = q.shape[1] // k.shape[1]
    Tq, Tk = q.shape[2], k.shape[2]
    allowed = torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq) if is_causal else None   # bottom-right
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(copies, dim=1), v.repeat_interleave(copies, dim=1), attn_mask=allowed)
    return torch.autograd.grad(out, (q, k, v), grad_out)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_backward_capstone_gives_autograd_s_gradients(dtype):
    ex = get("grads.grouped_attention_backward")
    drawn = cases(ex, dtype)
    assert any(c.args[4] and c.args[0].shape[2] < c.args[1].shape[2] for c in drawn)   # causal, Tq < Tk
    assert all(c.args[0].shape[2] <= c.args[1].shape[2] for c in drawn)               # no query without keys
    for case in drawn:
        for mine, theirs in zip(ex.reference(*case.args), autograd_gqa(*case.args), strict=True):
            torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_temperatures_gradient_is_autograd_s(dtype):
    ex = get("grads.scale_grad")
    for case in cases(ex, dtype):
        q, k, v, grad_out, scale = case.args
        s = scale.detach().clone().requires_grad_()
        out = torch.softmax(s[:, None, None] * (q @ k.transpose(-2, -1)), dim=-1) @ v
        (expected,) = torch.autograd.grad(out, s, grad_out)
        torch.testing.assert_close(ex.reference(*case.args), expected)
