"""Correct solutions of the why exercises, written differently from the reference."""

import numpy as np
import torch


# ---------------------------------------------------------------- combine_heads

def combine_cat(head_outputs, w_o):
    return torch.cat(list(head_outputs.unbind(0)), dim=-1) @ w_o     # [head 0 | head 1 | ...]


def combine_sum_of_slices(head_outputs, w_o):
    """W_O as a sum over heads: head i goes through its own rows of w_o."""
    h, T, d = head_outputs.shape
    out = torch.zeros(T, w_o.shape[1], dtype=w_o.dtype)
    for i in range(h):
        out = out + head_outputs[i] @ w_o[i * d:(i + 1) * d]
    return out


def combine_einsum(head_outputs, w_o):
    h, T, d = head_outputs.shape
    return torch.einsum("htd,hdc->tc", head_outputs, w_o.reshape(h, d, -1))


# ---------------------------------------------------------------- ablate_head

def ablate_zero_input(head_outputs, w_o, head):
    kept = head_outputs.clone()
    kept[head] = 0                                                     # silence the head itself
    return torch.cat(list(kept), dim=-1) @ w_o


def ablate_subtract(head_outputs, w_o, head):
    h, T, d = head_outputs.shape
    full = torch.einsum("htd,hdc->tc", head_outputs, w_o.reshape(h, d, -1))
    return full - head_outputs[head] @ w_o[head * d:(head + 1) * d]


def ablate_numpy(head_outputs, w_o, head):
    o = head_outputs.numpy().astype(np.float64)
    w = w_o.numpy().astype(np.float64)
    h, T, d = o.shape
    out = sum(o[i] @ w[i * d:(i + 1) * d] for i in range(h) if i != head)
    return torch.from_numpy(np.asarray(out)).to(w_o.dtype)


# ---------------------------------------------------------------- attention_share

def share_gather(weights, positions):
    h, T, _ = weights.shape
    index = positions.view(1, T, 1).expand(h, T, 1)                    # (h, T, 1)
    return weights.gather(-1, index).squeeze(-1).mean(-1)              # (h, T) -> (h,)


def share_loop(weights, positions):
    T = weights.shape[1]
    total = sum(weights[:, i, int(positions[i])] for i in range(T))
    return total / T


def share_one_hot(weights, positions):
    T = weights.shape[-1]
    pick = torch.nn.functional.one_hot(positions, T).to(weights.dtype)  # (T, T): row i marks key positions[i]
    return (weights * pick).sum(dim=(1, 2)) / T


CORRECT = {
    "why.combine_heads": [combine_cat, combine_sum_of_slices, combine_einsum],
    "why.ablate_head": [ablate_zero_input, ablate_subtract, ablate_numpy],
    "why.attention_share": [share_gather, share_loop, share_one_hot],
}
