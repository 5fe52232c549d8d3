"""Answers to the gradients exercises: correct ones derived differently from the references,
classic wrong ones, and shortcuts through autograd."""

import math

import numpy as np
import torch


# ---------------------------------------------------------------- softmax_jacobian

def jacobian_einsum(p):
    """p_i (delta_ij - p_j) with einsum and an identity matrix."""
    eye = torch.eye(p.shape[0], dtype=p.dtype)
    return torch.einsum("i,ij->ij", p, eye - p[None, :])


def jacobian_loops(p):
    """Entry by entry, the two cases of the derivative."""
    n = p.shape[0]
    J = torch.empty(n, n, dtype=p.dtype)
    for i in range(n):
        for j in range(n):
            J[i, j] = p[i] * (1 - p[i]) if i == j else -p[i] * p[j]
    return J


def jacobian_numpy(p):
    a = p.numpy()
    return torch.from_numpy(np.diag(a) - np.outer(a, a))


def jacobian_wrong_outer_only(p):
    return -torch.outer(p, p)


def jacobian_wrong_identity(p):
    """diag(1 - p) instead of diag(p)."""
    return torch.diag(1 - p) - torch.outer(p, p)


def jacobian_wrong_in_place(p):
    """Right numbers, but p is changed by the call."""
    outer = torch.outer(p, p)
    return torch.diag(p.mul_(1.0).add_(0.0)) - outer


def jacobian_forbidden_jacrev(p):
    return torch.func.jacrev(lambda z: torch.softmax(z, dim=-1))(p.log())


def jacobian_forbidden_functional(p):
    return torch.autograd.functional.jacobian(lambda z: torch.softmax(z, dim=-1), p.log())


def jacobian_forbidden_vjp(p):
    z = p.log()
    _, pull = torch.func.vjp(lambda t: torch.softmax(t, dim=-1), z)
    return torch.stack([pull(torch.eye(p.shape[0], dtype=p.dtype)[i])[0] for i in range(p.shape[0])])


def jacobian_forbidden_grad(p):
    z = p.log()
    return torch.stack([torch.func.grad(lambda t, i=i: torch.softmax(t, dim=-1)[i])(z) for i in range(p.shape[0])])


# ---------------------------------------------------------------- gqa_kv_grad

def gqa_kv_grad_loop(grad_k_heads, num_kv_heads):
    per = grad_k_heads.shape[1] // num_kv_heads
    return torch.stack([grad_k_heads[:, j * per:(j + 1) * per].sum(dim=1) for j in range(num_kv_heads)], dim=1)


