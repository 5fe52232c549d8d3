"""Correct solutions of the masking exercises, each written differently from the reference."""

import numpy as np
import torch


# ---------------------------------------------------------------- causal_mask

def causal_mask_arange(q_len, k_len):
    """Query i (the last q_len positions of k_len) sees key j when j <= i + k_len - q_len."""
    i = torch.arange(q_len).unsqueeze(1)       # (q_len, 1)
    j = torch.arange(k_len).unsqueeze(0)       # (1, k_len)
    return j <= i + (k_len - q_len)


def causal_mask_lists(q_len, k_len):
    """Row by row in plain Python."""
    offset = k_len - q_len
    rows = [[j <= i + offset for j in range(k_len)] for i in range(q_len)]
    return torch.tensor(rows, dtype=torch.bool)


# ---------------------------------------------------------------- masked_softmax

def masked_softmax_by_hand(scores, mask):
    """exp of the shifted allowed scores, divided by the row sum where it is > 0."""
    work = torch.promote_types(scores.dtype, torch.float32)
    s = scores.to(work)
    allowed = mask.broadcast_to(s.shape)
    top = torch.where(allowed, s, float("-inf")).amax(dim=-1, keepdim=True)   # (..., Tq, 1)
    top = torch.where(torch.isfinite(top), top, 0.0)         # rows with nothing allowed
    e = torch.where(allowed, torch.exp(s - top), 0.0)
    total = e.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, e / total, torch.zeros((), dtype=work)).to(scores.dtype)


def masked_softmax_float64(scores, mask):
    """softmax in float64 with -inf fills; rows with nothing allowed set to zero after."""
    w = torch.softmax(scores.double().masked_fill(~mask, float("-inf")), dim=-1)
    any_allowed = mask.broadcast_to(w.shape).any(dim=-1, keepdim=True)
    return torch.where(any_allowed, w, 0.0).to(scores.dtype)


# ---------------------------------------------------------------- decoder_mask

def decoder_mask_loop(lengths, max_len):
    """Sequence by sequence: lower triangle, then the padded key columns cleared."""
    out = torch.zeros(len(lengths), 1, max_len, max_len, dtype=torch.bool)
    for b, n in enumerate(lengths.tolist()):
        out[b, 0] = torch.ones(max_len, max_len, dtype=torch.bool).tril()
        out[b, 0, :, n:] = False
    return out


def decoder_mask_numpy(lengths, max_len):
    """np.tri for the causal part, a broadcast comparison for the padding."""
    causal = np.tri(max_len, dtype=bool)                                  # (T, T)
    real = np.arange(max_len)[None, :] < lengths.numpy()[:, None]         # (B, T)
    return torch.from_numpy(causal[None, None] & real[:, None, None, :])  # (B, 1, T, T)


def causal_mask_wrong_triu(q_len, k_len):
    """The upper triangle: True = blocked's layout, read the other way round."""
    return torch.ones(q_len, k_len, dtype=torch.bool).triu(diagonal=k_len - q_len)


def causal_mask_wrong_int(q_len, k_len):
    """Right pattern, as 0/1 integers."""
    return torch.ones(q_len, k_len, dtype=torch.long).tril(diagonal=k_len - q_len)


def causal_mask_wrong_square_only(q_len, k_len):
    """Top-left for every shape, written with arange."""
    return torch.arange(k_len)[None, :] <= torch.arange(q_len)[:, None]


def masked_softmax_wrong_multiply(scores, mask):
    """Zeroes the blocked weights after an unmasked softmax: the rows no longer sum to 1."""
    return torch.softmax(scores.float(), dim=-1).to(scores.dtype) * mask


def masked_softmax_wrong_renormalised_nan(scores, mask):
    """Masks after the softmax and renormalises: empty rows become 0 / 0 = NaN."""
    w = torch.softmax(scores.to(torch.promote_types(scores.dtype, torch.float32)), dim=-1) * mask
    return (w / w.sum(dim=-1, keepdim=True)).to(scores.dtype)


def masked_softmax_wrong_min_fill(scores, mask):
    """The dtype's lowest value as the fill: empty rows get uniform weights."""
    work = torch.promote_types(scores.dtype, torch.float32)
    filled = scores.to(work).masked_fill(~mask, torch.finfo(work).min)
    return torch.softmax(filled, dim=-1).to(scores.dtype)


def decoder_mask_wrong_no_batch_axis(lengths, max_len):
    """Right entries, shape (B, T, T): no head axis."""
    pos = torch.arange(max_len)
    return (pos[None, :] <= pos[:, None])[None] & (pos[None, :] < lengths[:, None])[:, None, :]


def decoder_mask_wrong_padding_on_both(lengths, max_len):
    """Hides the padded queries' rows as well."""
    pos = torch.arange(max_len)
    real = pos[None, :] < lengths[:, None]                          # (B, T)
    causal = pos[None, :] <= pos[:, None]
    return (causal[None] & real[:, None, :] & real[:, :, None])[:, None]


def decoder_mask_wrong_lengths_minus_one(lengths, max_len):
    pos = torch.arange(max_len)
    return ((pos[None, :] <= pos[:, None])[None] & (pos[None, :] < lengths[:, None] - 1)[:, None, :])[:, None]


def causal_mask_forbidden_torch_bias(q_len, k_len):
    from torch.nn.attention.bias import causal_lower_right
    return causal_lower_right(q_len, k_len)._materialize()


CORRECT = {
    "masking.causal_mask": [causal_mask_arange, causal_mask_lists],
    "masking.masked_softmax": [masked_softmax_by_hand, masked_softmax_float64],
    "masking.decoder_mask": [decoder_mask_loop, decoder_mask_numpy],
}

WRONG = {
    "masking.causal_mask": [causal_mask_wrong_triu, causal_mask_wrong_int, causal_mask_wrong_square_only],
    "masking.masked_softmax": [masked_softmax_wrong_multiply, masked_softmax_wrong_renormalised_nan,
                               masked_softmax_wrong_min_fill],
    "masking.decoder_mask": [decoder_mask_wrong_no_batch_axis, decoder_mask_wrong_padding_on_both,
                             decoder_mask_wrong_lengths_minus_one],
}

FORBIDDEN = {
    "masking.causal_mask": [causal_mask_forbidden_torch_bias],
}


# ---------------------------------------------------------------- more held-out wrong answers

def causal_mask_wrong_le_q_len(q_len, k_len):
    """The offset taken as k_len - q_len + 1."""
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(diagonal=k_len - q_len + 1)


def masked_softmax_wrong_nan_kept(scores, mask):
    """-inf fill and softmax, the NaN of empty rows left in."""
    work = torch.promote_types(scores.dtype, torch.float32)
    return torch.softmax(scores.to(work).masked_fill(~mask, float("-inf")), dim=-1).to(scores.dtype)


def decoder_mask_wrong_lengths_as_rows(lengths, max_len):
    """Padding by query rows AND the causal part as j < i."""
    pos = torch.arange(max_len)
    return ((pos[None, :] < pos[:, None])[None] & (pos[None, :] < lengths[:, None])[:, :, None])[:, None]


WRONG["masking.causal_mask"] += [causal_mask_wrong_le_q_len]
WRONG["masking.masked_softmax"] += [masked_softmax_wrong_nan_kept]
WRONG["masking.decoder_mask"] += [decoder_mask_wrong_lengths_as_rows]
