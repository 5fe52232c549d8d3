"""mha.flash_attention: Triton kernels, forward and backward, run here by Triton's interpreter.

Each case compares the value and the three gradients with autograd through
mha.scaled_dot_product_attention in float64, on the same (rounded) inputs. Sizes are small:
the interpreter runs every program of a grid one after another, with numpy. The same
checks at large T on a GPU are in test_flash_gpu.py (`make test-gpu`).
"""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import mha
from mha import flash
from mha.flash import Blocks
from precision import assert_as_accurate_as

if importlib.util.find_spec("triton") is None:
    pytest.skip("Triton publishes wheels for Linux only", allow_module_level=True)
from mha.kernels import triton  # noqa: E402  (mha.kernels first: it chooses the interpreter)
from mha.kernels import attention as kernels  # noqa: E402
import triton.language as tl  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

DEVICE = "cpu" if flash.interpreted() else "cuda"   # make test-gpu runs this file on a GPU too
NAMES = ("out", "dq", "dk", "dv")


def draw(B, H, Tq, Tk, d, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, d, generator=g).to(DEVICE, dtype) for T in (Tq, Tk, Tk)]


def explicit(q, k, v, grad, is_causal, scale, dtype):
    """out, dq, dk, dv by autograd through the explicit maths (mha.scaled_dot_product_attention)
    in ``dtype``: float64 for the truth, the inputs' dtype for the same-precision reference."""
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    out = mha.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)[0]
    out.backward(grad.to(dtype))
    return out.detach(), q.grad, k.grad, v.grad


def run_flash(q, k, v, grad, is_causal=False, scale=None, row_stats="log_sum_exp"):
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    out = mha.flash_attention(q, k, v, is_causal=is_causal, scale=scale, row_stats=row_stats)
    out.backward(grad)
    return out.detach(), q.grad, k.grad, v.grad


def check_accuracy(q, k, v, is_causal=False, scale=None, seed=1, row_stats="log_sum_exp", ulps=2):
    """Value and gradients of flash_attention against float64 autograd, held to the accuracy
    of the same maths in the inputs' dtype (tests/precision.py); returns the error ratios."""
    grad = torch.randn(q.shape, generator=torch.Generator().manual_seed(seed)).to(DEVICE, q.dtype)
    got = run_flash(q, k, v, grad, is_causal, scale, row_stats)
    for g in got:
        assert g.dtype == q.dtype
    return assert_as_accurate_as(got, explicit(q, k, v, grad, is_causal, scale, q.dtype),
                                 explicit(q, k, v, grad, is_causal, scale, torch.float64), names=NAMES, ulps=ulps)


# ----------------------------------------------------------------------------- values and gradients

SHAPES = [  # B, h, Tq, Tk, d, is_causal: odd lengths, Tq != Tk both ways, d not a power of two
    (2, 2, 37, 37, 16, False),
    (1, 2, 37, 53, 32, True),      # Tq < Tk: the diagonal starts 16 keys in
    (1, 1, 53, 37, 64, True),      # Tq > Tk: 16 rows see nothing
    (1, 1, 19, 19, 24, True),      # d = 24 padded to 32
    (1, 1, 9, 40, 128, False),
    (1, 1, 33, 1, 16, True),       # one key: only the last query sees it
]


@pytest.mark.parametrize("B,H,Tq,Tk,d,is_causal", SHAPES)
def test_value_and_gradients_as_accurate_as_the_same_maths_in_float32(B, H, Tq, Tk, d, is_causal):
    check_accuracy(*draw(B, H, Tq, Tk, d), is_causal=is_causal)


@pytest.mark.parametrize("scale", [0.05, 1.0, 3.0])
def test_custom_scale(scale):
    """Scale 3 makes scores of 50 and more: their float32 rounding dominates every error,
    in the kernel and in the reference alike."""
    check_accuracy(*draw(1, 4, 48, 64, 32), is_causal=True, scale=scale)


