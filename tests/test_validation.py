"""Bad configuration and bad input raise ValueError or TypeError naming the argument."""

import pytest
import torch
from torch import nn

import mha


def module(**kwargs):
    return mha.MultiHeadAttention(8, 2, **kwargs)


# --- configuration --------------------------------------------------------------------

def test_embed_dim_not_divisible_by_num_heads():
    with pytest.raises(ValueError, match=r"embed_dim=10 .*num_heads=3"):
        mha.MultiHeadAttention(10, 3)


def test_num_heads_not_divisible_by_num_kv_heads():
    with pytest.raises(ValueError, match=r"num_heads=4 .*num_kv_heads=3"):
        mha.MultiHeadAttention(12, 4, num_kv_heads=3)


def test_bad_backend():
    with pytest.raises(ValueError, match=r"backend .*'sdpa'.*'flash'"):
        module(backend="flash")


@pytest.mark.parametrize("name,value", [("embed_dim", 0), ("num_heads", -1), ("num_kv_heads", 0)])
def test_sizes_must_be_positive(name, value):
    kwargs = {"embed_dim": 8, "num_heads": 2, name: value}
    with pytest.raises(ValueError, match=name):
        mha.MultiHeadAttention(kwargs.pop("embed_dim"), kwargs.pop("num_heads"), **kwargs)


def test_sizes_must_be_ints():
    with pytest.raises(TypeError, match="num_heads"):
        mha.MultiHeadAttention(8, 2.0)


def test_dropout_outside_zero_one():
    with pytest.raises(ValueError, match="dropout"):
        module(dropout=1.0)


def test_count_parameters_checks_divisibility_like_the_module():
    with pytest.raises(ValueError, match="num_heads"):
        mha.count_parameters(10, 3)
    with pytest.raises(ValueError, match="num_kv_heads"):
        mha.count_parameters(12, 4, num_kv_heads=3)


# --- inputs ---------------------------------------------------------------------------

@pytest.mark.parametrize("name,shape", [("query", (8,)), ("query", (1, 2, 3, 8)), ("key", (1, 3))])
def test_query_key_value_of_the_wrong_rank(name, shape):
    args = {"query": torch.randn(1, 3, 8), "key": torch.randn(1, 3, 8), "value": torch.randn(1, 3, 8)}
    args[name] = torch.randn(shape)
    with pytest.raises(ValueError, match=name):
        module()(**args)


@pytest.mark.parametrize("name", ["query", "key", "value"])
def test_query_key_value_of_the_wrong_width(name):
    args = {"query": torch.randn(1, 3, 8), "key": torch.randn(1, 3, 8), "value": torch.randn(1, 3, 8)}
    args[name] = torch.randn(1, 3, 7)
    with pytest.raises(ValueError, match=rf"{name} must have shape \(B, T, 8\)"):
        module()(**args)


def test_key_width_is_checked_against_kdim():
    m = module(kdim=5, vdim=5)
    with pytest.raises(ValueError, match=r"key must have shape \(B, T, 5\)"):
        m(torch.randn(1, 3, 8), torch.randn(1, 4, 8), torch.randn(1, 4, 5))


def test_query_must_be_a_float_tensor():
    with pytest.raises(TypeError, match="query"):
        module()(torch.ones(1, 3, 8, dtype=torch.long))
    with pytest.raises(TypeError, match="query"):
        module()([[0.0] * 8])


def test_key_and_value_of_different_lengths():
    with pytest.raises(ValueError, match="key and value"):
        module()(torch.randn(1, 3, 8), torch.randn(1, 4, 8), torch.randn(1, 5, 8))


def test_mask_that_does_not_broadcast_to_the_scores():
    with pytest.raises(ValueError, match=r"mask of shape \(3, 4\)"):
        module()(torch.randn(2, 3, 8), mask=torch.ones(3, 4, dtype=torch.bool))


def test_mask_with_a_bad_batch_size():
    with pytest.raises(ValueError, match="mask"):
        module()(torch.randn(2, 3, 8), mask=mha.padding_mask([3, 3, 3], 3))


@pytest.mark.parametrize("dtype", [torch.float64, torch.int64])
def test_float_mask_of_the_wrong_dtype(dtype):
    with pytest.raises(TypeError, match=r"mask must be bool .*float32"):
        module()(torch.randn(1, 3, 8), mask=torch.zeros(3, 3, dtype=dtype))


