"""Answers to the induction-heads exercises: correct ones written differently from the
references, and classic wrong ones."""

import numpy as np
import torch


# ---------------------------------------------------------------- k_composition

def k_composition_loops(w_q, w_k, w_v, w_o):
    """Pair by pair, the Frobenius norm as the square root of a sum of squares."""
    h1, h2 = w_v.shape[0], w_q.shape[0]
    out = torch.empty(h1, h2, dtype=w_q.dtype)
    for a in range(h1):
        ov = w_v[a] @ w_o[a]
        for b in range(h2):
            qk = w_q[b] @ w_k[b].T
            m = qk @ ov.T
            out[a, b] = (m ** 2).sum().sqrt() / ((qk ** 2).sum().sqrt() * (ov ** 2).sum().sqrt())
    return out


def k_composition_einsum(w_q, w_k, w_v, w_o):
    """einsum for the matrices, torch.linalg.norm for the norms."""
    qk = torch.einsum("hcd,hed->hce", w_q, w_k)                   # (h2, C, C)
    ov = torch.einsum("acd,ade->ace", w_v, w_o)                   # (h1, C, C)
    m = torch.einsum("bce,afe->abcf", qk, ov)                     # (h1, h2, C, C): W_QK W_OV^T
    norm = torch.linalg.norm(m, dim=(-2, -1))
    return norm / torch.outer(torch.linalg.norm(ov, dim=(-2, -1)), torch.linalg.norm(qk, dim=(-2, -1)))


def k_composition_numpy(w_q, w_k, w_v, w_o):
    """numpy float64; M^T = W_OV W_QK^T has the same Frobenius norm as M."""
    q, k, v, o = (t.double().numpy() for t in (w_q, w_k, w_v, w_o))
    qk = q @ np.swapaxes(k, -1, -2)
    ov = v @ o
    mt = ov[:, None] @ np.swapaxes(qk, -1, -2)[None]              # (h1, h2, C, C)
    norm = np.sqrt((mt ** 2).sum(axis=(-2, -1)))
    fro = lambda x: np.sqrt((x ** 2).sum(axis=(-2, -1)))          # noqa: E731
    return torch.from_numpy(norm / np.outer(fro(ov), fro(qk))).to(w_q.dtype)


def k_composition_wrong_spectral(w_q, w_k, w_v, w_o):
    """The spectral norm (largest singular value) instead of the Frobenius norm."""
    qk = w_q @ w_k.transpose(-2, -1)
    ov = w_v @ w_o
    m = qk[None] @ ov[:, None].transpose(-2, -1)
    spec = lambda x: torch.linalg.matrix_norm(x, ord=2)           # noqa: E731
    return spec(m) / (spec(ov)[:, None] * spec(qk)[None, :])


def k_composition_wrong_v_composition(w_q, w_k, w_v, w_o):
    """Composes head a's OV with head b's QK as if b's values read a's output: W_OV W_QK^T."""
    qk = w_q @ w_k.transpose(-2, -1)
    ov = w_v @ w_o
    m = ov[:, None] @ qk[None].transpose(-2, -1)
    m = m @ ov[:, None]
    return torch.linalg.matrix_norm(m) / (torch.linalg.matrix_norm(ov)[:, None] ** 2
                                          * torch.linalg.matrix_norm(qk)[None, :])


def k_composition_wrong_cosine(w_q, w_k, w_v, w_o):
    """The cosine similarity of the flattened W_QK and W_OV."""
    qk = (w_q @ w_k.transpose(-2, -1)).flatten(1)
    ov = (w_v @ w_o).flatten(1)
    return torch.nn.functional.normalize(ov, dim=1) @ torch.nn.functional.normalize(qk, dim=1).T


# ---------------------------------------------------------------- prefix_matching_score

def prefix_loops(weights, tokens):
    B, h, T, _ = weights.shape
    total = torch.zeros(h, dtype=torch.float64)
    n = 0
    for b in range(B):
        for i in range(T):
            keys = [j for j in range(1, i + 1) if tokens[b, j - 1] == tokens[b, i]]
            if keys:
                total += weights[b, :, i, keys].double().sum(dim=-1)
                n += 1
    return (total / n).to(weights.dtype)


