"""mha.apply_rope: rotary position embedding, its two layouts and its relative-position property.

float64 results are compared within the worst-case rounding of their steps (precision.rope:
an angle is rounded at its own scale, so the bound grows with the position), float32 and
float16 ones by their accuracy against a float64 truth (tests/precision.py).
"""

import math
import subprocess
import sys

import pytest
import torch

import mha
from mha.rope import layout_permutation, rope_frequencies
from precision import assert_as_accurate_as, assert_within, assert_within_rounding, attention, rope


def rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def rope_as_complex(x, positions, base=10000.0):
    """The interleaved layout written independently: pair (2i, 2i+1) is the complex number
    x[2i] + i x[2i+1], multiplied by exp(i * position * base^(-2i/d)). float64."""
    d = x.shape[-1]
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())   # (..., T, d/2)
    theta = torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)
    rotation = torch.polar(torch.ones(len(positions), d // 2, dtype=torch.float64),
                           positions.double()[:, None] * theta)                            # (T, d/2)
    return torch.view_as_real(z * rotation).flatten(-2)                                     # (..., T, d)


def test_interleaved_layout_multiplies_each_pair_by_a_complex_rotation():
    x = rand(2, 3, 10, 16, dtype=torch.float64)
    positions = torch.arange(10)
    assert_within(mha.apply_rope(x), rope_as_complex(x, positions), rope(x, positions))


def test_the_default_layout_is_interleaved_and_positions_default_to_arange():
    x = rand(4, 12, 64)
    explicit = mha.apply_rope(x, torch.arange(12), base=10000.0, layout="interleaved")
    assert torch.equal(mha.apply_rope(x), explicit)


def test_pair_i_rotates_by_position_times_base_to_the_minus_2i_over_d():
    d, base = 8, 100.0
    x = torch.zeros(1, d, dtype=torch.float64)
    x[0, 2] = 1.0                                    # pair i = 1, first feature
    out = mha.apply_rope(x, torch.tensor([5]), base=base)
    angle = 5 * base ** (-2 * 1 / d)
    expected = torch.tensor([math.cos(angle), math.sin(angle)], dtype=torch.float64)
    assert_within(out[0, 2:4], expected, rope(x, torch.tensor([5]), base=base)[0, 2:4])
    assert torch.all(out[0, [0, 1, 4, 5, 6, 7]] == 0)   # other pairs untouched (they were zero)


def test_frequencies_are_base_to_the_minus_2i_over_d():
    theta = rope_frequencies(8, base=10000.0, dtype=torch.float64)
    # base^(-2i/d): the exponent's rounding and the power's, within (|ln theta| + 1) eps theta
    # <= 1.4 eps (theta |ln theta| <= 1/e); the decimals are within half an ulp
    assert_within_rounding(theta, torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=torch.float64), terms=1)


