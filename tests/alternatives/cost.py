"""Correct solutions of the cost-of-attention exercises, each written differently from the reference."""

import numpy as np
import torch


# ---------------------------------------------------------------- cross_layer_flops

def cross_layer_flops_by_matmul(batch, tgt_len, src_len, embed_dim, num_heads):
    """Sum 2 m k n over every matmul of the layer, head by head for the attention core."""
    d_h = embed_dim // num_heads
    shapes = [(batch * tgt_len, embed_dim, embed_dim)] * 2            # x W_Q, y W_O on the target
    shapes += [(batch * src_len, embed_dim, embed_dim)] * 2           # m W_K, m W_V on the source
    shapes += [(tgt_len, d_h, src_len), (tgt_len, src_len, d_h)] * (batch * num_heads)   # q k^T, w v
    return sum(2 * m * k * n for m, k, n in shapes)


def cross_layer_flops_factored(batch, tgt_len, src_len, embed_dim, num_heads):
    """4 B C (C (T + S) + T S): the common factor taken out."""
    return 4 * batch * embed_dim * (embed_dim * (tgt_len + src_len) + tgt_len * src_len)


def cross_layer_flops_loop(batch, tgt_len, src_len, embed_dim, num_heads):
    """Per sequence, then times the batch, in floats turned back into an int at the end."""
    per_sequence = 0.0
    for rows in (tgt_len, src_len, src_len, tgt_len):                 # Q, K, V, O projections
        per_sequence += 2.0 * rows * embed_dim * embed_dim
    per_sequence += 2 * (2.0 * tgt_len * src_len * embed_dim)        # both products, all heads
    return int(round(per_sequence)) * batch


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

def cross_flops_wrong_one_head_core(batch, tgt_len, src_len, embed_dim, num_heads):
    """The T S part counted for one head of width C / h."""
    d = embed_dim // num_heads
    return 4 * batch * (tgt_len + src_len) * embed_dim ** 2 + 4 * batch * tgt_len * src_len * d


def cross_flops_wrong_macs(batch, tgt_len, src_len, embed_dim, num_heads):
    """Multiply-adds, not FLOPs, and only three projections."""
    return batch * (tgt_len + 2 * src_len) * embed_dim ** 2 + 2 * batch * tgt_len * src_len * embed_dim


def cross_flops_wrong_float(batch, tgt_len, src_len, embed_dim, num_heads):
    return 4.0 * batch * (tgt_len + src_len) * embed_dim ** 2 + 4.0 * batch * tgt_len * src_len * embed_dim


def cross_flops_wrong_square_scores(batch, tgt_len, src_len, embed_dim, num_heads):
    """Projections right, the scores counted as T x T."""
    return 4 * batch * (tgt_len + src_len) * embed_dim ** 2 + 4 * batch * tgt_len * tgt_len * embed_dim


def cross_flops_wrong_source_scores(batch, tgt_len, src_len, embed_dim, num_heads):
    """Projections right, the scores counted as S x S."""
    return 4 * batch * (tgt_len + src_len) * embed_dim ** 2 + 4 * batch * src_len * src_len * embed_dim


# ---------------------------------------------------------------- flop_growth (a prediction)

def flop_growth_written_down():
    """The number, worked out on paper: 4096 (8 C + 4 * 4096) / (512 (8 C + 4 * 512)) at C = 512, 26.7."""
    return 26.7


def flop_growth_by_shares():
    """The projections are 2/3 of the count at T = 512 and grow 8 times; the T^2 third grows 64 times."""
    return 2 / 3 * 8 + 1 / 3 * 64


def flop_growth_wrong_guess_cubic():
    """8 times longer, so 8 ** 3."""
    return 512.0


def flop_growth_wrong_rounded_down():
    """Rounded down to a multiple of 5 before answering: 25 is 6% under."""
    return 25.0


def crossover_wrong_mha_always(embed_dim, num_heads, num_kv_heads):
    return 2 * embed_dim


