"""Correct solutions of the layer exercises, written differently from the reference."""

import math

import numpy as np
import torch
import torch.nn.functional as F


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


# ---------------------------------------------------------------- multi_head_attention (the capstone)

def allowed_keys(key_mask, is_causal, T):
    """(B or 1, 1, T, T) bool, True = may attend, or None when nothing is masked."""
    allowed = None
    if is_causal:
        i = torch.arange(T)
        allowed = (i[None, :] <= i[:, None])[None, None]                   # (1, 1, T, T)
    if key_mask is not None:
        real = key_mask[:, None, None, :]                                   # (B, 1, 1, T)
        allowed = real if allowed is None else allowed & real
    return allowed


def mha_loops(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads, key_mask, is_causal):
    """One head at a time, each with its own rows of the fused weight."""
    B, T, C = x.shape
    d = C // num_heads
    allowed = allowed_keys(key_mask, is_causal, T)
    outputs = []
    for i in range(num_heads):
        rows = [slice(role * C + i * d, role * C + (i + 1) * d) for role in range(3)]
        q, k, v = (F.linear(x, in_proj_weight[r], None if in_proj_bias is None else in_proj_bias[r]) for r in rows)
        scores = q @ k.transpose(1, 2) / math.sqrt(d)                       # (B, T, T)
        if allowed is not None:
            scores = scores.masked_fill(~allowed[:, 0], float("-inf"))
        outputs.append(torch.softmax(scores, dim=-1) @ v)                   # (B, T, d)
    return F.linear(torch.cat(outputs, dim=-1), out_proj_weight, out_proj_bias)


