"""Slips in lesson 06's layer: concatenating heads, splitting a fused grouped projection, and the
prediction of how much dropout shakes a row."""

import math

import torch

from . import Slip


def concat_heads_head_axis_last(heads, w_o):
    h, B, T, d = heads.shape
    return heads.permute(1, 2, 3, 0).reshape(B, T, h * d) @ w_o.T


def concat_heads_cat_along_time(heads, w_o):
    h, B, T, d = heads.shape
    merged = torch.cat(list(heads), dim=1)                  # (B, h T, d): heads one after another in time
    return merged.reshape(B, T, h * d) @ w_o.T


def split_qkv_gqa_three_parts(qkv, num_heads, num_kv_heads):
    B, T, width = qkv.shape
    d = width // (num_heads + 2 * num_kv_heads)
    q, k, v = torch.tensor_split(qkv, 3, dim=-1)
    return (q.view(B, T, num_heads, d).transpose(1, 2), k.view(B, T, num_kv_heads, d).transpose(1, 2),
            v.view(B, T, num_kv_heads, d).transpose(1, 2))


def split_qkv_gqa_width_from_the_queries(qkv, num_heads, num_kv_heads):
    B, T, width = qkv.shape
    d = width // num_heads                                   # the queries' heads alone
    q, k, v = qkv.split([num_heads * d, num_kv_heads * d, num_kv_heads * d], dim=-1)
    return tuple(t.reshape(B, T, -1, d).transpose(1, 2) for t in (q, k, v))


def split_qkv_gqa_values_then_keys(qkv, num_heads, num_kv_heads):
    B, T, width = qkv.shape
    d = width // (num_heads + 2 * num_kv_heads)
    q = qkv[..., :num_heads * d]
    v = qkv[..., num_heads * d:(num_heads + num_kv_heads) * d]
    k = qkv[..., (num_heads + num_kv_heads) * d:]
    return tuple(t.unflatten(-1, (-1, d)).transpose(1, 2) for t in (q, k, v))


def dropout_spread_rescaled_once():
    n, p, w = 16, 0.2, 1 / 16
    var = w**2 * p * (1 - p) / (1 - p)            # divided by (1 - p) once
    return math.sqrt(n * var)


def dropout_spread_keep_and_drop_swapped():
    n, p, w = 16, 0.2, 1 / 16
    return math.sqrt(n * w**2 * p * (1 - p) / p**2)


def dropout_spread_of_the_mean():
    n, p, w = 16, 0.2, 1 / 16
    return math.sqrt(n * w**2 * p / (1 - p)) / n


def dropout_spread_not_rescaled_fraction():
    """The spread of the fraction of weights that survive."""
    return math.sqrt(16 * 0.2 * 0.8) / 16


def dropout_spread_p_over_sqrt_n():
    return 0.2 / math.sqrt(16)


SLIPS = {
    "layer.concat_heads": [
        Slip(concat_heads_head_axis_last, "merged as (B, T, d, h)", ("features-interleaved",)),
        Slip(concat_heads_cat_along_time, "heads concatenated along time, then a plain reshape that mixes "
             "time across heads", ("direct-reshape",)),
    ],
    "layer.split_qkv_gqa": [
        Slip(split_qkv_gqa_three_parts, "three equal parts", ("three-equal-parts",)),
        Slip(split_qkv_gqa_width_from_the_queries, "d = width // num_heads: split sizes that do not add up"),
        Slip(split_qkv_gqa_values_then_keys, "values before keys", ("k-and-v-swapped",)),
    ],
    "layer.dropout_row_spread": [
        Slip(dropout_spread_rescaled_once, "the rescaling's square forgotten: w^2 p", ("rescaled-once",)),
        Slip(dropout_spread_keep_and_drop_swapped, "p and 1 - p swapped", ("p-swap-or-w-unsquared",)),
        Slip(dropout_spread_of_the_mean, "the spread of the mean of the weights", ("mean-not-sum",)),
        Slip(dropout_spread_not_rescaled_fraction, "the survivors' fraction, not rescaled",
             ("survivors-not-rescaled",)),
        Slip(dropout_spread_p_over_sqrt_n, "p / sqrt(n): a guess at a formula"),
    ],
}
