"""Correct solutions of the dimension exercises, each written differently from the reference."""

import numpy as np
import torch


# ---------------------------------------------------------------- split_heads

def split_heads_chunk_stack(x, num_heads):
    """Cut the channels into num_heads blocks and stack them on a new head axis."""
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)          # (B, h, T, d)


def split_heads_numpy(x, num_heads):
    """numpy reshape and transpose, in x's own dtype."""
    a = x.numpy()
    B, T, C = a.shape
    out = a.reshape(B, T, num_heads, C // num_heads).transpose(0, 2, 1, 3)
    return torch.from_numpy(np.ascontiguousarray(out))


# ---------------------------------------------------------------- merge_heads

def merge_heads_unbind_cat(x):
    """Put the heads side by side along the channels."""
    return torch.cat(x.unbind(dim=1), dim=-1)                       # (B, T, h * d)


def merge_heads_loop_fill(x):
    """Copy head i into channels i*d to (i+1)*d - 1 of a fresh tensor."""
    B, h, T, d = x.shape
    out = x.new_empty(B, T, h * d)
    for i in range(h):
        out[:, :, i * d:(i + 1) * d] = x[:, i]
    return out


def merge_heads_permute_reshape(x):
    """permute, then reshape (which copies when it must)."""
    return x.permute(0, 2, 1, 3).reshape(x.shape[0], x.shape[2], -1)


# ---------------------------------------------------------------- shapes

def shapes_divmod(batch, seq_len, embed_dim, num_heads):
    d, rest = divmod(embed_dim, num_heads)
    if rest:
        raise ValueError(f"embed_dim={embed_dim} is not a multiple of num_heads={num_heads}")
    names = ("qkv", "q_heads", "scores", "merged")
    values = ((batch, seq_len, 3 * embed_dim), (batch, num_heads, seq_len, d),
              (batch, num_heads, seq_len, seq_len), (batch, seq_len, num_heads * d))
    return dict(zip(names, values))


def shapes_step_by_step(batch, seq_len, embed_dim, num_heads):
    if embed_dim % num_heads:
        raise ValueError(f"num_heads={num_heads} does not divide embed_dim={embed_dim}")
    x = (batch, seq_len, embed_dim)
    qkv = x[:2] + (3 * x[2],)
    q_heads = (batch, num_heads, seq_len, embed_dim // num_heads)
    scores = q_heads[:3] + (seq_len,)
    return {"merged": x, "scores": scores, "q_heads": q_heads, "qkv": qkv}


CORRECT = {
    "dims.split_heads": [split_heads_chunk_stack, split_heads_numpy],
    "dims.merge_heads": [merge_heads_unbind_cat, merge_heads_loop_fill, merge_heads_permute_reshape],
    "dims.shapes": [shapes_divmod, shapes_step_by_step],
}