def mha_einsum(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads, key_mask, is_causal):
    B, T, C = x.shape
    d = C // num_heads
    w = in_proj_weight.view(3, num_heads, d, C)                             # (role, head, feature, in)
    qkv = torch.einsum("btc,rhdc->rbhtd", x, w)
    if in_proj_bias is not None:
        qkv = qkv + in_proj_bias.view(3, 1, num_heads, 1, d)
    q, k, v = qkv.unbind(0)
    scores = torch.einsum("bhid,bhjd->bhij", q, k) * d ** -0.5
    allowed = allowed_keys(key_mask, is_causal, T)
    if allowed is not None:
        scores = torch.where(allowed, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
    heads = torch.einsum("bhij,bhjd->bhid", scores.softmax(-1), v)
    out = torch.einsum("bhtd,ohd->bto", heads, out_proj_weight.view(C, num_heads, d))
    return out if out_proj_bias is None else out + out_proj_bias


def mha_linear_modules(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads, key_mask,
                       is_causal):
    """nn.Linear modules holding the weights, as a module would; the result still carries autograd's graph."""
    B, T, C = x.shape
    d = C // num_heads
    qkv_proj = torch.nn.Linear(C, 3 * C, bias=in_proj_bias is not None, dtype=x.dtype)
    out_proj = torch.nn.Linear(C, C, bias=out_proj_bias is not None, dtype=x.dtype)
    with torch.no_grad():
        for module, weight, bias in ((qkv_proj, in_proj_weight, in_proj_bias),
                                     (out_proj, out_proj_weight, out_proj_bias)):
            module.weight.copy_(weight)
            if bias is not None:
                module.bias.copy_(bias)
    q, k, v = qkv_proj(x).chunk(3, dim=-1)
    q, k, v = (t.view(B, T, num_heads, d).permute(0, 2, 1, 3) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    allowed = allowed_keys(key_mask, is_causal, T)
    if allowed is not None:
        scores = scores.masked_fill(allowed.logical_not(), -math.inf)
    heads = F.softmax(scores, dim=-1) @ v
    return out_proj(heads.permute(0, 2, 1, 3).contiguous().view(B, T, C))


def mha_bmm(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads, key_mask, is_causal):
    """The heads moved into the batch, (B * h, T, d), and torch.bmm; the mask as an additive bias."""
    B, T, C = x.shape
    d = C // num_heads
    qkv = x.reshape(B * T, C) @ in_proj_weight.t()
    if in_proj_bias is not None:
        qkv += in_proj_bias
    qkv = qkv.reshape(B, T, 3, num_heads, d).permute(2, 0, 3, 1, 4).reshape(3, B * num_heads, T, d)
    scores = torch.bmm(qkv[0], qkv[1].transpose(1, 2)) / math.sqrt(d)     # (B h, T, T)
    allowed = allowed_keys(key_mask, is_causal, T)
    if allowed is not None:
        bias = torch.zeros(allowed.shape, dtype=x.dtype).masked_fill(~allowed, torch.finfo(x.dtype).min)
        scores = scores + bias.expand(B, num_heads, T, T).reshape(B * num_heads, T, T)
    heads = torch.bmm(torch.softmax(scores, dim=-1), qkv[2])              # (B h, T, d)
    merged = heads.reshape(B, num_heads, T, d).transpose(1, 2).reshape(B * T, C)
    out = merged @ out_proj_weight.t()
    if out_proj_bias is not None:
        out = out + out_proj_bias
    return out.reshape(B, T, C)


def mha_per_sequence(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads, key_mask,
                     is_causal):
    """One sequence at a time, its padding cut off: the keys a query may see are the real ones."""
    B, T, C = x.shape
    d = C // num_heads
    w_q, w_k, w_v = in_proj_weight.split(C)
    b_q, b_k, b_v = (None, None, None) if in_proj_bias is None else in_proj_bias.split(C)
    rows = []
    for b in range(B):
        n = T if key_mask is None else int(key_mask[b].sum())               # the real tokens come first
        q = F.linear(x[b], w_q, b_q).view(T, num_heads, d).transpose(0, 1)      # (h, T, d)
        k = F.linear(x[b, :n], w_k, b_k).view(n, num_heads, d).transpose(0, 1)  # (h, n, d)
        v = F.linear(x[b, :n], w_v, b_v).view(n, num_heads, d).transpose(0, 1)
        scores = q @ k.transpose(1, 2) / math.sqrt(d)                       # (h, T, n)
        if is_causal:
            scores = scores.masked_fill(torch.ones(T, n, dtype=torch.bool).triu(1), float("-inf"))
        rows.append((torch.softmax(scores, dim=-1) @ v).transpose(0, 1).reshape(T, C))
    return F.linear(torch.stack(rows), out_proj_weight, out_proj_bias)


def mha_wrong_no_diagonal(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads, key_mask,
                          is_causal):
    """The causal mask strictly below the diagonal: a query may not see itself, and query 0 sees nothing."""
    B, T, C = x.shape
    d = C // num_heads
    q, k, v = (t.view(B, T, num_heads, d).transpose(1, 2)
               for t in F.linear(x, in_proj_weight, in_proj_bias).split(C, dim=-1))
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    if is_causal:
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(-1), float("-inf"))
    if key_mask is not None:
        scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    heads = torch.softmax(scores, dim=-1) @ v
    return F.linear(heads.transpose(1, 2).reshape(B, T, C), out_proj_weight, out_proj_bias)


def mha_wrong_one_mask_only(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads, key_mask,
                            is_causal):
    """The causal mask when is_causal, else the padding: with both, the padding is forgotten."""
    B, T, C = x.shape
    d = C // num_heads
    q, k, v = (t.view(B, T, num_heads, d).transpose(1, 2)
               for t in F.linear(x, in_proj_weight, in_proj_bias).split(C, dim=-1))
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    if is_causal:
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    elif key_mask is not None:
        scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    heads = torch.softmax(scores, dim=-1) @ v
    return F.linear(heads.transpose(1, 2).reshape(B, T, C), out_proj_weight, out_proj_bias)


def mha_wrong_view_after_transpose(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads,
                                   key_mask, is_causal):
    """Right up to the merge, which calls .view on the transposed heads: it raises."""
    B, T, C = x.shape
    d = C // num_heads
    q, k, v = (t.view(B, T, num_heads, d).transpose(1, 2)
               for t in F.linear(x, in_proj_weight, in_proj_bias).split(C, dim=-1))
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    allowed = allowed_keys(key_mask, is_causal, T)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    heads = torch.softmax(scores, dim=-1) @ v
    return F.linear(heads.transpose(1, 2).view(B, T, C), out_proj_weight, out_proj_bias)


def mha_wrong_mask_without_head_axis(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads,
                                     key_mask, is_causal):
    """key_mask[:, None]: (B, 1, T) lines up B with the heads of the (B, h, T, T) scores."""
    B, T, C = x.shape
    d = C // num_heads
    q, k, v = (t.view(B, T, num_heads, d).transpose(1, 2)
               for t in F.linear(x, in_proj_weight, in_proj_bias).split(C, dim=-1))
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    if is_causal:
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    if key_mask is not None:
        scores = scores.masked_fill(~key_mask[:, None], float("-inf"))
    heads = torch.softmax(scores, dim=-1) @ v
    return F.linear(heads.transpose(1, 2).reshape(B, T, C), out_proj_weight, out_proj_bias)


def mha_wrong_keys_times_queries(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads,
                                 key_mask, is_causal):
    """Scores k q^T: row i holds what every key scores against query i's column."""
    B, T, C = x.shape
    d = C // num_heads
    q, k, v = (t.view(B, T, num_heads, d).transpose(1, 2)
               for t in F.linear(x, in_proj_weight, in_proj_bias).split(C, dim=-1))
    scores = k @ q.transpose(-2, -1) / math.sqrt(d)
    allowed = allowed_keys(key_mask, is_causal, T)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    heads = torch.softmax(scores, dim=-1) @ v
    return F.linear(heads.transpose(1, 2).reshape(B, T, C), out_proj_weight, out_proj_bias)


def mha_wrong_bias_always_added(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads,
                                key_mask, is_causal):
    """Adds the biases without asking whether they are given: None raises."""
    B, T, C = x.shape
    d = C // num_heads
    qkv = x @ in_proj_weight.T + in_proj_bias
    q, k, v = (t.view(B, T, num_heads, d).transpose(1, 2) for t in qkv.split(C, dim=-1))
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    allowed = allowed_keys(key_mask, is_causal, T)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    heads = torch.softmax(scores, dim=-1) @ v
    return heads.transpose(1, 2).reshape(B, T, C) @ out_proj_weight.T + out_proj_bias


CORRECT["layer.multi_head_attention"] = [mha_loops, mha_einsum, mha_linear_modules, mha_bmm, mha_per_sequence]
WRONG["layer.multi_head_attention"] = [mha_wrong_no_diagonal, mha_wrong_one_mask_only, mha_wrong_view_after_transpose,
                                       mha_wrong_mask_without_head_axis, mha_wrong_keys_times_queries,
                                       mha_wrong_bias_always_added]
