"""Exercises of lesson 08, gradients: the softmax Jacobian, the gradient of key heads shared
by grouped-query attention, the gradient of the softmax's temperature, a linear layer's
backward pass to fix, and the capstone: the whole backward pass of grouped-query causal
attention. Autograd is not allowed: the point is to derive the formulas."""

from __future__ import annotations

import math
import re

import torch

from mha.autograde import Case, ErrorHint, Exercise, Explain, Mistake
from mha.autograde.draw import other_than, randint, randn, separating


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


# ---------------------------------------------------------------- 3. the gradient of the scale, one per head

def _heads(q, k, v, grad_out, scale):
    """R = q k^T, P = softmax(scale R) with head n's scale[n], dP = grad_out v^T, and dS (the
    gradient of the scaled scores), each (B, h, Tq, Tk)."""
    R = q @ k.transpose(-2, -1)                                       # (B, h, Tq, Tk) raw scores
    P = torch.softmax(scale[:, None, None] * R, dim=-1)               # head n's scores times scale[n]
    dP = grad_out @ v.transpose(-2, -1)                               # (B, h, Tq, Tk)
    dS = P * (dP - (dP * P).sum(dim=-1, keepdim=True))                # (B, h, Tq, Tk)
    return R, P, dP, dS


def scale_grad(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad_out: torch.Tensor,
               scale: torch.Tensor) -> torch.Tensor:
    """dL/dscale for out = softmax(scale[n] * q k^T) v in every head n (no mask), q (B, h, Tq, d),
    k (B, h, Tk, d), v (B, h, Tk, d_v), scale (h,), given grad_out = dL/dout (B, h, Tq, d_v):
    (h,), in q's dtype."""
    R, _, _, dS = _heads(q, k, v, grad_out, scale)
    return (dS * R).sum(dim=(0, 2, 3))                                # every sequence, query and key


def _sg_case(g, b, h, tq, tk, d, dv, dtype=torch.float32, note=""):
    scale = torch.tensor([round(0.2 + 1.2 * float(torch.rand(1, generator=g)), 3) for _ in range(h)], dtype=dtype)
    return Case((randn(g, b, h, tq, d, dtype=dtype), randn(g, b, h, tk, d, dtype=dtype),
                 randn(g, b, h, tk, dv, dtype=dtype), randn(g, b, h, tq, dv, dtype=dtype), scale), note=note)


def _sg_public(g):
    return [_sg_case(g, 1, 1, 3, 3, 4, 4, note="one sequence, one head"),
            _sg_case(g, 2, 3, 2, 5, 4, 3, note="two sequences, three heads"),
            _sg_case(g, 3, 2, 4, 4, 8, 2, torch.float64, note="float64")]


def _sg_hidden(g):
    # B >= 2 sequences and h >= 2 heads in every case, so that a sum over the heads, a gradient per
    # sequence and a mean all differ from the answer; the first is drawn until every listed mistake
    # gives its own answer
    def draw(dtype):
        return _sg_case(g, randint(g, 2, 3), randint(g, 2, 4), randint(g, 2, 6), randint(g, 2, 6), randint(g, 2, 8),
                        randint(g, 1, 5), dtype)
    return [separating(lambda: draw(torch.float64), SCALE_GRAD), draw(torch.float32), draw(torch.float64)]


def _sg_wrong(kind):
    def wrong(q, k, v, grad_out, scale):
        R, P, dP, dS = _heads(q, k, v, grad_out, scale)
        every = (0, 2, 3)
        if kind == "no-rowsum":
            return (P * dP * R).sum(dim=every)
        if kind == "scaled":
            return (dS * scale[:, None, None] * R).sum(dim=every)
        if kind == "mean":
            return (dS * R).mean(dim=every)
        if kind == "divided":
            return (dS * R).sum(dim=every) / scale
        if kind == "dp":
            return (dP * R).sum(dim=every)
        if kind == "all-heads":
            return (dS * R).sum()
        if kind == "per-sequence":
            return (dS * R).sum(dim=(2, 3))
        if kind == "unscaled-p":
            _, _, _, dS1 = _heads(q, k, v, grad_out, torch.ones_like(scale))
            return (dS1 * R).sum(dim=every)
        return dS * R
    return wrong


