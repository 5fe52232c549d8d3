"""Slips in lesson 04's counts: grouped-query cross-attention, and the K/V heads that fit."""

from . import Slip


# ---------------------------------------------------------------- params.cross_gqa_params

def cross_gqa_each_bias_counted_twice(embed_dim, num_heads, num_kv_heads, kdim, bias):
    d = embed_dim // num_heads
    kv = num_kv_heads * d
    if bias:   # every projection with its bias row, then the biases once more
        weights = 2 * (embed_dim + 1) * embed_dim + 2 * (kdim + 1) * kv
        return weights + 2 * embed_dim + 2 * kv
    return 2 * embed_dim * embed_dim + 2 * kdim * kv


def cross_gqa_output_back_to_the_encoder(embed_dim, num_heads, num_kv_heads, kdim, bias):
    kv = num_kv_heads * (embed_dim // num_heads)
    w_q, w_k, w_v, w_o = embed_dim * embed_dim, kdim * kv, kdim * kv, embed_dim * kdim
    b = embed_dim + kv + kv + kdim if bias else 0
    return w_q + w_k + w_v + w_o + b


def cross_gqa_group_size_for_the_groups(embed_dim, num_heads, num_kv_heads, kdim, bias):
    d = embed_dim // num_heads
    kv = (num_heads // num_kv_heads) * d        # heads per group, taken for the number of groups
    return 2 * embed_dim**2 + 2 * kdim * kv + ((2 * embed_dim + 2 * kv) if bias else 0)


def cross_gqa_kv_width_from_kdim(embed_dim, num_heads, num_kv_heads, kdim, bias):
    kv = num_kv_heads * (kdim // num_heads)     # d_h taken from the encoder's width
    return 2 * embed_dim**2 + 2 * kdim * kv + ((2 * embed_dim + 2 * kv) if bias else 0)


# ---------------------------------------------------------------- params.max_kv_heads

def max_kv_heads_for_one_sequence(memory_bytes, layers, num_heads, head_dim, seq_len, batch, bytes_per_element):
    per_head = 2 * layers * head_dim * seq_len * bytes_per_element
    for g in range(num_heads, 0, -1):
        if num_heads % g == 0 and g * per_head <= memory_bytes:
            return g
    return 0


def max_kv_heads_head_dim_left_out(memory_bytes, layers, num_heads, head_dim, seq_len, batch, bytes_per_element):
    per_head = 2 * layers * seq_len * batch * bytes_per_element
    fits = [g for g in range(1, num_heads + 1) if num_heads % g == 0 and g * per_head <= memory_bytes]
    return fits[-1] if fits else 0


def max_kv_heads_any_count(memory_bytes, layers, num_heads, head_dim, seq_len, batch, bytes_per_element):
    per_head = 2 * layers * head_dim * seq_len * batch * bytes_per_element
    return min(memory_bytes // per_head, num_heads)        # as many as fit, divisor of num_heads or not


SLIPS = {
    "params.cross_gqa_params": [
        Slip(cross_gqa_each_bias_counted_twice, "biases in (in + 1) x out, then added again", ("biases-twice",)),
        Slip(cross_gqa_output_back_to_the_encoder, "W_O writes kdim features", ("o-writes-kdim",)),
        Slip(cross_gqa_group_size_for_the_groups, "h / g key/value heads instead of g", ("group-size-for-groups",)),
        Slip(cross_gqa_kv_width_from_kdim, "d_h taken as kdim // num_heads"),
    ],
    "params.max_kv_heads": [
        Slip(max_kv_heads_for_one_sequence, "the batch left out of the cache", ("no-batch",)),
        Slip(max_kv_heads_head_dim_left_out, "head_dim left out of the cache", ("no-head-dim",)),
        Slip(max_kv_heads_any_count, "as many heads as fit, a divisor of num_heads or not", ("not-a-divisor",)),
    ],
}
