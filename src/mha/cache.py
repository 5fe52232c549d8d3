"""A key/value cache for incremental (autoregressive) decoding.

Each decoding step computes keys and values only for the new tokens; the cache appends
them to those of the earlier tokens, so attention sees the whole prefix without
recomputing it. Keys and values are stored per K/V head: (B, num_kv_heads, T, head_dim),
which is why grouped-query and multi-query attention shrink the cache.

Use one KVCache per attention layer.
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