def test_position_zero_is_the_identity():
    x = rand(3, 1, 6)
    for layout in ("interleaved", "half"):
        assert torch.equal(mha.apply_rope(x, torch.zeros(1, dtype=torch.long), layout=layout), x)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_rotation_keeps_the_length_of_every_vector(layout):
    x = rand(2, 20, 32, dtype=torch.float64)
    out = mha.apply_rope(x, layout=layout)
    # each rotated pair is within (3 + 3 P) eps (|a| + |b|) <= (3 + 3 P) eps 2 |(a, b)| (P = 19,
    # the largest position), so out is within 2 (3 + 3 P) eps |x| of the rotation of x; each norm
    # (d = 32 squares summed, a square root) is within (d / 2 + 2) eps of its own value
    d, P = 32, 19
    assert_within_rounding(out.norm(dim=-1), x.norm(dim=-1), terms=3 + 3 * P + d // 2 + 2)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_query_key_dot_product_depends_only_on_the_offset(layout):
    d = 16
    q, k = rand(1, d, seed=1, dtype=torch.float64), rand(1, d, seed=2, dtype=torch.float64)

    def score(m, n):
        qm = mha.apply_rope(q, torch.tensor([m]), layout=layout)
        kn = mha.apply_rope(k, torch.tensor([n]), layout=layout)
        bound = rope(q, [m], layout=layout) @ rope(k, [n], layout=layout).mT   # rotations, then d terms
        return (qm @ kn.T)[0], bound[0]

    for m, n in [(3, 1), (7, 7), (2, 9)]:
        for shift in (1, 10, 500):
            (shifted, bound_shifted), (plain, bound) = score(m + shift, n + shift), score(m, n)
            assert_within(shifted, plain, bound_shifted, bound)
    assert abs(float(score(3, 1)[0] - score(4, 1)[0])) > 1e-3     # the offset itself does matter


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_negative_positions_undo_the_rotation(layout):
    x = rand(2, 5, 12, dtype=torch.float64)
    p = torch.tensor([0, 3, 8, 100, 4096])
    back = mha.apply_rope(mha.apply_rope(x, p, layout=layout), -p, layout=layout)
    assert_within(back, x, rope(rope(x, p, layout=layout), -p, layout=layout))


def test_half_layout_is_the_interleaved_one_under_a_fixed_feature_permutation():
    d = 64
    x = rand(4, 12, d)
    P = layout_permutation(d)                                         # [0, 32, 1, 33, ...]
    assert P[:4].tolist() == [0, 32, 1, 33]
    P_inv = torch.argsort(P)
    half = mha.apply_rope(x, layout="half")
    converted = mha.apply_rope(x[..., P], layout="interleaved")[..., P_inv]
    assert torch.equal(half, converted)      # the same products of the same numbers, moved


def test_permuting_the_projection_rows_converts_attention_scores_between_layouts():
    d, T = 8, 6
    w_q, w_k, x = rand(d, d, seed=1), rand(d, d, seed=2), rand(T, d, seed=3)
    P = layout_permutation(d)
    scores_half = mha.apply_rope(x @ w_q.T, layout="half") @ mha.apply_rope(x @ w_k.T, layout="half").T
    q_i = mha.apply_rope(x @ w_q[P].T, layout="interleaved")          # rows of W_Q permuted
    k_i = mha.apply_rope(x @ w_k[P].T, layout="interleaved")
    x, w_q, w_k = x.double(), w_q.double(), w_k.double()
    exact = mha.apply_rope(x @ w_q.T, layout="half") @ mha.apply_rope(x @ w_k.T, layout="half").T
    assert_as_accurate_as(q_i @ k_i.T, scores_half, exact)


def test_mixing_up_the_layouts_gives_different_numbers_without_an_error():
    x = rand(10, 16)
    diff = (mha.apply_rope(x, layout="half") - mha.apply_rope(x, layout="interleaved")).abs().max()
    assert diff > 0.5


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_output_keeps_the_input_dtype(dtype):
    x = rand(2, 7, 8, dtype=dtype)
    out = mha.apply_rope(x)
    assert out.dtype == dtype and out.shape == x.shape


def test_half_precision_angles_are_computed_in_float32():
    x = rand(1, 4000, 8).half()
    p = torch.arange(4000)
    exact = mha.apply_rope(x.double(), p)
    # float16 angles would be off by whole radians at these positions: the result must be as
    # accurate as the exact one rounded to float16, within 2x
    assert_as_accurate_as(mha.apply_rope(x, p), exact.half(), exact)


def test_float64_input_gets_float64_angles_at_large_positions():
    x = rand(3, 32, dtype=torch.float64)
    p = torch.tensor([10**6, 10**6 + 1, 123_456_789])
    # an angle of 1.2e8 is rounded to 1.2e8 eps = 3e-8: the bound is that (float32 angles: 8)
    assert_within(mha.apply_rope(x, p), rope_as_complex(x, p), rope(x, p))


def test_positions_broadcast_over_heads_one_row_per_sequence():
    x = rand(2, 3, 5, 8)                                             # (B, h, T, d)
    positions = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])[:, None]   # (B, 1, T)
    out = mha.apply_rope(x, positions)
    assert torch.equal(out[0], mha.apply_rope(x[0], torch.arange(5)))
    assert torch.equal(out[1], mha.apply_rope(x[1], torch.arange(7, 12)))


