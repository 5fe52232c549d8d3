"""Exercises of lesson 08, gradients: the softmax Jacobian, the gradient of key heads shared
by grouped-query attention, the gradient of the softmax's temperature, and a linear layer's
backward pass to fix. Autograd is not allowed: the point is to derive the formulas."""

from __future__ import annotations

import math

import torch

from mha.autograde import Case, ErrorHint, Exercise, Explain, Mistake
from mha.autograde.draw import randint, randn


# Autograd is refused at run time: while a graded function runs, the grader replaces the two
# torch functions named below by stand-ins that raise ForbiddenCall, and every autograd route
# goes through one of them: .backward(), torch.autograd.grad and torch.autograd.functional
# (reverse mode), torch.func.grad / vjp / jacrev (which call torch.autograd.grad), and forward
# mode (torch.func.jvp / jacfwd, torch.autograd.forward_ad). tests/test_grads_exercises.py
# checks each route. The static check (mha.autograde.forbidden.forbidden_uses) looks for the last
# part of every name as a variable or attribute, and inside any string, docstrings included:
# "torch.autograd" or "backward" here would give zero points to honest code whose docstring
# says "the backward pass" or "no autograd", and "torch.func" to a variable named `func`.
# The names below never occur in honest code; "requires_grad_" and "requires_grad" (the usual
# first step of a .backward() route) make `check` warn already in the notebook.
NO_AUTOGRAD = ("mha", "torch.autograd._engine_run_backward", "torch.autograd.forward_ad.make_dual",
               "torch.Tensor.requires_grad_", "torch.Tensor.requires_grad")


def _probabilities(g, n: int, dtype, scale: float = 1.5) -> torch.Tensor:
    """A probability vector (n,): the softmax of random logits, computed in float64."""
    return torch.softmax(randn(g, n, dtype=torch.float64, scale=scale), dim=-1).to(dtype)


# ---------------------------------------------------------------- 1. softmax Jacobian

def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    """J[i, j] = d p_i / d s_j = p_i (delta_ij - p_j), i.e. diag(p) - p p^T, for p = softmax(s) (n,)."""
    return torch.diag(p) - torch.outer(p, p)


def _jac_public(g):
    return [Case((_probabilities(g, 3, torch.float32),), note="three probabilities"),
            Case((torch.tensor([0.5, 0.25, 0.125, 0.125]),), note="exact binary fractions"),
            Case((_probabilities(g, 6, torch.float64, scale=3.0),), note="float64, peaked")]


def _jac_hidden(g):
    return [Case((_probabilities(g, randint(g, 2, 8), dtype, scale),))
            for dtype, scale in ((torch.float32, 1.0), (torch.float64, 2.0), (torch.float32, 0.5))]


SOFTMAX_JACOBIAN = Exercise(
    id="grads.softmax_jacobian", title="The softmax Jacobian", lesson="08-gradients",
    function="softmax_jacobian", params=("p",), points=3,
    reference=softmax_jacobian, public=_jac_public, hidden=_jac_hidden, public_seed=801,
    section="The softmax Jacobian",
    mistakes=(
        Mistake("every probability depends on every score through the normalising sum: "
                "subtract the outer product p p^T, J = diag(p) - p p^T",
                lambda p: torch.diag(p), name="diag-only"),
        Mistake("the off-diagonal entries are not zero: d p_i / d s_j = -p_i p_j for i != j",
                lambda p: torch.diag(p - p * p), name="no-off-diagonal"),
        Mistake("the sign is the other way round: raising s_i raises p_i, so the diagonal "
                "p_i (1 - p_i) is positive; J = diag(p) - p p^T",
                lambda p: torch.outer(p, p) - torch.diag(p), name="sign-flipped"),
        Mistake("the diagonal has a term of its own: d p_i / d s_i = p_i (1 - p_i), so J = diag(p) - p p^T; "
                "- p p^T alone gives only the off-diagonal entries", lambda p: -torch.outer(p, p), name="outer-only"),
        Mistake("the diagonal term is p_i delta_ij, not (1 - p_i) delta_ij: J = diag(p) - p p^T",
                lambda p: torch.diag(1 - p) - torch.outer(p, p), name="diag-one-minus-p"),
    ),
    forbidden=NO_AUTOGRAD,
)


# ---------------------------------------------------------------- 2. the backward of sharing K/V heads