def prefix_shifted_tokens(weights, tokens):
    """The previous token of every key, with a sentinel for key 0, compared with every query."""
    B, T = tokens.shape
    previous = torch.cat([torch.full((B, 1), -1, dtype=tokens.dtype), tokens[:, :-1]], dim=1)   # (B, T)
    target = (tokens[:, :, None] == previous[:, None, :]) & (torch.arange(T)[None, :] <= torch.arange(T)[:, None])
    rows = target.any(-1)                                        # (B, T)
    per_row = torch.einsum("bhij,bij->bhi", weights, target.to(weights.dtype))
    return per_row.permute(1, 0, 2)[:, rows].mean(dim=1)


def prefix_numpy(weights, tokens):
    w, t = weights.double().numpy(), tokens.numpy()
    B, h, T, _ = w.shape
    prev = np.concatenate([np.full((B, 1), np.iinfo(np.int64).min), t[:, :-1]], axis=1)
    target = (t[:, :, None] == prev[:, None, :]) & np.tril(np.ones((T, T), dtype=bool))
    rows = target.any(-1)
    per_row = (w * target[:, None]).sum(-1)                      # (B, h, T)
    return torch.from_numpy(per_row.transpose(1, 0, 2)[:, rows].mean(axis=1)).to(weights.dtype)


def prefix_wrong_half(weights, tokens):
    """Assumes the second half repeats the first, as in this lesson's training data."""
    T = tokens.shape[1]
    half = T // 2
    i = torch.arange(half, T)
    return weights[:, :, i, i - half + 1].mean(dim=(0, 2))


def prefix_wrong_future(weights, tokens):
    """Targets anywhere, after an occurrence before OR after the query."""
    B, T = tokens.shape
    same = tokens[:, :, None] == tokens[:, None, :]
    target = torch.zeros(B, T, T, dtype=torch.bool)
    target[:, :, 1:] = same[:, :, :-1]
    target &= ~torch.eye(T, dtype=torch.bool)
    rows = target.any(-1)
    return (weights * target[:, None]).sum(-1).permute(1, 0, 2)[:, rows].mean(dim=1)


def prefix_wrong_previous_token(weights, tokens):
    """The previous-token score: the weight on key i - 1."""
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2))


# ---------------------------------------------------------------- mean_ablate_head

def mean_ablate_subtract(head_outputs, out_proj_weight, head):
    """The full output, minus the head's own contribution, plus its mean's."""
    B, h, T, d = head_outputs.shape
    cols = out_proj_weight[:, head * d:(head + 1) * d]                     # (C, d): reads this head
    full = head_outputs.transpose(1, 2).reshape(B, T, h * d) @ out_proj_weight.T
    own = head_outputs[:, head] @ cols.T                                   # (B, T, C)
    mean = head_outputs[:, head].mean(dim=(0, 1)) @ cols.T                 # (C,)
    return full - own + mean


def mean_ablate_einsum(head_outputs, out_proj_weight, head):
    """Per-head blocks of W_O with einsum; the head's slot replaced with torch.where."""
    B, h, T, d = head_outputs.shape
    mean = head_outputs[:, head].mean(dim=(0, 1))
    pick = (torch.arange(h) == head)[None, :, None, None]
    x = torch.where(pick, mean.expand(B, h, T, d), head_outputs)
    w = out_proj_weight.view(-1, h, d)                                     # (C_out, h, d)
    return torch.einsum("bhtd,ohd->bto", x, w)


def mean_ablate_cat(head_outputs, out_proj_weight, head):
    """The heads concatenated one by one, the ablated one as its mean repeated."""
    B, h, T, d = head_outputs.shape
    parts = [head_outputs[:, k] if k != head
             else head_outputs[:, k].reshape(-1, d).mean(0).expand(B, T, d) for k in range(h)]
    return torch.cat(parts, dim=-1) @ out_proj_weight.T


def mean_ablate_wrong_in_place(head_outputs, out_proj_weight, head):
    """Right numbers, but it writes the mean into the caller's tensor."""
    B, h, T, d = head_outputs.shape
    head_outputs[:, head] = head_outputs[:, head].mean(dim=(0, 1))
    return head_outputs.transpose(1, 2).reshape(B, T, h * d) @ out_proj_weight.T


def mean_ablate_wrong_first_sequence(head_outputs, out_proj_weight, head):
    """The mean over the positions of the first sequence only."""
    B, h, T, d = head_outputs.shape
    x = head_outputs.clone()
    x[:, head] = head_outputs[0, head].mean(dim=0)
    return x.transpose(1, 2).reshape(B, T, h * d) @ out_proj_weight.T


