"""Slips in lesson 07's alignment score."""

import torch

from . import Slip


def alignment_floor_division(weights, ideal, tgt_lengths):
    Tq = weights.shape[-2]
    real = torch.arange(Tq)[None, :] < tgt_lengths[:, None]
    hits = ((weights.argmax(dim=-1) == ideal) & real[:, None, :]).sum(dim=(0, 2))     # int64 counts
    return (hits // real.sum()).to(weights.dtype)


def alignment_mean_of_each_sequence(weights, ideal, tgt_lengths):
    Tq = weights.shape[-2]
    real = (torch.arange(Tq)[None, :] < tgt_lengths[:, None]).to(weights.dtype)        # (B, Tq)
    hits = (weights.argmax(dim=-1) == ideal).to(weights.dtype) * real[:, None, :]      # (B, h, Tq)
    return (hits.sum(dim=2) / tgt_lengths[:, None].to(weights.dtype)).mean(dim=0)


def alignment_lengths_minus_one(weights, ideal, tgt_lengths):
    Tq = weights.shape[-2]
    real = torch.arange(Tq)[None, :] < tgt_lengths[:, None] - 1
    hits = (weights.argmax(dim=-1) == ideal) & real[:, None, :]
    return hits.sum(dim=(0, 2)).to(weights.dtype) / real.sum().to(weights.dtype)


SLIPS = {
    "cross.alignment_accuracy": [
        Slip(alignment_floor_division, "hits // pairs: integer division", ("integer-division",)),
        Slip(alignment_mean_of_each_sequence, "the mean of per-sequence fractions", ("mean-of-sequences",)),
        Slip(alignment_lengths_minus_one, "i < tgt_lengths[b] - 1: the last real query left out", ("length-minus-one",)),
    ],
}
