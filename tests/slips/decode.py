"""Slips in lesson 11's rotary embedding."""

import torch

from . import Slip


def rope_positions_counted_from_one(x, positions, base):
    T, d = x.shape
    pos = torch.arange(1, T + 1, dtype=x.dtype) + positions[0].to(x.dtype)   # "the first token is position 1"
    theta = base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    a = pos[:, None] * theta
    out = torch.empty_like(x)
    out[:, 0::2] = x[:, 0::2] * a.cos() - x[:, 1::2] * a.sin()
    out[:, 1::2] = x[:, 0::2] * a.sin() + x[:, 1::2] * a.cos()
    return out


def rope_sin_and_cos_swapped(x, positions, base):
    T, d = x.shape
    theta = base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    a = positions.to(x.dtype)[:, None] * theta
    out = torch.empty_like(x)
    out[:, 0::2] = x[:, 0::2] * a.sin() - x[:, 1::2] * a.cos()
    out[:, 1::2] = x[:, 0::2] * a.cos() + x[:, 1::2] * a.sin()
    return out


def rope_frequencies_in_float32(x, positions, base):
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2).float() / d)                  # float32, whatever x is
    a = (positions.float()[:, None] * theta).to(x.dtype)
    x1, x2 = x[:, 0::2], x[:, 1::2]
    return torch.stack((x1 * a.cos() - x2 * a.sin(), x1 * a.sin() + x2 * a.cos()), dim=-1).flatten(1)


def rope_odd_member_first(x, positions, base):
    T, d = x.shape
    theta = base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    a = positions.to(x.dtype)[:, None] * theta
    first, second = x[:, 1::2], x[:, 0::2]                                # "pair i is (x[2i+1], x[2i])"
    out = torch.empty_like(x)
    out[:, 0::2] = first * a.cos() - second * a.sin()
    out[:, 1::2] = first * a.sin() + second * a.cos()
    return out


SLIPS = {
    "decode.rope_rotate": [
        Slip(rope_frequencies_in_float32, "angles computed in float32 for float64 rows"),
        Slip(rope_positions_counted_from_one, "positions[t] + 1", ("positions-plus-one",)),
        Slip(rope_sin_and_cos_swapped, "sin and cos swapped", ("sin-cos-swapped",)),
        Slip(rope_odd_member_first, "the odd member of each pair read first", ("pair-members-swapped",)),
    ],
}
