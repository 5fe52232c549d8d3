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
    """Row by row with the softmax Jacobian as a matrix, in float64."""
    total = torch.zeros((), dtype=torch.float64)
    q64, k64, v64, g64 = (t.double() for t in (q, k, v, grad_out))
    for i in range(q.shape[0]):
        r = k64 @ q64[i]                                    # (Tk,) raw scores of query i
        p = torch.softmax(scale * r, dim=0)
        J = torch.diag(p) - torch.outer(p, p)
        dp = v64 @ g64[i]                                   # (Tk,)
        total = total + (J @ dp) @ r
    return total.to(q.dtype)


def scale_grad_expectation(q, k, v, grad_out, scale):
    """dL/ds = sum_i cov_P(R_i, dP_i): the covariance of the raw scores and dP under each row's P."""
    R = q @ k.T
    P = torch.softmax(scale * R, dim=-1)
    dP = grad_out @ v.T
    mean_R = (P * R).sum(-1, keepdim=True)
    mean_dP = (P * dP).sum(-1, keepdim=True)
    return (P * (R - mean_R) * (dP - mean_dP)).sum()


def scale_grad_through_output(q, k, v, grad_out, scale):
    """dO/ds = P (R - E_P R) v, then <dO/ds, grad_out>."""
    R = torch.einsum("id,jd->ij", q, k)
    P = torch.softmax(scale * R, dim=-1)
    centred = R - (P * R).sum(-1, keepdim=True)
    dO_ds = (P * centred) @ v                               # (Tq, d_v)
    return torch.einsum("ic,ic->", dO_ds, grad_out)


def scale_grad_wrong_divided(q, k, v, grad_out, scale):
    """Differentiates with respect to 1/s instead of s, sign lost."""
    R = q @ k.T
    P = torch.softmax(scale * R, dim=-1)
    dP = grad_out @ v.T
    dS = P * (dP - (dP * P).sum(-1, keepdim=True))
    return (dS * R).sum() / scale


def scale_grad_wrong_dp(q, k, v, grad_out, scale):
    """Stops at dP: sum(dP * R)."""
    return ((grad_out @ v.T) * (q @ k.T)).sum()


def scale_grad_wrong_float(q, k, v, grad_out, scale):
    """Right number, as a Python float."""
    R = q @ k.T
    P = torch.softmax(scale * R, dim=-1)
    dP = grad_out @ v.T
    return float((P * (dP - (dP * P).sum(-1, keepdim=True)) * R).sum())


def scale_grad_forbidden_autograd(q, k, v, grad_out, scale):
    s = torch.tensor(scale, dtype=q.dtype, requires_grad=True)
    out = torch.softmax(s * q @ k.T, dim=-1) @ v
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
    "grads.scale_grad": [scale_grad_per_row, scale_grad_expectation, scale_grad_through_output],
    "grads.linear_backward": [linear_backward_matmuls, linear_backward_einsum, linear_backward_loops],
}

WRONG = {
    "grads.softmax_jacobian": [jacobian_wrong_outer_only, jacobian_wrong_identity, jacobian_wrong_in_place],
    "grads.gqa_kv_grad": [gqa_kv_grad_wrong_reshape_last, gqa_kv_grad_wrong_last_copy, gqa_kv_grad_wrong_all_heads],
    "grads.scale_grad": [scale_grad_wrong_divided, scale_grad_wrong_dp, scale_grad_wrong_float],
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


def scale_grad_wrong_softmax_grad_only(q, k, v, grad_out, scale):
    """sum(dS) without the raw scores."""
    R = q @ k.T
    P = torch.softmax(scale * R, dim=-1)
    dP = grad_out @ v.T
    return (P * (dP - (dP * P).sum(-1, keepdim=True))).sum()


def linear_backward_wrong_bias_mean_over_positions(x, w, b, grad_y):
    """dL/db summed over the batch but averaged over the positions."""
    gx = grad_y @ w
    gw = torch.einsum("bto,bti->oi", grad_y, x)
    return gx, gw, grad_y.sum(dim=(0, 1)) / x.shape[1]


WRONG["grads.softmax_jacobian"] += [jacobian_wrong_transposed_outer]
WRONG["grads.gqa_kv_grad"] += [gqa_kv_grad_wrong_repeat_then_mean]
WRONG["grads.scale_grad"] += [scale_grad_wrong_softmax_grad_only]
WRONG["grads.linear_backward"] += [linear_backward_wrong_bias_mean_over_positions]
