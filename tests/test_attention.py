"""mha.scaled_dot_product_attention: shapes, softmax rows, empty rows, dropout, gradients.

Numbers are compared by the rules of tests/precision.py: float64 results to the worst-case
rounding of their sums, float32 ones to the accuracy of the same maths in float32.
"""

import math

import pytest
import torch

import mha
from precision import assert_as_accurate_as, assert_within, assert_within_rounding, attention


def qkv(*lead, tq=5, tk=5, d=4, dv=None, dtype=torch.float32, seed=0, grad=False):
    """Random q (*lead, tq, d), k (*lead, tk, d), v (*lead, tk, dv)."""
    g = torch.Generator().manual_seed(seed)
    dv = d if dv is None else dv
    shapes = [(*lead, tq, d), (*lead, tk, d), (*lead, tk, dv)]
    return [torch.randn(s, generator=g, dtype=dtype).requires_grad_(grad) for s in shapes]


def test_output_and_weights_have_the_documented_shapes():
    q, k, v = qkv(2, 3, tq=4, tk=6, d=5, dv=7)
    out, weights = mha.scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 4, 7)
    assert weights.shape == (2, 3, 4, 6)


def test_matches_softmax_of_scaled_scores_times_values():
    q, k, v = qkv(2, tq=3, tk=4, d=8, dtype=torch.float64)
    expected_w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1)
    out, weights = mha.scaled_dot_product_attention(q, k, v)
    bound_w, bound_out = attention(q, k, v)       # 8-term scores, a 4-term softmax, a 4-term weighted sum
    assert_within(weights, expected_w, bound_w)
    assert_within(out, expected_w @ v, bound_out)


def test_explicit_scale_replaces_one_over_sqrt_d():
    q, k, v = qkv(1, tq=3, tk=3, d=4, dtype=torch.float64)
    _, weights = mha.scaled_dot_product_attention(q, k, v, scale=0.1)
    assert_within(weights, torch.softmax(0.1 * q @ k.transpose(-2, -1), -1), attention(q, k, v, scale=0.1)[0])


def test_matches_torch_functional_sdpa_with_a_bool_mask():
    q, k, v = qkv(2, 2, tq=4, tk=6)
    mask = torch.rand(2, 1, 4, 6, generator=torch.Generator().manual_seed(1)) > 0.3
    mask[..., 0] = True  # no empty rows: torch and mha agree there too, but keep this test plain
    out, _ = mha.scaled_dot_product_attention(q, k, v, mask)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    exact = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)
    assert_as_accurate_as(out, expected, exact)                  # as accurate as torch's own, within 2x


def test_weight_rows_sum_to_one():
    q, k, v = qkv(2, 3, tq=5, tk=7)
    _, weights = mha.scaled_dot_product_attention(q, k, v, is_causal=True)
    # Tk = 7 exponentials times the reciprocal of their own sum, summed again here: two sums of
    # Tk terms of total 1 and the division, within 2 (Tk + 1) eps of 1, whatever the scores
    assert_within_rounding(weights.sum(-1), torch.ones(2, 3, 5), terms=7 + 1)
    assert (weights >= 0).all()


def test_masked_positions_get_exactly_zero_weight():
    q, k, v = qkv(1, tq=4, tk=4)
    mask = mha.causal_mask(4)
    _, weights = mha.scaled_dot_product_attention(q, k, v, mask)
    assert (weights[..., ~mask] == 0).all()
    assert (weights[..., mask] > 0).all()


def test_is_causal_equals_the_bottom_right_causal_mask():
    q, k, v = qkv(2, tq=3, tk=6)
    by_flag = mha.scaled_dot_product_attention(q, k, v, is_causal=True)
    by_mask = mha.scaled_dot_product_attention(q, k, v, mha.causal_mask(3, 6))
    assert torch.equal(by_flag[0], by_mask[0]) and torch.equal(by_flag[1], by_mask[1])
    # bottom-right: the last query sees every key
    assert (by_flag[1][:, -1] > 0).all()


def test_float_mask_is_added_to_the_scores():
    q, k, v = qkv(1, tq=3, tk=4, dtype=torch.float64)
    bias = torch.randn(3, 4, dtype=torch.float64)
    _, weights = mha.scaled_dot_product_attention(q, k, v, bias)
    expected = torch.softmax(q @ k.transpose(-2, -1) / 2.0 + bias, -1)  # d = 4: scale 1/2
    assert_within(weights, expected, attention(q, k, v, mask=bias)[0])


