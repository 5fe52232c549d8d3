"""Correct solutions of lesson 07's exercises, written differently from the references."""

from __future__ import annotations

import numpy as np
import torch


# ------------------------------------------------------------ cross.cross_attention_shapes

def shapes_by_running_it(batch, tgt_len, src_len, embed_dim, kdim, num_heads):
    """Push meta tensors (shapes without data) through the projections and the reshapes."""
    if embed_dim % num_heads:
        raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}")
    d = embed_dim // num_heads
    query = torch.empty(batch, tgt_len, embed_dim, device="meta")
    memory = torch.empty(batch, src_len, kdim, device="meta")
    w_q = torch.empty(embed_dim, embed_dim, device="meta")
    w_k = torch.empty(embed_dim, kdim, device="meta")      # nn.Linear layout: (out, in)

    def heads(x):
        return x.view(batch, x.shape[1], num_heads, d).transpose(1, 2)

    q, k = heads(query @ w_q.T), heads(memory @ w_k.T)
    v = heads(memory @ w_k.T)
    scores = q @ k.transpose(-2, -1)
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, tgt_len, embed_dim)
    return {name: tuple(t.shape) for name, t in
            (("k_proj", w_k), ("q", q), ("k", k), ("v", v), ("scores", scores), ("out", out))}


def shapes_by_hand(batch, tgt_len, src_len, embed_dim, kdim, num_heads):
    d, rest = divmod(embed_dim, num_heads)
    if rest != 0:
        raise ValueError("num_heads must divide embed_dim")
    per_head = lambda length: (batch, num_heads, length, d)  # noqa: E731
    return dict(q=per_head(tgt_len), k=per_head(src_len), v=per_head(src_len),
                scores=(batch, num_heads, tgt_len, src_len), out=(batch, tgt_len, embed_dim),
                k_proj=(embed_dim, kdim))


# ------------------------------------------------------------ cross.mask_for_role

def mask_with_loops(role, src_lengths, tgt_lengths, src_len, tgt_len):
    if role not in {"encoder", "decoder", "cross"}:
        raise ValueError(f"unknown role {role!r}")
    rows = src_len if role == "encoder" else tgt_len
    cols = tgt_len if role == "decoder" else src_len
    lengths = tgt_lengths if role == "decoder" else src_lengths
    out = []
    for b in range(len(src_lengths)):
        n = int(lengths[b])
        out.append([[[j < n and (role != "decoder" or j <= i) for j in range(cols)] for i in range(rows)]])
    return torch.tensor(out, dtype=torch.bool).reshape(len(src_lengths), 1, rows, cols)


def mask_with_numpy(role, src_lengths, tgt_lengths, src_len, tgt_len):
    shapes = {"encoder": (src_len, src_len), "decoder": (tgt_len, tgt_len), "cross": (tgt_len, src_len)}
    if role not in shapes:
        raise ValueError(f"role must be encoder, decoder or cross, not {role!r}")
    q_len, k_len = shapes[role]
    lengths = (tgt_lengths if role == "decoder" else src_lengths).numpy()
    keys = np.arange(k_len)
    allowed = np.broadcast_to(keys < lengths[:, None, None, None], (len(lengths), 1, q_len, k_len))
    if role == "decoder":
        allowed = allowed & np.tri(q_len, k_len, dtype=bool)
    return torch.from_numpy(np.ascontiguousarray(allowed))


# ------------------------------------------------------------ cross.alignment_accuracy

def alignment_per_head_loop(weights, ideal, tgt_lengths):
    scores = []
    for head in weights.unbind(dim=1):                      # (B, Tq, Tk) each
        hits, real = 0, 0
        for b, n in enumerate(tgt_lengths.tolist()):        # only the real queries of each sequence
            best = head[b, :n].max(dim=-1).indices          # (n,)
            hits += int((best == ideal[:n]).sum())
            real += n
        scores.append(hits / real)
    return torch.tensor(scores, dtype=torch.float64).to(weights.dtype)


