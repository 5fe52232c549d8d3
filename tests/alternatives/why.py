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


def combine_wrong_mean_of_heads(head_outputs, w_o):
    """Averages the heads and repeats the average: the heads lose their own features."""
    h = head_outputs.shape[0]
    return head_outputs.mean(dim=0).repeat(1, h) @ w_o


def combine_wrong_cat_then_reshape(head_outputs, w_o):
    """Stacks the heads along the tokens, then reshapes: the rows mix tokens."""
    T = head_outputs.shape[1]
    return torch.cat(list(head_outputs), dim=0).reshape(T, -1) @ w_o


def combine_wrong_reversed_heads(head_outputs, w_o):
    return torch.cat(list(head_outputs.flip(0)), dim=-1) @ w_o


def ablate_wrong_in_place_weights(head_outputs, w_o, head):
    """Right numbers, but it zeroes the caller's w_o (the model's weights, in a notebook)."""
    d = head_outputs.shape[-1]
    w_o[head * d:(head + 1) * d] = 0
    return torch.cat(list(head_outputs), dim=-1) @ w_o


def ablate_wrong_in_place_heads(head_outputs, w_o, head):
    """Right numbers, but it zeroes the caller's head outputs."""
    head_outputs[head].zero_()
    return torch.cat(list(head_outputs), dim=-1) @ w_o


def ablate_wrong_rescaled(head_outputs, w_o, head):
    """Makes up for the missing head by scaling the others: not what the lesson measures."""
    h, d = head_outputs.shape[0], head_outputs.shape[-1]
    w = w_o.clone()
    w[head * d:(head + 1) * d] = 0
    return torch.cat(list(head_outputs), dim=-1) @ w * h / (h - 1)


def share_wrong_max(weights, positions):
    T = weights.shape[-2]
    return weights[:, torch.arange(T), positions].max(dim=-1).values


def share_wrong_median(weights, positions):
    T = weights.shape[-2]
    return weights[:, torch.arange(T), positions].median(dim=-1).values


def share_wrong_first_query_only(weights, positions):
    return weights[:, 0, positions[0]]


CORRECT = {
    "why.combine_heads": [combine_cat, combine_sum_of_slices, combine_einsum],
    "why.ablate_head": [ablate_zero_input, ablate_subtract, ablate_numpy],
    "why.attention_share": [share_gather, share_loop, share_one_hot],
}

WRONG = {
    "why.combine_heads": [combine_wrong_mean_of_heads, combine_wrong_cat_then_reshape, combine_wrong_reversed_heads],
    "why.ablate_head": [ablate_wrong_in_place_weights, ablate_wrong_in_place_heads, ablate_wrong_rescaled],
    "why.attention_share": [share_wrong_max, share_wrong_median, share_wrong_first_query_only],
}


# ---------------------------------------------------------------- more held-out wrong answers

def combine_wrong_stack_then_flatten(head_outputs, w_o):
    """torch.stack over a new last axis, then flatten: features interleaved across heads."""
    return torch.stack(list(head_outputs), dim=-1).flatten(1) @ w_o


def ablate_wrong_head_output_zeroed_and_rescaled(head_outputs, w_o, head):
    """The removed head replaced by the mean of the others."""
    others = torch.cat([head_outputs[:head], head_outputs[head + 1:]]).mean(dim=0, keepdim=True)
    x = head_outputs.clone()
    x[head] = others[0]
    return torch.cat(list(x), dim=-1) @ w_o


def share_wrong_sum_over_keys(weights, positions):
    """Sums the weights of every key up to positions[i]."""
    T = weights.shape[-1]
    upto = torch.arange(T)[None, :] <= positions[:, None]
    return (weights * upto).sum(dim=-1).mean(dim=-1)


WRONG["why.combine_heads"] += [combine_wrong_stack_then_flatten]
WRONG["why.ablate_head"] += [ablate_wrong_head_output_zeroed_and_rescaled]
WRONG["why.attention_share"] += [share_wrong_sum_over_keys]
