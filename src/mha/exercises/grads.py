"""Exercises of lesson 08, gradients: the softmax Jacobian, the gradient of one head's
queries, and the gradients of the output and query projections. Autograd is not allowed:
the point is to write the derived formulas."""

from __future__ import annotations

import math

import torch

from ._core import Case, Exercise, Mistake
from .heads import _int, _randn

# Autograd is refused at run time: while a graded function runs, the grader replaces the two
# torch functions named below by stand-ins that raise ForbiddenCall, and every autograd route
# goes through one of them: .backward(), torch.autograd.grad and torch.autograd.functional
# (reverse mode), torch.func.grad / vjp / jacrev (which call torch.autograd.grad), and forward
# mode (torch.func.jvp / jacfwd, torch.autograd.forward_ad). tests/test_grads_exercises.py
# checks each route. The static check (mha.exercises._core.forbidden_uses) looks for the last
# part of every name as a variable or attribute, and inside any string, docstrings included:
# "torch.autograd" or "backward" here would give zero points to honest code whose docstring
# says "the backward pass" or "no autograd", and "torch.func" to a variable named `func`.
# The names below never occur in honest code; "requires_grad_" and "requires_grad" (the usual
# first step of a .backward() route) make `check` warn already in the notebook.
NO_AUTOGRAD = ("mha", "torch.autograd._engine_run_backward", "torch.autograd.forward_ad.make_dual",
               "torch.Tensor.requires_grad_", "torch.Tensor.requires_grad")


def _probabilities(g, n: int, dtype, scale: float = 1.5) -> torch.Tensor:
    """A probability vector (n,): the softmax of random logits, computed in float64."""
    return torch.softmax(_randn(g, n, dtype=torch.float64, scale=scale), dim=-1).to(dtype)


# ---------------------------------------------------------------- 1. softmax Jacobian

def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    """J[i, j] = d p_i / d s_j = p_i (delta_ij - p_j), i.e. diag(p) - p p^T, for p = softmax(s) (n,)."""
    return torch.diag(p) - torch.outer(p, p)


def _jac_public(g):
    return [Case((_probabilities(g, 3, torch.float32),), note="three probabilities"),
            Case((torch.tensor([0.5, 0.25, 0.125, 0.125]),), note="exact binary fractions"),
            Case((_probabilities(g, 6, torch.float64, scale=3.0),), note="float64, peaked")]


def _jac_hidden(g):
    return [Case((_probabilities(g, _int(g, 2, 8), dtype, scale),))
            for dtype, scale in ((torch.float32, 1.0), (torch.float64, 2.0), (torch.float32, 0.5))]


SOFTMAX_JACOBIAN = Exercise(
    id="grads.softmax_jacobian", title="The softmax Jacobian", lesson="08-gradients",
    function="softmax_jacobian", params=("p",), points=3,
    reference=softmax_jacobian, public=_jac_public, hidden=_jac_hidden, public_seed=801,
    mistakes=(
        Mistake("every probability depends on every score through the normalising sum: "
                "subtract the outer product p p^T, J = diag(p) - p p^T",
                lambda p: torch.diag(p)),
        Mistake("the off-diagonal entries are not zero: d p_i / d s_j = -p_i p_j for i != j",
                lambda p: torch.diag(p - p * p)),
        Mistake("the sign is the other way round: raising s_i raises p_i, so the diagonal "
                "p_i (1 - p_i) is positive; J = diag(p) - p p^T",
                lambda p: torch.outer(p, p) - torch.diag(p)),
    ),
    forbidden=NO_AUTOGRAD,
)


# ---------------------------------------------------------------- 2. dq of one head

def _head_grads(q, k, v, grad_out):
    """P, dP and dS of one head (no mask, scale 1 / sqrt(d))."""
    s = 1.0 / math.sqrt(q.shape[-1])
    P = torch.softmax(q @ k.T * s, dim=-1)                 # (Tq, Tk)
    dP = grad_out @ v.T                                    # (Tq, Tk)
    dS = P * (dP - (dP * P).sum(dim=-1, keepdim=True))     # (Tq, Tk)
    return s, P, dP, dS


