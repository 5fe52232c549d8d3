"""Slips in lesson 03's dimension exercises: splitting heads, heads into the batch, the shapes,
and the prediction of the weights' memory."""

import torch

from . import Slip


# ---------------------------------------------------------------- dims.split_heads

def split_heads_straight_to_heads_first(x, num_heads):
    B, T, C = x.shape
    return x.reshape(B, num_heads, -1, C // num_heads)


def split_heads_chunks_stacked_last(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=2)      # (B, T, h, d), never transposed


# ---------------------------------------------------------------- dims.heads_into_batch

def heads_into_batch_with_views(x, num_heads):
    T, B, C = x.shape
    return x.view(T, B * num_heads, C // num_heads).transpose(0, 1)     # .view where the statement allows
                                                                         # a non-contiguous x


def heads_into_batch_heads_concatenated(x, num_heads):
    T, B, C = x.shape
    d = C // num_heads
    return torch.cat([x[..., i * d:(i + 1) * d].transpose(0, 1) for i in range(num_heads)], dim=0)


# ---------------------------------------------------------------- dims.shapes

def shapes_scores_between_features(batch, seq_len, embed_dim, num_heads):
    if embed_dim % num_heads:
        raise ValueError(f"embed_dim={embed_dim} must be a multiple of num_heads={num_heads}")
    d = embed_dim // num_heads
    return {"qkv": (batch, seq_len, 3 * embed_dim), "q_heads": (batch, num_heads, seq_len, d),
            "scores": (batch, num_heads, d, d), "merged": (batch, seq_len, embed_dim)}


def shapes_qkv_per_head(batch, seq_len, embed_dim, num_heads):
    if embed_dim % num_heads:
        raise ValueError(f"embed_dim={embed_dim} must be a multiple of num_heads={num_heads}")
    d = embed_dim // num_heads
    return {"qkv": (batch, seq_len, 3 * d), "q_heads": (batch, num_heads, seq_len, d),
            "scores": (batch, num_heads, seq_len, seq_len), "merged": (batch, seq_len, embed_dim)}


# ---------------------------------------------------------------- dims.weights_mib

def weights_mib_in_megabytes():
    return 12 * 1024**2 * 4 / 1e6


def weights_mib_as_float64():
    return 12 * 1024 * 1024 * 8 / 2**20


def weights_mib_weights_and_values():
    """The weights, and the values they average, counted together."""
    return (12 * 1024 * 1024 + 1024 * 768) * 4 / 2**20


def weights_mib_in_kib():
    return 12 * 1024 * 1024 * 4 / 1024


def weights_mib_every_layer():
    layers = 12
    return layers * 12 * 1024 * 1024 * 4 / 2**20


def weights_mib_bits():
    return 12 * 1024 * 1024 * 32 / 2**20


def split_heads_time_moved_last(x, num_heads):
    B, T, C = x.shape
    return x.view(B, T, num_heads, C // num_heads).permute(0, 2, 3, 1)     # (B, h, d, T)


SLIPS = {
    "dims.split_heads": [
        Slip(split_heads_time_moved_last, "permuted to (B, h, d, T)"),
        Slip(split_heads_straight_to_heads_first, "a reshape straight to (B, h, T, d)", ("direct-view",)),
        Slip(split_heads_chunks_stacked_last, "(B, T, h, d): the heads never moved in front of T", ("no-transpose",)),
    ],
    "dims.heads_into_batch": [
        Slip(heads_into_batch_with_views, ".view on an input that may be non-contiguous", ("view-not-contiguous",)),
        Slip(heads_into_batch_heads_concatenated, "heads concatenated along the batch: row i * B + b",
             ("head-major",)),
    ],
    "dims.shapes": [
        Slip(shapes_scores_between_features, "scores (B, h, d_h, d_h)"),
        Slip(shapes_qkv_per_head, "the fused projection 3 d_h wide, one head's"),
    ],
    "dims.weights_mib": [
        Slip(weights_mib_in_megabytes, "megabytes, 10**6 bytes", ("megabytes",)),
        Slip(weights_mib_as_float64, "8 bytes per number", ("eight-bytes",)),
        Slip(weights_mib_weights_and_values, "adds the values' size to the weights'"),
        Slip(weights_mib_in_kib, "KiB, 2**10 bytes", ("kibibytes",)),
        Slip(weights_mib_every_layer, "all 12 layers' weights", ("all-layers",)),
        Slip(weights_mib_bits, "32 per number: bits, not bytes", ("bits-or-batch-of-8",)),
    ],
}