def crossover_wrong_kv_heads_full_width(embed_dim, num_heads, num_kv_heads):
    """An algebra slip: K and V counted twice when the factor 2 T is cancelled."""
    return embed_dim + 2 * num_kv_heads * (embed_dim // num_heads)


def crossover_wrong_float(embed_dim, num_heads, num_kv_heads):
    return embed_dim + num_kv_heads * embed_dim / num_heads


# ---------------------------------------------------------------- backward_flops

def backward_flops_by_matmul(batch, seq_len, embed_dim, num_heads, input_grad):
    """Every product of the backward pass with its shape, as (n, m, k, p): n products of
    (m, k) @ (k, p)."""
    B, T, C, h = batch, seq_len, embed_dim, num_heads
    d = C // h
    products = [(4, C, B * T, C)]                                 # dW = x^T dY for the four projections
    products.append((1, B * T, C, C))                             # d(heads' output) = dY W_O^T
    if input_grad:
        products.append((3, B * T, C, C))                         # dX through W_Q, W_K, W_V
    products += [(B * h, T, T, d), (B * h, T, d, T),              # dV = P^T dO, dP = dO V^T
                 (B * h, T, T, d), (B * h, T, T, d)]              # dQ = dS K, dK = dS^T Q
    return sum(n * 2 * m * k * p for n, m, k, p in products)


def backward_flops_twice_forward(batch, seq_len, embed_dim, num_heads, input_grad):
    """Twice the forward, less the three input gradients nobody needs."""
    forward = 8 * batch * seq_len * embed_dim ** 2 + 4 * batch * seq_len ** 2 * embed_dim
    unused = 0 if input_grad else 3 * 2 * batch * seq_len * embed_dim ** 2
    return 2 * forward - unused


def backward_wrong_no_input_grads(batch, seq_len, embed_dim, num_heads, input_grad):
    """Weights' gradients only, whatever input_grad says."""
    return 8 * batch * seq_len * embed_dim ** 2 + 8 * batch * seq_len ** 2 * embed_dim


def backward_wrong_recomputes(batch, seq_len, embed_dim, num_heads, input_grad):
    """Adds the recomputed Q K^T of FlashAttention's backward, which this one does not do."""
    return backward_flops_twice_forward(batch, seq_len, embed_dim, num_heads, input_grad) + \
        2 * batch * seq_len ** 2 * embed_dim


def backward_wrong_flag_inverted(batch, seq_len, embed_dim, num_heads, input_grad):
    return backward_flops_twice_forward(batch, seq_len, embed_dim, num_heads, not input_grad)


# ---------------------------------------------------------------- loglog_slope

def loglog_slope_forbidden_lstsq(x, y):
    """Solve the least-squares problem [log x, 1] @ [p, log a] = log y."""
    design = torch.stack([x.log(), torch.ones_like(x)], dim=1)         # (n, 2)
    solution = torch.linalg.lstsq(design, y.log()[:, None]).solution   # (2, 1)
    return solution[0, 0]


def loglog_slope_forbidden_polyfit(x, y):
    """numpy's polyfit in float64, returned in the input's dtype."""
    p = np.polyfit(np.log(x.double().numpy()), np.log(y.double().numpy()), 1)[0]
    return torch.tensor(p, dtype=x.dtype)


def loglog_slope_normal_equations(x, y):
    """The closed form from the normal equations, sums only, in float64."""
    u, v = x.double().log(), y.double().log()
    n = len(u)
    p = (n * (u * v).sum() - u.sum() * v.sum()) / (n * (u * u).sum() - u.sum() ** 2)
    return p.to(x.dtype)


def loglog_slope_numpy_by_hand(x, y):
    u, v = np.log(x.double().numpy()), np.log(y.double().numpy())
    du = u - u.mean()
    return torch.tensor(float(du @ (v - v.mean()) / (du @ du)), dtype=x.dtype)


def loglog_slope_wrong_log10_x(x, y):
    u, v = torch.log10(x), torch.log(y)
    du = u - u.mean()
    return (du * (v - v.mean())).sum() / (du * du).sum()


def loglog_slope_wrong_y_on_x_reversed(x, y):
    """The slope of log x against log y: the inverse of the exponent for noiseless data only."""
    u, v = x.log(), y.log()
    dv = v - v.mean()
    return (dv * (u - u.mean())).sum() / (dv * dv).sum()


def loglog_slope_wrong_mean_of_ratios(x, y):
    """The mean of the slopes between neighbouring points."""
    u, v = x.log(), y.log()
    return ((v[1:] - v[:-1]) / (u[1:] - u[:-1])).mean()


def loglog_slope_covariance(x, y):
    """cov(log x, log y) / var(log x), from torch.cov."""
    c = torch.cov(torch.stack([x.log(), y.log()]))
    return c[0, 1] / c[0, 0]


CORRECT = {
    "cost.cross_layer_flops": [cross_layer_flops_by_matmul, cross_layer_flops_factored, cross_layer_flops_loop],
    "cost.flop_growth": [flop_growth_written_down, flop_growth_by_shares],
    "cost.crossover_length": [crossover_length_search, crossover_length_ratio],
    "cost.backward_flops": [backward_flops_by_matmul, backward_flops_twice_forward],
    "cost.loglog_slope": [loglog_slope_normal_equations, loglog_slope_numpy_by_hand, loglog_slope_covariance],
}

WRONG = {
    "cost.cross_layer_flops": [cross_flops_wrong_one_head_core, cross_flops_wrong_macs, cross_flops_wrong_float,
                               cross_flops_wrong_square_scores, cross_flops_wrong_source_scores],
    "cost.flop_growth": [flop_growth_wrong_guess_cubic, flop_growth_wrong_rounded_down],
    "cost.crossover_length": [crossover_wrong_mha_always, crossover_wrong_kv_heads_full_width, crossover_wrong_float],
    "cost.backward_flops": [backward_wrong_no_input_grads, backward_wrong_recomputes, backward_wrong_flag_inverted],
    "cost.loglog_slope": [loglog_slope_wrong_log10_x, loglog_slope_wrong_y_on_x_reversed,
                          loglog_slope_wrong_mean_of_ratios],
}

FORBIDDEN = {
    "cost.loglog_slope": [loglog_slope_forbidden_lstsq, loglog_slope_forbidden_polyfit],
}


# ---------------------------------------------------------------- more held-out wrong answers

def cross_flops_wrong_kv_projected_once(batch, tgt_len, src_len, embed_dim, num_heads):
    """K and V counted as one fused C x 2C product, then only once."""
    B, T, S, C = batch, tgt_len, src_len, embed_dim
    return 4 * B * T * C * C + 2 * B * S * C * C + 4 * B * T * S * C


def crossover_wrong_heads_for_kv(embed_dim, num_heads, num_kv_heads):
    """num_kv_heads * C // num_heads counted for K and V together, with the 2C of Q and O halved."""
    return embed_dim // 2 + num_kv_heads * (embed_dim // num_heads)


def backward_wrong_core_twice_forward(batch, seq_len, embed_dim, num_heads, input_grad):
    """Everything twice the forward: 2 (8 B T C^2 + 4 B T^2 C)."""
    return 2 * (8 * batch * seq_len * embed_dim ** 2 + 4 * batch * seq_len ** 2 * embed_dim)


def loglog_slope_wrong_no_centering_y(x, y):
    """The covariance divided by n once more than the variance."""
    u, v = x.log(), y.log()
    du = u - u.mean()
    return (du * v).sum() / (du * du).sum() / len(x)


WRONG["cost.cross_layer_flops"] += [cross_flops_wrong_kv_projected_once]
WRONG["cost.crossover_length"] += [crossover_wrong_heads_for_kv]
WRONG["cost.backward_flops"] += [backward_wrong_core_twice_forward]
WRONG["cost.loglog_slope"] += [loglog_slope_wrong_no_centering_y]
