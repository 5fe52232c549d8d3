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


# ---------------------------------------------------------------- cross_gqa_params

def cross_gqa_params_matrix_shapes(embed_dim, num_heads, num_kv_heads, kdim, bias):
    """Sum over the shapes (in, out) of W_Q, W_K, W_V, W_O."""
    kv = num_kv_heads * (embed_dim // num_heads)
    shapes = [(embed_dim, embed_dim), (kdim, kv), (kdim, kv), (embed_dim, embed_dim)]
    return sum(i * o + (o if bias else 0) for i, o in shapes)


def cross_gqa_params_per_head(embed_dim, num_heads, num_kv_heads, kdim, bias):
    """Query heads and key/value heads counted one by one."""
    d_h = embed_dim // num_heads
    per_query_head = embed_dim * d_h + d_h * embed_dim      # its W_Q columns and W_O rows
    per_kv_head = 2 * kdim * d_h                            # its W_K and W_V columns, from the encoder
    total = num_heads * per_query_head + num_kv_heads * per_kv_head
    if bias:
        total += num_heads * d_h + 2 * num_kv_heads * d_h + embed_dim
    return total


def cross_gqa_params_torch_shapes(embed_dim, num_heads, num_kv_heads, kdim, bias):
    """The shapes nn.Linear would give each projection, (out, in), multiplied out."""
    kv = embed_dim * num_kv_heads // num_heads
    layers = {"q": (embed_dim, embed_dim), "k": (kv, kdim), "v": (kv, kdim), "o": (embed_dim, embed_dim)}
    return int(sum(math.prod(shape) + shape[0] * bias for shape in layers.values()))


def mha_params_wrong_heads(embed_dim, num_heads, bias):
    """Counts one C x d_h block per projection."""
    d = embed_dim // num_heads
    return 4 * embed_dim * d + (4 * embed_dim if bias else 0)


def mha_params_wrong_fused_qkv(embed_dim, num_heads, bias):
    """The fused in_proj (3C x C) counted, the output projection forgotten."""
    return 3 * embed_dim * embed_dim + (3 * embed_dim if bias else 0)


def mha_params_wrong_bias_per_head(embed_dim, num_heads, bias):
    return 4 * embed_dim * embed_dim + (4 * num_heads if bias else 0)


def cross_gqa_params_wrong_kv_heads_width(embed_dim, num_heads, num_kv_heads, kdim, bias):
    """K/V heads as wide as C // num_kv_heads: the key/value projections keep embed_dim features."""
    kv = num_kv_heads * (embed_dim // num_kv_heads)
    return 2 * embed_dim * embed_dim + 2 * kdim * kv + ((2 * embed_dim + 2 * kv) if bias else 0)


def cross_gqa_params_wrong_encoder_everywhere(embed_dim, num_heads, num_kv_heads, kdim, bias):
    """Every projection reads the encoder's kdim features, W_O included."""
    kv = num_kv_heads * (embed_dim // num_heads)
    return 2 * kdim * embed_dim + 2 * kdim * kv + ((2 * embed_dim + 2 * kv) if bias else 0)


def cross_gqa_params_wrong_float(embed_dim, num_heads, num_kv_heads, kdim, bias):
    """Right count, as a float."""
    kv = num_kv_heads * embed_dim / num_heads
    return 2 * embed_dim * embed_dim + 2 * kdim * kv + ((2 * embed_dim + 2 * kv) if bias else 0)


def cross_gqa_params_wrong_one_bias_vector(embed_dim, num_heads, num_kv_heads, kdim, bias):
    """One bias vector of embed_dim for the whole layer."""
    kv = num_kv_heads * (embed_dim // num_heads)
    return 2 * embed_dim * embed_dim + 2 * kdim * kv + (embed_dim if bias else 0)


# ---------------------------------------------------------------- max_kv_heads

def max_kv_heads_descending(memory_bytes, layers, num_heads, head_dim, seq_len, batch, bytes_per_element):
    """Try the divisors from the largest down."""
    for g in range(num_heads, 0, -1):
        if num_heads % g == 0 and 2 * layers * g * head_dim * seq_len * batch * bytes_per_element <= memory_bytes:
            return g
    return 0


def max_kv_heads_floor_then_divisor(memory_bytes, layers, num_heads, head_dim, seq_len, batch, bytes_per_element):
    """How many heads' worth fits, then the largest divisor of num_heads up to that."""
    room = memory_bytes // (2 * layers * head_dim * seq_len * batch * bytes_per_element)
    return max((g for g in range(1, min(room, num_heads) + 1) if num_heads % g == 0), default=0)


def max_kv_heads_per_token(memory_bytes, layers, num_heads, head_dim, seq_len, batch, bytes_per_element):
    """Bytes per token and K/V head first, then the divisors in order, keeping the last that fits."""
    per_token = 2 * layers * head_dim * bytes_per_element
    best = 0
    for g in (x for x in range(1, num_heads + 1) if num_heads % x == 0):
        if per_token * g * seq_len * batch <= memory_bytes:
            best = g
    return best


def max_kv_heads_wrong_power_of_two(memory_bytes, layers, num_heads, head_dim, seq_len, batch, bytes_per_element):
    """Only powers of two: misses divisors such as 3 or 6."""
    unit = 2 * layers * head_dim * seq_len * batch * bytes_per_element
    g = 1
    while g * 2 <= num_heads and num_heads % (g * 2) == 0 and g * 2 * unit <= memory_bytes:
        g *= 2
    return g if unit <= memory_bytes else 0


def max_kv_heads_wrong_at_least_one(memory_bytes, layers, num_heads, head_dim, seq_len, batch, bytes_per_element):
    """Never answers 0."""
    return max(1, max_kv_heads_descending(memory_bytes, layers, num_heads, head_dim, seq_len, batch,
                                          bytes_per_element))


def max_kv_heads_wrong_gib(memory_bytes, layers, num_heads, head_dim, seq_len, batch, bytes_per_element):
    """Rounds the budget down to whole GiB first."""
    budget = memory_bytes // 2 ** 30 * 2 ** 30
    return max_kv_heads_descending(budget, layers, num_heads, head_dim, seq_len, batch, bytes_per_element)


CORRECT = {
    "params.mha_params": [mha_params_per_projection, mha_params_per_head],
    "params.cross_gqa_params": [cross_gqa_params_matrix_shapes, cross_gqa_params_per_head,
                                cross_gqa_params_torch_shapes],
    "params.max_kv_heads": [max_kv_heads_descending, max_kv_heads_floor_then_divisor, max_kv_heads_per_token],
}

WRONG = {
    "params.mha_params": [mha_params_wrong_heads, mha_params_wrong_fused_qkv, mha_params_wrong_bias_per_head],
    "params.cross_gqa_params": [cross_gqa_params_wrong_kv_heads_width, cross_gqa_params_wrong_encoder_everywhere,
                                cross_gqa_params_wrong_float, cross_gqa_params_wrong_one_bias_vector],
    "params.max_kv_heads": [max_kv_heads_wrong_power_of_two, max_kv_heads_wrong_at_least_one, max_kv_heads_wrong_gib],
}


# ---------------------------------------------------------------- more held-out wrong answers

def mha_params_wrong_bias_once(embed_dim, num_heads, bias):
    """One bias vector for the whole layer."""
    return 4 * embed_dim * embed_dim + (embed_dim if bias else 0)


def cross_gqa_params_wrong_kdim_everywhere_out(embed_dim, num_heads, num_kv_heads, kdim, bias):
    """K and V keep the encoder's width kdim for input and output."""
    return 2 * embed_dim * embed_dim + 2 * kdim * kdim + ((2 * embed_dim + 2 * kdim) if bias else 0)


def max_kv_heads_wrong_bits(memory_bytes, layers, num_heads, head_dim, seq_len, batch, bytes_per_element):
    """Bytes counted as bits (8 per byte)."""
    unit = 2 * layers * head_dim * seq_len * batch * bytes_per_element * 8
    fits = [g for g in range(1, num_heads + 1) if num_heads % g == 0 and g * unit <= memory_bytes]
    return max(fits, default=0)


WRONG["params.mha_params"] += [mha_params_wrong_bias_once]
WRONG["params.cross_gqa_params"] += [cross_gqa_params_wrong_kdim_everywhere_out]
WRONG["params.max_kv_heads"] += [max_kv_heads_wrong_bits]
