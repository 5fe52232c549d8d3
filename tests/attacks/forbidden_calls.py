"""Call the course's reference implementations (and torch's fused ones) where forbidden."""
import importlib

import mha
import torch.nn.functional as F
from mha import causal_mask as reference_mask


def split_heads(x, num_heads):
    return mha.split_heads(x, num_heads)


def merge_heads(x):
    return getattr(__import__("m" + "ha"), "merge_heads")(x)


def causal_mask(q_len, k_len):
    return reference_mask(q_len, k_len)


def decoder_mask(lengths, max_len):
    masks = importlib.import_module("mha.masks")
    return masks.combine_masks(masks.causal_mask(max_len), masks.padding_mask(lengths, max_len))


def multi_head(x, w_q, w_k, w_v, w_o, num_heads):
    B, T, C = x.shape
    q, k, v = ((x @ w).view(B, T, num_heads, -1).transpose(1, 2) for w in (w_q, w_k, w_v))
    out = F.scaled_dot_product_attention(q, k, v)
    return out.transpose(1, 2).reshape(B, T, C) @ w_o