# Scale 3 with d = 112: scores near 100, rows of the softmax nearly one-hot (found by review).
LARGE_SCORES = dict(shape=(1, 1, 7, 100, 112), scale=3.0, seed=7)


@pytest.mark.parametrize("row_stats", flash.ROW_STATS)
def test_scores_of_several_tens_in_float32(row_stats):
    """There the plain float32 maths is a lucky yardstick: on a nearly one-hot row it is almost
    exact (it returns v itself). Any float32 computation rounds the scores at their size, which
    moves each weight by up to |s'| eps relative (s' in base-2 units, as the kernel holds them),
    and one saved log-sum-exp, rounded at that size too, moves every weight of its row by as
    much: the rule allows |s'| ulps of the largest value more (lesson 14 measures the cost)."""
    q, k, v = draw(*LARGE_SCORES["shape"], seed=LARGE_SCORES["seed"])
    scale = LARGE_SCORES["scale"]
    largest = float((q.double() @ k.double().transpose(-2, -1)).abs().max()) * scale * math.log2(math.e)
    assert largest > 100                                   # scores of several tens, in natural units
    check_accuracy(q, k, v, scale=scale, row_stats=row_stats, ulps=2 + largest)


def test_scores_of_several_tens_in_float16_as_accurate_as_the_same_maths():
    """The same peaked rows in float16: within the factor-2 rule, here through its two-ulps term
    (the plain float16 maths are nearly exact on the peaked rows)."""
    q, k, v = draw(*LARGE_SCORES["shape"], dtype=torch.float16, seed=LARGE_SCORES["seed"])
    check_accuracy(q, k, v, scale=LARGE_SCORES["scale"])


@pytest.mark.parametrize("blocks", [Blocks(16, 16), Blocks(16, 32), Blocks(64, 16)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_every_block_shape_gives_the_same_numbers(blocks, is_causal):
    """Query blocks smaller, larger and equal to key blocks: every causal band shape."""
    q, k, v = draw(1, 1, 45, 70, 16)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(3)).to(DEVICE)
    s = 0.25
    out, stats = flash.forward(q, k, v, is_causal, s, blocks)
    grads = flash.backward(q, k, v, out, stats, do, is_causal, s, blocks)
    assert_as_accurate_as((out, *grads), explicit(q, k, v, do, is_causal, s, torch.float32),
                          explicit(q, k, v, do, is_causal, s, torch.float64), names=NAMES)


def test_fully_masked_rows_give_zeros_never_nan_in_value_and_gradients():
    """Causal with Tq > Tk: query i sees keys j <= i - (Tq - Tk), so the first 20 rows see none."""
    q, k, v = draw(1, 2, 30, 10, 16)
    grad = torch.randn(q.shape, device=DEVICE)
    out, dq, dk, dv = run_flash(q, k, v, grad, is_causal=True)
    assert torch.equal(out[:, :, :20], torch.zeros_like(out[:, :, :20]))
    assert torch.equal(dq[:, :, :20], torch.zeros_like(dq[:, :, :20]))
    assert all(torch.isfinite(t).all() for t in (out, dq, dk, dv))
    assert out[:, :, 20:].abs().sum() > 0


def test_equals_the_plain_torch_loop_it_implements():
    """The forward kernel computes lesson 10's mha.tiled_attention, up to float32 rounding."""
    q, k, v = draw(2, 2, 41, 58, 32)
    for causal in (False, True):
        exact = mha.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)[0]
        assert_as_accurate_as(mha.flash_attention(q, k, v, is_causal=causal),
                              mha.tiled_attention(q, k, v, is_causal=causal, block_size=16), exact)


