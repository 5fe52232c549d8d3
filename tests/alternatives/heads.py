"""Answers to the heads exercises: correct ones written differently from the reference, and
classic wrong ones that the checks must catch."""

import math

import numpy as np
import torch


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


def single_head_scaled_query(x, w_q, w_k, w_v):
    """The scale folded into the queries first, softmax through F."""
    q = (x @ w_q) * w_q.shape[1] ** -0.5
    return torch.nn.functional.softmax(q @ (x @ w_k).mT, dim=1) @ (x @ w_v)


def single_head_wrong_scale_c(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.T / math.sqrt(x.shape[1]), dim=-1) @ v


def single_head_wrong_no_values(x, w_q, w_k, w_v):
    q, k = x @ w_q, x @ w_k
    return torch.softmax(q @ k.T / math.sqrt(q.shape[1]), dim=-1) @ x[:, : q.shape[1]]


def single_head_wrong_columns(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    w = torch.softmax(q @ k.T / math.sqrt(q.shape[1]), dim=0)
    return w @ v


def single_head_wrong_in_place(x, w_q, w_k, w_v):
    """Right numbers, but it scales the caller's w_q in place."""
    w_q /= math.sqrt(w_q.shape[1])
    return torch.softmax((x @ w_q) @ (x @ w_k).T, dim=-1) @ (x @ w_v)


def single_head_forbidden_sdpa(x, w_q, w_k, w_v):
    return torch.nn.functional.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)


# ---------------------------------------------------------------- batched_head

def batched_head_bmm(x, w_q, w_k, w_v):
    """torch.bmm and the transpose written as permute."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = torch.bmm(q, k.permute(0, 2, 1)) / math.sqrt(q.shape[2])
    return torch.bmm(torch.softmax(scores, dim=2), v)


def batched_head_per_sequence(x, w_q, w_k, w_v):
    """The unbatched head on each sequence, stacked."""
    out = []
    for xb in x:
        q, k, v = xb @ w_q, xb @ w_k, xb @ w_v
        out.append(torch.softmax(q @ k.T / math.sqrt(w_k.shape[1]), dim=-1) @ v)
    return torch.stack(out)


def batched_head_einsum_by_hand(x, w_q, w_k, w_v):
    """einsum, and the softmax written out with the row max."""
    q = torch.einsum("btc,cd->btd", x, w_q)
    k = torch.einsum("btc,cd->btd", x, w_k)
    v = torch.einsum("btc,cd->btd", x, w_v)
    s = torch.einsum("bid,bjd->bij", q, k) / math.sqrt(q.shape[-1])
    e = torch.exp(s - s.amax(dim=-1, keepdim=True))
    return torch.einsum("bij,bjd->bid", e / e.sum(dim=-1, keepdim=True), v)


def batched_head_wrong_mT_only(x, w_q, w_k, w_v):
    """Fixes the transpose only."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.mT / math.sqrt(k.shape[0]), dim=1) @ v


def batched_head_wrong_dim_kept(x, w_q, w_k, w_v):
    """Fixes the transpose and the scale, keeps softmax over dim=1."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.transpose(1, 2) / math.sqrt(k.shape[-1]), dim=1) @ v


def batched_head_wrong_scale_t(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(k.shape[1]), dim=-1) @ v


def batched_head_wrong_as_is(x, w_q, w_k, w_v):
    """The colleague's code, unchanged."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = q @ k.T / math.sqrt(k.shape[0])
    return torch.softmax(scores, dim=1) @ v


def batched_head_forbidden_sdpa(x, w_q, w_k, w_v):
    return torch.nn.functional.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)


# ---------------------------------------------------------------- multi_query_head

def mqa_loop_over_heads(x, w_q, w_k, w_v, w_o, num_heads):
    """Each query head from its own column block, against the one shared key head."""
    d = x.shape[-1] // num_heads
    k, v = x @ w_k, x @ w_v                                                  # (B, T, d)
    outs = []
    for i in range(num_heads):
        q = x @ w_q[:, i * d:(i + 1) * d]                                     # (B, T, d)
        p = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d), dim=-1)      # (B, T, T)
        outs.append(p @ v)
    return torch.cat(outs, dim=-1) @ w_o


def mqa_einsum_float64(x, w_q, w_k, w_v, w_o, num_heads):
    """unflatten the queries, einsum with the shared head in float64."""
    x64, a, b, c, o = (t.double() for t in (x, w_q, w_k, w_v, w_o))
    d = x.shape[-1] // num_heads
    q = (x64 @ a).unflatten(-1, (num_heads, d))                              # (B, T, h, d)
    k, v = x64 @ b, x64 @ c                                                  # (B, T, d)
    p = torch.softmax(torch.einsum("bthd,bsd->bhts", q, k) / math.sqrt(d), dim=-1)
    heads = torch.einsum("bhts,bsd->bthd", p, v).flatten(2)                  # (B, T, C)
    return (heads @ o).to(x.dtype)