def gqa_kv_grad(grad_k_heads: torch.Tensor, num_kv_heads: int) -> torch.Tensor:
    """The forward shares g = num_kv_heads key heads among h query heads:
    k_heads = k.repeat_interleave(h // g, dim=1), (B, g, T, d) -> (B, h, T, d). Given
    grad_k_heads = dL/dk_heads (B, h, T, d), return dL/dk (B, g, T, d): every copy's gradient,
    summed."""
    B, h, T, d = grad_k_heads.shape
    return grad_k_heads.view(B, num_kv_heads, h // num_kv_heads, T, d).sum(dim=2)


def _gkv_case(g, b, groups, per, t, d, dtype=torch.float32):
    return Case((randn(g, b, groups * per, t, d, dtype=dtype), groups))


def _gkv_public(g):
    return [_gkv_case(g, 1, 2, 2, 3, 2), _gkv_case(g, 2, 2, 3, 2, 4, torch.float64), _gkv_case(g, 1, 1, 4, 3, 2)]


def _gkv_hidden(g):
    # g >= 2 groups of >= 2 heads: the repeat grouping, a mean and one copy all differ
    return [_gkv_case(g, randint(g, 1, 3), randint(g, 2, 4), randint(g, 2, 4), randint(g, 1, 5), randint(g, 1, 5), dt)
            for dt in (torch.float32, torch.float64, torch.float32)]


GQA_KV_GRAD = Exercise(
    id="grads.gqa_kv_grad", title="The gradient of shared key heads", lesson="08-gradients",
    function="gqa_kv_grad", params=("grad_k_heads", "num_kv_heads"), points=3,
    reference=gqa_kv_grad, public=_gkv_public, hidden=_gkv_hidden, public_seed=805,
    section="Back to the queries and keys: $dQ = s\\, dS\\, K$ and $dK = s\\, dS^\\top Q$",
    mistakes=(
        Mistake("repeat_interleave gives key head j to the CONSECUTIVE query heads j * (h // g) .. "
                "(j + 1) * (h // g) - 1; query head i reading key head i % g is repeat's layout",
                lambda gk, groups: gk.view(gk.shape[0], gk.shape[1] // groups, groups, *gk.shape[2:]).sum(dim=1),
                name="repeat-layout",
                section="11-kv-cache-gqa-mla: Fewer key/value heads: MQA and GQA"),
        Mistake("a key head used by several query heads collects the gradient of every use: sum the "
                "copies' gradients, do not average them",
                lambda gk, groups: gk.view(gk.shape[0], groups, gk.shape[1] // groups, *gk.shape[2:]).mean(dim=2),
                name="mean-not-sum"),
        Mistake("every copy of a key head contributes to the loss, not only the first: add up the "
                "gradients of all h // g copies",
                lambda gk, groups: gk[:, ::gk.shape[1] // groups].clone(), name="first-copy-only"),
        Mistake("key head j collects the gradients of the query heads that share it, j * (h // g) .. "
                "(j + 1) * (h // g) - 1, not of every query head",
                lambda gk, groups: gk.sum(dim=1, keepdim=True).expand(-1, groups, -1, -1).clone(),
                name="sum-of-all-heads"),
        Mistake("add the gradients of every copy of a key head, not the last copy's times the number of copies: "
                "each copy meets different queries", lambda gk, groups: gk[:, gk.shape[1] // groups - 1::gk.shape[1] // groups]
                * (gk.shape[1] // groups), name="one-copy-times-copies"),
    ),
    forbidden=NO_AUTOGRAD,
)


# ---------------------------------------------------------------- 3. the gradient of the scale

def _head(q, k, v, grad_out, scale):
    """R = q k^T, P = softmax(scale R), dP = grad_out v^T and dS (the gradient of scale * R)."""
    R = q @ k.T                                            # (Tq, Tk) raw scores
    P = torch.softmax(scale * R, dim=-1)                   # (Tq, Tk)
    dP = grad_out @ v.T                                    # (Tq, Tk)
    dS = P * (dP - (dP * P).sum(dim=-1, keepdim=True))     # (Tq, Tk)
    return R, P, dP, dS


def scale_grad(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad_out: torch.Tensor, scale: float) -> torch.Tensor:
    """dL/dscale for out = softmax(scale * q k^T) v (one head, no mask), given grad_out = dL/dout:
    a 0-dim tensor in q's dtype."""
    R, _, _, dS = _head(q, k, v, grad_out, scale)
    return (dS * R).sum()


def _sg_case(g, tq, tk, d, dv, dtype=torch.float32):
    scale = round(0.2 + 1.2 * float(torch.rand(1, generator=g)), 3)
    return Case((randn(g, tq, d, dtype=dtype), randn(g, tk, d, dtype=dtype), randn(g, tk, dv, dtype=dtype),
                 randn(g, tq, dv, dtype=dtype), scale))


def _sg_public(g):
    return [_sg_case(g, 3, 3, 4, 4), _sg_case(g, 2, 5, 4, 3), _sg_case(g, 4, 4, 8, 2, torch.float64)]


def _sg_hidden(g):
    return [_sg_case(g, randint(g, 2, 6), randint(g, 2, 6), randint(g, 2, 8), randint(g, 1, 5), dt)
            for dt in (torch.float64, torch.float32, torch.float64)]


def _sg_wrong(kind):
    def wrong(q, k, v, grad_out, scale):
        R, P, dP, dS = _head(q, k, v, grad_out, scale)
        if kind == "no-rowsum":
            return (P * dP * R).sum()
        if kind == "scaled":
            return (dS * scale * R).sum()
        if kind == "mean":
            return (dS * R).mean()
        if kind == "divided":
            return (dS * R).sum() / scale
        if kind == "dp":
            return (dP * R).sum()
        if kind == "unscaled-softmax":                     # P = softmax(R): the forward without its scale
            return (_head(q, k, v, grad_out, 1.0)[3] * R).sum()
        return dS * R
    return wrong


SCALE_GRAD = Exercise(
    id="grads.scale_grad", title="The gradient of the temperature", lesson="08-gradients",
    function="scale_grad", params=("q", "k", "v", "grad_out", "scale"), points=4,
    reference=scale_grad, public=_sg_public, hidden=_sg_hidden, public_seed=806,
    section="Back to the queries and keys: $dQ = s\\, dS\\, K$ and $dK = s\\, dS^\\top Q$",
    mistakes=(
        Mistake("pass dP through the softmax with both terms of its Jacobian: dS = P * (dP - rowsum(dP * P)); "
                "P * dP alone misses the -p p^T term", _sg_wrong("no-rowsum"), name="no-rowsum",
                section="The softmax Jacobian"),
        Mistake("S = scale * R with R = q k^T, so dL/dscale = sum(dS * R), the raw scores; sum(dS * S) "
                "is scale times too large", _sg_wrong("scaled"), name="scaled-scores"),
        Mistake("the scale is one number used by every score: add up the contributions of all the "
                "scores (a sum, not a mean)", _sg_wrong("mean"), name="mean-not-sum"),
        Mistake("the scale is a single number, so its gradient is one number: sum dS * R over every "
                "entry (a 0-dim tensor)", _sg_wrong("matrix"), name="matrix-not-number"),
        Mistake("the scale multiplies the scores, S = scale * R, so dS/dscale = R: multiply, do not divide "
                "by the scale", _sg_wrong("divided"), name="divided-by-scale"),
        Mistake("dP is the gradient of the weights, not of the scores: pass it through the softmax first, "
                "dS = P * (dP - rowsum(dP * P)), then sum dS * R", _sg_wrong("dp"), name="stopped-at-dp"),
        Mistake("the weights are P = softmax(scale * q k^T): the forward that dS passes back through has the "
                "scale in it; softmax(q k^T) is the layer at scale 1", _sg_wrong("unscaled-softmax"),
                name="softmax-without-scale"),
    ),
    forbidden=NO_AUTOGRAD,
)


# ---------------------------------------------------------------- 4. a linear layer's backward, fixed

def linear_backward(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, grad_y: torch.Tensor) -> tuple:
    """y = x @ w.T + b as nn.Linear computes it, x (B, T, n_in), w (n_out, n_in), b (n_out,);
    given grad_y = dL/dy (B, T, n_out) -> (dL/dx, dL/dw, dL/db) with the shapes of x, w and b."""
    grad_x = grad_y @ w                                        # (B, T, n_in)
    grad_w = torch.einsum("bto,bti->oi", grad_y, x)            # (n_out, n_in): summed over B and T
    grad_b = grad_y.sum(dim=(0, 1))                            # (n_out,)
    return grad_x, grad_w, grad_b


def _lb_case(g, bsz, t, n_in, n_out, dtype=torch.float32):
    return Case((randn(g, bsz, t, n_in, dtype=dtype), randn(g, n_out, n_in, dtype=dtype),
                 randn(g, n_out, dtype=dtype), randn(g, bsz, t, n_out, dtype=dtype)))


def _lb_public(g):
    return [_lb_case(g, 2, 3, 4, 5), _lb_case(g, 3, 2, 3, 3, torch.float64), _lb_case(g, 2, 4, 6, 2)]


def _lb_hidden(g):
    # B, T >= 2 everywhere; one square layer (where grad_y @ w.T runs, and the (in, out) layout
    # of dw has the right shape), the others with n_in != n_out
    n = randint(g, 2, 6)
    n_in = randint(g, 2, 6)
    n_out = n_in + randint(g, 1, 3)
    return [_lb_case(g, randint(g, 2, 3), randint(g, 2, 4), n, n, torch.float64),
            _lb_case(g, randint(g, 2, 3), randint(g, 2, 4), n_in, n_out),
            _lb_case(g, randint(g, 2, 3), randint(g, 2, 4), n_out, n_in, torch.float64)]


def _lb_wrong(kind):
    def wrong(x, w, b, grad_y):
        gx, gw, gb = linear_backward(x, w, b, grad_y)
        if kind == "dx":
            return grad_y @ w.T, gw, gb
        if kind == "layout":
            return gx, gw.T, gb
        if kind == "per-sequence":
            return gx, torch.einsum("bto,bti->boi", grad_y, x), gb
        if kind == "bias":
            return gx, gw, grad_y.sum(dim=0)
        if kind == "first-sequence":
            return gx, grad_y[0].T @ x[0], gb
        if kind == "bias-value":
            return gx, gw, b * x.shape[0] * x.shape[1]
        return gx, gw / (x.shape[0] * x.shape[1]), gb / (x.shape[0] * x.shape[1])
    return wrong


def _times_w_t(case, found):
    """Whether the product that failed is grad_y (B T, n_out) against w.T (n_in, n_out)."""
    x, w = case.args[0], case.args[1]
    n_out, n_in = w.shape
    return tuple(int(n) for n in found.groups()) == (x.shape[0] * x.shape[1], n_out, n_in, n_out)


_lb_explain = Explain(
    ErrorHint("dx-w-transposed", "y = x w^T, so dL/dx = grad_y @ w: (B, T, n_out) @ (n_out, n_in); grad_y @ w.T "
              "only runs when n_in == n_out", (r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)",),
              when=_times_w_t),
)


LINEAR_BACKWARD = Exercise(
    id="grads.linear_backward", title="Fix a linear layer's backward", lesson="08-gradients",
    function="linear_backward", params=("x", "w", "b", "grad_y"), points=4, answer="tensors",
    reference=linear_backward, public=_lb_public, hidden=_lb_hidden, public_seed=807,
    section="The output projection: $dW_O = O^\\top dY$",
    mistakes=(
        Mistake("y = x w^T, so dL/dx = grad_y @ w; grad_y @ w.T is right only by accident, when the "
                "layer is square", _lb_wrong("dx"), name="dx-w-transposed"),
        Mistake("w is stored (n_out, n_in), as nn.Linear stores it, and its gradient has the same layout: "
                "grad_y^T x, not x^T grad_y", _lb_wrong("layout"), name="dw-transposed"),
        Mistake("w is shared by every sequence of the batch: sum the per-sequence gradients over B too, "
                "giving one (n_out, n_in) matrix", _lb_wrong("per-sequence"), name="dw-per-sequence"),
        Mistake("the bias is added at every position of every sequence: sum grad_y over the batch AND "
                "the positions, giving (n_out,)", _lb_wrong("bias"), name="db-batch-only"),
        Mistake("sum the contributions, do not average them: grad_y is already dL/dy, any averaging in "
                "the loss is inside it", _lb_wrong("mean"), name="averaged"),
        Mistake("w is shared by every sequence of the batch: dL/dw sums the products of ALL sequences, not "
                "only the first one's", _lb_wrong("first-sequence"), name="dw-first-sequence"),
        Mistake("dL/db is the sum of grad_y over the batch and the positions; b itself does not appear in "
                "its own gradient (y depends on b linearly, with slope 1)", _lb_wrong("bias-value"),
                name="db-from-b"),
    ),
    forbidden=NO_AUTOGRAD, explain=_lb_explain,
)

EXERCISES = (SOFTMAX_JACOBIAN, GQA_KV_GRAD, SCALE_GRAD, LINEAR_BACKWARD)