def test_the_forward_saves_one_log_sum_exp_per_row_by_default():
    """FlashAttention-2's L = log sum_j e^(s_ij), natural units, float32, as accurate as
    torch.logsumexp of the float32 scores."""
    q, k, v = draw(1, 2, 23, 31, 16)
    scale = 0.3
    _, (lse,) = flash.forward(q, k, v, True, scale)
    allowed = mha.causal_mask(23, 31, device=DEVICE)
    lse_plain, lse_exact = (torch.logsumexp((q.to(t) @ k.to(t).transpose(-2, -1) * scale)
                                            .masked_fill(~allowed, float("-inf")), dim=-1)
                            for t in (torch.float32, torch.float64))
    assert lse.dtype == torch.float32 and lse.shape == (1, 2, 23)
    assert_as_accurate_as(lse, lse_plain, lse_exact)


def test_max_and_sum_give_each_rows_softmax():
    """row_stats="max_and_sum": the row's largest base-2 score m and 1 / l; 2^(s' - m) / l is
    the softmax, as accurately as float32's own."""
    q, k, v = draw(1, 2, 23, 31, 16)
    scale = 0.3
    _, (row_max, inv_sum) = flash.forward(q, k, v, True, scale, row_stats="max_and_sum")
    allowed = mha.causal_mask(23, 31, device=DEVICE)
    scores = [(q.to(t) @ k.to(t).transpose(-2, -1) * scale).masked_fill(~allowed, float("-inf"))
              for t in (torch.float32, torch.float64)]
    p = torch.exp2(scores[0] * math.log2(math.e) - row_max[..., None]) * inv_sum[..., None]
    assert_as_accurate_as(p, torch.softmax(scores[0], -1), torch.softmax(scores[1], -1))


@pytest.mark.parametrize("row_stats", flash.ROW_STATS)
def test_empty_rows_save_what_makes_their_probabilities_zero(row_stats):
    q, k, v = draw(1, 1, 12, 4, 16)
    _, stats = flash.forward(q, k, v, True, 0.25, row_stats=row_stats)
    first = stats[0]                                   # L, or the row max: +inf for an empty row
    assert torch.isinf(first[..., :8]).all() and (first[..., :8] > 0).all()
    assert torch.isfinite(first[..., 8:]).all()
    if row_stats == "max_and_sum":
        assert torch.equal(stats[1][..., :8], torch.zeros_like(stats[1][..., :8])) and (stats[1][..., 8:] > 0).all()


@pytest.mark.parametrize("row_stats", flash.ROW_STATS)
def test_both_row_statistics_give_accurate_gradients(row_stats):
    q, k, v = draw(1, 2, 37, 53, 32)
    check_accuracy(q, k, v, is_causal=True, row_stats=row_stats)


def test_non_contiguous_inputs():
    x = torch.randn(2, 19, 2, 16, generator=torch.Generator().manual_seed(0)).to(DEVICE)   # (B, T, h, d)
    q = k = v = x.transpose(1, 2)                     # a (B, h, T, d) view of it
    assert not q.is_contiguous()
    check_accuracy(q, k, v, is_causal=True)


def test_empty_sequences():
    q, k, v = draw(1, 2, 0, 5, 16)
    assert mha.flash_attention(q, k, v).shape == (1, 2, 0, 16)
    q, k, v = (t.requires_grad_() for t in draw(1, 2, 4, 0, 16))
    out = mha.flash_attention(q, k, v)
    out.sum().backward()
    assert torch.equal(out, torch.zeros(1, 2, 4, 16, device=DEVICE)) and torch.equal(q.grad, torch.zeros_like(q))


@pytest.mark.parametrize("wanted", ["q", "k", "v", "kv"])
def test_only_the_gradients_asked_for_are_computed(wanted):
    q, k, v = draw(1, 2, 21, 29, 32)
    grad = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    leaves = {name: t.clone().requires_grad_(name in wanted) for name, t in zip("qkv", (q, k, v))}
    mha.flash_attention(*leaves.values(), is_causal=True).backward(grad)
    full = run_flash(q, k, v, grad, is_causal=True)
    for i, name in enumerate("qkv"):
        got = leaves[name].grad
        assert (got is None) == (name not in wanted)
        if got is not None:
            assert torch.equal(got, full[1 + i])


