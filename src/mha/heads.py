"""Splitting the model dimension into heads, and merging it back.

    (B, T, C) --view--> (B, T, h, d) --transpose(1, 2)--> (B, h, T, d),   C = h * d

The view cuts each token's C features into h slices of d; the transpose then groups
tokens by head. Viewing straight to (B, h, T, d) would instead cut the flat (T * C)
memory of each sequence into h blocks of T * d numbers, mixing tokens across heads.
"""

from __future__ import annotations

import torch

from ._checks import check_int, check_tensor


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, T, C) -> (B, h, T, C // h). A view (no copy) with the head axis second."""
    check_tensor("x", x, dims=3)
    check_int("num_heads", num_heads)
    B, T, C = x.shape
    if C % num_heads:
        raise ValueError(f"x's last dimension {C} must be divisible by num_heads={num_heads}")
    return x.view(B, T, num_heads, C // num_heads).transpose(1, 2)  # (B, h, T, d)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, h, T, d) -> (B, T, h * d), the exact inverse of `split_heads`.

    After the transpose the memory is no longer in (B, T, h, d) order, so `.contiguous()`
    copies it into that order before `.view` can flatten the last two axes.
    """
    check_tensor("x", x, dims=4)
    B, h, T, d = x.shape
    return x.transpose(1, 2).contiguous().view(B, T, h * d)  # (B, T, C)
