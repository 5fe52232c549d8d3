"""Correct solutions of the onehead exercises, written differently from the reference."""

import numpy as np
import torch


def entropy_xlogy(weights):
    return -torch.xlogy(weights, weights).sum(dim=-1)        # xlogy(0, 0) = 0


def entropy_where(weights):
    logs = torch.where(weights > 0, weights.log(), torch.zeros_like(weights))   # log 0 never used
    return -(weights * logs).sum(-1)


def entropy_numpy(weights):
    w = weights.detach().cpu().numpy().astype(np.float64)
    terms = np.zeros_like(w)
    positive = w > 0
    terms[positive] = w[positive] * np.log(w[positive])
    return torch.from_numpy(-terms.sum(axis=-1)).to(weights.dtype)


def entropy_loop(weights):
    rows = weights.reshape(-1, weights.shape[-1]).double()
    out = torch.stack([-sum(p * p.log() for p in row if p > 0) if (row > 0).any() else row.new_zeros(())
                       for row in rows])
    return out.reshape(weights.shape[:-1]).to(weights.dtype)


CORRECT = {
    "onehead.attention_entropy": [entropy_xlogy, entropy_where, entropy_numpy, entropy_loop],
}