def test_heads_past_a_launchs_limit_go_in_several_launches(monkeypatch):
    """CUDA allows 65,535 programs on grid axis 1, where the heads go: more heads are
    launched in slices (here slices of 2, in the interpreter)."""
    q, k, v = draw(1, 5, 21, 29, 16)
    grad = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    whole = run_flash(q, k, v, grad, is_causal=True)
    monkeypatch.setattr(flash, "MAX_HEADS_PER_LAUNCH", 2)
    for a, b in zip(run_flash(q, k, v, grad, is_causal=True), whole):
        assert torch.equal(a, b)


# ----------------------------------------------------------------------------- dtypes

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_as_accurate_as_the_same_maths_in_that_dtype(dtype):
    check_accuracy(*draw(1, 2, 33, 47, 32, dtype), is_causal=True)


def test_bfloat16_is_computed_in_float32_by_the_interpreter_and_returned_as_bfloat16():
    """The interpreter's tl.dot multiplies bfloat16 bit patterns as integers, so the
    kernels get float32 copies; the result is the float32 result rounded to bfloat16."""
    if not flash.interpreted():
        pytest.skip("on a GPU, bfloat16 tiles are multiplied as bfloat16")
    q, k, v = draw(1, 1, 20, 20, 16, torch.bfloat16)
    out = mha.flash_attention(q, k, v, is_causal=True)
    assert out.dtype == torch.bfloat16
    expected = mha.flash_attention(q.float(), k.float(), v.float(), is_causal=True).to(torch.bfloat16)
    assert torch.equal(out, expected)


# ----------------------------------------------------------------------------- the causal bounds

