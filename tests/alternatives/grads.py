"""Correct solutions of the gradient exercises, each written differently from the reference."""

import math

import numpy as np
import torch


# ---------------------------------------------------------------- softmax_jacobian

def jacobian_broadcast(p):
    """p_i (delta_ij - p_j) by broadcasting a column against (I - row)."""
    eye = torch.eye(p.shape[0], dtype=p.dtype)
    return p[:, None] * (eye - p[None, :])


def jacobian_numpy_loops(p):
    """Entry by entry in numpy float64, then back to p's dtype."""
    a = p.double().numpy()
    n = a.shape[0]
    out = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            out[i, j] = a[i] * (1.0 - a[j]) if i == j else -a[i] * a[j]
    return torch.from_numpy(out).to(p.dtype)


# ---------------------------------------------------------------- attention_grad_q

def grad_q_row_by_row(q, k, v, grad_out):
    """One query at a time, with the explicit (Tk, Tk) Jacobian of its softmax."""
    s = 1.0 / math.sqrt(q.shape[1])
    rows = []
    for i in range(q.shape[0]):
        p = torch.softmax(k @ q[i] * s, dim=0)            # (Tk,)
        dp = v @ grad_out[i]                               # (Tk,) = row i of grad_out v^T
        jac = torch.diag(p) - torch.outer(p, p)            # (Tk, Tk), symmetric
        ds = jac @ dp                                      # (Tk,)
        rows.append(s * (ds @ k))                          # (d,)
    return torch.stack(rows)


def grad_q_einsum_float64(q, k, v, grad_out):
    """einsum in float64, with the softmax written out by hand, then back to q's dtype."""
    q64, k64, v64, g64 = (t.double() for t in (q, k, v, grad_out))
    s = q64.shape[-1] ** -0.5
    scores = torch.einsum("ia,ja->ij", q64, k64) * s
    e = torch.exp(scores - scores.max(dim=1, keepdim=True).values)
    p = e / e.sum(dim=1, keepdim=True)
    dp = torch.einsum("ic,jc->ij", g64, v64)
    ds = p * dp - p * torch.einsum("ij,ij->i", p, dp)[:, None]
    return (s * torch.einsum("ij,ja->ia", ds, k64)).to(q.dtype)


# ---------------------------------------------------------------- out_proj_grad

def out_proj_einsum(o, grad_y):
    return torch.einsum("btc,bte->ce", o, grad_y)


def out_proj_flattened(o, grad_y):
    """Every (batch, position) row is one sample: flatten them, one matmul."""
    B, T, C = o.shape
    return o.reshape(B * T, C).T @ grad_y.reshape(B * T, -1)          # (C, B*T) @ (B*T, E)


# ---------------------------------------------------------------- query_proj_grad

def query_proj_per_head(x, grad_q):
    """x^T dq_i for each head i, then the heads side by side."""
    blocks = [torch.einsum("btc,bta->ca", x, grad_q[:, i]) for i in range(grad_q.shape[1])]
    return torch.cat(blocks, dim=1)                                    # (C, h * d_h)


def query_proj_einsum_reshape(x, grad_q):
    B, h, T, d_h = grad_q.shape
    w = torch.einsum("btc,bhta->cha", x, grad_q)                       # (C, h, d_h)
    return w.reshape(x.shape[-1], h * d_h)


CORRECT = {
    "grads.softmax_jacobian": [jacobian_broadcast, jacobian_numpy_loops],
    "grads.attention_grad_q": [grad_q_row_by_row, grad_q_einsum_float64],
    "grads.out_proj_grad": [out_proj_einsum, out_proj_flattened],
    "grads.query_proj_grad": [query_proj_per_head, query_proj_einsum_reshape],
}