def _sg_explain(case, outcome):
    q, k, _, _, scale = case.args
    h, tk = q.shape[1], k.shape[2]
    if outcome.status == "raised" and h != tk:
        sizes = {int(n) for n in re.findall(r"size of tensor [ab] \((\d+)\)", outcome.error_message)}
        if sizes == {h, tk}:
            return ("scale is (h,), one number per head, and the scores are (B, h, Tq, Tk): give it the axes it "
                    "lacks, scale[:, None, None], so that it lines up with the heads")
    return None


SCALE_GRAD = Exercise(
    id="grads.scale_grad", title="The gradient of the temperatures", lesson="08-gradients",
    function="scale_grad", params=("q", "k", "v", "grad_out", "scale"), points=4,
    reference=scale_grad, public=_sg_public, hidden=_sg_hidden, public_seed=806,
    section="Back to the queries and keys: $dQ = s\\, dS\\, K$ and $dK = s\\, dS^\\top Q$",
    mistakes=(
        Mistake("pass dP through the softmax with both terms of its Jacobian: dS = P * (dP - rowsum(dP * P)); "
                "P * dP alone misses the -p p^T term", _sg_wrong("no-rowsum"), name="no-rowsum",
                section="The softmax Jacobian"),
        Mistake("S = scale * R with R = q k^T, so dL/dscale sums dS * R, the raw scores; dS * S "
                "is scale times too large", _sg_wrong("scaled"), name="scaled-scores"),
        Mistake("a head's scale is used by every score of that head: add up their contributions (a sum, "
                "not a mean)", _sg_wrong("mean"), name="mean-not-sum"),
        Mistake("each head's scale is one number, so its gradient is one number: sum dS * R over the batch, "
                "the queries and the keys, leaving (h,)", _sg_wrong("matrix"), name="not-summed"),
        Mistake("the scale multiplies the scores, S = scale * R, so dS/dscale = R: multiply, do not divide "
                "by the scale", _sg_wrong("divided"), name="divided-by-scale"),
        Mistake("dP is the gradient of the weights, not of the scores: pass it through the softmax first, "
                "dS = P * (dP - rowsum(dP * P)), then sum dS * R", _sg_wrong("dp"), name="stopped-at-dp"),
        Mistake("each head has its own scale: sum over everything but the head axis, one number per head (h,), "
                "not one number for all of them", _sg_wrong("all-heads"), name="summed-over-heads"),
        Mistake("every sequence of the batch uses the same scale of a head: add the sequences' contributions "
                "too, (h,) and not (B, h)", _sg_wrong("per-sequence"), name="per-sequence"),
        Mistake("recompute P as the forward pass computed it, softmax(scale * R): without the scale the "
                "weights, and so dS, are other ones", _sg_wrong("unscaled-p"), name="p-without-scale"),
    ),
    forbidden=NO_AUTOGRAD, explain=_sg_explain,
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



# ---------------------------------------------------------------- 5. the capstone: the backward pass of GQA attention

def grouped_attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad_out: torch.Tensor,
                               is_causal: bool) -> tuple:
    """The backward pass of grouped-query attention, out = softmax(q k^T / sqrt(d)) v where query
    head i reads key and value head i // (h // g) (k.repeat_interleave(h // g, dim=1)). q
    (B, h, Tq, d), k (B, g, Tk, d), v (B, g, Tk, d_v), grad_out = dL/dout (B, h, Tq, d_v), Tq <= Tk;
    is_causal: query i sees the keys j <= i + Tk - Tq (bottom-right). -> (dq, dk, dv), the shapes
    of q, k and v."""
    return _gqa_backward(q, k, v, grad_out, is_causal)


