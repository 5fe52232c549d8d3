"""Masks: causal alignments, padding, combining, and converting torch's convention.

Attention computed with a mask is compared by its accuracy against float64 (tests/precision.py).
"""

import copy

import pytest
import torch

import mha
from precision import assert_as_accurate_as


def test_square_causal_mask_is_the_lower_triangle():
    expected = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    assert torch.equal(mha.causal_mask(3), expected)
    assert torch.equal(mha.causal_mask(3, align="top-left"), expected)


def test_causal_mask_is_bool_with_true_meaning_may_attend():
    m = mha.causal_mask(4)
    assert m.dtype == torch.bool
    assert m[3, 0] and not m[0, 3]  # a later query sees an earlier key, never the reverse


def test_causal_mask_defaults_to_bottom_right_when_queries_are_the_last_positions():
    # 2 queries that are positions 3 and 4 of a 5-token sequence
    expected = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(mha.causal_mask(2, 5), expected)
    assert torch.equal(mha.causal_mask(2, 5, align="bottom-right"), expected)


def test_causal_mask_bottom_right_equals_the_last_rows_of_the_full_triangle():
    for q_len, k_len in [(1, 4), (3, 7), (5, 5)]:
        full = mha.causal_mask(k_len)
        assert torch.equal(mha.causal_mask(q_len, k_len), full[-q_len:])


def test_causal_mask_top_left_on_request():
    expected = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(mha.causal_mask(2, 5, align="top-left"), expected)


def test_causal_mask_top_left_matches_torch_sdpa_is_causal():
    q, k, v = torch.randn(1, 2, 8), torch.randn(1, 5, 8), torch.randn(1, 5, 8)
    by_torch = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    by_mask = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mha.causal_mask(2, 5, align="top-left"))
    exact = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                             attn_mask=mha.causal_mask(2, 5, align="top-left"))
    assert_as_accurate_as([by_torch, by_mask], [by_mask, by_torch], [exact, exact])   # each as accurate as the other


def test_causal_mask_with_more_queries_than_keys_bottom_right_leaves_early_rows_empty():
    m = mha.causal_mask(4, 2)
    assert m.shape == (4, 2)
    assert not m[0].any() and not m[1].any() and m[3].all()


def test_padding_mask_shape_is_batch_1_1_max_len():
    assert mha.padding_mask([3, 1], 4).shape == (2, 1, 1, 4)


def test_padding_mask_is_true_on_the_first_length_positions():
    m = mha.padding_mask(torch.tensor([3, 1, 0, 4]), 4)
    expected = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert m.dtype == torch.bool
    assert torch.equal(m[:, 0, 0], expected)


def test_padding_mask_broadcasts_against_scores():
    scores = torch.zeros(2, 3, 5, 4)  # (B, h, Tq, Tk)
    m = mha.padding_mask([2, 4], 4)
    assert torch.broadcast_shapes(m.shape, scores.shape) == scores.shape


def test_combine_bool_masks_is_logical_and():
    causal = mha.causal_mask(3)[None, None]           # (1, 1, 3, 3)
    pad = mha.padding_mask([2, 3], 3)                   # (2, 1, 1, 3)
    both = mha.combine_masks(causal, pad)
    assert both.dtype == torch.bool and both.shape == (2, 1, 3, 3)
    assert torch.equal(both, causal & pad)
    assert not both[0, 0, 2, 2]  # causal allows it, padding does not


def test_combine_masks_ignores_none():
    m = mha.causal_mask(3)
    assert torch.equal(mha.combine_masks(None, m, None), m)
    assert mha.combine_masks(None, None) is None


def test_combine_float_masks_adds_them():
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    assert torch.equal(mha.combine_masks(a, b), a + b)      # the same one addition


def test_combine_bool_and_float_turns_the_bool_into_minus_inf_and_adds():
    bias = torch.randn(3, 3)
    out = mha.combine_masks(mha.causal_mask(3), bias)
    assert out.dtype == torch.float32
    keep = mha.causal_mask(3)
    assert torch.equal(out[keep], bias[keep])
    assert torch.isneginf(out[~keep]).all()


def test_to_additive_gives_zero_where_allowed_and_minus_inf_elsewhere():
    keep = mha.causal_mask(3)
    add = mha.to_additive(keep, torch.float64)
    assert add.dtype == torch.float64
    assert (add[keep] == 0).all() and torch.isneginf(add[~keep]).all()