def gqa_kv_grad_index_add(grad_k_heads, num_kv_heads):
    """index_add_ along the heads with the forward's own map, head i -> i // (h // g)."""
    B, h, T, d = grad_k_heads.shape
    out = grad_k_heads.new_zeros(B, num_kv_heads, T, d)
    return out.index_add_(1, torch.arange(h) // (h // num_kv_heads), grad_k_heads)


def gqa_kv_grad_unflatten(grad_k_heads, num_kv_heads):
    return grad_k_heads.unflatten(1, (num_kv_heads, -1)).sum(2)


def gqa_kv_grad_wrong_reshape_last(grad_k_heads, num_kv_heads):
    """Sums over the wrong axis after a reshape."""
    B, h, T, d = grad_k_heads.shape
    return grad_k_heads.reshape(B, h // num_kv_heads, num_kv_heads, T, d).mean(1) * (h // num_kv_heads)


def gqa_kv_grad_wrong_last_copy(grad_k_heads, num_kv_heads):
    per = grad_k_heads.shape[1] // num_kv_heads
    return grad_k_heads[:, per - 1::per] * per


def gqa_kv_grad_wrong_all_heads(grad_k_heads, num_kv_heads):
    """Every key head gets the sum over all query heads."""
    total = grad_k_heads.sum(dim=1, keepdim=True)
    return total.expand(-1, num_kv_heads, -1, -1) / num_kv_heads


def gqa_kv_grad_forbidden_backward(grad_k_heads, num_kv_heads):
    B, h, T, d = grad_k_heads.shape
    k = torch.zeros(B, num_kv_heads, T, d, dtype=grad_k_heads.dtype).requires_grad_()
    (k.repeat_interleave(h // num_kv_heads, dim=1) * grad_k_heads).sum().backward()
    return k.grad


# ---------------------------------------------------------------- scale_grad

def scale_grad_per_row(q, k, v, grad_out, scale):
    """Row by row with the softmax Jacobian as a matrix, in float64, head by head."""
    B, h, Tq, _ = q.shape
    total = torch.zeros(h, dtype=torch.float64)
    q64, k64, v64, g64 = (t.double() for t in (q, k, v, grad_out))
    for b in range(B):
        for n in range(h):
            for i in range(Tq):
                r = k64[b, n] @ q64[b, n, i]                       # (Tk,) raw scores of query i
                p = torch.softmax(float(scale[n]) * r, dim=0)
                J = torch.diag(p) - torch.outer(p, p)
                dp = v64[b, n] @ g64[b, n, i]                      # (Tk,)
                total[n] += (J @ dp) @ r
    return total.to(q.dtype)


def scale_grad_expectation(q, k, v, grad_out, scale):
    """dL/ds_n = sum over head n's rows of cov_P(R, dP): the covariance of the raw scores and dP."""
    R = torch.einsum("bhid,bhjd->bhij", q, k)
    P = torch.softmax(scale.view(1, -1, 1, 1) * R, dim=-1)
    dP = torch.einsum("bhic,bhjc->bhij", grad_out, v)
    mean_R = (P * R).sum(-1, keepdim=True)
    mean_dP = (P * dP).sum(-1, keepdim=True)
    return torch.einsum("bhij->h", P * (R - mean_R) * (dP - mean_dP))


def scale_grad_through_output(q, k, v, grad_out, scale):
    """dO/ds = P (R - E_P R) v, then <dO/ds, grad_out> per head."""
    R = q @ k.mT
    P = (R * scale[:, None, None]).softmax(-1)
    centred = R - (P * R).sum(-1, keepdim=True)
    dO_ds = (P * centred) @ v                                       # (B, h, Tq, d_v)
    return (dO_ds * grad_out).sum(dim=-1).sum(dim=-1).sum(dim=0)


def scale_grad_heads_in_batch(q, k, v, grad_out, scale):
    """The batch moved behind the heads: (h, B Tq, .) rows, then one sum per head."""
    B, h, Tq, _ = q.shape
    R = q @ k.transpose(-2, -1)                                     # (B, h, Tq, Tk)
    P = torch.softmax(R * scale[None, :, None, None], dim=-1)
    dP = grad_out @ v.transpose(-2, -1)
    dS = P * (dP - (dP * P).sum(-1, keepdim=True))
    return (dS * R).transpose(0, 1).reshape(h, -1).sum(dim=1)


def scale_grad_wrong_temperature_divides(q, k, v, grad_out, scale):
    """Reads the scale as a temperature that divides the scores, softmax(R / s)."""
    R = q @ k.transpose(-2, -1)
    P = torch.softmax(R / scale[:, None, None], dim=-1)
    dP = grad_out @ v.transpose(-2, -1)
    dS = P * (dP - (dP * P).sum(-1, keepdim=True))
    return (dS * R).sum(dim=(0, 2, 3))


def scale_grad_wrong_softmax_grad_only(q, k, v, grad_out, scale):
    """sum(dS) per head, without the raw scores."""
    R = q @ k.transpose(-2, -1)
    P = torch.softmax(scale[:, None, None] * R, dim=-1)
    dP = grad_out @ v.transpose(-2, -1)
    return (P * (dP - (dP * P).sum(-1, keepdim=True))).sum(dim=(0, 2, 3))


def scale_grad_wrong_list(q, k, v, grad_out, scale):
    """Right numbers, as a list of Python floats."""
    R = q @ k.transpose(-2, -1)
    P = torch.softmax(scale[:, None, None] * R, dim=-1)
    dP = grad_out @ v.transpose(-2, -1)
    return [float(x) for x in (P * (dP - (dP * P).sum(-1, keepdim=True)) * R).sum(dim=(0, 2, 3))]


def scale_grad_wrong_over_batch_only(q, k, v, grad_out, scale):
    """Sums over the batch and the keys, but keeps one number per query."""
    R = q @ k.transpose(-2, -1)
    P = torch.softmax(scale[:, None, None] * R, dim=-1)
    dP = grad_out @ v.transpose(-2, -1)
    return (P * (dP - (dP * P).sum(-1, keepdim=True)) * R).sum(dim=(0, 3))


def scale_grad_forbidden_autograd(q, k, v, grad_out, scale):
    s = scale.detach().clone().requires_grad_()
    out = torch.softmax(s[:, None, None] * q @ k.transpose(-2, -1), dim=-1) @ v
    return torch.autograd.grad((out * grad_out).sum(), s)[0]


# ---------------------------------------------------------------- linear_backward

def linear_backward_matmuls(x, w, b, grad_y):
    """Flatten the batch and the positions into one axis of rows."""
    rows_x = x.reshape(-1, x.shape[-1])                     # (B T, n_in)
    rows_g = grad_y.reshape(-1, grad_y.shape[-1])           # (B T, n_out)
    return (grad_y @ w, rows_g.T @ rows_x, rows_g.sum(0))


def linear_backward_einsum(x, w, b, grad_y):
    return (torch.einsum("bto,oi->bti", grad_y, w), torch.einsum("bto,bti->oi", grad_y, x),
            torch.einsum("bto->o", grad_y))


def linear_backward_loops(x, w, b, grad_y):
    """Per sequence, added up; returned as a list."""
    gw = torch.zeros_like(w)
    for xb, gb in zip(x, grad_y):
        gw += gb.T @ xb
    return [torch.matmul(grad_y, w), gw, grad_y.sum(dim=1).sum(dim=0)]


def linear_backward_wrong_as_is(x, w, b, grad_y):
    """The colleague's code."""
    grad_x = grad_y @ w.T
    grad_w = x.transpose(-2, -1) @ grad_y
    grad_b = grad_y.sum(dim=0)
    return grad_x, grad_w, grad_b


def linear_backward_wrong_w_only_first(x, w, b, grad_y):
    """The weight's gradient from the first sequence only."""
    return grad_y @ w, grad_y[0].T @ x[0], grad_y.sum(dim=(0, 1))


def linear_backward_wrong_bias_from_y(x, w, b, grad_y):
    """dL/db taken as the bias's share of y."""
    return grad_y @ w, torch.einsum("bto,bti->oi", grad_y, x), b * x.shape[0] * x.shape[1]


def linear_backward_forbidden_autograd(x, w, b, grad_y):
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, b)]
    y = leaves[0] @ leaves[1].T + leaves[2]
    return torch.autograd.grad(y, leaves, grad_y)


CORRECT = {
    "grads.softmax_jacobian": [jacobian_einsum, jacobian_loops, jacobian_numpy],
    "grads.gqa_kv_grad": [gqa_kv_grad_loop, gqa_kv_grad_index_add, gqa_kv_grad_unflatten],
    "grads.scale_grad": [scale_grad_per_row, scale_grad_expectation, scale_grad_through_output,
                         scale_grad_heads_in_batch],
    "grads.linear_backward": [linear_backward_matmuls, linear_backward_einsum, linear_backward_loops],
}

WRONG = {
    "grads.softmax_jacobian": [jacobian_wrong_outer_only, jacobian_wrong_identity, jacobian_wrong_in_place],
    "grads.gqa_kv_grad": [gqa_kv_grad_wrong_reshape_last, gqa_kv_grad_wrong_last_copy, gqa_kv_grad_wrong_all_heads],
    "grads.scale_grad": [scale_grad_wrong_temperature_divides, scale_grad_wrong_softmax_grad_only,
                         scale_grad_wrong_list, scale_grad_wrong_over_batch_only],
    "grads.linear_backward": [linear_backward_wrong_as_is, linear_backward_wrong_w_only_first,
                              linear_backward_wrong_bias_from_y],
}

FORBIDDEN = {
    "grads.softmax_jacobian": [jacobian_forbidden_jacrev, jacobian_forbidden_functional, jacobian_forbidden_vjp,
                               jacobian_forbidden_grad],
    "grads.gqa_kv_grad": [gqa_kv_grad_forbidden_backward],
    "grads.scale_grad": [scale_grad_forbidden_autograd],
    "grads.linear_backward": [linear_backward_forbidden_autograd],
}


# ---------------------------------------------------------------- more held-out wrong answers

def jacobian_wrong_transposed_outer(p):
    """diag(p) - p p^T written with p as a (1, n) row, in the wrong order: row @ row.T is the
    (1, 1) sum of squares, broadcast over the matrix."""
    row = p[None, :]
    return torch.diag(p) - row @ row.T


def gqa_kv_grad_wrong_repeat_then_mean(grad_k_heads, num_kv_heads):
    """Means over the copies in repeat's layout."""
    B, h, T, d = grad_k_heads.shape
    return grad_k_heads.view(B, h // num_kv_heads, num_kv_heads, T, d).mean(dim=1)


def linear_backward_wrong_bias_mean_over_positions(x, w, b, grad_y):
    """dL/db summed over the batch but averaged over the positions."""
    gx = grad_y @ w
    gw = torch.einsum("bto,bti->oi", grad_y, x)
    return gx, gw, grad_y.sum(dim=(0, 1)) / x.shape[1]


WRONG["grads.softmax_jacobian"] += [jacobian_wrong_transposed_outer]
WRONG["grads.gqa_kv_grad"] += [gqa_kv_grad_wrong_repeat_then_mean]
WRONG["grads.linear_backward"] += [linear_backward_wrong_bias_mean_over_positions]


# ---------------------------------------------------------------- grouped_attention_backward (the capstone)

def causal_blocked(Tq, Tk):
    """(Tq, Tk) bool, True where key j lies in query i's future (bottom-right: j > i + Tk - Tq)."""
    i, j = torch.arange(Tq)[:, None], torch.arange(Tk)[None, :]
    return j > i + (Tk - Tq)


def gab_loops(q, k, v, grad_out, is_causal):
    """One query head at a time, its key head picked by index; the copies' gradients added in place."""
    B, h, Tq, d = q.shape
    g, Tk = k.shape[1], k.shape[2]
    per = h // g
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for i in range(h):
        j = i // per
        S = q[:, i] @ k[:, j].transpose(1, 2) / math.sqrt(d)               # (B, Tq, Tk)
        if is_causal:
            S = S.masked_fill(causal_blocked(Tq, Tk), -math.inf)
        P = S.softmax(dim=-1)
        dP = grad_out[:, i] @ v[:, j].transpose(1, 2)
        dS = P * (dP - (P * dP).sum(-1, keepdim=True))
        dq[:, i] = dS @ k[:, j] / math.sqrt(d)
        dk[:, j] += dS.transpose(1, 2) @ q[:, i] / math.sqrt(d)
        dv[:, j] += P.transpose(1, 2) @ grad_out[:, i]
    return dq, dk, dv


def gab_grouped_einsum(q, k, v, grad_out, is_causal):
    """No copies at all: the query heads viewed as (g, h // g), the key heads broadcast over them."""
    B, h, Tq, d = q.shape
    g, Tk = k.shape[1], k.shape[2]
    qg = q.view(B, g, h // g, Tq, d)
    go = grad_out.view(B, g, h // g, Tq, -1)
    S = torch.einsum("bgpid,bgjd->bgpij", qg, k) * d ** -0.5
    if is_causal:
        S = torch.where(causal_blocked(Tq, Tk), torch.tensor(-math.inf, dtype=S.dtype), S)
    P = torch.softmax(S, dim=-1)
    dP = torch.einsum("bgpic,bgjc->bgpij", go, v)
    dS = P * (dP - torch.einsum("bgpij,bgpij->bgpi", P, dP)[..., None])
    dq = torch.einsum("bgpij,bgjd->bgpid", dS, k) * d ** -0.5
    dk = torch.einsum("bgpij,bgpid->bgjd", dS, qg) * d ** -0.5
    dv = torch.einsum("bgpij,bgpic->bgjc", P, go)
    return dq.reshape(B, h, Tq, d), dk, dv


def gab_bmm(q, k, v, grad_out, is_causal):
    """Heads in the batch, (B h, T, .), with torch.bmm; the copies summed through unflatten."""
    B, h, Tq, d = q.shape
    g, Tk, dv_ = k.shape[1], k.shape[2], v.shape[-1]
    per = h // g
    flat = lambda t: t.reshape(B * h, t.shape[-2], t.shape[-1])             # noqa: E731
    qf, gof = flat(q), flat(grad_out)
    kf, vf = flat(k.repeat_interleave(per, dim=1)), flat(v.repeat_interleave(per, dim=1))
    S = torch.bmm(qf, kf.transpose(1, 2)) / math.sqrt(d)
    if is_causal:
        S = S + torch.zeros(Tq, Tk, dtype=S.dtype).masked_fill(causal_blocked(Tq, Tk), torch.finfo(S.dtype).min)
    P = torch.softmax(S, dim=-1)
    dP = torch.bmm(gof, vf.transpose(1, 2))
    dS = P * (dP - (P * dP).sum(-1, keepdim=True))
    dq = torch.bmm(dS, kf) / math.sqrt(d)
    dk = torch.bmm(dS.transpose(1, 2), qf).unflatten(0, (B, g, per)).sum(2) / math.sqrt(d)
    dv = torch.bmm(P.transpose(1, 2), gof).unflatten(0, (B, g, per)).sum(2)
    return dq.view(B, h, Tq, d), dk, dv.reshape(B, g, Tk, dv_)


def gab_jacobian_rows(q, k, v, grad_out, is_causal):
    """Each row's softmax Jacobian built as a matrix, diag(p) - p p^T, in float64; index_add for the copies."""
    B, h, Tq, d = q.shape
    g = k.shape[1]
    q64, k64, v64, g64 = (t.double() for t in (q, k, v, grad_out))
    owner = torch.arange(h) // (h // g)                                     # the key head each query head reads
    kh, vh = k64[:, owner], v64[:, owner]                                   # (B, h, Tk, .)
    S = q64 @ kh.transpose(-2, -1) / math.sqrt(d)
    if is_causal:
        S = S.masked_fill(causal_blocked(Tq, k.shape[2]), -math.inf)
    P = torch.softmax(S, dim=-1)
    J = torch.diag_embed(P) - P[..., :, None] * P[..., None, :]            # (B, h, Tq, Tk, Tk)
    dP = g64 @ vh.transpose(-2, -1)
    dS = (J @ dP[..., None])[..., 0]                                        # J is symmetric
    dq = dS @ kh / math.sqrt(d)
    dk = torch.zeros_like(k64).index_add_(1, owner, dS.transpose(-2, -1) @ q64 / math.sqrt(d))
    dv = torch.zeros_like(v64).index_add_(1, owner, P.transpose(-2, -1) @ g64)
    return dq.to(q.dtype), dk.to(q.dtype), dv.to(q.dtype)


def gab_rowsum_from_output(q, k, v, grad_out, is_causal):
    """The row sums of dS from the output, rowsum(dO * O), as FlashAttention computes them."""
    B, h, Tq, d = q.shape
    g = k.shape[1]
    kh = k.repeat_interleave(h // g, dim=1)
    vh = v.repeat_interleave(h // g, dim=1)
    S = torch.matmul(q, kh.mT) * (1 / math.sqrt(d))
    if is_causal:
        S.masked_fill_(causal_blocked(Tq, k.shape[2]), float("-inf"))
    P = torch.softmax(S, -1)
    O = P @ vh
    delta = (grad_out * O).sum(-1, keepdim=True)                            # (B, h, Tq, 1)
    dS = P * (grad_out @ vh.mT - delta)
    dk = (dS.mT @ q).view(B, g, h // g, *k.shape[2:]).sum(2)
    dv = (P.mT @ grad_out).view(B, g, h // g, *v.shape[2:]).sum(2)
    return (dS @ kh) / math.sqrt(d), dk / math.sqrt(d), dv


def gab_wrong_scale_by_dv(q, k, v, grad_out, is_causal):
    """Scales the scores by 1 / sqrt(d_v), the values' width."""
    B, h, Tq, d = q.shape
    g, Tk = k.shape[1], k.shape[2]
    s = v.shape[-1] ** -0.5
    kh, vh = k.repeat_interleave(h // g, 1), v.repeat_interleave(h // g, 1)
    S = s * q @ kh.transpose(-2, -1)
    if is_causal:
        S = S.masked_fill(causal_blocked(Tq, Tk), float("-inf"))
    P = torch.softmax(S, dim=-1)
    dP = grad_out @ vh.transpose(-2, -1)
    dS = P * (dP - (dP * P).sum(-1, keepdim=True))
    fold = lambda t: t.view(B, g, h // g, Tk, t.shape[-1]).sum(2)           # noqa: E731
    return s * dS @ kh, fold(s * dS.transpose(-2, -1) @ q), fold(P.transpose(-2, -1) @ grad_out)


def gab_wrong_dk_not_transposed(q, k, v, grad_out, is_causal):
    """dk = s dS q, dS not transposed: it runs only when Tq == Tk, and is wrong there."""
    B, h, Tq, d = q.shape
    g, Tk = k.shape[1], k.shape[2]
    s = d ** -0.5
    kh, vh = k.repeat_interleave(h // g, 1), v.repeat_interleave(h // g, 1)
    S = s * q @ kh.transpose(-2, -1)
    if is_causal:
        S = S.masked_fill(causal_blocked(Tq, Tk), float("-inf"))
    P = torch.softmax(S, dim=-1)
    dP = grad_out @ vh.transpose(-2, -1)
    dS = P * (dP - (dP * P).sum(-1, keepdim=True))
    fold = lambda t: t.view(B, g, h // g, Tk, t.shape[-1]).sum(2)           # noqa: E731
    return s * dS @ kh, fold(s * dS @ q), fold(P.transpose(-2, -1) @ grad_out)


def gab_wrong_copies_not_summed(q, k, v, grad_out, is_causal):
    """Right for every copy, but dk and dv returned per query head, (B, h, Tk, .)."""
    B, h, Tq, d = q.shape
    g, Tk = k.shape[1], k.shape[2]
    s = d ** -0.5
    kh, vh = k.repeat_interleave(h // g, 1), v.repeat_interleave(h // g, 1)
    S = s * q @ kh.transpose(-2, -1)
    if is_causal:
        S = S.masked_fill(causal_blocked(Tq, Tk), float("-inf"))
    P = torch.softmax(S, dim=-1)
    dP = grad_out @ vh.transpose(-2, -1)
    dS = P * (dP - (dP * P).sum(-1, keepdim=True))
    return s * dS @ kh, s * dS.transpose(-2, -1) @ q, P.transpose(-2, -1) @ grad_out


def gab_wrong_no_expansion(q, k, v, grad_out, is_causal):
    """Uses k and v as they are, with g heads against h query heads: broadcasting fails."""
    B, h, Tq, d = q.shape
    s = d ** -0.5
    S = s * q @ k.transpose(-2, -1)
    if is_causal:
        S = S.masked_fill(causal_blocked(Tq, k.shape[2]), float("-inf"))
    P = torch.softmax(S, dim=-1)
    dP = grad_out @ v.transpose(-2, -1)
    dS = P * (dP - (dP * P).sum(-1, keepdim=True))
    return s * dS @ k, s * dS.transpose(-2, -1) @ q, P.transpose(-2, -1) @ grad_out


def gab_wrong_strict_causal(q, k, v, grad_out, is_causal):
    """The causal mask without its diagonal, and -1e9 for the blocked scores."""
    B, h, Tq, d = q.shape
    g, Tk = k.shape[1], k.shape[2]
    s = d ** -0.5
    kh, vh = k.repeat_interleave(h // g, 1), v.repeat_interleave(h // g, 1)
    S = s * q @ kh.transpose(-2, -1)
    if is_causal:
        S = S.masked_fill(~torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq - 1), -1e9)
    P = torch.softmax(S, dim=-1)
    dP = grad_out @ vh.transpose(-2, -1)
    dS = P * (dP - (dP * P).sum(-1, keepdim=True))
    fold = lambda t: t.view(B, g, h // g, Tk, t.shape[-1]).sum(2)           # noqa: E731
    return s * dS @ kh, fold(s * dS.transpose(-2, -1) @ q), fold(P.transpose(-2, -1) @ grad_out)


def gab_forbidden_autograd(q, k, v, grad_out, is_causal):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    B, h, Tq, d = q.shape
    g, Tk = k.shape[1], k.shape[2]
    S = leaves[0] @ leaves[1].repeat_interleave(h // g, 1).transpose(-2, -1) / math.sqrt(d)
    if is_causal:
        S = S.masked_fill(causal_blocked(Tq, Tk), float("-inf"))
    out = torch.softmax(S, -1) @ leaves[2].repeat_interleave(h // g, 1)
    return torch.autograd.grad(out, leaves, grad_out)


CORRECT["grads.grouped_attention_backward"] = [gab_loops, gab_grouped_einsum, gab_bmm, gab_jacobian_rows,
                                               gab_rowsum_from_output]
WRONG["grads.grouped_attention_backward"] = [gab_wrong_scale_by_dv, gab_wrong_dk_not_transposed,
                                             gab_wrong_copies_not_summed, gab_wrong_no_expansion,
                                             gab_wrong_strict_causal]
FORBIDDEN["grads.grouped_attention_backward"] = [gab_forbidden_autograd]
