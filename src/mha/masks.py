"""Boolean attention masks. Convention: True = the query MAY attend to the key.

This is the convention of torch.nn.functional.scaled_dot_product_attention. Beware:
torch.nn.MultiheadAttention's `attn_mask` and `key_padding_mask` use the opposite one
(True = blocked); `mask_from_torch` converts them.

Masks broadcast against scores of shape (B, h, Tq, Tk): a causal mask is (Tq, Tk), a
padding mask (B, 1, 1, Tk).
"""

from __future__ import annotations

import torch

from ._checks import check_int, check_tensor

ALIGNMENTS = ("bottom-right", "top-left")


def causal_mask(q_len: int, k_len: int | None = None, *, align: str = "bottom-right", device=None) -> torch.Tensor:
    """(q_len, k_len) bool mask, True where query i may see key j.

    With q_len == k_len both alignments give the lower triangle (j <= i). When the queries
    are the last q_len positions of a longer sequence (decoding with a KV cache),
    "bottom-right" lets query i see keys j <= i + (k_len - q_len), so the last query sees
    every key. "top-left" (what F.scaled_dot_product_attention's is_causal does) keeps
    j <= i, which is wrong for a cache.
    """
    check_int("q_len", q_len, minimum=0)
    k_len = q_len if k_len is None else check_int("k_len", k_len, minimum=0)
    if align not in ALIGNMENTS:
        raise ValueError(f"align must be one of {ALIGNMENTS}, got {align!r}")
    offset = k_len - q_len if align == "bottom-right" else 0
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(diagonal=offset)


def padding_mask(lengths, max_len: int) -> torch.Tensor:
    """(B, 1, 1, max_len) bool mask, True for the first lengths[b] positions (real tokens)."""
    check_int("max_len", max_len, minimum=0)
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be a 1-D sequence of ints (one per batch element), got {lengths!r}")
    if len(lengths) and (lengths.min() < 0 or lengths.max() > max_len):
        raise ValueError(f"lengths must lie in [0, max_len={max_len}], got {lengths.tolist()}")
    keep = torch.arange(max_len, device=lengths.device) < lengths[:, None]  # (B, max_len)
    return keep[:, None, None, :]


def combine_masks(*masks):
    """Combine masks that must all allow a position; None entries are ignored.

    Boolean masks are AND-ed; if any mask is additive (float), the boolean ones are turned
    into 0 / -inf and everything is added. The result broadcasts like its inputs.
    """
    masks = [m for m in masks if m is not None]
    if not masks:
        return None
    for i, m in enumerate(masks):
        check_tensor(f"masks[{i}]", m)
    floats = [m for m in masks if m.dtype != torch.bool]
    if not floats:
        out = masks[0]
        for m in masks[1:]:
            out = out & m
        return out
    dtype = floats[0].dtype
    out = None
    for m in masks:
        add = to_additive(m, dtype) if m.dtype == torch.bool else m
        out = add if out is None else out + add
    return out


def to_additive(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Bool mask (True = may attend) -> float mask with 0 where allowed and -inf elsewhere."""
    check_tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be bool to convert to additive, got {mask.dtype}")
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))


def mask_from_torch(attn_mask=None, key_padding_mask=None):
    """Convert torch.nn.MultiheadAttention's masks to this package's convention.

    Args:
        attn_mask: (Tq, Tk) or (B * h, Tq, Tk) as nn.MultiheadAttention takes it: bool with
            True = NOT allowed, or an additive float mask (kept as is). A 3-D mask given
            alone is returned as (B * h, Tq, Tk); reshape it to (B, h, Tq, Tk) before use.
            Given with key_padding_mask, it is reshaped to (B, h, Tq, Tk) here.
        key_padding_mask: (B, Tk) bool, True = padding (NOT allowed), or additive float.

    Returns:
        One mask in this package's convention (bool True = may attend, or additive float),
        broadcastable to (B, h, Tq, Tk), or None when both are None.
    """
    out = []
    if attn_mask is not None:
        check_tensor("attn_mask", attn_mask, dims=(2, 3))
        out.append(~attn_mask if attn_mask.dtype == torch.bool else attn_mask)
    if key_padding_mask is not None:
        check_tensor("key_padding_mask", key_padding_mask, dims=2)
        kpm = ~key_padding_mask if key_padding_mask.dtype == torch.bool else key_padding_mask
        out.append(kpm[:, None, None, :])
        if attn_mask is not None and attn_mask.dim() == 3:  # (B * h, Tq, Tk) -> (B, h, Tq, Tk)
            B = key_padding_mask.shape[0]
            if attn_mask.shape[0] % B:
                raise ValueError(f"attn_mask's first dimension must be batch * num_heads, a multiple of "
                                 f"key_padding_mask's batch {B}, got shape {tuple(attn_mask.shape)}")
            out[0] = out[0].reshape(B, -1, *attn_mask.shape[-2:])
    return combine_masks(*out)