def test_bool_mask_and_its_additive_form_give_the_same_result():
    q, k, v = qkv(2, tq=4, tk=4)
    mask = mha.causal_mask(4)
    a = mha.scaled_dot_product_attention(q, k, v, mask)[0]
    b = mha.scaled_dot_product_attention(q, k, v, mha.to_additive(mask, torch.float32))[0]
    assert torch.equal(a, b)   # s + 0 is s and s + (-inf) is -inf: the same scores, bit for bit


def _one_empty_row_masks(tq, tk, dtype):
    keep = torch.ones(tq, tk, dtype=torch.bool)
    keep[1] = False  # query 1 may attend to nothing
    return {"bool": keep, "float": mha.to_additive(keep, dtype)}


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_fully_masked_row_has_zero_weights_and_zero_output(kind):
    q, k, v = qkv(2, tq=3, tk=4)
    mask = _one_empty_row_masks(3, 4, torch.float32)[kind]
    out, weights = mha.scaled_dot_product_attention(q, k, v, mask)
    assert (weights[:, 1] == 0).all() and (out[:, 1] == 0).all()
    assert_within_rounding(weights[:, [0, 2]].sum(-1), torch.ones(2, 2), terms=4 + 1)   # as above, Tk = 4


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_fully_masked_row_gives_no_nan_in_the_gradient(kind):
    q, k, v = qkv(2, tq=3, tk=4, grad=True)
    mask = _one_empty_row_masks(3, 4, torch.float32)[kind]
    out, _ = mha.scaled_dot_product_attention(q, k, v, mask)
    out.square().sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[:, 1] == 0).all()  # the empty row does not depend on its query


def test_softmax_of_an_all_minus_inf_row_is_zero_not_nan():
    scores = torch.tensor([[float("-inf")] * 3, [0.0, 1.0, float("-inf")]])
    w = mha.safe_softmax(scores)
    assert torch.equal(w[0], torch.zeros(3))
    assert_within_rounding(w[1].sum(), torch.tensor(1.0), terms=3 + 1)   # as for the rows above, Tk = 3


# --- dropout --------------------------------------------------------------------------

P = 0.5


def _dropped(seed=0):
    q, k, v = qkv(1, tq=32, tk=32, d=8)
    _, clean = mha.scaled_dot_product_attention(q, k, v)
    torch.manual_seed(seed)
    out, dropped = mha.scaled_dot_product_attention(q, k, v, dropout_p=P)
    return v, clean, out, dropped


def test_dropout_zeroes_about_p_of_the_weights():
    _, _, _, dropped = _dropped()
    frac = (dropped == 0).float().mean().item()
    assert 0.4 < frac < 0.6


def test_dropout_zeroes_individual_entries_not_whole_rows():
    _, _, _, dropped = _dropped()
    zeros_per_row = (dropped == 0).sum(-1)
    assert ((zeros_per_row > 0) & (zeros_per_row < 32)).all()


def test_dropout_scales_survivors_by_one_over_one_minus_p():
    _, clean, _, dropped = _dropped()
    kept = dropped != 0
    # the same weights scaled by 1 / (1 - p) on either side: each rounds that constant and a product
    assert_within_rounding(dropped[kept], clean[kept] / (1 - P), terms=2)


def test_dropout_output_uses_the_dropped_weights():
    v, _, out, dropped = _dropped()
    assert torch.equal(out, dropped @ v)   # the very product the function returns: bit for bit


def test_dropout_zero_is_deterministic_and_equal_to_no_dropout():
    q, k, v = qkv(1, tq=6, tk=6)
    a = mha.scaled_dot_product_attention(q, k, v, dropout_p=0.0)
    b = mha.scaled_dot_product_attention(q, k, v)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


# --- gradients ------------------------------------------------------------------------

@pytest.mark.parametrize("mask_kind", ["none", "bool", "float", "causal", "empty-row"])
def test_gradcheck_in_float64(mask_kind):
    q, k, v = qkv(2, tq=3, tk=4, d=3, dtype=torch.float64, grad=True)
    mask, causal = None, False
    if mask_kind == "bool":
        mask = torch.tensor([[True, False, True, True], [False, True, True, False], [True, True, True, True]])
    elif mask_kind == "float":
        mask = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    elif mask_kind == "causal":
        causal = True
    elif mask_kind == "empty-row":
        mask = _one_empty_row_masks(3, 4, torch.float64)["bool"]
    fn = lambda q, k, v: mha.scaled_dot_product_attention(q, k, v, mask, is_causal=causal)[0]  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v))