def mean_ablate_wrong_rows(head_outputs, out_proj_weight, head):
    """Zeroes the head's rows of the weight (its output features) and adds nothing back."""
    B, h, T, d = head_outputs.shape
    w = out_proj_weight.clone()
    w[head * d:(head + 1) * d] = 0
    return head_outputs.transpose(1, 2).reshape(B, T, h * d) @ w.T


def composing_head_by_overlap():
    """The pairs whose feature sets overlap, with the blocks as feature numbers."""
    block = {"A": set(range(0, 4)), "B": set(range(4, 8)), "C": set(range(8, 12)), "D": set(range(12, 16))}
    writes = [block["B"], block["C"] | block["D"], block["A"], block["B"]]
    keys = [block["B"], block["C"], block["A"] | block["B"], block["D"]]
    return sum(1 for w in writes for k in keys if w & k)


def composing_head_written_down():
    """Counted off the tables: 2 + 1 + 3 + 1, second-layer head by second-layer head."""
    return 7


def composing_head_wrong_last():
    """The last head number of the tables, by habit (the old question asked for a head)."""
    return 3


def composing_head_wrong_two_heads():
    """7.5: "the pairs, and half of head 1's, which writes two blocks"."""
    return 7.5


CORRECT = {
    "induction.k_composition": [k_composition_loops, k_composition_einsum, k_composition_numpy],
    "induction.prefix_matching_score": [prefix_loops, prefix_shifted_tokens, prefix_numpy],
    "induction.mean_ablate_head": [mean_ablate_subtract, mean_ablate_einsum, mean_ablate_cat],
    "induction.composing_head": [composing_head_by_overlap, composing_head_written_down],
}

WRONG = {
    "induction.k_composition": [k_composition_wrong_spectral, k_composition_wrong_v_composition,
                                k_composition_wrong_cosine],
    "induction.prefix_matching_score": [prefix_wrong_half, prefix_wrong_future, prefix_wrong_previous_token],
    "induction.mean_ablate_head": [mean_ablate_wrong_in_place, mean_ablate_wrong_first_sequence,
                                   mean_ablate_wrong_rows],
    "induction.composing_head": [composing_head_wrong_last, composing_head_wrong_two_heads],
}


# ---------------------------------------------------------------- more held-out wrong answers

def k_composition_wrong_norm_of_product_only_qk(w_q, w_k, w_v, w_o):
    """Normalised by ||W_QK|| squared instead of ||W_QK|| ||W_OV||."""
    qk = w_q @ w_k.transpose(-2, -1)
    ov = w_v @ w_o
    m = qk[None] @ ov[:, None].transpose(-2, -1)
    return torch.linalg.matrix_norm(m) / (torch.linalg.matrix_norm(qk)[None, :] ** 2)


def prefix_wrong_first_occurrence_only(weights, tokens):
    """Only the key after the FIRST earlier occurrence counts."""
    B, T = tokens.shape
    same = tokens[:, :, None] == tokens[:, None, :]
    target = torch.zeros(B, T, T, dtype=torch.bool)
    target[:, :, 1:] = same[:, :, :-1]
    target &= torch.ones(T, T, dtype=torch.bool).tril()
    idx = torch.arange(T).expand(B, T, T)
    first = torch.where(target, idx, T).amin(dim=-1, keepdim=True)
    target &= idx == first
    counted = target.any(dim=-1)
    on = (weights * target[:, None]).sum(dim=-1)
    return (on * counted[:, None]).sum(dim=(0, 2)) / counted.sum()


def mean_ablate_wrong_median(head_outputs, out_proj_weight, head):
    """The median output instead of the mean."""
    B, h, T, d = head_outputs.shape
    x = head_outputs.clone()
    x[:, head] = head_outputs[:, head].reshape(B * T, d).median(dim=0).values
    return x.transpose(1, 2).reshape(B, T, h * d) @ out_proj_weight.T


WRONG["induction.k_composition"] += [k_composition_wrong_norm_of_product_only_qk]
WRONG["induction.prefix_matching_score"] += [prefix_wrong_first_occurrence_only]
WRONG["induction.mean_ablate_head"] += [mean_ablate_wrong_median]
