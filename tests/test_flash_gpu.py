"""mha.flash_attention on a CUDA GPU, at the lengths the interpreter cannot reach: the same
checks as test_flash.py (value and the three gradients, Tq != Tk, fully masked rows, every
dtype), plus peak memory against SDPA's FlashAttention backend. `make test-gpu` runs this
file; without a CUDA GPU every test is skipped.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (make test-gpu on a GPU machine)", allow_module_level=True)

import mha  # noqa: E402
from mha import flash  # noqa: E402
from precision import assert_as_accurate_as  # noqa: E402

def draw(B, H, Tq, Tk, d, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(B, H, T, d, device="cuda", generator=g).to(dtype) for T in (Tq, Tk, Tk)]


def explicit(q, k, v, grad, is_causal, dtype):
    """Autograd through the explicit maths in ``dtype``, causal bottom-right as mha's; T must
    stay small enough for (T, T) matrices. float64 is the truth (slow on most GPUs, but these
    are a few calls); the inputs' dtype is the same-precision reference."""
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    out = mha.scaled_dot_product_attention(q, k, v, is_causal=is_causal)[0]
    out.backward(grad.to(dtype))
    return out.detach(), q.grad, k.grad, v.grad


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("d", [64, 128, 80])
@pytest.mark.parametrize("Tq,Tk,is_causal", [(4096, 4096, True), (4096, 4096, False), (3001, 4097, True),
                                              (4097, 3001, True)])
def test_value_and_gradients_at_large_T(dtype, d, Tq, Tk, is_causal):
    q, k, v = draw(1, 2, Tq, Tk, d, dtype)
    grad = torch.randn_like(q)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = mha.flash_attention(*leaves, is_causal=is_causal)
    out.backward(grad)
    got = [out.detach()] + [t.grad for t in leaves]
    assert_as_accurate_as(got, explicit(q, k, v, grad, is_causal, dtype),
                          explicit(q, k, v, grad, is_causal, torch.float64), names=("out", "dq", "dk", "dv"))


def test_fully_masked_rows_give_zeros_on_the_gpu():
    q, k, v = (t.requires_grad_() for t in draw(1, 2, 3000, 1000, 64, torch.bfloat16))
    out = mha.flash_attention(q, k, v, is_causal=True)
    out.sum().backward()
    assert torch.equal(out[:, :, :2000], torch.zeros_like(out[:, :, :2000]))
    assert torch.equal(q.grad[:, :, :2000], torch.zeros_like(q.grad[:, :, :2000]))
    assert all(torch.isfinite(t).all() for t in (out, q.grad, k.grad, v.grad))


def test_float32_uses_ieee_unless_tf32_is_allowed():
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        assert flash._precision(torch.float32) == "ieee"
        torch.backends.cuda.matmul.allow_tf32 = True
        assert flash._precision(torch.float32) == "tf32"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    assert flash._precision(torch.bfloat16) == "ieee"


@pytest.mark.parametrize("d", [64, 128])
def test_peak_memory_within_ten_percent_of_sdpa_flash_and_no_T_by_T_matrix(d):
    """Forward+backward at T = 16384: a (T, T) bfloat16 matrix per head would be 512 MiB."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B, H, T = 1, 16, 16384
    q, k, v = (t.requires_grad_() for t in draw(B, H, T, T, d, torch.bfloat16))
    grad = torch.randn_like(q)

    def peak(fn):
        q.grad = k.grad = v.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fn(q, k, v).backward(grad)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before

    def sdpa(q, k, v):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    ours = peak(lambda q, k, v: mha.flash_attention(q, k, v, is_causal=True))
    theirs = peak(sdpa)
    assert ours <= 1.10 * theirs + 2**20, (ours, theirs)
    assert ours < H * T * T * 2 / 4