def test_checking_the_positions_does_not_import_sympy():
    """torch.broadcast_shapes imports sympy on its first call, a second or more of CPU time in
    every notebook that uses RoPE; apply_rope checks the broadcast itself."""
    code = ("import sys, torch, mha; mha.apply_rope(torch.randn(2, 3, 5, 8), torch.arange(5)[None, None]); "
            "print('sympy' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert run.stdout.strip() == "False"


def test_odd_feature_count_raises():
    with pytest.raises(ValueError, match="even"):
        mha.apply_rope(torch.randn(4, 7))


def test_unknown_layout_raises():
    with pytest.raises(ValueError, match="layout"):
        mha.apply_rope(torch.randn(4, 8), layout="rotate_half")


@pytest.mark.parametrize("positions, error", [
    (torch.arange(5), ValueError),                       # wrong length
    (torch.arange(4.0), TypeError),                      # floating positions
    (torch.ones(4, dtype=torch.bool), TypeError),
    (torch.tensor(3), ValueError),                       # a scalar
    (torch.arange(4).repeat(3, 1), ValueError),          # (3, T) does not broadcast to (2, T)
    ([0, 1, 2, 3], TypeError),                           # not a tensor
])
def test_bad_positions_raise(positions, error):
    with pytest.raises(error, match="positions"):
        mha.apply_rope(torch.randn(2, 4, 8), positions)


@pytest.mark.parametrize("x, error", [(torch.arange(8), TypeError), (torch.randn(8), ValueError),
                                      (torch.randn(2, 8).numpy(), TypeError)])
def test_bad_input_raises(x, error):
    with pytest.raises(error, match="x"):
        mha.apply_rope(x)


@pytest.mark.parametrize("base, error", [(1.0, ValueError), (0, ValueError), (-5, ValueError),
                                         (float("inf"), ValueError), ("10000", TypeError)])
def test_bad_base_raises(base, error):
    with pytest.raises(error, match="base"):
        mha.apply_rope(torch.randn(2, 8), base=base)


def test_gradient_is_the_inverse_rotation():
    x = rand(5, 8, dtype=torch.float64).requires_grad_()
    g = rand(5, 8, seed=9, dtype=torch.float64)
    (mha.apply_rope(x) * g).sum().backward()
    assert_within(x.grad, mha.apply_rope(g, -torch.arange(5)), rope(g, torch.arange(5)))   # both rotate g


def _decode_with_rope(q, k, v, restart_positions):
    """q, k, v (B, h, T, d) before RoPE: a prompt of 3 tokens then one at a time through a
    KVCache holding rotated keys; new tokens rotated at len(cache) or, the bug, from 0."""
    cache, outs, start, T = mha.KVCache(), [], 0, q.shape[-2]
    for n in [3] + [1] * (T - 3):
        sl = slice(start, start + n)
        pos = torch.arange(n) if restart_positions else torch.arange(len(cache), len(cache) + n)
        k_all, v_all = cache.update(mha.apply_rope(k[..., sl, :], pos), v[..., sl, :])
        outs.append(mha.scaled_dot_product_attention(mha.apply_rope(q[..., sl, :], pos), k_all, v_all,
                                                     is_causal=True)[0])
        start += n
    return torch.cat(outs, dim=-2)


def _qkv_and_full_pass():
    """q, k, v, the full causal pass, and the bound of its rounding (which covers each query's
    row computed alone, over its keys: the same steps, no longer sums)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 10, 8, generator=g, dtype=torch.float64) for _ in range(3))
    pos = torch.arange(10)
    full, _ = mha.scaled_dot_product_attention(mha.apply_rope(q, pos), mha.apply_rope(k, pos), v, is_causal=True)
    bound = attention(rope(q, pos), rope(k, pos), v, is_causal=True)[1]
    return q, k, v, full, bound


def test_cached_decoding_with_rope_at_the_caches_length_equals_the_full_pass():
    q, k, v, full, bound = _qkv_and_full_pass()
    assert_within(_decode_with_rope(q, k, v, False), full, bound)


def test_cached_decoding_with_positions_restarting_at_zero_is_wrong_after_the_prompt():
    q, k, v, full, bound = _qkv_and_full_pass()
    wrong = _decode_with_rope(q, k, v, True)
    assert_within(wrong[..., :3, :], full[..., :3, :], bound[..., :3, :])
    assert (wrong[..., 3:, :] - full[..., 3:, :]).abs().max() > 0.05