def test_mask_from_torch_inverts_a_bool_attn_mask():
    blocked = torch.tensor([[False, True], [False, False]])  # torch: True = NOT allowed
    assert torch.equal(mha.mask_from_torch(blocked), ~blocked)


def test_mask_from_torch_keeps_a_float_attn_mask():
    bias = torch.randn(3, 4)
    assert torch.equal(mha.mask_from_torch(bias), bias)


def test_mask_from_torch_turns_key_padding_mask_into_a_padding_mask():
    key_padding = torch.tensor([[False, False, True], [False, True, True]])  # True = padding
    assert torch.equal(mha.mask_from_torch(key_padding_mask=key_padding), mha.padding_mask([2, 1], 3))


def test_mask_from_torch_combines_attn_mask_and_key_padding_mask():
    blocked = ~mha.causal_mask(3)
    key_padding = torch.tensor([[False, False, True]])
    out = mha.mask_from_torch(blocked, key_padding)
    assert torch.equal(out, mha.causal_mask(3) & mha.padding_mask([2], 3))


def test_mask_from_torch_of_nothing_is_none():
    assert mha.mask_from_torch() is None


def exact(ref, *args, **kwargs):
    """torch's module in float64 on the same inputs (weights, tensors, float masks converted exactly)."""
    to64 = lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t   # noqa: E731
    with torch.no_grad():
        return copy.deepcopy(ref).double()(*map(to64, args), **{k: to64(v) for k, v in kwargs.items()})[0]


@pytest.mark.parametrize("use_float", [False, True])
def test_mask_from_torch_gives_the_same_attention_as_torch_multihead_attention(use_float):
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    ours = mha.MultiHeadAttention.from_torch(ref)
    x = torch.randn(2, 4, 8)
    attn_mask = ~mha.causal_mask(4)                              # torch convention
    key_padding = torch.tensor([[False] * 4, [False, False, True, True]])
    if use_float:
        attn_mask = torch.zeros(4, 4).masked_fill(attn_mask, float("-inf"))
        key_padding = torch.zeros(2, 4).masked_fill(key_padding, float("-inf"))
    expected, _ = ref(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding, need_weights=False)
    got = ours(x, mask=mha.mask_from_torch(attn_mask, key_padding))
    assert_as_accurate_as(got, expected, exact(ref, x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding,
                                               need_weights=False))
    # passing torch's bool mask unconverted is the classic bug: it attends to the wrong keys
    if not use_float:
        wrong = ours(x, mask=attn_mask)
        assert not torch.allclose(wrong, expected, atol=1e-3)


def test_mask_from_torch_of_a_per_head_attn_mask_matches_torch_after_reshaping():
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    ours = mha.MultiHeadAttention.from_torch(ref)
    x = torch.randn(2, 4, 8)
    blocked = torch.rand(2 * 2, 4, 4, generator=torch.Generator().manual_seed(1)) > 0.6  # (B * h, Tq, Tk)
    blocked[..., 0] = False  # no empty rows (torch gives NaN there)
    expected, _ = ref(x, x, x, attn_mask=blocked, need_weights=False)
    got = ours(x, mask=mha.mask_from_torch(blocked).reshape(2, 2, 4, 4))
    assert_as_accurate_as(got, expected, exact(ref, x, x, x, attn_mask=blocked, need_weights=False))


def test_mask_from_torch_of_a_per_head_attn_mask_and_key_padding_mask_matches_torch():
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    ours = mha.MultiHeadAttention.from_torch(ref)
    x = torch.randn(2, 4, 8)
    blocked = torch.rand(2 * 2, 4, 4, generator=torch.Generator().manual_seed(1)) > 0.6  # (B * h, Tq, Tk)
    blocked[..., 0] = False
    key_padding = torch.tensor([[False] * 4, [False, False, False, True]])
    expected, _ = ref(x, x, x, attn_mask=blocked, key_padding_mask=key_padding, need_weights=False)
    mask = mha.mask_from_torch(blocked, key_padding)
    assert mask.shape == (2, 2, 4, 4)
    assert_as_accurate_as(ours(x, mask=mask), expected,
                          exact(ref, x, x, x, attn_mask=blocked, key_padding_mask=key_padding, need_weights=False))
