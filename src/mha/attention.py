"""Scaled dot-product attention, written out step by step.

    weights = softmax(q @ k^T * scale + mask)      scale = 1 / sqrt(head_dim)
    out     = dropout(weights) @ v

Mask convention everywhere in `mha`: a boolean mask is True where a query MAY attend to a
key; a float mask is added to the scores (0 = allowed, -inf = blocked). A query row that may
attend to nothing gets weights 0 and output 0 (not NaN), and its gradient is 0 too.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._checks import check_mask, check_tensor
from .masks import causal_mask


def scaled_dot_product_attention(q, k, v, mask=None, *, is_causal=False, dropout_p=0.0, scale=None):
    """Attention over the last two dimensions, returning the output and the weights.

    Args:
        q: (..., Tq, d) queries.  k: (..., Tk, d) keys.  v: (..., Tk, d_v) values.
            Leading dimensions (e.g. batch and heads) must broadcast.
        mask: optional bool mask (True = may attend) or additive float mask of q's dtype,
            broadcastable to (..., Tq, Tk).
        is_causal: also block later keys; aligned bottom-right when Tq != Tk, so the last
            query sees every key (the right alignment for decoding with a cache).
        dropout_p: probability of zeroing each weight after the softmax; survivors are
            scaled by 1 / (1 - dropout_p), as torch does. Pass 0.0 at evaluation time.
        scale: multiplier of the scores, default 1 / sqrt(d).

    Returns:
        out (..., Tq, d_v) and weights (..., Tq, Tk), the weights after dropout.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, floating=True)
        if t.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., length, dim), got {tuple(t.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dimension, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same length (dim -2), got {k.shape[-2]} and {v.shape[-2]}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")

    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., Tq, Tk)
    if mask is not None:
        check_mask(mask, scores.shape, scores.dtype)
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    if is_causal:
        scores = scores.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], device=q.device), float("-inf"))
    weights = safe_softmax(scores)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v, weights


def safe_softmax(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim where a row of all -inf gives zeros instead of NaN.

    The empty rows are set to 0 before the softmax (so no NaN is ever computed, which keeps
    the backward pass NaN-free too) and their weights are zeroed afterwards.
    """
    empty = torch.isneginf(scores).all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1)
    return weights.masked_fill(empty, 0.0)
