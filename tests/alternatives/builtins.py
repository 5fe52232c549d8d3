"""Answers to the built-ins exercises: correct ones written differently from the references, and
classic wrong ones."""

import math

import numpy as np
import torch


# ---------------------------------------------------------------- torch_masks_to_allowed

def torch_masks_to_allowed_loop(attn_mask, key_padding_mask):
    """Sequence by sequence: allowed = not blocked by attn_mask and key not padding."""
    rows = []
    for padded in key_padding_mask:                                  # (Tk,) per sequence
        allowed = torch.logical_and(torch.logical_not(attn_mask), torch.logical_not(padded).unsqueeze(0))
        rows.append(allowed.unsqueeze(0))                            # (1, Tq, Tk)
    return torch.stack(rows)                                         # (B, 1, Tq, Tk)


def torch_masks_to_allowed_numpy(attn_mask, key_padding_mask):
    """De Morgan in numpy: (not a) and (not p) over broadcast axes."""
    a = ~attn_mask.numpy()                                           # (Tq, Tk)
    p = ~key_padding_mask.numpy()                                    # (B, Tk)
    return torch.from_numpy(np.logical_and(a[np.newaxis, np.newaxis], p[:, np.newaxis, np.newaxis, :]))


def torch_masks_wrong_or(attn_mask, key_padding_mask):
    """Inverts each mask but joins them with | : a key is allowed if either allows it."""
    return ~attn_mask[None, None] | ~key_padding_mask[:, None, None, :]


def torch_masks_wrong_float(attn_mask, key_padding_mask):
    """Right pattern as an additive float mask."""
    allowed = ~(attn_mask[None, None] | key_padding_mask[:, None, None, :])
    return torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))


def torch_masks_wrong_padding_transposed(attn_mask, key_padding_mask):
    """The padding mask laid along the queries."""
    return ~(attn_mask[None, None] | key_padding_mask[:, None, :, None])


# ---------------------------------------------------------------- document_mask

def document_mask_loops(doc_ids):
    B, T = doc_ids.shape
    out = torch.zeros(B, 1, T, T, dtype=torch.bool)
    for b in range(B):
        for i in range(T):
            for j in range(i + 1):
                out[b, 0, i, j] = bool(doc_ids[b, i] == doc_ids[b, j])
    return out


