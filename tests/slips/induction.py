"""Slips in lesson 13: the prefix-matching score, mean-ablation, and the prediction of how many
pairs K-compose."""

import torch

from . import Slip


def prefix_matching_rolled(weights, tokens):
    B, T = tokens.shape
    previous = torch.roll(tokens, shifts=1, dims=1)                    # tokens[j - 1] for key j
    target = (tokens[:, :, None] == previous[:, None, :]) & torch.ones(T, T, dtype=torch.bool).tril()
    has = target.any(dim=-1)                                           # (B, T)
    score = (weights * target[:, None]).sum(dim=-1)                    # (B, h, T)
    return (score * has[:, None]).sum(dim=(0, 2)) / has.sum()


def prefix_matching_strictly_earlier_keys(weights, tokens):
    B, T = tokens.shape
    target = torch.zeros(B, T, T, dtype=torch.bool)
    target[:, :, 1:] = tokens[:, :, None] == tokens[:, None, :-1]
    target &= torch.ones(T, T, dtype=torch.bool).tril(-1)              # j < i
    has = target.any(dim=-1)
    score = (weights * target[:, None]).sum(dim=-1)
    return (score * has[:, None]).sum(dim=(0, 2)) / has.sum()


def mean_ablate_centred(head_outputs, out_proj_weight, head):
    B, h, T, d = head_outputs.shape
    x = head_outputs.clone()
    x[:, head] -= head_outputs[:, head].mean(dim=(0, 1))              # the mean taken out, the rest kept
    return x.permute(0, 2, 1, 3).reshape(B, T, h * d) @ out_proj_weight.T


def mean_ablate_merged_without_the_transpose(head_outputs, out_proj_weight, head):
    B, h, T, d = head_outputs.shape
    x = head_outputs.clone()
    x[:, head] = head_outputs[:, head].mean(dim=(0, 1))
    return x.reshape(B, T, h * d) @ out_proj_weight.T


WRITES = {0: "B", 1: "CD", 2: "A", 3: "B"}
QUERIES = {0: "A", 1: "B", 2: "D", 3: "B"}
KEYS = {0: "B", 1: "C", 2: "AB", 3: "D"}


def composing_head_through_the_queries():
    return sum(bool(set(w) & set(q)) for w in WRITES.values() for q in QUERIES.values())


def composing_head_heads_that_compose():
    return sum(any(set(w) & set(k) for k in KEYS.values()) for w in WRITES.values())


def composing_head_blocks_read_by_keys():
    """The key blocks a first-layer head writes: B, C, A, B, D."""
    return sum(len(set(k)) for k in KEYS.values())


def composing_head_one_per_second_layer_head():
    return len(KEYS)


def prefix_matching_key_before_the_occurrence(weights, tokens):
    B, T = tokens.shape
    target = torch.zeros(B, T, T, dtype=torch.bool)
    target[:, :, :-1] = tokens[:, :, None] == tokens[:, None, 1:]      # key j with tokens[j + 1] == tokens[i]
    target &= torch.ones(T, T, dtype=torch.bool).tril()
    has = target.any(dim=-1)
    score = (weights * target[:, None]).sum(dim=-1)
    return (score * has[:, None]).sum(dim=(0, 2)) / has.sum()


def mean_ablate_mean_over_the_batch(head_outputs, out_proj_weight, head):
    B, h, T, d = head_outputs.shape
    x = head_outputs.clone()
    x[:, head] = head_outputs[:, head].mean(dim=0)                     # (T, d): one mean per position
    return x.transpose(1, 2).flatten(2) @ out_proj_weight.T


SLIPS = {
    "induction.prefix_matching_score": [
        Slip(prefix_matching_key_before_the_occurrence, "the key before an earlier occurrence, tokens[j + 1]"),
        Slip(prefix_matching_rolled, "torch.roll wraps the last token into key 0", ("roll-wraps",)),
        Slip(prefix_matching_strictly_earlier_keys, "j < i: the key at the query's own position left out"),
    ],
    "induction.mean_ablate_head": [
        Slip(mean_ablate_mean_over_the_batch, "the mean over the batch only, one per position",
             ("mean-per-position",)),
        Slip(mean_ablate_centred, "subtracts the mean instead of replacing the output by it", ("mean-subtracted",)),
        Slip(mean_ablate_merged_without_the_transpose, "heads merged by a plain reshape of (B, h, T, d)",
             ("direct-merge",)),
    ],
    "induction.composing_head": [
        Slip(composing_head_through_the_queries, "counts the pairs through the queries", ("q-composition",)),
        Slip(composing_head_heads_that_compose, "counts first-layer heads, not pairs", ("heads-not-pairs",)),
        Slip(composing_head_blocks_read_by_keys, "counts the key blocks read, not the pairs", ("blocks-not-pairs",)),
        Slip(composing_head_one_per_second_layer_head, "one K-composing head per second-layer head: heads, not pairs",
             ("heads-not-pairs",)),
    ],
}
