"""Rotary position embedding (RoPE, Su et al. 2021, RoFormer).

RoPE splits the d features of a query or key into d/2 pairs and rotates pair i by the
angle a = position * theta_i, with theta_i = base ** (-2i / d):

    (x1, x2) -> (x1 cos a - x2 sin a,  x1 sin a + x2 cos a)

A rotation keeps lengths, and the dot product of a query rotated by m theta_i with a key
rotated by n theta_i depends only on (m - n) theta_i: after RoPE, q_m . k_n depends on the
offset m - n and not on where the pair sits in the text.

Two layouts of the pairs exist in real code, and mixing them up gives wrong numbers with
no error:
    "interleaved": pairs (2i, 2i + 1), as in the RoFormer paper;
    "half":        pairs (i, i + d/2), the "rotate-half" layout.
They differ by a fixed permutation of the features (see `layout_permutation`).
"""

from __future__ import annotations

import math

import torch

from ._checks import check_tensor

LAYOUTS = ("interleaved", "half")


def rope_frequencies(dim: int, *, base: float = 10000.0, dtype=torch.float32, device=None) -> torch.Tensor:
    """theta_i = base ** (-2i / dim) for i = 0 .. dim/2 - 1: (dim // 2,) in `dtype`."""
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2 or dim % 2:
        raise ValueError(f"dim must be an even int >= 2 (features come in pairs), got {dim!r}")
    _check_base(base)
    exponents = torch.arange(0, dim, 2, dtype=dtype, device=device) / dim   # 2i / d
    return base ** -exponents


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None, *, base: float = 10000.0,
               layout: str = "interleaved") -> torch.Tensor:
    """Rotate the feature pairs of x by its positions.

    Args:
        x: (..., T, d) floating tensor, d even (queries or keys; heads may sit in front).
        positions: integer tensor of shape (T,), or broadcastable to x.shape[:-2] + (T,)
            (one row of positions per sequence); default torch.arange(T).
        base: theta_i = base ** (-2i / d). 10000 in RoFormer and Llama 2, 500000 in Llama 3.
        layout: "interleaved" rotates pairs (2i, 2i + 1); "half" rotates pairs (i, i + d/2).

    Returns:
        A tensor of x's shape and dtype. Angles are computed in float32, or in float64
        when x is float64.
    """
    check_tensor("x", x, floating=True)
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., T, d) with at least 2 dimensions, got {tuple(x.shape)}")
    T, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError(f"x's last dimension d must be even (RoPE rotates pairs of features), got d={d}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    _check_base(base)
    positions = _check_positions(positions, x)

    compute = torch.promote_types(x.dtype, torch.float32)              # float32, or float64
    theta = rope_frequencies(d, base=base, dtype=compute, device=x.device)   # (d/2,)
    angles = positions.to(compute)[..., None] * theta                   # (..., T, d/2)
    cos, sin = angles.cos(), angles.sin()
    xc = x.to(compute)
    if layout == "interleaved":
        x1, x2 = xc[..., 0::2], xc[..., 1::2]                          # (..., T, d/2) each
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)   # (..., T, d/2, 2)
        out = out.flatten(-2)                                           # (..., T, d): pairs back in place
    else:
        x1, x2 = xc[..., : d // 2], xc[..., d // 2:]                    # (..., T, d/2) each
        out = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)     # (..., T, d)
    return out.to(x.dtype)


def layout_permutation(dim: int) -> torch.Tensor:
    """The feature order P that turns the "half" layout into the "interleaved" one.

    x[..., P] puts feature i next to feature i + dim/2, so for every x
    apply_rope(x, layout="half") == apply_rope(x[..., P], layout="interleaved")[..., argsort(P)].
    Permuting the rows of W_Q and W_K by P converts a model from one layout to the other
    (q . k is unchanged when q and k are permuted alike).
    """
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2 or dim % 2:
        raise ValueError(f"dim must be an even int >= 2, got {dim!r}")
    half = torch.arange(dim // 2)
    return torch.stack((half, half + dim // 2), dim=-1).flatten()     # [0, d/2, 1, d/2 + 1, ...]


def _check_base(base) -> None:
    if isinstance(base, bool) or not isinstance(base, (int, float)):
        raise TypeError(f"base must be a number > 1 (theta_i = base ** (-2i/d)), got {type(base).__name__} "
                        f"({base!r})")
    if not math.isfinite(base) or base <= 1:
        raise ValueError(f"base must be a finite number > 1 (theta_i = base ** (-2i/d)), got {base!r}")


def _check_positions(positions, x: torch.Tensor) -> torch.Tensor:
    T = x.shape[-2]
    if positions is None:
        return torch.arange(T, device=x.device)
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be an integer torch.Tensor of shape (T,) = ({T},), "
                        f"got {type(positions).__name__}")
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"positions must be an integer tensor (token indices), got dtype {positions.dtype}")
    if positions.dim() == 0 or positions.shape[-1] != T:
        raise ValueError(f"positions must have shape (T,) = ({T},) or (..., {T}) matching x of shape "
                         f"{tuple(x.shape)}, got shape {tuple(positions.shape)}")
    if not _broadcasts_to(tuple(positions.shape), tuple(x.shape[:-1])):
        raise ValueError(f"positions of shape {tuple(positions.shape)} must broadcast to x's leading "
                         f"dimensions and length {tuple(x.shape[:-1])}")
    return positions.to(x.device)


def _broadcasts_to(shape: tuple, target: tuple) -> bool:
    """Whether `shape` broadcasts to exactly `target`. (torch.broadcast_shapes would do, but
    its first call imports sympy, which takes a second or more.)"""
    if len(shape) > len(target):
        return False
    return all(n in (1, t) for n, t in zip(reversed(shape), reversed(target)))
