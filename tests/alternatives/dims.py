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


def split_heads_wrong_reshape(x, num_heads):
    B, T, C = x.shape
    return x.reshape(B, num_heads, T, C // num_heads)


def split_heads_wrong_no_transpose(x, num_heads):
    """The view, without bringing the heads in front of the tokens (wrong shape)."""
    B, T, C = x.shape
    return x.view(B, T, num_heads, C // num_heads)


def split_heads_wrong_strided(x, num_heads):
    """Head i gets every h-th channel."""
    return torch.stack([x[..., i::num_heads] for i in range(num_heads)], dim=1)


# ---------------------------------------------------------------- heads_into_batch

def hib_batch_first_route(x, num_heads):
    """To batch-first, split the heads as usual, then flatten (B, h) into one axis."""
    xb = x.transpose(0, 1)                                     # (B, T, C)
    B, T, C = xb.shape
    heads = xb.reshape(B, T, num_heads, C // num_heads).permute(0, 2, 1, 3)   # (B, h, T, d)
    return heads.reshape(B * num_heads, T, C // num_heads)


def hib_loop(x, num_heads):
    T, B, C = x.shape
    d = C // num_heads
    rows = [x[:, b, i * d:(i + 1) * d] for b in range(B) for i in range(num_heads)]   # each (T, d)
    return torch.stack(rows)


def hib_einops_like(x, num_heads):
    """unflatten then one permute, contiguous copy then view."""
    T, B, C = x.shape
    out = x.unflatten(-1, (num_heads, C // num_heads)).permute(1, 2, 0, 3)   # (B, h, T, d)
    return out.contiguous().view(B * num_heads, T, C // num_heads)


def hib_wrong_view(x, num_heads):
    """The torch-internals one-liner with .view: fails on a non-contiguous x."""
    T, B, C = x.shape
    return x.view(T, B * num_heads, C // num_heads).transpose(0, 1)


def hib_wrong_batch_first_assumed(x, num_heads):
    """Treats x as (B, T, C)."""
    B, T, C = x.shape
    return x.reshape(B, T, num_heads, C // num_heads).transpose(1, 2).reshape(B * num_heads, T, C // num_heads)


def hib_wrong_heads_last(x, num_heads):
    """Stacks the heads, but in the order (B * h) with the heads outside: (h, B, T, d)."""
    T, B, C = x.shape
    d = C // num_heads
    return torch.cat([x[..., i * d:(i + 1) * d].transpose(0, 1) for i in range(num_heads)])


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


def shapes_wrong_message(batch, seq_len, embed_dim, num_heads):
    """Raises, but the message names neither argument."""
    if embed_dim % num_heads:
        raise ValueError("the widths do not fit")
    return shapes_divmod(batch, seq_len, embed_dim, num_heads)


def shapes_wrong_scores_over_features(batch, seq_len, embed_dim, num_heads):
    out = shapes_divmod(batch, seq_len, embed_dim, num_heads)
    out["scores"] = (batch, num_heads, seq_len, embed_dim // num_heads)
    return out


def shapes_wrong_no_check(batch, seq_len, embed_dim, num_heads):
    """Never raises: the floor division hides the mismatch."""
    d = embed_dim // num_heads
    return {"qkv": (batch, seq_len, 3 * embed_dim), "q_heads": (batch, num_heads, seq_len, d),
            "scores": (batch, num_heads, seq_len, seq_len), "merged": (batch, seq_len, embed_dim)}


def shapes_wrong_assert(batch, seq_len, embed_dim, num_heads):
    """An assert instead of a ValueError."""
    assert embed_dim % num_heads == 0, f"embed_dim={embed_dim}, num_heads={num_heads}"
    return shapes_divmod(batch, seq_len, embed_dim, num_heads)


def weights_mib_in_bytes_first():
    nbytes = 12 * 1024 * 1024 * 4            # 12 heads, 1024 x 1024 weights each, float32
    return nbytes / 1024 / 1024


def weights_mib_rounded():
    """A prediction written down as a plain number."""
    return 48.0


def weights_mib_wrong_batch_of_eight():
    return 8 * 12 * 1024 * 1024 * 4 / 2**20


def weights_mib_wrong_gigabytes():
    """The size in GiB where MiB are asked for."""
    return 12 * 1024 * 1024 * 4 / 2**30


CORRECT = {
    "dims.split_heads": [split_heads_chunk_stack, split_heads_numpy],
    "dims.heads_into_batch": [hib_batch_first_route, hib_loop, hib_einops_like],
    "dims.shapes": [shapes_divmod, shapes_step_by_step],
    "dims.weights_mib": [weights_mib_in_bytes_first, weights_mib_rounded],
}

WRONG = {
    "dims.split_heads": [split_heads_wrong_reshape, split_heads_wrong_no_transpose, split_heads_wrong_strided],
    "dims.heads_into_batch": [hib_wrong_view, hib_wrong_batch_first_assumed, hib_wrong_heads_last],
    "dims.shapes": [shapes_wrong_message, shapes_wrong_scores_over_features, shapes_wrong_no_check,
                    shapes_wrong_assert],
    "dims.weights_mib": [weights_mib_wrong_batch_of_eight, weights_mib_wrong_gigabytes],
}


# ---------------------------------------------------------------- more held-out wrong answers

def split_heads_wrong_permute_order(x, num_heads):
    """(B, T, h, d) permuted to (B, h, d, T): the last two axes swapped."""
    B, T, C = x.shape
    return x.view(B, T, num_heads, C // num_heads).permute(0, 2, 3, 1)


def hib_wrong_time_last(x, num_heads):
    """(T, B, C) -> (B * h, d, T)."""
    T, B, C = x.shape
    d = C // num_heads
    return x.reshape(T, B * num_heads, d).permute(1, 2, 0)


def shapes_wrong_merged_heads_first(batch, seq_len, embed_dim, num_heads):
    if embed_dim % num_heads:
        raise ValueError(f"embed_dim={embed_dim} not divisible by num_heads={num_heads}")
    B, T, C, h = batch, seq_len, embed_dim, num_heads
    return {"qkv": (B, T, 3 * C), "q_heads": (B, h, T, C // h), "scores": (B, h, T, T), "merged": (B, h, T * C // h)}


WRONG["dims.split_heads"] += [split_heads_wrong_permute_order]
WRONG["dims.heads_into_batch"] += [hib_wrong_time_last]
WRONG["dims.shapes"] += [shapes_wrong_merged_heads_first]
