"""Correct solutions of the parameter-count exercises, each written differently from the reference."""

import math


# ---------------------------------------------------------------- mha_params

def mha_params_per_projection(embed_dim, num_heads, bias):
    """Four projections, each a C x C matrix and, with bias, C biases."""
    one = embed_dim * embed_dim + (embed_dim if bias else 0)
    return sum(one for _ in ("q", "k", "v", "o"))


def mha_params_per_head(embed_dim, num_heads, bias):
    """Head by head: each has C x d_h for Q, K, V and d_h x C of W_O."""
    d_h = embed_dim // num_heads
    weights = num_heads * (3 * embed_dim * d_h + d_h * embed_dim)
    return weights + 4 * embed_dim * int(bias)


# ---------------------------------------------------------------- gqa_params

def gqa_params_matrix_shapes(embed_dim, num_heads, num_kv_heads, bias):
    """Sum over the shapes (in, out) of W_Q, W_K, W_V, W_O."""
    kv = num_kv_heads * (embed_dim // num_heads)
    shapes = [(embed_dim, embed_dim), (embed_dim, kv), (embed_dim, kv), (embed_dim, embed_dim)]
    return sum(i * o + (o if bias else 0) for i, o in shapes)


def gqa_params_per_head(embed_dim, num_heads, num_kv_heads, bias):
    """Query heads and key/value heads counted one by one."""
    d_h = embed_dim // num_heads
    per_query_head = embed_dim * d_h + d_h * embed_dim      # its W_Q columns and W_O rows
    per_kv_head = 2 * embed_dim * d_h                       # its W_K and W_V columns
    total = num_heads * per_query_head + num_kv_heads * per_kv_head
    if bias:
        total += num_heads * d_h + 2 * num_kv_heads * d_h + embed_dim
    return total


# ---------------------------------------------------------------- kv_cache_bytes

def kv_cache_bytes_prod(layers, kv_heads, head_dim, seq_len, batch, bytes_per_element):
    return math.prod((2, layers, kv_heads, head_dim, seq_len, batch, bytes_per_element))


def kv_cache_bytes_per_token(layers, kv_heads, head_dim, seq_len, batch, bytes_per_element):
    """Bytes one token adds to one layer (its key and its value), times tokens and layers."""
    per_token = kv_heads * head_dim * bytes_per_element * 2
    return per_token * seq_len * batch * layers


CORRECT = {
    "params.mha_params": [mha_params_per_projection, mha_params_per_head],
    "params.gqa_params": [gqa_params_matrix_shapes, gqa_params_per_head],
    "params.kv_cache_bytes": [kv_cache_bytes_prod, kv_cache_bytes_per_token],
}
