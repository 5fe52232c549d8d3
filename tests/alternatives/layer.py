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

def gqa_split_slices(qkv, num_heads, num_kv_heads):
    """Plain slicing, and unflatten for the heads."""
    d = qkv.shape[-1] // (num_heads + 2 * num_kv_heads)
    nq, nk = num_heads * d, num_kv_heads * d
    parts = qkv[..., :nq], qkv[..., nq:nq + nk], qkv[..., nq + nk:]
    return tuple(p.unflatten(-1, (p.shape[-1] // d, d)).permute(0, 2, 1, 3) for p in parts)


def gqa_split_loops(qkv, num_heads, num_kv_heads):
    """Every head cut out of the last axis on its own, stacked on a head axis."""
    d = qkv.shape[-1] // (num_heads + 2 * num_kv_heads)
    starts = {"q": 0, "k": num_heads * d, "v": (num_heads + num_kv_heads) * d}
    counts = {"q": num_heads, "k": num_kv_heads, "v": num_kv_heads}
    return tuple(torch.stack([qkv[..., starts[r] + i * d: starts[r] + (i + 1) * d] for i in range(counts[r])], dim=1)
                 for r in "qkv")


def gqa_split_one_view(qkv, num_heads, num_kv_heads):
    """One view to (B, T, h + 2g, d), one transpose, then slices along the heads; as a list."""
    B, T, width = qkv.shape
    n = num_heads + 2 * num_kv_heads
    x = qkv.view(B, T, n, width // n).transpose(1, 2)                 # (B, h + 2g, T, d)
    return [x[:, :num_heads], x[:, num_heads:num_heads + num_kv_heads], x[:, num_heads + num_kv_heads:]]


def gqa_split_wrong_equal_thirds(qkv, num_heads, num_kv_heads):
    """Three equal parts, as for multi-head attention."""
    B, T, width = qkv.shape
    q, k, v = qkv.chunk(3, dim=-1)
    d = width // (num_heads + 2 * num_kv_heads)
    return tuple(t.reshape(B, T, -1, d).transpose(1, 2) for t in (q, k, v))


def gqa_split_wrong_width(qkv, num_heads, num_kv_heads):
    """Head width taken as width // (3 * num_heads)."""
    B, T, width = qkv.shape
    d = width // (3 * num_heads)
    q = qkv[..., :num_heads * d].reshape(B, T, num_heads, d).transpose(1, 2)
    k = qkv[..., num_heads * d:(num_heads + num_kv_heads) * d].reshape(B, T, num_kv_heads, d).transpose(1, 2)
    v = qkv[..., (num_heads + num_kv_heads) * d:(num_heads + 2 * num_kv_heads) * d]
    return q, k, v.reshape(B, T, num_kv_heads, d).transpose(1, 2)


def gqa_split_wrong_interleaved_heads(qkv, num_heads, num_kv_heads):
    """Each part split as (d, n): head i gets every n-th feature."""
    B, T, width = qkv.shape
    d = width // (num_heads + 2 * num_kv_heads)
    parts = qkv.split([num_heads * d, num_kv_heads * d, num_kv_heads * d], dim=-1)
    return tuple(p.reshape(B, T, d, -1).permute(0, 3, 1, 2) for p in parts)


def concat_wrong_sum(heads, w_o):
    """Adds the heads instead of concatenating them."""
    h, d = heads.shape[0], heads.shape[-1]
    return heads.sum(0) @ w_o.T[:d]


def concat_wrong_stack_heads_last(heads, w_o):
    h, B, T, d = heads.shape
    return heads.permute(1, 2, 3, 0).reshape(B, T, h * d) @ w_o.T


def concat_wrong_right_multiply(heads, w_o):
    h, B, T, d = heads.shape
    return w_o @ heads.permute(1, 2, 0, 3).reshape(B, T, h * d).transpose(1, 2)


def dropout_wrong_survivors_unscaled_in_place(weights, keep, p):
    """Right numbers, but written into the caller's weights."""
    weights.mul_(keep).div_(1 - p)
    return weights


def dropout_wrong_expected_value(weights, keep, p):
    """The test-time rule: every weight times (1 - p), the draw ignored."""
    return weights * (1 - p)


def dropout_wrong_renormalised(weights, keep, p):
    out = weights * keep
    return out / out.sum(dim=-1, keepdim=True)


def fuse_wrong_heads_reversed(w_heads):
    """Grouped by role, but the heads in reverse order inside each role."""
    h, three_d, C = w_heads.shape
    d = three_d // 3
    return w_heads.flip(0).view(h, 3, d, C).transpose(0, 1).reshape(3 * h * d, C)


def fuse_wrong_roles_interleaved(w_heads):
    """Role-major inside each head's block of rows: [q0; q1; ...] only for q, k and v mixed."""
    h, three_d, C = w_heads.shape
    d = three_d // 3
    return w_heads.view(h, 3, d, C).permute(1, 2, 0, 3).reshape(3 * h * d, C)


def fuse_wrong_v_first(w_heads):
    h, three_d, C = w_heads.shape
    d = three_d // 3
    return w_heads.view(h, 3, d, C).flip(1).transpose(0, 1).reshape(3 * h * d, C)


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


def dropout_spread_binomial():
    """The number of survivors is binomial(16, 0.8); the sum is that number / (16 * 0.8)."""
    n, keep = 16, 0.8
    return (n * keep * (1 - keep)) ** 0.5 / (n * keep)


def dropout_spread_written_down():
    return 0.125


def dropout_spread_wrong_p_over_n():
    """sqrt(p / n), the rescaling forgotten on one side."""
    return (0.2 / 16) ** 0.5


def dropout_spread_wrong_guess():
    return 0.2


CORRECT = {
    "layer.concat_heads": [concat_cat, concat_einsum, concat_sum_of_heads],
    "layer.split_qkv_gqa": [gqa_split_slices, gqa_split_loops, gqa_split_one_view],
    "layer.attention_dropout": [dropout_where, dropout_masked_fill, dropout_numpy],
    "layer.fuse_head_weights": [fuse_cat, fuse_index, fuse_einops_like],
    "layer.dropout_row_spread": [dropout_spread_binomial, dropout_spread_written_down],
}

WRONG = {
    "layer.concat_heads": [concat_wrong_sum, concat_wrong_stack_heads_last, concat_wrong_right_multiply],
    "layer.split_qkv_gqa": [gqa_split_wrong_equal_thirds, gqa_split_wrong_width, gqa_split_wrong_interleaved_heads],
    "layer.attention_dropout": [dropout_wrong_survivors_unscaled_in_place, dropout_wrong_expected_value,
                                dropout_wrong_renormalised],
    "layer.fuse_head_weights": [fuse_wrong_heads_reversed, fuse_wrong_roles_interleaved, fuse_wrong_v_first],
    "layer.dropout_row_spread": [dropout_spread_wrong_p_over_n, dropout_spread_wrong_guess],
}


# ---------------------------------------------------------------- more held-out wrong answers

def concat_wrong_mean_of_heads(heads, w_o):
    """The heads averaged, the average repeated h times, then projected."""
    h = heads.shape[0]
    return heads.mean(dim=0).repeat(1, 1, h) @ w_o.T


def gqa_split_wrong_v_first(qkv, num_heads, num_kv_heads):
    """[q, v, k]: the values taken from the middle part."""
    B, T, width = qkv.shape
    d = width // (num_heads + 2 * num_kv_heads)
    q, k, v = qkv.split([num_heads * d, num_kv_heads * d, num_kv_heads * d], dim=-1)
    heads = lambda t, n: t.reshape(B, T, n, d).transpose(1, 2)    # noqa: E731
    return heads(q, num_heads), heads(v, num_kv_heads), heads(k, num_kv_heads)


def dropout_wrong_mask_then_softmax(weights, keep, p):
    """Drops weights, then renormalises with a softmax of the kept weights."""
    return torch.softmax(weights.masked_fill(~keep, float("-inf")), dim=-1) / (1 - p)


def fuse_wrong_transposed_blocks(w_heads):
    h, three_d, C = w_heads.shape
    d = three_d // 3
    return w_heads.view(h, 3, d, C).transpose(0, 1).transpose(2, 1).reshape(3 * h * d, C)


WRONG["layer.concat_heads"] += [concat_wrong_mean_of_heads]
WRONG["layer.split_qkv_gqa"] += [gqa_split_wrong_v_first]
WRONG["layer.attention_dropout"] += [dropout_wrong_mask_then_softmax]
WRONG["layer.fuse_head_weights"] += [fuse_wrong_transposed_blocks]
