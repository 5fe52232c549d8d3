"""Correct solutions of the heads exercises, each written differently from the reference."""

import math

import numpy as np
import torch


# ---------------------------------------------------------------- attention_weights

def weights_einsum_by_hand(q, k):
    """einsum for the scores and a softmax written out (shift by the row maximum)."""
    scores = torch.einsum("id,jd->ij", q, k) * q.shape[-1] ** -0.5
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def weights_numpy_float64(q, k):
    """The whole computation in numpy float64, then back to q's dtype."""
    a, b = q.double().numpy(), k.double().numpy()
    s = a @ b.T / np.sqrt(a.shape[1])
    s -= s.max(axis=1, keepdims=True)
    w = np.exp(s)
    return torch.from_numpy(w / w.sum(axis=1, keepdims=True)).to(q.dtype)


# ---------------------------------------------------------------- single_head

def single_head_query_by_query(x, w_q, w_k, w_v):
    """One query row at a time, keys and values computed once."""
    k, v = x @ w_k, x @ w_v                               # (T, d)
    rows = []
    for t in range(x.shape[0]):
        q_t = x[t] @ w_q                                   # (d,)
        p = torch.softmax(k @ q_t / math.sqrt(w_q.shape[1]), dim=0)   # (T,)
        rows.append(p @ v)                                 # (d,)
    return torch.stack(rows)


def single_head_einsum_float64(x, w_q, w_k, w_v):
    """einsum in float64 with exp(log_softmax), then back to x's dtype."""
    x64, a, b, c = (t.double() for t in (x, w_q, w_k, w_v))
    q = torch.einsum("tc,cd->td", x64, a)
    k = torch.einsum("tc,cd->td", x64, b)
    v = torch.einsum("tc,cd->td", x64, c)
    p = torch.log_softmax(torch.einsum("id,jd->ij", q, k) / math.sqrt(a.shape[1]), dim=1).exp()
    return torch.einsum("ij,jd->id", p, v).to(x.dtype)


def single_head_scores_through_weights(x, w_q, w_k, w_v):
    """Scores as x (W_Q W_K^T) x^T, the product taken in another order, all in x's dtype."""
    d = w_q.shape[1]
    scores = x @ (w_q @ w_k.T) @ x.T / math.sqrt(d)     # (T, C) (C, C) (C, T) -> (T, T)
    return torch.softmax(scores, dim=-1) @ x @ w_v      # ((T, T) @ (T, C)) @ (C, d)


# ---------------------------------------------------------------- multi_head

def multi_head_loop_over_heads(x, w_q, w_k, w_v, w_o, num_heads):
    """Each head from its own column block of the projections, then cat and W_O."""
    C = x.shape[-1]
    d = C // num_heads
    outs = []
    for i in range(num_heads):
        cols = slice(i * d, (i + 1) * d)
        q, k, v = x @ w_q[:, cols], x @ w_k[:, cols], x @ w_v[:, cols]     # (B, T, d)
        p = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d), dim=-1)    # (B, T, T)
        outs.append(p @ v)                                                  # (B, T, d)
    return torch.cat(outs, dim=-1) @ w_o                                    # (B, T, C)


def multi_head_einsum_float64(x, w_q, w_k, w_v, w_o, num_heads):
    """unflatten into heads, einsum over them in float64, then back to x's dtype."""
    x64, a, b, c, o = (t.double() for t in (x, w_q, w_k, w_v, w_o))
    d = x.shape[-1] // num_heads
    q = (x64 @ a).unflatten(-1, (num_heads, d))           # (B, T, h, d)
    k = (x64 @ b).unflatten(-1, (num_heads, d))
    v = (x64 @ c).unflatten(-1, (num_heads, d))
    p = torch.softmax(torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(d), dim=-1)  # (B, h, T, T)
    heads = torch.einsum("bhts,bshd->bthd", p, v)         # (B, T, h, d)
    return (heads.flatten(2) @ o).to(x.dtype)


CORRECT = {
    "heads.attention_weights": [weights_einsum_by_hand, weights_numpy_float64],
    "heads.single_head": [single_head_query_by_query, single_head_einsum_float64,
                          single_head_scores_through_weights],
    "heads.multi_head": [multi_head_loop_over_heads, multi_head_einsum_float64],
}
