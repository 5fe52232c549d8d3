"""The backward pass of attention, derived by hand (no autograd).

Forward, per query row, with s the scale (default 1 / sqrt(d)):

    S = s Q K^T          (Tq, Tk) scores, -inf where is_causal blocks a key
    P = softmax(S)       row by row; a row with nothing allowed is all zeros
    O = P V              (Tq, d_v)

Given dO = dL/dO, the chain rule gives

    dV = P^T dO
    dP = dO V^T
    dS = P * (dP - rowsum(dP * P))      the softmax Jacobian diag(p) - p p^T, row by row
    dQ = s dS K
    dK = s dS^T Q

A blocked key has P = 0, so its dS is exactly 0: no gradient flows through a masked
score. A query row with nothing to attend to has P = 0 everywhere, so its dQ is 0 and it
contributes nothing to dK and dV (zeros, never NaN), matching
`mha.scaled_dot_product_attention`'s forward.
"""

from __future__ import annotations

import math
import numbers

import torch

from ._checks import check_tensor
from .attention import safe_softmax
from .masks import causal_mask


def attention_backward(q, k, v, grad_out, *, is_causal=False, scale=None):
    """Gradients of softmax(q k^T * scale) v with respect to q, k and v.

    Args:
        q: (..., Tq, d) queries.  k: (..., Tk, d) keys.  v: (..., Tk, d_v) values.
            Leading dimensions (batch, heads) broadcast, as in
            `mha.scaled_dot_product_attention`; all four tensors share one floating dtype.
        grad_out: (..., Tq, d_v), the gradient of the loss with respect to the output, with
            the output's shape (the broadcast leading dimensions).
        is_causal: block later keys, aligned bottom-right when Tq != Tk (query i sees keys
            j <= i + Tk - Tq), as everywhere in `mha`. Rows with no key allowed (Tq > Tk)
            give outputs 0 and gradients 0.
        scale: multiplier of the scores, default 1 / sqrt(d).

    Returns:
        (dq, dk, dv) with the shapes and dtype of q, k and v. Gradients of broadcast
        leading dimensions are summed, as autograd does.
    """
    for name, t in (("q", q), ("k", k), ("v", v), ("grad_out", grad_out)):
        check_tensor(name, t, floating=True)
        if t.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., length, dim), got {tuple(t.shape)}")
    for name, t in (("k", k), ("v", v), ("grad_out", grad_out)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, got {t.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dimension, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same length (dim -2), got {k.shape[-2]} and {v.shape[-2]}")
    try:
        lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the leading dimensions of q {tuple(q.shape)}, k {tuple(k.shape)} and "
                         f"v {tuple(v.shape)} must broadcast") from None
    out_shape = (*lead, q.shape[-2], v.shape[-1])
    if tuple(grad_out.shape) != out_shape:
        raise ValueError(f"grad_out must have the output's shape {out_shape} (..., Tq, d_v), "
                         f"got {tuple(grad_out.shape)}")
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be a bool, got {type(is_causal).__name__} ({is_causal!r})")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)
                              or not math.isfinite(scale)):
        raise TypeError(f"scale must be a finite real number or None (for 1 / sqrt(d)), got {scale!r}")

    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    Tq, Tk = q.shape[-2], k.shape[-2]

    # Recompute the forward's weights P (FlashAttention's backward does the same).
    S = (q @ k.transpose(-2, -1)) * s                             # (..., Tq, Tk)
    if is_causal:
        S = S.masked_fill(~causal_mask(Tq, Tk, device=q.device), float("-inf"))
    P = safe_softmax(S)                                           # (..., Tq, Tk), blocked -> 0

    dV = P.transpose(-2, -1) @ grad_out                           # (..., Tk, d_v)
    dP = grad_out @ v.transpose(-2, -1)                           # (..., Tq, Tk)
    dS = P * (dP - (dP * P).sum(dim=-1, keepdim=True))            # (..., Tq, Tk), 0 where P = 0
    dQ = (dS @ k) * s                                             # (..., Tq, d)
    dK = (dS.transpose(-2, -1) @ q) * s                           # (..., Tk, d)

    # A leading dimension that was broadcast (say, one k shared by every head) collects
    # the gradient of every copy: sum back to each input's own shape.
    return dQ.sum_to_size(q.shape), dK.sum_to_size(k.shape), dV.sum_to_size(v.shape)