def attention_grad_q(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    """dL/dq for out = softmax(q k^T / sqrt(d)) v, given grad_out = dL/dout: (Tq, d)."""
    s, _, _, dS = _head_grads(q, k, v, grad_out)
    return s * dS @ k


def _no_scale(q, k, v, dout):
    _, _, _, dS = _head_grads(q, k, v, dout)
    return dS @ k


def _no_rowsum(q, k, v, dout):
    s, P, dP, _ = _head_grads(q, k, v, dout)
    return s * (P * dP) @ k


def _no_softmax(q, k, v, dout):
    s, _, dP, _ = _head_grads(q, k, v, dout)
    return s * dP @ k


def _keys_instead(q, k, v, dout):
    s, _, _, dS = _head_grads(q, k, v, dout)
    return s * dS.T @ q


def _gq_case(g, tq, tk, d, dv, dtype=torch.float32):
    return Case((_randn(g, tq, d, dtype=dtype), _randn(g, tk, d, dtype=dtype),
                 _randn(g, tk, dv, dtype=dtype), _randn(g, tq, dv, dtype=dtype)))


def _gq_public(g):
    return [_gq_case(g, 3, 3, 4, 4), _gq_case(g, 2, 5, 4, 3), _gq_case(g, 4, 4, 8, 2, torch.float64)]


def _gq_hidden(g):
    t = _int(g, 2, 6)
    return [_gq_case(g, t, t, _int(g, 2, 8), _int(g, 1, 5), torch.float64),                   # square
            _gq_case(g, _int(g, 1, 5), _int(g, 2, 7), _int(g, 2, 8), _int(g, 1, 5)),
            _gq_case(g, _int(g, 2, 6), _int(g, 2, 6), _int(g, 4, 16), _int(g, 2, 6))]


GRAD_Q = Exercise(
    id="grads.attention_grad_q", title="The gradient of one head's queries", lesson="08-gradients",
    function="attention_grad_q", params=("q", "k", "v", "grad_out"), points=6,
    reference=attention_grad_q, public=_gq_public, hidden=_gq_hidden, public_seed=802,
    mistakes=(
        Mistake("the scores are q k^T * s with s = 1 / sqrt(d), so the chain rule brings the same "
                "factor back: dq = s dS k", _no_scale),
        Mistake("the softmax Jacobian has two terms: dS = P * (dP - rowsum(dP * P)); the "
                "rowsum term comes from -p p^T", _no_rowsum),
        Mistake("dP = grad_out v^T is the gradient of the weights P, not of the scores S: pass "
                "it back through the softmax, dS = P * (dP - rowsum(dP * P))", _no_softmax),
        Mistake("s dS^T q is the gradient of the keys; for the queries, row i of dS belongs to "
                "query i: dq = s dS k", _keys_instead),
    ),
    forbidden=NO_AUTOGRAD,
)


# ---------------------------------------------------------------- 3. dW_O

def out_proj_grad(o: torch.Tensor, grad_y: torch.Tensor) -> torch.Tensor:
    """dL/dW_O for y = o @ W_O with W_O (C, E) in (in, out) layout: o (B, T, C), grad_y (B, T, E) -> (C, E)."""
    return (o.transpose(-2, -1) @ grad_y).sum(dim=0)       # (B, C, E) summed over the batch


def _op_case(g, b, t, c, e, dtype=torch.float32):
    return Case((_randn(g, b, t, c, dtype=dtype), _randn(g, b, t, e, dtype=dtype)))


def _op_public(g):
    return [_op_case(g, 2, 3, 4, 4), _op_case(g, 3, 5, 6, 2), _op_case(g, 2, 4, 8, 8, torch.float64)]


def _op_hidden(g):
    c = _int(g, 2, 9)
    return [_op_case(g, _int(g, 2, 4), _int(g, 1, 6), c, c, torch.float64),               # square W_O
            _op_case(g, _int(g, 2, 4), _int(g, 2, 6), _int(g, 2, 9), _int(g, 2, 9)),
            _op_case(g, _int(g, 2, 4), _int(g, 2, 6), _int(g, 2, 9), _int(g, 2, 9))]


OUT_PROJ = Exercise(
    id="grads.out_proj_grad", title="The gradient of the output projection", lesson="08-gradients",
    function="out_proj_grad", params=("o", "grad_y"), points=3,
    reference=out_proj_grad, public=_op_public, hidden=_op_hidden, public_seed=803,
    mistakes=(
        Mistake("wrong transpose order: with y = o @ W_O and W_O of shape (C, E), dW_O = o^T grad_y; "
                "grad_y^T o is the (out, in) layout of nn.Linear's weight",
                lambda o, gy: (gy.transpose(-2, -1) @ o).sum(dim=0)),
        Mistake("W_O is shared by every sequence of the batch: add up the per-sequence gradients "
                "(sum over B), giving one (C, E) matrix",
                lambda o, gy: o.transpose(-2, -1) @ gy),
        Mistake("sum the per-sequence gradients over the batch, do not average them: grad_y is "
                "already dL/dY, so any averaging in the loss is inside it",
                lambda o, gy: (o.transpose(-2, -1) @ gy).mean(dim=0)),
    ),
    forbidden=NO_AUTOGRAD,
)


# ---------------------------------------------------------------- 4. dW_Q from the heads

def query_proj_grad(x: torch.Tensor, grad_q: torch.Tensor) -> torch.Tensor:
    """dL/dW_Q for q = x @ W_Q, W_Q (C, C) in (in, out) layout, split into h heads of width d_h:
    x (B, T, C), grad_q (B, h, T, d_h) -> (C, C); head i's columns are i*d_h .. (i+1)*d_h - 1."""
    B, h, T, d_h = grad_q.shape
    dq = grad_q.transpose(1, 2).reshape(B, T, h * d_h)     # (B, T, C): merge the heads
    return (x.transpose(-2, -1) @ dq).sum(dim=0)           # (C, C)


def _qp_case(g, b, t, h, d_h, dtype=torch.float32):
    return Case((_randn(g, b, t, h * d_h, dtype=dtype), _randn(g, b, h, t, d_h, dtype=dtype)))


def _qp_public(g):
    return [_qp_case(g, 1, 3, 2, 2), _qp_case(g, 2, 4, 2, 3), _qp_case(g, 2, 5, 4, 2, torch.float64)]


def _qp_hidden(g):
    # h >= 2 and d_h >= 2 in every case: with heads of width 1 a merge in the order (d_h, h)
    # gives the same matrix as the right one, (h, d_h)
    return [_qp_case(g, _int(g, 1, 3), _int(g, 2, 6), _int(g, 2, 4), _int(g, 2, 4), dtype)
            for dtype in (torch.float32, torch.float64, torch.float32)]


def _qp_features_by_head_last(x, grad_q):
    B, h, T, d_h = grad_q.shape
    dq = grad_q.permute(0, 2, 3, 1).reshape(B, T, h * d_h)   # (B, T, d_h, h): heads interleaved
    return (x.transpose(-2, -1) @ dq).sum(dim=0)


QUERY_PROJ = Exercise(
    id="grads.query_proj_grad", title="The gradient of the query projection", lesson="08-gradients",
    function="query_proj_grad", params=("x", "grad_q"), points=4,
    reference=query_proj_grad, public=_qp_public, hidden=_qp_hidden, public_seed=804,
    mistakes=(
        Mistake("merge the heads with transpose(1, 2) and then reshape to (B, T, C); a direct "
                "reshape of (B, h, T, d_h) scrambles tokens across heads",
                lambda x, gq: (x.transpose(-2, -1) @ gq.reshape(x.shape)).sum(dim=0)),
        Mistake("wrong transpose order: W_Q is (in, out), so dW_Q = x^T dq; dq^T x is the (out, in) "
                "layout of nn.Linear's weight",
                lambda x, gq: query_proj_grad(x, gq).T),
        Mistake("each head owns its own d_h columns of W_Q: place head i's x^T dq_i in columns "
                "i*d_h .. (i+1)*d_h - 1, do not add the heads together",
                lambda x, gq: (x.transpose(-2, -1)[:, None] @ gq).sum(dim=(0, 1))),
        Mistake("head i owns the d_h consecutive columns i*d_h .. (i+1)*d_h - 1: merge the heads as "
                "(B, T, h, d_h), head axis first, not as (B, T, d_h, h)", _qp_features_by_head_last),
    ),
    forbidden=NO_AUTOGRAD,
)

EXERCISES = (SOFTMAX_JACOBIAN, GRAD_Q, OUT_PROJ, QUERY_PROJ)
