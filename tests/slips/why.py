"""Slips in lesson 02's heads: combining them, and ablating one."""

import torch

from . import Slip


def combine_heads_linear_layout(head_outputs, w_o):
    return torch.cat(list(head_outputs), dim=-1) @ w_o.T          # as nn.Linear would


def combine_heads_stacked_last(head_outputs, w_o):
    stacked = torch.stack(list(head_outputs), dim=-1)              # (T, d_h, h)
    return stacked.flatten(1) @ w_o


def ablate_head_columns_zeroed(head_outputs, w_o, head):
    h, T, d = head_outputs.shape
    w = w_o.clone()
    w[:, head * d:(head + 1) * d] = 0
    return torch.cat(list(head_outputs), dim=-1) @ w


def ablate_head_the_head_s_features_dropped(head_outputs, w_o, head):
    """The head's features cut out of the concatenation, and the same number of w_o's last rows."""
    h, T, d = head_outputs.shape
    kept = torch.cat([head_outputs[i] for i in range(h) if i != head], dim=-1)     # (T, (h - 1) d_h)
    return kept @ w_o[: (h - 1) * d]


SLIPS = {
    "why.combine_heads": [
        Slip(combine_heads_linear_layout, "w_o used as nn.Linear stores it, transposed", ("w-o-transposed",)),
        Slip(combine_heads_stacked_last, "heads stacked on the last axis: features interleaved",
             ("features-interleaved",)),
    ],
    "why.ablate_head": [
        Slip(ablate_head_columns_zeroed, "zeroes the head's columns of w_o, not its rows", ("zero-columns",)),
        Slip(ablate_head_the_head_s_features_dropped, "drops the head and w_o's last rows: the rows shift",
             ("drop-and-shift",)),
    ],
}