def _gqa_backward(q, k, v, grad_out, is_causal, *, jacobian="full", rowsum_dim=-1, mask="bottom-right",
                  scaled=True, copies="sum", layout="interleave"):
    """The backward pass, and the slips its joins invite (the keyword arguments; the defaults are right)."""
    B, h, Tq, d = q.shape
    g, Tk = k.shape[1], k.shape[2]
    per = h // g
    if layout == "interleave":                                    # query head i reads key head i // per
        k_h, v_h = k.repeat_interleave(per, dim=1), v.repeat_interleave(per, dim=1)   # (B, h, Tk, .)
    else:                                                         # query head i reads key head i % g
        k_h, v_h = k.repeat(1, per, 1, 1), v.repeat(1, per, 1, 1)
    s = 1 / math.sqrt(d)
    S = s * q @ k_h.transpose(-2, -1)                              # (B, h, Tq, Tk)
    if is_causal and mask != "none":
        offset = Tk - Tq if mask == "bottom-right" else 0
        S = S.masked_fill(~torch.ones(Tq, Tk, dtype=torch.bool).tril(offset), float("-inf"))
    P = torch.softmax(S, dim=-1)                                   # (B, h, Tq, Tk)
    dv_h = P.transpose(-2, -1) @ grad_out                          # (B, h, Tk, d_v)
    dP = grad_out @ v_h.transpose(-2, -1)                          # (B, h, Tq, Tk)
    if jacobian == "full":
        dS = P * (dP - (dP * P).sum(dim=rowsum_dim, keepdim=True))
    elif jacobian == "unweighted":                                 # the row sum not weighted by P
        dS = P * (dP - dP.sum(dim=-1, keepdim=True))
    else:                                                          # diag(p) only
        dS = P * dP
    c = s if scaled else 1.0
    dq = c * dS @ k_h                                              # (B, h, Tq, d)
    dk_h = c * dS.transpose(-2, -1) @ q                            # (B, h, Tk, d)

    def fold(t):                                                   # (B, h, Tk, .) -> (B, g, Tk, .)
        if layout == "interleave":
            t = t.view(B, g, per, Tk, t.shape[-1])
        else:
            t = t.view(B, per, g, Tk, t.shape[-1]).transpose(1, 2)
        return t.sum(dim=2) if copies == "sum" else t.mean(dim=2)
    return dq, fold(dk_h), fold(dv_h)


def _gab_case(g, b, groups, per, tq, tk, d, dv, *, causal, dtype=torch.float32, note=""):
    h = groups * per
    return Case((randn(g, b, h, tq, d, dtype=dtype), randn(g, b, groups, tk, d, dtype=dtype),
                 randn(g, b, groups, tk, dv, dtype=dtype), randn(g, b, h, tq, dv, dtype=dtype), causal), note=note)


_AUTOGRAD = "the expected gradients are autograd's"


def _gab_public(g):
    return [_gab_case(g, 1, 1, 2, 3, 3, 4, 4, causal=False,
                      note=f"one key head for two query heads, no mask; {_AUTOGRAD}"),
            _gab_case(g, 2, 2, 2, 4, 4, 2, 3, causal=True, dtype=torch.float64,
                      note=f"two key heads for four query heads, causal, float64; {_AUTOGRAD}"),
            _gab_case(g, 1, 2, 2, 2, 5, 3, 4, causal=True,
                      note=f"2 queries, 5 keys, causal: the mask sits bottom-right; {_AUTOGRAD}")]


def _gab_hidden(g):
    # Every case has g >= 2 key heads, each shared by 2 or 3 query heads, so that the copies' sum,
    # their mean and repeat's layout all differ. The first, drawn until every listed mistake gives
    # its own answer, is causal with fewer queries than keys (where top-left and bottom-right
    # differ, and by two keys or more, where they differ from a mask without its diagonal too) and
    # d_v != d; the others are a case without the mask and a causal square one.
    def first():
        tq, d = randint(g, 2, 4), randint(g, 2, 4)
        return _gab_case(g, randint(g, 1, 2), randint(g, 2, 3), randint(g, 2, 3), tq, tq + randint(g, 2, 3), d,
                         other_than(g, 2, 4, (d,)), causal=True)

    tq = randint(g, 2, 5)
    plain = _gab_case(g, randint(g, 1, 2), randint(g, 2, 3), randint(g, 2, 3), tq, tq + randint(g, 0, 2),
                      randint(g, 2, 4), randint(g, 2, 4), causal=False, dtype=torch.float64)
    t = randint(g, 3, 6)
    square = _gab_case(g, randint(g, 1, 2), randint(g, 2, 3), randint(g, 2, 3), t, t, randint(g, 2, 4),
                       randint(g, 2, 4), causal=True, dtype=torch.float64)
    return [separating(first, GQA_BACKWARD), plain, square]


