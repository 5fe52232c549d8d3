"""Slips in lessons 01 and 03's heads: one head, a batched head, multi-query attention, the
stable softmax."""

import math

import torch

from . import Slip


# ---------------------------------------------------------------- heads.single_head

def single_head_softmax_over_everything(x, w_q, w_k, w_v):
    T = x.shape[0]
    scores = (x @ w_q) @ (x @ w_k).T / math.sqrt(w_q.shape[1])
    weights = torch.softmax(scores.flatten(), dim=0).view(T, T)        # one softmax over the whole matrix
    return weights @ (x @ w_v)


def single_head_scaled_by_input_width(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.T / w_q.shape[0] ** 0.5, dim=-1) @ v     # w_q.shape[0] is C


def single_head_values_are_queries(x, w_q, w_k, w_v):
    q, k = x @ w_q, x @ w_k
    return torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1) @ q


def single_head_divided_by_width(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.T / q.shape[-1], dim=-1) @ v


# ---------------------------------------------------------------- heads.batched_head

def batched_head_only_scale_and_axis_fixed(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = q @ k.T / math.sqrt(k.shape[-1])                            # .T left as it was
    return torch.softmax(scores, dim=-1) @ v


def batched_head_bmm_with_the_weights(x, w_q, w_k, w_v):
    q, k, v = torch.bmm(x, w_q), torch.bmm(x, w_k), torch.bmm(x, w_v)   # bmm on a (C, d) weight
    return torch.softmax(torch.bmm(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1]), dim=-1) @ v


def batched_head_scale_by_length(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.mT / k.shape[1] ** 0.5, dim=-1) @ v      # k.shape[1] is T


def batched_head_queries_transposed(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = q.transpose(1, 2) @ k / math.sqrt(q.shape[-1])              # (B, d, d): q^T k
    return torch.softmax(scores, dim=-1) @ v


# ---------------------------------------------------------------- heads.multi_query_head

def mqa_merged_with_view(x, w_q, w_k, w_v, w_o, num_heads):
    B, T, C = x.shape
    d = C // num_heads
    q = (x @ w_q).view(B, T, num_heads, d).transpose(1, 2)
    k, v = (x @ w_k).unsqueeze(1), (x @ w_v).unsqueeze(1)
    out = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1) @ v
    return out.transpose(1, 2).view(B, T, C) @ w_o


def mqa_keys_split_into_heads(x, w_q, w_k, w_v, w_o, num_heads):
    B, T, C = x.shape
    d = C // num_heads
    heads = lambda t: t.view(B, T, num_heads, d).transpose(1, 2)
    q, k, v = heads(x @ w_q), heads(x @ w_k), heads(x @ w_v)
    out = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, C) @ w_o


def mqa_merged_head_last(x, w_q, w_k, w_v, w_o, num_heads):
    B, T, C = x.shape
    d = C // num_heads
    q = (x @ w_q).reshape(B, T, num_heads, d).permute(0, 2, 1, 3)
    k, v = (x @ w_k)[:, None], (x @ w_v)[:, None]
    out = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1) @ v     # (B, h, T, d)
    return out.permute(0, 2, 3, 1).reshape(B, T, C) @ w_o                      # (B, T, d, h)


def mqa_keys_with_a_head_axis_in_the_wrong_place(x, w_q, w_k, w_v, w_o, num_heads):
    B, T, C = x.shape
    d = C // num_heads
    q = (x @ w_q).view(B, T, num_heads, d).transpose(1, 2)
    k, v = (x @ w_k).unsqueeze(2), (x @ w_v).unsqueeze(2)                     # (B, T, 1, d)
    out = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, C) @ w_o


def mqa_scaled_after_the_softmax(x, w_q, w_k, w_v, w_o, num_heads):
    B, T, C = x.shape
    d = C // num_heads
    q = (x @ w_q).view(B, T, num_heads, d).transpose(1, 2)
    k, v = (x @ w_k)[:, None], (x @ w_v)[:, None]
    weights = torch.softmax(q @ k.transpose(-1, -2), dim=-1) / math.sqrt(d)
    return (weights @ v).transpose(1, 2).reshape(B, T, C) @ w_o


# ---------------------------------------------------------------- onehead.stable_softmax

def stable_softmax_max_pair(scores):
    e = torch.exp(scores - scores.max(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def stable_softmax_axis_added_back_in_front(scores):
    e = torch.exp(scores - scores.amax(dim=-1).unsqueeze(0))
    return e / e.sum(dim=-1, keepdim=True)


def stable_softmax_normalised_down_the_columns(scores):
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-2, keepdim=True)


def stable_softmax_divided_by_the_largest(scores):
    e = torch.exp(scores)
    return e / e.amax(dim=-1, keepdim=True)


SLIPS = {
    "heads.single_head": [
        Slip(single_head_softmax_over_everything, "one softmax over all T x T scores, not per row"),
        Slip(single_head_scaled_by_input_width, "scaled by sqrt(C), read from w_q.shape[0]", ("scale-by-c",)),
        Slip(single_head_values_are_queries, "averages the queries instead of the values", ("averages-the-queries",)),
        Slip(single_head_divided_by_width, "divides by d instead of sqrt(d)", ("scale-by-d",)),
    ],
    "heads.batched_head": [
        Slip(batched_head_only_scale_and_axis_fixed, "keeps .T on the 3-D keys", ("t-on-3d-tensor",)),
        Slip(batched_head_bmm_with_the_weights, "torch.bmm with a 2-D weight", ("bmm-needs-3d",)),
        Slip(batched_head_scale_by_length, "scales by sqrt(T), k.shape[1]", ("scale-by-t",)),
        Slip(batched_head_queries_transposed, "q^T k (a (B, d, d) product) in place of q k^T"),
    ],
    "heads.multi_query_head": [
        Slip(mqa_merged_with_view, ".view to merge the transposed heads", ("view-after-transpose",)),
        Slip(mqa_keys_split_into_heads, "the one key/value head split into h heads", ("kv-split-into-heads",)),
        Slip(mqa_merged_head_last, "heads merged as (B, T, d, h)", ("merge-interleaved",)),
        Slip(mqa_keys_with_a_head_axis_in_the_wrong_place, "keys given an axis at dim 2, (B, T, 1, d), not dim 1"),
        Slip(mqa_scaled_after_the_softmax, "divides the weights by sqrt(d) after the softmax", ("scale-after-softmax",)),
    ],
    "onehead.stable_softmax": [
        Slip(stable_softmax_max_pair, "subtracts max(dim=...)'s (values, indices) pair", ("max-returns-pair",)),
        Slip(stable_softmax_axis_added_back_in_front, "the max without keepdim, its axis put back in front",
             ("max-without-keepdim",)),
        Slip(stable_softmax_normalised_down_the_columns, "normalises over dim -2, the rows' axis",
             ("sum-over-dim-0",)),
        Slip(stable_softmax_divided_by_the_largest, "no shift (exp overflows), and divides by the largest exp, "
             "not the sum: two slips", ("no-max-shift",)),
    ],
}
