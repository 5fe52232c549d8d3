"""Argument checks shared by the package: each error names the argument and what is valid."""

from __future__ import annotations

import torch


def check_int(name: str, value, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_tensor(name: str, x, *, dims: int | tuple[int, ...] | None = None, floating: bool = False) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if dims is not None:
        allowed = (dims,) if isinstance(dims, int) else dims
        if x.dim() not in allowed:
            want = " or ".join(str(d) for d in allowed)
            raise ValueError(f"{name} must have {want} dimensions, got shape {tuple(x.shape)}")
    if floating and not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    return x


def check_mask(mask, scores_shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A mask is bool (True = may attend) or additive float of the scores' dtype, and broadcasts."""
    check_tensor("mask", mask)
    if mask.dtype != torch.bool and mask.dtype != dtype:
        raise TypeError(
            f"mask must be bool (True = may attend) or an additive float mask of the query's dtype "
            f"{dtype}, got dtype {mask.dtype}"
        )
    try:
        shape = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        shape = None
    if shape != torch.Size(scores_shape):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the attention scores' shape "
            f"{tuple(scores_shape)} (batch, heads, query length, key length)"
        )
    return mask
