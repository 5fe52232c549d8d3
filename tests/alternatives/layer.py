"""Correct solutions of the layer exercises, written differently from the reference."""

import numpy as np
import torch


# ---------------------------------------------------------------- concat_heads

def concat_cat(heads, w_o):
    merged = torch.cat(list(heads.unbind(0)), dim=-1)          # (B, T, h * d)
    return torch.nn.functional.linear(merged, w_o)


def concat_einsum(heads, w_o):
    h, B, T, d = heads.shape
    w = w_o.view(w_o.shape[0], h, d)                           # (C_out, h, d): W_O's column blocks
    return torch.einsum("hbtd,chd->btc", heads, w)


def concat_sum_of_heads(heads, w_o):
    d = heads.shape[-1]
    return sum(heads[i] @ w_o[:, i * d:(i + 1) * d].T for i in range(heads.shape[0]))


# ---------------------------------------------------------------- split_qkv

def split_qkv_split_route(qkv, num_heads):
    B, T, three_c = qkv.shape
    C = three_c // 3
    d = C // num_heads
    q, k, v = qkv.split(C, dim=-1)                             # each (B, T, C)
    return torch.stack([t.reshape(B, T, num_heads, d).transpose(1, 2) for t in (q, k, v)])


def split_qkv_loops(qkv, num_heads):
    B, T, three_c = qkv.shape
    d = three_c // (3 * num_heads)
    out = qkv.new_empty(3, B, num_heads, T, d)
    for r in range(3):
        for i in range(num_heads):
            start = r * num_heads * d + i * d
            out[r, :, i] = qkv[..., start:start + d]
    return out


def split_qkv_unflatten(qkv, num_heads):
    d = qkv.shape[-1] // (3 * num_heads)
    return qkv.unflatten(-1, (3, num_heads, d)).movedim(2, 0).transpose(2, 3)


# ---------------------------------------------------------------- attention_dropout

def dropout_where(weights, keep, p):
    return torch.where(keep, weights / (1 - p), torch.zeros_like(weights))


def dropout_masked_fill(weights, keep, p):
    return weights.masked_fill(~keep, 0) * (1.0 / (1.0 - p))


def dropout_numpy(weights, keep, p):
    w = weights.detach().cpu().numpy().astype(np.float64)
    out = np.where(keep.numpy(), w / (1.0 - p), 0.0)
    return torch.from_numpy(out).to(weights.dtype)


# ---------------------------------------------------------------- fuse_head_weights

def fuse_cat(w_heads):
    d = w_heads.shape[1] // 3
    roles = [torch.cat([w[r * d:(r + 1) * d] for w in w_heads]) for r in range(3)]   # each (C, C)
    return torch.cat(roles)


def fuse_index(w_heads):
    h, three_d, C = w_heads.shape
    d = three_d // 3
    rows = torch.arange(h * three_d)                           # row of the fused matrix
    role, rest = rows // (h * d), rows % (h * d)
    head, j = rest // d, rest % d
    return w_heads[head, role * d + j]


def fuse_einops_like(w_heads):
    h, three_d, C = w_heads.shape
    return w_heads.unflatten(1, (3, three_d // 3)).permute(1, 0, 2, 3).flatten(0, 2)


CORRECT = {
    "layer.concat_heads": [concat_cat, concat_einsum, concat_sum_of_heads],
    "layer.split_qkv": [split_qkv_split_route, split_qkv_loops, split_qkv_unflatten],
    "layer.attention_dropout": [dropout_where, dropout_masked_fill, dropout_numpy],
    "layer.fuse_head_weights": [fuse_cat, fuse_index, fuse_einops_like],
}
