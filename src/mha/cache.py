"""Key/value caches for incremental (autoregressive) decoding.

Each decoding step computes keys and values only for the new tokens; the cache appends
them to those of the earlier tokens, so attention sees the whole prefix without
recomputing it. Keys and values are stored per K/V head: (B, num_kv_heads, T, head_dim),
which is why grouped-query and multi-query attention shrink the cache. LatentCache holds
what multi-head latent attention needs instead: one latent vector and one RoPE key per token.

Use one cache per attention layer.
"""

from __future__ import annotations

import torch


class KVCache:
    """Grows along the time axis with each `update`. Empty when created."""

    def __init__(self):
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def __len__(self) -> int:
        """Number of cached positions."""
        return 0 if self.k is None else self.k.shape[-2]

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append k, v of shape (B, g, T_new, d) and return all keys and values so far."""
        if self.k is not None and (k.shape[:2] != self.k.shape[:2] or k.shape[-1] != self.k.shape[-1]):
            raise ValueError(
                f"cache holds keys of shape (B, g, T, d) = {tuple(self.k.shape)}; new keys of shape "
                f"{tuple(k.shape)} do not match in batch, heads or head_dim (use a new KVCache)"
            )
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        return self.k, self.v

    def reset(self) -> None:
        self.k = self.v = None

    def nbytes(self) -> int:
        """Bytes held by the cached keys and values."""
        return sum(t.numel() * t.element_size() for t in (self.k, self.v) if t is not None)


class LatentCache:
    """The cache of multi-head latent attention (mha.MultiHeadLatentAttention, DeepSeek-V2).

    Per token it stores only the latent c_KV (kv_latent_dim values) and the RoPE key shared
    by all heads (rope_dim values, already rotated): kv_latent_dim + rope_dim values per
    token and layer, whatever the number of heads. Keys and values are rebuilt from c_KV (or,
    in the absorbed form, never built at all). New tokens get the positions that follow the
    cached ones: len(cache), len(cache) + 1, ...

    Use one LatentCache per attention layer.
    """

    def __init__(self):
        self.c_kv: torch.Tensor | None = None     # (B, T, kv_latent_dim)
        self.k_rope: torch.Tensor | None = None   # (B, T, rope_dim)

    def __len__(self) -> int:
        """Number of cached positions."""
        return 0 if self.c_kv is None else self.c_kv.shape[-2]

    def update(self, c_kv: torch.Tensor, k_rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append c_kv (B, T_new, kv_latent_dim) and k_rope (B, T_new, rope_dim); return all so far."""
        if c_kv.shape[:-1] != k_rope.shape[:-1]:
            raise ValueError(f"c_kv and k_rope must agree in batch and length, got shapes {tuple(c_kv.shape)} "
                             f"and {tuple(k_rope.shape)}")
        if self.c_kv is not None and (c_kv.shape[0] != self.c_kv.shape[0] or c_kv.shape[-1] != self.c_kv.shape[-1]
                                      or k_rope.shape[-1] != self.k_rope.shape[-1]):
            raise ValueError(
                f"cache holds c_kv of shape (B, T, d_c) = {tuple(self.c_kv.shape)} and k_rope of shape "
                f"{tuple(self.k_rope.shape)}; new shapes {tuple(c_kv.shape)} and {tuple(k_rope.shape)} do not "
                f"match in batch or width (use a new LatentCache)"
            )
        self.c_kv = c_kv if self.c_kv is None else torch.cat([self.c_kv, c_kv], dim=-2)
        self.k_rope = k_rope if self.k_rope is None else torch.cat([self.k_rope, k_rope], dim=-2)
        return self.c_kv, self.k_rope

    def reset(self) -> None:
        self.c_kv = self.k_rope = None

    def nbytes(self) -> int:
        """Bytes held by the cached latents and RoPE keys."""
        return sum(t.numel() * t.element_size() for t in (self.c_kv, self.k_rope) if t is not None)
