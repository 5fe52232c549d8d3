"""Allocate far more memory than the machine has."""
import torch


def multi_query_head(x, w_q, w_k, w_v, w_o, num_heads):
    blocks = []
    while True:
        blocks.append(bytearray(1 << 30))


def split_heads(x, num_heads):
    return torch.empty(1 << 40)
