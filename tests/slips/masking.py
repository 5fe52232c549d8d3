"""Slips in lesson 05's masks: the causal mask, the masked softmax, the decoder's mask."""

import torch

from . import Slip


def causal_mask_diagonal_the_wrong_way(q_len, k_len):
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(diagonal=q_len - k_len)


def causal_mask_positions_stretched(q_len, k_len):
    """Query i placed at the same fraction of the sequence as key i * k_len / q_len."""
    i = torch.arange(q_len)[:, None]
    j = torch.arange(k_len)[None, :]
    return j * q_len <= i * k_len


def masked_softmax_float32_min_fill(scores, mask):
    filled = scores.masked_fill(~mask, torch.finfo(torch.float32).min)
    return torch.softmax(filled, dim=-1)


def masked_softmax_zero_fill(scores, mask):
    """Masked scores set to 0 (not -inf) before the softmax; empty rows zeroed."""
    weights = torch.softmax(scores * mask, dim=-1)
    return torch.where(mask.any(dim=-1, keepdim=True), weights, torch.zeros_like(weights))


def decoder_mask_length_counted_in(lengths, max_len):
    pos = torch.arange(max_len)
    causal = pos[None, :] <= pos[:, None]
    real = pos[None, :] <= lengths[:, None]
    return (causal & real[:, None, :]).unsqueeze(1)


def decoder_mask_head_axis_second_to_last(lengths, max_len):
    pos = torch.arange(max_len)
    allowed = (pos[None, :] <= pos[:, None])[None] & (pos[None, None, :] < lengths[:, None, None])
    return allowed.unsqueeze(2)                                        # (B, T, 1, T)


def masked_softmax_always_in_float32(scores, mask):
    s = scores.float().masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, dim=-1)
    return torch.nan_to_num(w, nan=0.0).to(scores.dtype)


SLIPS = {
    "masking.causal_mask": [
        Slip(causal_mask_diagonal_the_wrong_way, "tril's offset q_len - k_len, the sign flipped", ("offset-sign",)),
        Slip(causal_mask_positions_stretched, "the queries spread over the keys' span (j q_len <= i k_len), not "
             "placed at the last positions: the top-left hint's fix, i + k_len - q_len, is its fix", ("top-left",)),
    ],
    "masking.masked_softmax": [
        Slip(masked_softmax_always_in_float32, "computes in float32 for float64 scores too", ("float32-for-float64",)),
        Slip(masked_softmax_float32_min_fill, "fills with float32's min: overflows float16, and empty rows average",
             ("large-negative-fill", "fill-overflows-float16")),
        Slip(masked_softmax_zero_fill, "masked scores set to 0, not -inf"),
    ],
    "masking.decoder_mask": [
        Slip(decoder_mask_length_counted_in, "j <= lengths[b]", ("length-inclusive",)),
        Slip(decoder_mask_head_axis_second_to_last, "the head axis at dim 2: (B, T, 1, T)"),
    ],
}