def document_mask_from_starts(doc_ids):
    """Each position's document start; a key is allowed from its query's start up to the query."""
    B, T = doc_ids.shape
    pos = torch.arange(T).expand(B, T)
    new_doc = torch.ones(B, T, dtype=torch.bool)
    new_doc[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    start = torch.where(new_doc, pos, torch.zeros_like(pos)).cummax(dim=1).values   # (B, T)
    j = torch.arange(T)
    return ((j[None, None, :] >= start[:, :, None]) & (j[None, None, :] <= pos[:, :, None])).unsqueeze(1)


def document_mask_numpy(doc_ids):
    ids = doc_ids.numpy()
    T = ids.shape[1]
    same = ids[:, :, None] == ids[:, None, :]
    return torch.from_numpy(np.logical_and(same, np.tril(np.ones((T, T), dtype=bool)))[:, None])


def document_mask_wrong_first_doc_only(doc_ids):
    """Treats every position after the first document as padding."""
    T = doc_ids.shape[-1]
    real = doc_ids == doc_ids[:, :1]
    return (torch.ones(T, T, dtype=torch.bool).tril() & real[:, None, :] & real[:, :, None])[:, None]


def document_mask_wrong_no_batch(doc_ids):
    """Uses the first row's documents for every row."""
    T = doc_ids.shape[-1]
    same = doc_ids[0][:, None] == doc_ids[0][None, :]
    return (same & torch.ones(T, T, dtype=torch.bool).tril()).expand(doc_ids.shape[0], 1, T, T)


def document_mask_wrong_block_diagonal_upper(doc_ids):
    """Same document, but the future keys of the document allowed (bidirectional inside it)."""
    return (doc_ids[:, :, None] == doc_ids[:, None, :])[:, None].clone()


def document_mask_forbidden_flex(doc_ids):
    from torch.nn.attention.flex_attention import create_mask

    B, T = doc_ids.shape

    def same_document_causal(b, h, q, kv):
        return (doc_ids[b, q] == doc_ids[b, kv]) & (q >= kv)
    return create_mask(same_document_causal, B, 1, T, T, device="cpu")


# ---------------------------------------------------------------- alibi_slopes

def alibi_slopes_recursive(num_heads):
    """The paper's construction, recursively, in Python floats."""
    def power_of_two(n):
        start = 2 ** (-8 / n)
        return [start ** (k + 1) for k in range(n)]

    if math.log2(num_heads).is_integer():
        return torch.tensor(power_of_two(num_heads), dtype=torch.float64)
    n = 2 ** math.floor(math.log2(num_heads))
    extra = alibi_slopes_recursive(2 * n)[0::2][: num_heads - n]
    return torch.cat([torch.tensor(power_of_two(n), dtype=torch.float64), extra])


def alibi_slopes_exponents(num_heads):
    """The exponents first: -8 k / n, then -8 (2 j + 1) / (2 n) for the extra ones."""
    n = 1 << (num_heads.bit_length() - 1)
    exps = [-8.0 * k / n for k in range(1, n + 1)]
    exps += [-8.0 * (2 * j + 1) / (2 * n) for j in range(num_heads - n)]
    return torch.pow(2.0, torch.tensor(exps, dtype=torch.float64))


def alibi_slopes_numpy(num_heads):
    n = int(2 ** np.floor(np.log2(num_heads)))
    coarse = np.exp2(-8.0 * np.arange(1, n + 1) / n)
    finer = np.exp2(-8.0 * np.arange(1, 2 * n + 1) / (2 * n))
    return torch.from_numpy(np.concatenate([coarse, finer[::2][: num_heads - n]]))


def alibi_slopes_wrong_float32(num_heads):
    return alibi_slopes_numpy(num_heads).float()


def alibi_slopes_wrong_linear(num_heads):
    """Evenly spaced exponents between -8/h and -8: the power-of-two rule, applied to any h."""
    return 2.0 ** torch.linspace(-8.0 / num_heads, -8.0, num_heads, dtype=torch.float64)


def alibi_slopes_wrong_sorted(num_heads):
    """The right slopes, sorted from the largest down."""
    return alibi_slopes_numpy(num_heads).sort(descending=True).values


CORRECT = {
    "builtins.torch_masks_to_allowed": [torch_masks_to_allowed_loop, torch_masks_to_allowed_numpy],
    "builtins.document_mask": [document_mask_loops, document_mask_from_starts, document_mask_numpy],
    "builtins.alibi_slopes": [alibi_slopes_recursive, alibi_slopes_exponents, alibi_slopes_numpy],
}

WRONG = {
    "builtins.torch_masks_to_allowed": [torch_masks_wrong_or, torch_masks_wrong_float,
                                        torch_masks_wrong_padding_transposed],
    "builtins.document_mask": [document_mask_wrong_first_doc_only, document_mask_wrong_no_batch,
                               document_mask_wrong_block_diagonal_upper],
    "builtins.alibi_slopes": [alibi_slopes_wrong_float32, alibi_slopes_wrong_linear, alibi_slopes_wrong_sorted],
}

FORBIDDEN = {
    "builtins.document_mask": [document_mask_forbidden_flex],
}


# ---------------------------------------------------------------- more held-out wrong answers

def torch_masks_wrong_padding_inverted_only(attn_mask, key_padding_mask):
    """Only key_padding_mask inverted and joined with | ."""
    return attn_mask[None, None] | ~key_padding_mask[:, None, None, :]


def document_mask_wrong_ids_compared_to_first_token(doc_ids):
    """Same document as the row's first token, for every query."""
    T = doc_ids.shape[-1]
    same = (doc_ids == doc_ids[:, :1])[:, None, :].expand(-1, T, -1)
    return (same & torch.ones(T, T, dtype=torch.bool).tril())[:, None]


def alibi_slopes_wrong_halved_exponent(num_heads):
    """2 ** (-4 k / n): half the exponent."""
    return alibi_slopes_numpy(num_heads) ** 0.5


WRONG["builtins.torch_masks_to_allowed"] += [torch_masks_wrong_padding_inverted_only]
WRONG["builtins.document_mask"] += [document_mask_wrong_ids_compared_to_first_token]
WRONG["builtins.alibi_slopes"] += [alibi_slopes_wrong_halved_exponent]
