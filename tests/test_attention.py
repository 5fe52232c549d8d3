"""mha.scaled_dot_product_attention: shapes, softmax rows, empty rows, dropout, gradients."""

import math

import pytest
import torch

import mha


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
    torch.testing.assert_close(weights, expected_w, rtol=0, atol=1e-12)
    torch.testing.assert_close(out, expected_w @ v, rtol=0, atol=1e-12)


def test_explicit_scale_replaces_one_over_sqrt_d():
    q, k, v = qkv(1, tq=3, tk=3, d=4, dtype=torch.float64)
    _, weights = mha.scaled_dot_product_attention(q, k, v, scale=0.1)
    torch.testing.assert_close(weights, torch.softmax(0.1 * q @ k.transpose(-2, -1), -1), rtol=0, atol=1e-12)


def test_matches_torch_functional_sdpa_with_a_bool_mask():
    q, k, v = qkv(2, 2, tq=4, tk=6)
    mask = torch.rand(2, 1, 4, 6, generator=torch.Generator().manual_seed(1)) > 0.3
    mask[..., 0] = True  # no empty rows: torch and mha agree there too, but keep this test plain
    out, _ = mha.scaled_dot_product_attention(q, k, v, mask)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)


def test_weight_rows_sum_to_one():
    q, k, v = qkv(2, 3, tq=5, tk=7)
    _, weights = mha.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5), rtol=0, atol=1e-6)
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
    torch.testing.assert_close(weights, expected, rtol=0, atol=1e-12)


def test_bool_mask_and_its_additive_form_give_the_same_result():
    q, k, v = qkv(2, tq=4, tk=4)
    mask = mha.causal_mask(4)
    a = mha.scaled_dot_product_attention(q, k, v, mask)[0]
    b = mha.scaled_dot_product_attention(q, k, v, mha.to_additive(mask, torch.float32))[0]
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


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
    torch.testing.assert_close(weights[:, [0, 2]].sum(-1), torch.ones(2, 2), rtol=0, atol=1e-6)


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
    torch.testing.assert_close(w[1].sum(), torch.tensor(1.0))


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
    torch.testing.assert_close(dropped[kept], clean[kept] / (1 - P), rtol=1e-6, atol=0)


def test_dropout_output_uses_the_dropped_weights():
    v, _, out, dropped = _dropped()
    torch.testing.assert_close(out, dropped @ v, rtol=0, atol=1e-6)


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
