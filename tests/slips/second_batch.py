"""A second batch of held-out slips, written after the exercises had been changed for the
first one and measured as they came: none of the course's hints or cases was changed for them.
One per exercise, across the course, predictions included."""

import math

import torch

from . import Slip


def single_head_queries_and_keys_both_scaled(x, w_q, w_k, w_v):
    d = w_q.shape[1]
    q, k = x @ w_q / math.sqrt(d), x @ w_k / math.sqrt(d)       # each scaled: the scores by d
    return torch.softmax(q @ k.T, dim=-1) @ (x @ w_v)


def batched_head_first_sequence_for_all(x, w_q, w_k, w_v):
    q, k, v = x[0] @ w_q, x[0] @ w_k, x[0] @ w_v
    out = torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1) @ v
    return out.expand(x.shape[0], -1, -1).clone()


def mqa_softmax_over_the_heads(x, w_q, w_k, w_v, w_o, num_heads):
    B, T, C = x.shape
    d = C // num_heads
    q = (x @ w_q).view(B, T, num_heads, d).transpose(1, 2)
    k, v = (x @ w_k)[:, None], (x @ w_v)[:, None]
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=1)
    return (weights @ v).transpose(1, 2).reshape(B, T, C) @ w_o


def stable_softmax_logsumexp_without_keepdim(scores):
    return torch.exp(scores - torch.logsumexp(scores, dim=-1))


def heads_into_batch_features_before_time(x, num_heads):
    T, B, C = x.shape
    d = C // num_heads
    return x.reshape(T, B, num_heads, d).permute(1, 2, 3, 0).reshape(B * num_heads, T, d)


def mha_params_biases_on_q_k_v_only(embed_dim, num_heads, bias):
    C = embed_dim
    return 4 * C * C + (3 * C if bias else 0)


def cross_gqa_every_query_head_its_own_kv(embed_dim, num_heads, num_kv_heads, kdim, bias):
    C = embed_dim
    return 2 * C * C + 2 * kdim * C + ((4 * C) if bias else 0)


def decoder_mask_future_allowed(lengths, max_len):
    pos = torch.arange(max_len)
    upper = pos[None, :] >= pos[:, None]                              # j >= i
    return (upper[None] & (pos[None, None, :] < lengths[:, None, None]))[:, None]


def fuse_head_weights_heads_one_after_another(w_heads):
    return torch.cat(list(w_heads), dim=0)


def attention_dropout_rescaled_by_the_kept_share(weights, keep, p):
    return weights * keep / keep.to(weights.dtype).mean()


def softmax_jacobian_outer_first(p):
    return torch.outer(p, p) - torch.diag(p)


