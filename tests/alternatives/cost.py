"""Correct solutions of the cost-of-attention exercises, each written differently from the reference."""

import numpy as np
import torch


# ---------------------------------------------------------------- layer_flops

def layer_flops_by_matmul(batch, seq_len, embed_dim, num_heads):
    """Sum 2 m k n over every matmul of the layer, head by head for the attention core."""
    d_h = embed_dim // num_heads
    shapes = [(batch * seq_len, embed_dim, embed_dim)] * 4            # x W_Q, x W_K, x W_V, y W_O
    shapes += [(seq_len, d_h, seq_len), (seq_len, seq_len, d_h)] * (batch * num_heads)   # q k^T, w v
    return sum(2 * m * k * n for m, k, n in shapes)


def layer_flops_factored(batch, seq_len, embed_dim, num_heads):
    """4 B T C (2 C + T): the two parts with their common factor taken out."""
    return 4 * batch * seq_len * embed_dim * (2 * embed_dim + seq_len)


# ---------------------------------------------------------------- crossover_length

def crossover_length_search(embed_dim, num_heads, num_kv_heads):
    """Walk T up until the attention core costs at least as much as the projections."""
    C, kv = embed_dim, num_kv_heads * (embed_dim // num_heads)

    def projections(T):
        return 2 * T * C * (C + kv + kv + C)

    def core(T):
        return 4 * T * T * C

    T = 1
    while core(T) < projections(T):
        T += 1
    return T


def crossover_length_ratio(embed_dim, num_heads, num_kv_heads):
    """2C scaled by the share of the projections that remain: (2 + 2 g / h) / 4 of 4C."""
    return embed_dim * (num_heads + num_kv_heads) // num_heads


# ---------------------------------------------------------------- naive_weights_bytes

def naive_weights_bytes_tensor(batch, num_heads, seq_len, bytes_per_element):
    """Ask torch for the size of an empty tensor of that shape, without allocating it."""
    dtype = {1: torch.uint8, 2: torch.float16, 4: torch.float32, 8: torch.float64}[bytes_per_element]
    meta = torch.empty(batch, num_heads, seq_len, seq_len, dtype=dtype, device="meta")
    return meta.numel() * meta.element_size()


def naive_weights_bytes_rows(batch, num_heads, seq_len, bytes_per_element):
    """One row of weights per query, per head, per sequence."""
    row = seq_len * bytes_per_element
    rows = 0
    for _ in range(batch):
        rows += num_heads * seq_len
    return rows * row


# ---------------------------------------------------------------- loglog_slope

def loglog_slope_lstsq(x, y):
    """Solve the least-squares problem [log x, 1] @ [p, log a] = log y."""
    design = torch.stack([x.log(), torch.ones_like(x)], dim=1)         # (n, 2)
    solution = torch.linalg.lstsq(design, y.log()[:, None]).solution   # (2, 1)
    return solution[0, 0]


def loglog_slope_numpy(x, y):
    """numpy's polyfit in float64, returned in the input's dtype."""
    p = np.polyfit(np.log(x.double().numpy()), np.log(y.double().numpy()), 1)[0]
    return torch.tensor(p, dtype=x.dtype)


def loglog_slope_covariance(x, y):
    """cov(log x, log y) / var(log x), from torch.cov."""
    c = torch.cov(torch.stack([x.log(), y.log()]))
    return c[0, 1] / c[0, 0]


CORRECT = {
    "cost.layer_flops": [layer_flops_by_matmul, layer_flops_factored],
    "cost.crossover_length": [crossover_length_search, crossover_length_ratio],
    "cost.naive_weights_bytes": [naive_weights_bytes_tensor, naive_weights_bytes_rows],
    "cost.loglog_slope": [loglog_slope_lstsq, loglog_slope_numpy, loglog_slope_covariance],
}