def alignment_numpy(weights, ideal, tgt_lengths):
    w = weights.detach().double().numpy()
    hits = np.argmax(w, axis=3) == ideal.numpy()            # (B, h, Tq)
    real = np.arange(w.shape[2])[None, :] < tgt_lengths.numpy()[:, None]     # (B, Tq)
    per_head = hits.transpose(1, 0, 2)[:, real]             # (h, number of real pairs)
    return torch.from_numpy(per_head.mean(axis=1)).to(weights.dtype)


def alignment_masked_mean(weights, ideal, tgt_lengths):
    """A weighted mean: weight 1 for real queries, 0 for padded ones."""
    Tq = weights.shape[-2]
    weight = (torch.arange(Tq) < tgt_lengths[:, None]).to(weights.dtype)[:, None, :].expand(-1, weights.shape[1], -1)
    hits = (weights.argmax(dim=-1) == ideal).to(weights.dtype)
    return (hits * weight).sum(dim=(0, 2)) / weight.sum(dim=(0, 2))


def shapes_wrong_kdim_heads(batch, tgt_len, src_len, embed_dim, kdim, num_heads):
    """Keys and values split from kdim instead of embed_dim."""
    if embed_dim % num_heads:
        raise ValueError("embed_dim must be divisible by num_heads")
    d = embed_dim // num_heads
    return {"k_proj": (embed_dim, kdim), "q": (batch, num_heads, tgt_len, d),
            "k": (batch, num_heads, src_len, kdim // num_heads), "v": (batch, num_heads, src_len, kdim // num_heads),
            "scores": (batch, num_heads, tgt_len, src_len), "out": (batch, tgt_len, embed_dim)}


def shapes_wrong_no_error(batch, tgt_len, src_len, embed_dim, kdim, num_heads):
    d = embed_dim // num_heads
    return {"k_proj": (embed_dim, kdim), "q": (batch, num_heads, tgt_len, d), "k": (batch, num_heads, src_len, d),
            "v": (batch, num_heads, src_len, d), "scores": (batch, num_heads, tgt_len, src_len),
            "out": (batch, tgt_len, embed_dim)}


def shapes_wrong_out_kdim(batch, tgt_len, src_len, embed_dim, kdim, num_heads):
    """The output as wide as the encoder."""
    right = shapes_by_hand(batch, tgt_len, src_len, embed_dim, kdim, num_heads)
    return {**right, "out": (batch, tgt_len, kdim)}


def mask_wrong_cross_causal_square(role, src_lengths, tgt_lengths, src_len, tgt_len):
    """A causal part for every role."""
    right = mask_with_loops(role, src_lengths, tgt_lengths, src_len, tgt_len)
    q_len, k_len = right.shape[-2:]
    return right & torch.ones(q_len, k_len, dtype=torch.bool).tril()


def mask_wrong_no_expand(role, src_lengths, tgt_lengths, src_len, tgt_len):
    """(B, 1, 1, Tk) for the padding-only roles: right values, but not the shape asked for."""
    right = mask_with_loops(role, src_lengths, tgt_lengths, src_len, tgt_len)
    return right[:, :, :1] if role in ("encoder", "cross") else right


def mask_wrong_unknown_role_accepted(role, src_lengths, tgt_lengths, src_len, tgt_len):
    """Treats any unknown role as the decoder's."""
    known = role if role in ("encoder", "cross") else "decoder"
    return mask_with_loops(known, src_lengths, tgt_lengths, src_len, tgt_len)


def alignment_wrong_probability_mass(weights, ideal, tgt_lengths):
    """The mean weight on the ideal key instead of the argmax hits."""
    Tq = weights.shape[-2]
    real = (torch.arange(Tq) < tgt_lengths[:, None]).to(weights.dtype)[:, None, :]
    return (weights[:, :, torch.arange(Tq), ideal] * real).sum(dim=(0, 2)) / real.sum()


def alignment_wrong_first_sequence(weights, ideal, tgt_lengths):
    n = int(tgt_lengths[0])
    return (weights[0, :, :n].argmax(dim=-1) == ideal[:n]).to(weights.dtype).mean(dim=-1)


def alignment_wrong_int(weights, ideal, tgt_lengths):
    """Counts hits as integers."""
    real = torch.arange(weights.shape[-2]) < tgt_lengths[:, None]
    return ((weights.argmax(dim=-1) == ideal) & real[:, None, :]).sum(dim=(0, 2))


def alignment_wrong_float32(weights, ideal, tgt_lengths):
    """The page's .float(): float32 whatever the weights' dtype."""
    real = (torch.arange(weights.shape[-2]) < tgt_lengths[:, None]).float()[:, None, :]
    return ((weights.argmax(dim=-1) == ideal).float() * real).sum(dim=(0, 2)) / real.sum()


def alignment_wrong_keys_masked(weights, ideal, tgt_lengths):
    """Uses the target lengths to hide keys (the source axis) instead of queries."""
    Tk = weights.shape[-1]
    hidden = torch.arange(Tk)[None, :] >= tgt_lengths[:, None]                  # (B, Tk)
    best = weights.masked_fill(hidden[:, None, None, :], -1.0).argmax(dim=-1)
    return (best == ideal).to(weights.dtype).mean(dim=(0, 2))


def mask_wrong_any_case(role, src_lengths, tgt_lengths, src_len, tgt_len):
    """Accepts the role in any letters ("Encoder", "CROSS")."""
    return mask_with_loops(role.lower(), src_lengths, tgt_lengths, src_len, tgt_len)


CORRECT = {
    "cross.cross_attention_shapes": [shapes_by_running_it, shapes_by_hand],
    "cross.mask_for_role": [mask_with_loops, mask_with_numpy],
    "cross.alignment_accuracy": [alignment_per_head_loop, alignment_numpy, alignment_masked_mean],
}

WRONG = {
    "cross.cross_attention_shapes": [shapes_wrong_kdim_heads, shapes_wrong_no_error, shapes_wrong_out_kdim],
    "cross.mask_for_role": [mask_wrong_cross_causal_square, mask_wrong_no_expand, mask_wrong_unknown_role_accepted,
                            mask_wrong_any_case],
    "cross.alignment_accuracy": [alignment_wrong_probability_mass, alignment_wrong_first_sequence, alignment_wrong_int,
                                 alignment_wrong_float32, alignment_wrong_keys_masked],
}


# ---------------------------------------------------------------- more held-out wrong answers

def shapes_wrong_scores_from_kdim(batch, tgt_len, src_len, embed_dim, kdim, num_heads):
    """Scores over kdim // h features instead of the sources."""
    right = shapes_by_hand(batch, tgt_len, src_len, embed_dim, kdim, num_heads)
    return {**right, "scores": (batch, num_heads, tgt_len, tgt_len)}


def mask_wrong_decoder_with_source_padding(role, src_lengths, tgt_lengths, src_len, tgt_len):
    """The decoder's padding taken from src_lengths."""
    if role == "decoder":
        pos = torch.arange(tgt_len)
        real = pos[None, :] < src_lengths[:, None]
        return ((pos[None, :] <= pos[:, None])[None] & real[:, None, :])[:, None]
    return mask_with_loops(role, src_lengths, tgt_lengths, src_len, tgt_len)


def alignment_wrong_real_keys_masked_out(weights, ideal, tgt_lengths):
    """Pads the weights' KEY axis by tgt_lengths before the argmax, and counts every query."""
    Tk = weights.shape[-1]
    hidden = torch.arange(Tk)[None, :] >= tgt_lengths[:, None]
    best = weights.masked_fill(hidden[:, None, None, :], -1.0).argmax(dim=-1)
    return (best == ideal).to(weights.dtype).mean(dim=(0, 2))


WRONG["cross.cross_attention_shapes"] += [shapes_wrong_scores_from_kdim]
WRONG["cross.mask_for_role"] += [mask_wrong_decoder_with_source_padding]
WRONG["cross.alignment_accuracy"] += [alignment_wrong_real_keys_masked_out]