def test_the_functional_form_checks_its_mask_too():
    q = torch.randn(1, 3, 4)
    with pytest.raises(ValueError, match="mask"):
        mha.scaled_dot_product_attention(q, q, q, torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask"):
        mha.scaled_dot_product_attention(q, q, q, torch.zeros(3, 3, dtype=torch.float16))


def test_scaled_dot_product_attention_shape_mismatches():
    q = torch.randn(1, 3, 4)
    with pytest.raises(ValueError, match="q and k"):
        mha.scaled_dot_product_attention(q, torch.randn(1, 3, 5), torch.randn(1, 3, 4))
    with pytest.raises(ValueError, match="k and v"):
        mha.scaled_dot_product_attention(q, q, torch.randn(1, 2, 4))
    with pytest.raises(ValueError, match="dropout_p"):
        mha.scaled_dot_product_attention(q, q, q, dropout_p=1.5)


def test_sequence_longer_than_max_len():
    m = module(max_len=4)
    with pytest.raises(ValueError, match="max_len=4"):
        m(torch.randn(1, 5, 8))


def test_cache_growing_past_max_len():
    m = module(max_len=4)
    cache = mha.KVCache()
    m(torch.randn(1, 4, 8), cache=cache, is_causal=True)
    with pytest.raises(ValueError, match="max_len=4"):
        m(torch.randn(1, 1, 8), cache=cache)


def test_cache_with_a_non_causal_multi_token_call():
    with pytest.raises(ValueError, match="is_causal=True"):
        module()(torch.randn(1, 3, 8), cache=mha.KVCache())


def test_cache_with_cross_attention():
    x = torch.randn(1, 1, 8)
    with pytest.raises(ValueError, match="cache="):
        module()(x, torch.randn(1, 4, 8), torch.randn(1, 4, 8), cache=mha.KVCache())


def test_cache_of_the_wrong_type():
    with pytest.raises(TypeError, match="cache"):
        module()(torch.randn(1, 1, 8), cache={})


# --- interoperability -----------------------------------------------------------------

def test_to_torch_with_gqa():
    with pytest.raises(ValueError, match="num_kv_heads"):
        mha.MultiHeadAttention(8, 4, num_kv_heads=2).to_torch()


def test_from_torch_with_add_bias_kv():
    with pytest.raises(ValueError, match="add_bias_kv"):
        mha.MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))


def test_from_torch_with_add_zero_attn():
    with pytest.raises(ValueError, match="add_zero_attn"):
        mha.MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_zero_attn=True))


def test_from_torch_with_something_else():
    with pytest.raises(TypeError, match="module"):
        mha.MultiHeadAttention.from_torch(nn.Linear(8, 8))


# --- masks ----------------------------------------------------------------------------

@pytest.mark.parametrize("lengths", [[-1, 2], [2, 5], [1.5, 2.0], [[1, 2]], [True, False]],
                         ids=["negative", "too-long", "float", "2-d", "bool"])
def test_bad_lengths_in_padding_mask(lengths):
    with pytest.raises(ValueError, match="lengths"):
        mha.padding_mask(lengths, 4)


def test_bad_max_len_in_padding_mask():
    with pytest.raises(TypeError, match="max_len"):
        mha.padding_mask([1], 4.0)


def test_bad_align():
    with pytest.raises(ValueError, match=r"align .*'bottom-right'.*'top-left'.*'upper'"):
        mha.causal_mask(3, 4, align="upper")


def test_negative_lengths_in_causal_mask():
    with pytest.raises(ValueError, match="k_len"):
        mha.causal_mask(3, -1)


def test_to_additive_needs_a_bool_mask():
    with pytest.raises(TypeError, match="mask"):
        mha.to_additive(torch.zeros(2, 2))


def test_mask_from_torch_rejects_a_1d_attn_mask():
    with pytest.raises(ValueError, match="attn_mask"):
        mha.mask_from_torch(torch.zeros(4, dtype=torch.bool))


def test_split_heads_with_indivisible_width():
    with pytest.raises(ValueError, match="num_heads=3"):
        mha.split_heads(torch.randn(1, 2, 8), 3)


def test_merge_heads_needs_four_dimensions():
    with pytest.raises(ValueError, match="x"):
        mha.merge_heads(torch.randn(2, 3, 4))


@pytest.mark.parametrize("name", ["batch", "seq_len", "embed_dim", "kv_len"])
def test_attention_flops_needs_positive_ints(name):
    args = {"batch": 1, "seq_len": 2, "embed_dim": 4, "kv_len": 3}
    args[name] = 0
    with pytest.raises(ValueError, match=name):
        mha.attention_flops(args.pop("batch"), args.pop("seq_len"), args.pop("embed_dim"), **args)


def test_kv_cache_bytes_needs_ints():
    with pytest.raises(TypeError, match="bytes_per_element"):
        mha.kv_cache_bytes(1, 1, 1, 1, bytes_per_element=0.5)


def test_mask_from_torch_rejects_a_per_head_attn_mask_that_does_not_fit_the_batch():
    with pytest.raises(ValueError, match="attn_mask"):
        mha.mask_from_torch(torch.zeros(3, 4, 4, dtype=torch.bool), torch.zeros(2, 4, dtype=torch.bool))
