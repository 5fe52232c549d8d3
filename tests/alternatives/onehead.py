"""Answers to the onehead exercise: correct softmaxes written differently from the
reference, and classic wrong ones."""

import numpy as np
import torch


def softmax_max_values(scores):
    """The row max from .max(dim=...).values, unsqueezed back."""
    m = scores.max(dim=-1).values.unsqueeze(-1)
    e = (scores - m).exp()
    return e / e.sum(-1, keepdim=True)


def softmax_numpy(scores):
    """numpy in float64, then back to the scores' dtype."""
    s = scores.detach().cpu().numpy().astype(np.float64)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return torch.from_numpy(e / e.sum(axis=-1, keepdims=True)).to(scores.dtype)


def softmax_row_loop(scores):
    """One row at a time, the max taken with a Python max over the finite entries."""
    rows = scores.reshape(-1, scores.shape[-1])
    out = torch.empty_like(rows)
    for i, row in enumerate(rows):
        m = max(float(s) for s in row if s != float("-inf"))
        e = torch.exp(row - m)
        out[i] = e / e.sum()
    return out.reshape(scores.shape)


def softmax_log_domain(scores):
    """log-sum-exp written out: exp(s - m - log(sum(exp(s - m))))."""
    m = scores.amax(-1, keepdim=True)
    lse = m + torch.log(torch.exp(scores - m).sum(-1, keepdim=True))
    return torch.exp(scores - lse)


def softmax_wrong_naive(scores):
    e = torch.exp(scores)
    return e / e.sum(-1, keepdim=True)


def softmax_wrong_clamped(scores):
    """Clamping the scores instead of shifting them changes the answer."""
    e = torch.exp(scores.clamp(-80, 80))
    return e / e.sum(-1, keepdim=True)


def softmax_wrong_min(scores):
    """Shifts by the row minimum: exp of the others still overflows (and -inf breaks it)."""
    e = torch.exp(scores - scores.amin(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def softmax_wrong_shared_max(scores):
    e = torch.exp(scores - scores.max())
    return e / e.sum(dim=-1, keepdim=True)


def softmax_forbidden_torch(scores):
    return torch.softmax(scores, dim=-1)


def softmax_forbidden_method(scores):
    return scores.softmax(-1)


def softmax_forbidden_logsumexp(scores):
    return torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))


CORRECT = {
    "onehead.stable_softmax": [softmax_max_values, softmax_numpy, softmax_row_loop, softmax_log_domain],
}

WRONG = {
    "onehead.stable_softmax": [softmax_wrong_naive, softmax_wrong_clamped, softmax_wrong_min,
                               softmax_wrong_shared_max],
}

FORBIDDEN = {
    "onehead.stable_softmax": [softmax_forbidden_torch, softmax_forbidden_method, softmax_forbidden_logsumexp],
}


# ---------------------------------------------------------------- more held-out wrong answers

def softmax_wrong_sum_keepdim_false(scores):
    """The row sums without keepdim: they line up with the columns."""
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1)


def softmax_wrong_log_space_sign(scores):
    """log-softmax by hand with the sign of the log-sum flipped."""
    m = scores.amax(dim=-1, keepdim=True)
    lse = m + torch.log(torch.exp(scores - m).sum(dim=-1, keepdim=True))
    return torch.exp(scores + lse)


WRONG["onehead.stable_softmax"] += [softmax_wrong_sum_keepdim_false, softmax_wrong_log_space_sign]
