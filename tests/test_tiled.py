"""mha.tiled_attention: FlashAttention's forward in plain torch, a specification.

Compared with mha.scaled_dot_product_attention by the rules of tests/precision.py: in
float64, both within the worst-case rounding of their sums (the tiled one with its online
softmax's rescales, one per key block); in float32 and half precision, as accurate as the
plain computation in the same dtype, within 2x, against a float64 truth.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap

import pytest
import torch

import mha
from precision import assert_as_accurate_as, assert_within, attention, attention_backward


pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def qkv(B, h, Tq, Tk, d=8, dv=5, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, h, Tq, d, generator=g, dtype=dtype),
            torch.randn(B, h, Tk, d, generator=g, dtype=dtype),
            torch.randn(B, h, Tk, dv, generator=g, dtype=dtype))


def key_blocks(k, block_size):
    return -(-k.shape[-2] // block_size)


def assert_matches_sdpa(q, k, v, **kwargs):
    block_size = kwargs.pop("block_size", 64)
    got = mha.tiled_attention(q, k, v, block_size=block_size, **kwargs)
    want = mha.scaled_dot_product_attention(q, k, v, **kwargs)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    if q.dtype == torch.float64:
        assert_within(got, want, attention(q, k, v, **kwargs, rescales=key_blocks(k, block_size))[1],
                      attention(q, k, v, **kwargs)[1])
    else:
        exact = mha.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kwargs)[0]
        assert_as_accurate_as(got, want, exact)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("block_size", [1, 3, 64, 100])
@pytest.mark.parametrize("Tq,Tk", [(37, 37), (13, 37), (37, 13)])
def test_equals_scaled_dot_product_attention(dtype, is_causal, block_size, Tq, Tk):
    # 37 and 13 are no multiple of 3 or 64, and 100 is more than either length
    assert_matches_sdpa(*qkv(2, 3, Tq, Tk, dtype=dtype), is_causal=is_causal, block_size=block_size)


@pytest.mark.parametrize("is_causal", [False, True])
def test_block_size_larger_than_both_lengths_is_one_tile(is_causal):
    assert_matches_sdpa(*qkv(1, 2, 6, 9), is_causal=is_causal, block_size=1000)


def test_explicit_scale_is_used():
    assert_matches_sdpa(*qkv(1, 2, 10, 12), scale=0.7, block_size=4)
    assert_matches_sdpa(*qkv(1, 2, 10, 12), scale=0.0, block_size=4)   # uniform average of v


def test_large_scores_do_not_overflow_in_float32():
    q, k, v = qkv(1, 1, 20, 20, dtype=torch.float32)
    q = q * 100.0                                     # scores of several hundred: exp overflows
    assert_matches_sdpa(q, k, v, block_size=3)
    assert torch.isfinite(mha.tiled_attention(q, k, v, block_size=3)).all()


def test_causal_rows_with_nothing_to_attend_to_give_zeros():
    q, k, v = qkv(2, 2, 9, 4)                         # bottom-right: queries 0..4 see no key
    out = mha.tiled_attention(q, k, v, is_causal=True, block_size=2)
    assert torch.equal(out[..., :5, :], torch.zeros_like(out[..., :5, :]))
    assert (out[..., 5:, :] != 0).any(dim=-1).all()
    assert_matches_sdpa(q, k, v, is_causal=True, block_size=2)


def test_no_keys_at_all_gives_zeros_and_no_queries_gives_an_empty_output():
    q, k, v = qkv(1, 2, 3, 0)
    assert torch.equal(mha.tiled_attention(q, k, v), torch.zeros(1, 2, 3, 5, dtype=q.dtype))
    q, k, v = qkv(1, 2, 0, 4)
    assert mha.tiled_attention(q, k, v).shape == (1, 2, 0, 5)


def test_bottom_right_alignment_when_queries_are_the_last_positions():
    q, k, v = qkv(1, 1, 16, 16)
    full = mha.tiled_attention(q, k, v, is_causal=True, block_size=4)
    last = mha.tiled_attention(q[..., -5:, :], k, v, is_causal=True, block_size=4)
    bound = attention(q, k, v, is_causal=True, rescales=key_blocks(k, 4))[1][..., -5:, :]   # both tiled
    assert_within(last, full[..., -5:, :], bound)


def test_leading_dimensions_broadcast_like_sdpa():
    q, _, _ = qkv(2, 4, 7, 7)
    _, k, v = qkv(2, 1, 7, 9, seed=1)                # one key/value head shared by 4 query heads
    assert_matches_sdpa(q, k, v, block_size=3)


def test_float16_and_bfloat16_inputs_keep_their_dtype():
    for dtype in (torch.float16, torch.bfloat16):
        q, k, v = qkv(1, 2, 11, 11, dtype=dtype)
        out = mha.tiled_attention(q, k, v, is_causal=True, block_size=4)
        assert out.dtype == dtype
        same = mha.scaled_dot_product_attention(q, k, v, is_causal=True)[0]
        exact = mha.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)[0]
        assert_as_accurate_as(out, same, exact)


@pytest.mark.parametrize("is_causal", [False, True])
def test_gradients_equal_autograd_through_sdpa(is_causal):
    q, k, v = qkv(1, 2, 11, 7)                        # Tq > Tk: causal has empty rows too
    grad_out = torch.randn(1, 2, 11, 5, dtype=torch.float64)
    grads = []
    for fn in (lambda *a: mha.tiled_attention(*a, is_causal=is_causal, block_size=3),
               lambda *a: mha.scaled_dot_product_attention(*a, is_causal=is_causal)[0]):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        (fn(*leaves) * grad_out).sum().backward()
        grads.append([t.grad for t in leaves])
    bounds = zip(attention_backward(q, k, v, grad_out, is_causal=is_causal, rescales=key_blocks(k, 3)),
                 attention_backward(q, k, v, grad_out, is_causal=is_causal))
    for got, want, (tiled, plain), name in zip(*grads, bounds, "qkv"):
        assert torch.isfinite(got).all()
        assert_within(got, want, tiled, plain, msg=f"d{name}")


def test_gradcheck_in_float64():
    q, k, v = (t.requires_grad_() for t in qkv(1, 1, 5, 6, d=3, dv=2))
    assert torch.autograd.gradcheck(lambda *a: mha.tiled_attention(*a, is_causal=True, block_size=2), (q, k, v))


def test_query_blocks_are_block_size_rows_or_a_multiple_so_that_there_are_at_most_16():
    from mha.tiled import MAX_QUERY_BLOCKS, query_block_size
    assert MAX_QUERY_BLOCKS == 16
    assert query_block_size(37, 3) == 3 and query_block_size(16 * 64, 64) == 64       # square tiles
    assert query_block_size(16 * 64 + 1, 64) == 128 and query_block_size(16384, 64) == 1024
    assert query_block_size(0, 5) == 5
    for q_len in (1, 15, 16, 17, 100, 1000, 4097):
        for block_size in (1, 3, 64):
            rows = query_block_size(q_len, block_size)
            assert rows % block_size == 0 and -(-q_len // rows) <= MAX_QUERY_BLOCKS
            assert rows == block_size or -(-q_len // (rows - block_size)) > MAX_QUERY_BLOCKS   # the smallest


@pytest.mark.parametrize("is_causal", [False, True])
def test_visits_each_tile_once_and_skips_the_tiles_no_query_may_see(is_causal):
    from torch.overrides import TorchFunctionMode

    from mha.tiled import query_block_size

    class CountMatmuls(TorchFunctionMode):
        n = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.n += getattr(func, "__name__", "") in ("matmul", "__matmul__")
            return func(*args, **(kwargs or {}))

    for Tq, Tk, block_size in [(12, 12, 4), (13, 5, 4), (5, 13, 4), (1000, 1000, 8), (300, 900, 10)]:
        q, k, v = qkv(1, 1, Tq, Tk, d=2, dv=1)
        rows = query_block_size(Tq, block_size)
        allowed = mha.causal_mask(Tq, Tk) if is_causal else torch.ones(Tq, Tk, dtype=torch.bool)
        tiles = sum(bool(allowed[i:i + rows, j:j + block_size].any())
                    for i in range(0, Tq, rows) for j in range(0, Tk, block_size))
        with CountMatmuls() as counter:
            mha.tiled_attention(q, k, v, is_causal=is_causal, block_size=block_size)
        assert counter.n == 2 * tiles, (Tq, Tk, block_size)       # q k^T and p v per tile


@pytest.mark.parametrize("block_size,error", [(0, ValueError), (-3, ValueError), (2.0, TypeError),
                                              (True, TypeError), ("64", TypeError)])
def test_bad_block_size_raises(block_size, error):
    with pytest.raises(error, match="block_size"):
        mha.tiled_attention(*qkv(1, 1, 4, 4), block_size=block_size)


def test_bad_inputs_raise_with_the_argument_named():
    q, k, v = qkv(1, 2, 4, 6)
    with pytest.raises(ValueError, match="q must have 4 dimensions"):
        mha.tiled_attention(q[0], k, v)
    with pytest.raises(ValueError, match="k must have 4 dimensions"):
        mha.tiled_attention(q, k[0], v)
    with pytest.raises(TypeError, match="v must be a torch.Tensor"):
        mha.tiled_attention(q, k, v.tolist())
    with pytest.raises(TypeError, match="q must be a floating-point tensor"):
        mha.tiled_attention(q.long(), k, v)
    with pytest.raises(TypeError, match="k must have q's dtype"):
        mha.tiled_attention(q, k.float(), v)
    with pytest.raises(ValueError, match="same last dimension"):
        mha.tiled_attention(q, k[..., :3], v)
    with pytest.raises(ValueError, match="same length Tk"):
        mha.tiled_attention(q, k, v[..., :5, :])
    with pytest.raises(ValueError, match="must broadcast"):
        mha.tiled_attention(q, torch.cat([k, k, k], dim=1), torch.cat([v, v, v], dim=1))
    with pytest.raises(TypeError, match="is_causal must be a bool"):
        mha.tiled_attention(q, k, v, is_causal=1)
    with pytest.raises(TypeError, match="scale must be a finite real number"):
        mha.tiled_attention(q, k, v, scale=float("nan"))


# ------------------------------------------------------------------------------- memory

PEAK = textwrap.dedent("""
    import json, sys
    import torch
    import mha

    def status(field):
        with open("/proc/self/status") as f:
            return int(next(l for l in f if l.startswith(field + ":")).split()[1]) * 1024

    T, block_size = int(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, 1, T, 64).unbind(0)          # (B, h, T, d) each, float32
    mha.tiled_attention(q[..., :8, :], k[..., :8, :], v[..., :8, :])   # warm up the code paths
    extra, finite = [], True
    for is_causal in (False, True):
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")                                       # reset the peak (VmHWM) to now
        before = status("VmRSS")
        out = mha.tiled_attention(q, k, v, is_causal=is_causal, block_size=block_size)
        extra.append(status("VmHWM") - before)
        finite = finite and bool(out.isfinite().all())
        del out
    print(json.dumps({"extra": max(extra), "finite": finite}))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_never_holds_the_t_by_t_matrix_at_t_16384_with_the_default_block_size():
    T = 16384
    scores_bytes = T * T * 4                                   # one (T, T) float32 matrix: 1 GiB
    block_size = inspect.signature(mha.tiled_attention).parameters["block_size"].default   # 64
    run = subprocess.run([sys.executable, "-c", PEAK, str(T), str(block_size)], capture_output=True, text=True,
                         check=True, timeout=300)
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["finite"]
    assert result["extra"] < scores_bytes / 8, f"peak rose by {result['extra'] / 2**20:.0f} MiB"
    print(f"peak rose by {result['extra'] / 2**20:.1f} MiB, the (T, T) matrix is {scores_bytes / 2**20:.0f} MiB")
