"""Correct solutions of the built-ins exercises, each written differently from the reference."""

import numpy as np
import torch


# ---------------------------------------------------------------- torch_masks_to_allowed

def torch_masks_to_allowed_loop(attn_mask, key_padding_mask):
    """Sequence by sequence: allowed = not blocked by attn_mask and key not padding."""
    rows = []
    for padded in key_padding_mask:                                  # (Tk,) per sequence
        allowed = torch.logical_and(torch.logical_not(attn_mask), torch.logical_not(padded).unsqueeze(0))
        rows.append(allowed.unsqueeze(0))                            # (1, Tq, Tk)
    return torch.stack(rows)                                         # (B, 1, Tq, Tk)


def torch_masks_to_allowed_numpy(attn_mask, key_padding_mask):
    """De Morgan in numpy: (not a) and (not p) over broadcast axes."""
    a = ~attn_mask.numpy()                                           # (Tq, Tk)
    p = ~key_padding_mask.numpy()                                    # (B, Tk)
    return torch.from_numpy(np.logical_and(a[np.newaxis, np.newaxis], p[:, np.newaxis, np.newaxis, :]))


# ---------------------------------------------------------------- sliding_window_mask

def sliding_window_mask_lists(q_len, k_len, window):
    """Row by row in plain Python."""
    offset = k_len - q_len
    rows = [[i + offset - window < j <= i + offset for j in range(k_len)] for i in range(q_len)]
    return torch.tensor(rows, dtype=torch.bool).reshape(q_len, k_len)


def sliding_window_mask_tril(q_len, k_len, window):
    """Causal band = the bottom-right triangle minus the triangle `window` diagonals lower."""
    ones = torch.ones(q_len, k_len, dtype=torch.bool)
    offset = k_len - q_len
    return ones.tril(offset) & ~ones.tril(offset - window)


# ---------------------------------------------------------------- alibi_bias

def alibi_bias_loop(num_heads, q_len, k_len):
    """One head at a time, in float64, stacked and cast at the end."""
    p = torch.arange(q_len, dtype=torch.float64).unsqueeze(1) + (k_len - q_len)   # (q_len, 1)
    j = torch.arange(k_len, dtype=torch.float64).unsqueeze(0)                     # (1, k_len)
    heads = [(0.5 ** (8.0 * (n + 1) / num_heads)) * (j - p) for n in range(num_heads)]
    return torch.stack(heads).float()


def alibi_bias_numpy(num_heads, q_len, k_len):
    """numpy: geometric slopes times the outer difference of key and query positions."""
    slopes = np.power(2.0, -8.0 / num_heads) ** np.arange(1, num_heads + 1)        # (h,)
    positions = np.arange(q_len) + k_len - q_len                                   # (q_len,)
    distance = np.subtract.outer(np.arange(k_len), positions).T                    # (q_len, k_len)
    return torch.from_numpy(np.multiply.outer(slopes, distance).astype(np.float32))


CORRECT = {
    "builtins.torch_masks_to_allowed": [torch_masks_to_allowed_loop, torch_masks_to_allowed_numpy],
    "builtins.sliding_window_mask": [sliding_window_mask_lists, sliding_window_mask_tril],
    "builtins.alibi_bias": [alibi_bias_loop, alibi_bias_numpy],
}