def mqa_queries_as_rows(x, w_q, w_k, w_v, w_o, num_heads):
    """All query heads stacked as rows against the one key head: (B, T*h, d) @ (B, d, T)."""
    B, T, C = x.shape
    d = C // num_heads
    q = (x @ w_q).reshape(B, T * num_heads, d)                               # row t*h + i: token t, head i
    p = torch.softmax(q @ (x @ w_k).transpose(1, 2) / math.sqrt(d), dim=-1)  # (B, T*h, T)
    return (p @ (x @ w_v)).reshape(B, T, C) @ w_o


def mqa_expand_keys(x, w_q, w_k, w_v, w_o, num_heads):
    """The key and value head copied to every query head with expand, then the usual MHA."""
    B, T, C = x.shape
    d = C // num_heads
    q = (x @ w_q).view(B, T, num_heads, d).permute(0, 2, 1, 3)
    k = (x @ w_k).unsqueeze(1).expand(B, num_heads, T, d)
    v = (x @ w_v).unsqueeze(1).expand(B, num_heads, T, d)
    p = torch.softmax(q @ k.transpose(-1, -2) * d ** -0.5, dim=-1)
    return (p @ v).permute(0, 2, 1, 3).contiguous().view(B, T, C) @ w_o


def mqa_wrong_direct_view(x, w_q, w_k, w_v, w_o, num_heads):
    B, T, C = x.shape
    d = C // num_heads
    q = (x @ w_q).view(B, num_heads, T, d)
    k, v = (x @ w_k)[:, None], (x @ w_v)[:, None]
    out = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, C) @ w_o


def mqa_wrong_scale(x, w_q, w_k, w_v, w_o, num_heads):
    B, T, C = x.shape
    d = C // num_heads
    q = (x @ w_q).view(B, T, num_heads, d).transpose(1, 2)
    k, v = (x @ w_k)[:, None], (x @ w_v)[:, None]
    out = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(C), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, C) @ w_o


def mqa_wrong_head_order(x, w_q, w_k, w_v, w_o, num_heads):
    """Queries split as (B, T, d, h): head i gets every h-th feature."""
    B, T, C = x.shape
    d = C // num_heads
    q = (x @ w_q).view(B, T, d, num_heads).permute(0, 3, 1, 2)
    k, v = (x @ w_k)[:, None], (x @ w_v)[:, None]
    out = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, C) @ w_o


def mqa_forbidden_sdpa(x, w_q, w_k, w_v, w_o, num_heads):
    B, T, C = x.shape
    q = (x @ w_q).view(B, T, num_heads, C // num_heads).transpose(1, 2)
    out = torch.nn.functional.scaled_dot_product_attention(q, (x @ w_k)[:, None], (x @ w_v)[:, None])
    return out.transpose(1, 2).reshape(B, T, C) @ w_o


CORRECT = {
    "heads.single_head": [single_head_query_by_query, single_head_einsum_float64,
                          single_head_scores_through_weights, single_head_scaled_query],
    "heads.batched_head": [batched_head_bmm, batched_head_per_sequence, batched_head_einsum_by_hand],
    "heads.multi_query_head": [mqa_loop_over_heads, mqa_einsum_float64, mqa_queries_as_rows, mqa_expand_keys],
}

WRONG = {
    "heads.single_head": [single_head_wrong_scale_c, single_head_wrong_no_values, single_head_wrong_columns,
                          single_head_wrong_in_place],
    "heads.batched_head": [batched_head_wrong_mT_only, batched_head_wrong_dim_kept, batched_head_wrong_scale_t,
                           batched_head_wrong_as_is],
    "heads.multi_query_head": [mqa_wrong_direct_view, mqa_wrong_scale, mqa_wrong_head_order],
}

FORBIDDEN = {
    "heads.single_head": [single_head_forbidden_sdpa],
    "heads.batched_head": [batched_head_forbidden_sdpa],
    "heads.multi_query_head": [mqa_forbidden_sdpa],
}


# ---------------------------------------------------------------- more held-out wrong answers

def single_head_wrong_weights_transposed(x, w_q, w_k, w_v):
    """Weights used as nn.Linear stores them: x @ w.T (runs only when C == d)."""
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
    return torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1) @ v


def batched_head_wrong_softmax_over_batch(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1]), dim=0) @ v


WRONG["heads.single_head"] += [single_head_wrong_weights_transposed]
WRONG["heads.batched_head"] += [batched_head_wrong_softmax_over_batch]