@triton.jit
def block_ranges(out, Tq, Tk, IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Program i writes key_range of query block i and query_range of key block i."""
    i = tl.program_id(0)
    full, end = kernels.key_range(i * BLOCK_M, Tq, Tk, IS_CAUSAL, BLOCK_M, BLOCK_N)
    start, q_full = kernels.query_range(i * BLOCK_N, Tq, Tk, IS_CAUSAL, BLOCK_M, BLOCK_N)
    tl.store(out + 4 * i + 0, full)
    tl.store(out + 4 * i + 1, end)
    tl.store(out + 4 * i + 2, start)
    tl.store(out + 4 * i + 3, q_full)


def test_block_ranges_match_the_mask_tile_by_tile():
    """key_range and query_range, run in a small kernel, against the tiles of the mask:
    a block is skipped iff no entry of its tile is allowed, and runs unmasked iff every
    entry of its tile is allowed (keys past Tk count as not allowed)."""
    shapes = [(37, 53, 16, 16), (53, 37, 32, 16), (10, 45, 16, 32), (64, 64, 16, 16), (5, 1, 16, 16)]
    for (Tq, Tk, bm, bn), causal in [(s, c) for s in shapes for c in (True, False)]:
        allowed = mha.causal_mask(Tq, Tk) if causal else torch.ones(Tq, Tk, dtype=torch.bool)
        n = max(-(-Tq // bm), -(-Tk // bn))
        got = torch.zeros(n, 4, dtype=torch.int32, device=DEVICE)
        block_ranges[(n,)](got, Tq, Tk, IS_CAUSAL=causal, BLOCK_M=bm, BLOCK_N=bn)
        where = (Tq, Tk, bm, bn, causal)
        for i in range(-(-Tq // bm)):                              # query block i: its key blocks
            full, end = got[i, :2].tolist()                        # (got is tiny: .tolist() is fine)
            for j in range(-(-Tk // bn)):
                tile = allowed[i * bm:(i + 1) * bm, j * bn:(j + 1) * bn]
                whole = bool(tile.all()) and tile.shape[1] == bn   # a shorter last block is masked
                assert (j * bn < full) == whole, (where, i, j, full)
                assert (j * bn < end) == bool(tile.any()), (where, i, j, end)
        for j in range(-(-Tk // bn)):                              # key block j: its query blocks
            start, full = got[j, 2:].tolist()
            for i in range(-(-Tq // bm)):
                tile = allowed[i * bm:(i + 1) * bm, j * bn:(j + 1) * bn]
                if not tile.any():
                    assert i * bm < start, (where, i, j, start)            # skipped
                elif tile.all():
                    assert i * bm >= full, (where, i, j, full)             # no mask
                else:
                    assert start <= i * bm < full, (where, i, j, start, full)   # masked


# ----------------------------------------------------------------------------- bad input

def test_bad_input_is_named():
    q, k, v = draw(1, 2, 8, 8, 16)
    cases = [
        ((q[0], k, v), {}, ValueError, "q must have 4 dimensions"),
        ((q, k, v[..., :8]), {}, ValueError, "v must have q's head width"),
        ((q, k[..., :8], v[..., :8]), {}, ValueError, "k must have q's head width"),
        ((q.long(), k, v), {}, TypeError, "q must be a floating-point tensor"),
        ((q, k, v[:, :, :5]), {}, ValueError, "k and v must have the same length"),
        ((q[..., :8], k[..., :8], v[..., :8]), {}, ValueError, "head width d = 8"),
        ((q.double(), k.double(), v.double()), {}, TypeError, "q must be float16, bfloat16 or float32"),
        ((q, k.half(), v), {}, TypeError, "k must have q's dtype"),
        ((q, k[:1, :1], v[:1, :1]), {}, ValueError, "does not broadcast"),
        ((q, k, v), {"is_causal": 1}, TypeError, "is_causal must be a bool"),
        ((q, k, v), {"scale": float("nan")}, TypeError, "scale must be a finite real number"),
        (("q", k, v), {}, TypeError, "q must be a torch.Tensor"),
        ((q, k, v), {"row_stats": "lse"}, ValueError, "row_stats must be one of"),
    ]
    for args, kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            mha.flash_attention(*args, **kwargs)
    with pytest.raises(TypeError, match=r"is_causal must be a bool \(True or False\), got numpy\.bool"):
        mha.flash_attention(q, k, v, is_causal=np.bool_(True))
    meta = torch.empty(1, 2, 8, 16, device="meta")
    with pytest.raises(ValueError, match="q, k and v are on meta: flash_attention runs on cpu"):
        mha.flash_attention(meta, meta, meta)
    wide = torch.zeros(1, 1, 4, 256, device=DEVICE)
    with pytest.raises(ValueError, match="16 <= d <= 128"):
        mha.flash_attention(wide, wide, wide)


# ----------------------------------------------------------------------------- imports

def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120)


def test_import_mha_does_not_import_triton_and_without_triton_flash_attention_falls_back():
    result = _python("""
        import sys, warnings
        sys.modules["triton"] = None          # as on macOS or Windows: import triton fails
        import torch, mha
        assert "triton" not in sys.modules or sys.modules["triton"] is None
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 2, 9, 16, generator=g, requires_grad=True) for _ in range(3))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = mha.flash_attention(q, k, v, is_causal=True)
            mha.flash_attention(q, k, v, is_causal=True)
        out.sum().backward()
        assert torch.equal(out, mha.tiled_attention(q, k, v, is_causal=True)) and q.grad is not None
        assert len(caught) == 1, caught       # warned once
        print(caught[0].message)
        """)
    assert result.returncode == 0, result.stderr
    assert "Linux only" in result.stdout and "mha.tiled_attention" in result.stdout


def test_triton_imported_first_on_a_machine_without_gpu_gets_a_clear_error():
    result = _python("""
        import os
        os.environ.pop("TRITON_INTERPRET", None)
        import triton, torch, mha
        if torch.cuda.is_available():
            print("has a GPU")
        else:
            try:
                mha.flash_attention(torch.zeros(1, 1, 4, 16), torch.zeros(1, 1, 4, 16), torch.zeros(1, 1, 4, 16))
            except ImportError as e:
                print(e)
        """)
    assert result.returncode == 0, result.stderr
    assert "has a GPU" in result.stdout or "before importing triton" in result.stdout