def gqa_kv_grad_groups_second(grad_k_heads, num_kv_heads):
    B, h, T, d = grad_k_heads.shape
    return grad_k_heads.reshape(B, h // num_kv_heads, num_kv_heads, T, d).sum(dim=1)


def crossover_length_without_the_groups(embed_dim, num_heads, num_kv_heads):
    return embed_dim + embed_dim


def backward_flops_twice_the_forward(batch, seq_len, embed_dim, num_heads, input_grad):
    B, T, C = batch, seq_len, embed_dim
    return 2 * (8 * B * T * C * C + 4 * B * T * T * C)


def decode_step_new_tokens_only(q, k_cache, v_cache, k_new, v_new):
    Tn = q.shape[-2]
    allowed = torch.ones(Tn, Tn, dtype=torch.bool).tril()
    scores = (q @ k_new.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v_new


def alibi_slopes_one_formula(num_heads):
    k = torch.arange(1, num_heads + 1, dtype=torch.float64)
    return 2.0 ** (-8.0 * k / num_heads)


def weights_mib_heads_by_width():
    return 12 * 1024 * 64 * 4 / 2**20


def dropout_spread_one_bernoulli():
    p = 0.2
    return math.sqrt(p * (1 - p))


def flop_growth_the_t_squared_part():
    return (4096 / 512) ** 2


def composing_head_through_the_values():
    writes = {0: "B", 1: "CD", 2: "A", 3: "B"}
    values = {0: "C", 1: "AB", 2: "C", 3: "AB"}
    return sum(bool(set(w) & set(v)) for w in writes.values() for v in values.values())


def tiles_visited_top_left():
    total = 0
    for first in range(0, 600, 64):
        last_row = min(first + 64, 600) - 1
        total += last_row // 64 + 1                                 # query i sees keys up to i
    return total


SLIPS = {
    "heads.single_head": [Slip(single_head_queries_and_keys_both_scaled, "q and k each divided by sqrt(d): the "
                               "scores by d", ("scale-by-d",))],
    "heads.batched_head": [Slip(batched_head_first_sequence_for_all, "the first sequence's output for every one")],
    "heads.multi_query_head": [Slip(mqa_softmax_over_the_heads, "the softmax over the heads' axis",
                                    ("softmax-over-heads",))],
    "onehead.stable_softmax": [Slip(stable_softmax_logsumexp_without_keepdim, "torch.logsumexp, which the exercise "
                                    "forbids (and without keepdim)")],
    "dims.heads_into_batch": [Slip(heads_into_batch_features_before_time, "permuted to (B, h, d, T) before the reshape")],
    "params.mha_params": [Slip(mha_params_biases_on_q_k_v_only, "biases on W_Q, W_K, W_V only, not W_O")],
    "params.cross_gqa_params": [Slip(cross_gqa_every_query_head_its_own_kv, "every query head its own key/value head",
                                     ("kv-not-grouped",))],
    "masking.decoder_mask": [Slip(decoder_mask_future_allowed, "j >= i: the future allowed, the past hidden",
                                  ("upper-triangle",))],
    "layer.fuse_head_weights": [Slip(fuse_head_weights_heads_one_after_another, "the heads' blocks one after another",
                                     ("head-major",))],
    "layer.attention_dropout": [Slip(attention_dropout_rescaled_by_the_kept_share, "divided by the share kept, not 1 - p")],
    "grads.softmax_jacobian": [Slip(softmax_jacobian_outer_first, "p p^T - diag(p)", ("sign-flipped",))],
    "grads.gqa_kv_grad": [Slip(gqa_kv_grad_groups_second, "the query heads read as (h // g, g)", ("repeat-layout",))],
    "cost.crossover_length": [Slip(crossover_length_without_the_groups, "2 C: the groups ignored", ("gqa-ignored",))],
    # classified after its first grading (as unlisted at first): twice the forward counts both
    # gradients of every product, x's included when input_grad is False, the x-grad-always count
    "cost.backward_flops": [Slip(backward_flops_twice_the_forward, "twice the forward count: every product's two "
                                 "gradients, x's included without input_grad", ("x-grad-always",))],
    "decode.decode_step": [Slip(decode_step_new_tokens_only, "the cache left out", ("cache-left-out",))],
    "builtins.alibi_slopes": [Slip(alibi_slopes_one_formula, "2^(-8 k / h) for every h, not only powers of two",
                                   ("power-of-two-rule",))],
    "dims.weights_mib": [Slip(weights_mib_heads_by_width, "T x d_h per head", ("t-by-d-h",))],
    "layer.dropout_row_spread": [Slip(dropout_spread_one_bernoulli, "the spread of one keep-or-drop, sqrt(p (1 - p))")],
    "cost.flop_growth": [Slip(flop_growth_the_t_squared_part, "the T^2 part's growth alone", ("quadratic",))],
    "induction.composing_head": [Slip(composing_head_through_the_values, "the pairs through the values",
                                      ("v-composition",))],
    "kernels.tiles_visited": [Slip(tiles_visited_top_left, "the mask aligned top-left", ("top-left",))],
}