def _gab_explain(case, outcome):
    q, k, v, _, _ = case.args
    h, groups = q.shape[1], k.shape[1]
    (tq, d), tk, dv = q.shape[2:], k.shape[2], v.shape[-1]
    if outcome.status == "raised":
        message = outcome.error_message
        sizes = {int(n) for n in re.findall(r"size of tensor [ab] \((\d+)\)", message)}
        if h != groups and sizes == {h, groups}:
            return ("k and v have g key heads and q has h query heads: expand them to h heads first "
                    "(query head i reads key head i // (h // g), k.repeat_interleave(h // g, dim=1)), and at the "
                    "end add up the gradients of each key head's copies")
        inner = re.search(r"to be: \[\d+, (\d+)\] but got: \[\d+, (\d+)\]|has size (\d+) for operand \d+ which "
                          r"does not broadcast with previously seen size (\d+)", message)
        if inner and {int(n) for n in inner.groups() if n} == {tq, tk} and tq != tk and not {d, dv} & {tq, tk}:
            return ("a product meets a (Tq, Tk) matrix from the wrong side: the queries' gradient takes dS as it is, "
                    "dq = s dS k, and the keys' and values' take it transposed, dk = s dS^T q and dv = P^T dO")
        return None
    if h == groups:
        return None
    if outcome.status == "value" and outcome.value.kind in ("tuple", "list") and outcome.value.length == 3:
        for item in outcome.value.data[1:]:
            if item.kind == "tensor" and item.data.ndim == 4 and item.data.shape[1] == h:
                return ("dk and dv have the shapes of k and v, (B, g, Tk, .): each key head is used by h // g query "
                        "heads, so its gradient is the sum of those copies' gradients (as in gqa_kv_grad)")
    return None


def _gab_slip(**slip):
    return lambda *args: _gqa_backward(*args, **slip)


GQA_BACKWARD = Exercise(
    id="grads.grouped_attention_backward", title="The whole backward pass of grouped-query attention",
    lesson="08-gradients", function="grouped_attention_backward", params=("q", "k", "v", "grad_out", "is_causal"),
    points=8, answer="tensors", reference=grouped_attention_backward, public=_gab_public, hidden=_gab_hidden,
    public_seed=808, section="The derivation becomes code: `mha.attention_backward`",
    mistakes=(
        Mistake("every probability depends on every score of its row: dS = P * (dP - rowsum(dP * P)); P * dP "
                "keeps only the diagonal of the softmax Jacobian", _gab_slip(jacobian="diagonal"),
                name="diag-only", section="The softmax Jacobian"),
        Mistake("the row sum in dS = P * (dP - rowsum(dP * P)) is weighted by the probabilities: it is p . dp, "
                "the p p^T term of the Jacobian applied to dp, not the plain sum of dP",
                _gab_slip(jacobian="unweighted"), name="rowsum-without-p", section="The softmax Jacobian"),
        Mistake("the softmax ran over the keys, so the row sum in dS = P * (dP - rowsum(dP * P)) runs over the "
                "keys too, the last axis, not over the queries", _gab_slip(rowsum_dim=-2), name="rowsum-over-queries",
                section="The softmax Jacobian"),
        Mistake("recompute P with the forward's causal mask: a masked key has P = 0 there, so dS = 0 and it "
                "learns nothing from that query; without the mask the gradient leaks into keys the query never "
                "saw", _gab_slip(mask="none"), name="masked-keys-leak",
                section="What the gradient shows: masks stop it exactly"),
        Mistake("align the causal mask bottom-right: with fewer queries than keys the queries are the last "
                "positions, so query i sees keys up to i + Tk - Tq", _gab_slip(mask="top-left"), name="top-left",
                section="05-causal-masking: Pitfall 4: fewer queries than keys, and where the triangle sits"),
        Mistake("S = s q k^T with s = 1 / sqrt(d), so the scale comes back in both gradients: dq = s dS k and "
                "dk = s dS^T q", _gab_slip(scaled=False), name="unscaled-dq-dk",
                section="Back to the queries and keys: $dQ = s\\, dS\\, K$ and $dK = s\\, dS^\\top Q$"),
        Mistake("a key head used by several query heads collects the gradient of every use: sum the copies' "
                "gradients, do not average them", _gab_slip(copies="mean"), name="mean-not-sum"),
        Mistake("query head i reads key head i // (h // g), as repeat_interleave lays them out: key head j's "
                "copies are the CONSECUTIVE query heads j * (h // g) .. (j + 1) * (h // g) - 1, not every g-th",
                _gab_slip(layout="repeat"), name="repeat-layout",
                section="11-kv-cache-gqa-mla: Fewer key/value heads: MQA and GQA"),
    ),
    forbidden=NO_AUTOGRAD, explain=_gab_explain,
)

EXERCISES = (SOFTMAX_JACOBIAN, GQA_KV_GRAD, SCALE_GRAD, LINEAR_BACKWARD, GQA_BACKWARD)
