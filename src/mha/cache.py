"""Key/value caches for incremental (autoregressive) decoding.

Each decoding step computes keys and values only for the new tokens; the cache appends
them to those of the earlier tokens, so attention sees the whole prefix without
recomputing it. Keys and values are stored per K/V head: (B, num_kv_heads, T, head_dim),
which is why grouped-query and multi-query attention shrink the cache. LatentCache holds
what multi-head latent attention needs instead: one latent vector and one RoPE key per token.

How the cache is stored. Appending with torch.cat would copy the whole cache at every
token: a step would read and write every cached key and value once more, on top of the
read that attention needs, and 16,384 appends would move O(T^2) bytes in all. These caches
keep a buffer with room to spare along the time axis, write the new tokens into it in
place, and return views of its filled part. When the buffer is full, it is replaced by one
twice as long (a copy of what is cached; a C++ vector grows the same way), so
the copies add up to less than twice the final size. With `capacity=N` the buffer is
allocated once, N positions long, and never grows; an update past N raises. A returned view
stays valid: later updates write only past its end, and a regrown buffer is a new tensor.

The returned tensors are views of the cache's buffer, not copies: read them, and clone one
before modifying it in place (an in-place RoPE, say). A write into a view changes what the
cache holds until the buffer next grows, and not after, so it depends on the cache's history.

Autograd. Other operations may save a returned view for their backward pass (attention saves
K and V to compute dq), and PyTorch refuses a backward pass through a tensor that was
modified in place after it was saved: it keeps a version counter per buffer, bumped by every
in-place write. The caches write the new positions through ``buffer.data``, which shares
the buffer's memory but not its version counter. That is safe because a write goes past the
end of every view returned so far: what any saved view holds never changes. When the new
tensors (or the cached ones) require grad, an update concatenates instead, so that the
gradient flows back to every step's keys and values.

Use one cache per attention layer.
"""

from __future__ import annotations

import torch

from ._checks import check_int

MIN_RESERVE = 16   # positions reserved by the first update of a cache without a capacity


class _Timeline:
    """One tensor (..., T, width) that grows along dim -2 inside a larger buffer. Each update
    brings its new positions in parts that sit side by side along the last dim."""

    __slots__ = ("buffer", "length")

    def __init__(self):
        self.buffer: torch.Tensor | None = None
        self.length = 0

    def view(self, start: int = 0, width: int | None = None) -> torch.Tensor | None:
        """The filled positions, optionally only the columns start .. start + width."""
        if self.buffer is None:
            return None
        filled = self.buffer.narrow(-2, 0, self.length)
        return filled if width is None else filled.narrow(-1, start, width)

    @property
    def reserved(self) -> int:
        return 0 if self.buffer is None else self.buffer.shape[-2]

    def append(self, parts: tuple[torch.Tensor, ...], capacity: int | None) -> torch.Tensor:
        """Write the new positions after the cached ones; return a view of all of them."""
        first = parts[0]
        n, total = self.length, self.length + first.shape[-2]
        old = self.buffer
        if (old is not None and old.requires_grad) or (torch.is_grad_enabled()
                                                       and any(p.requires_grad for p in parts)):
            # Autograd records: a new tensor, so that nothing an earlier step saved changes.
            new = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
            self.buffer = new if old is None else torch.cat([old.narrow(-2, 0, n), new], dim=-2)
            self.length = total
            return self.buffer
        if old is None or old.shape[-2] < total or (old.is_inference() and not torch.is_inference_mode_enabled()):
            size = capacity if capacity is not None else max(total, 2 * self.reserved, MIN_RESERVE)
            width = sum(p.shape[-1] for p in parts)
            buffer = first.new_empty(*first.shape[:-2], size, width)
            if n:
                buffer.narrow(-2, 0, n).copy_(old.narrow(-2, 0, n))
            self.buffer = old = buffer
        # Past the end of every view returned so far, through .data: see the module docstring.
        rows = old.data.narrow(-2, n, total - n)
        if len(parts) == 1:
            rows.copy_(first)
        else:
            start = 0
            for p in parts:
                rows.narrow(-1, start, p.shape[-1]).copy_(p)
                start += p.shape[-1]
        self.length = total
        return old.narrow(-2, 0, total)

    def nbytes(self) -> int:
        if self.buffer is None:
            return 0
        b = self.buffer
        return b.numel() // b.shape[-2] * self.length * b.element_size()


class _Cache:
    """What KVCache and LatentCache share: a length, a capacity, the checks of new tensors."""

    _names: tuple[str, str]   # the two tensors of an update, as the error messages call them

    def __init__(self, capacity: int | None = None):
        self.capacity = None if capacity is None else check_int("capacity", capacity)
        self._timelines = self._new_timelines()

    def _new_timelines(self) -> tuple[_Timeline, ...]:
        raise NotImplementedError

    def __len__(self) -> int:
        """Number of cached positions."""
        return self._timelines[0].length

    @property
    def reserved(self) -> int:
        """Positions the buffers have room for now (>= len(self)); memory is held for these."""
        return self._timelines[0].reserved

    def reset(self) -> None:
        """Empty the cache (and release its buffers; views returned earlier keep their values)."""
        self._timelines = self._new_timelines()

    def nbytes(self) -> int:
        """Bytes of the cached positions (the buffers reserve up to twice as many)."""
        return sum(t.nbytes() for t in self._timelines)

    def _check_room(self, new: int) -> None:
        if self.capacity is not None and len(self) + new > self.capacity:
            raise ValueError(f"{type(self).__name__}(capacity={self.capacity}) holds {len(self)} positions and "
                             f"cannot take {new} more (use a larger capacity, or capacity=None to grow)")

    def _check_pair(self, a, b, dims: int, shape_names: str) -> None:
        """Types, ranks, and a/b agreeing with each other in everything but the last dim."""
        na, nb = self._names
        for name, t in ((na, a), (nb, b)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if t.dim() != dims:
                raise ValueError(f"{name} must have shape {shape_names}, got shape {tuple(t.shape)}")
        if a.shape[:-1] != b.shape[:-1]:
            raise ValueError(f"{na} and {nb} must agree in every dimension but the last, got shapes "
                             f"{tuple(a.shape)} and {tuple(b.shape)}")
        if a.dtype != b.dtype or a.device != b.device:
            raise ValueError(f"{na} and {nb} must have one dtype and device, got {a.dtype} on {a.device} "
                             f"and {b.dtype} on {b.device}")

    def _check_against_cache(self, a, kind: str) -> None:
        """dtype and device of new tensors against those the cache holds."""
        held = self._timelines[0].buffer
        if held is None:
            return
        if a.dtype != held.dtype:
            raise ValueError(f"the cache holds {kind} of dtype {held.dtype}; new ones have dtype {a.dtype} "
                             f"(convert them, or use a new {type(self).__name__})")
        if a.device != held.device:
            raise ValueError(f"the cache holds {kind} on device {held.device}; new ones are on {a.device} "
                             f"(move them, or use a new {type(self).__name__})")


class KVCache(_Cache):
    """Keys and values of the tokens seen so far, (B, g, T, d) each. Empty when created.

    Args:
        capacity: the most positions it may hold. None (the default): the buffers start
            small and double when full. An int: buffers of that length, allocated at the
            first update, never copied; an update past it raises ValueError.

    `update` writes the new keys and values in place and returns views of all of them;
    `k` and `v` are the same views. They share the cache's memory: clone one before writing
    into it. `len(cache)` counts positions, `nbytes()` their bytes, `reserved` the positions
    the buffers have room for. A backward pass may run through the cache, whether or not the
    cached tensors require grad.
    """

    _names = ("k", "v")

    def _new_timelines(self):
        return _Timeline(), _Timeline()

    @property
    def k(self) -> torch.Tensor | None:
        """The cached keys (B, g, T, d), a view of the buffer; None when empty."""
        return self._timelines[0].view()

    @property
    def v(self) -> torch.Tensor | None:
        """The cached values (B, g, T, d_v), a view of the buffer; None when empty."""
        return self._timelines[1].view()

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append k (B, g, T_new, d) and v (B, g, T_new, d_v); return all keys and values so far."""
        self._check_pair(k, v, 4, "(B, g, T_new, d)")
        keys, values = self._timelines
        if keys.buffer is not None and (k.shape[:2] != keys.buffer.shape[:2] or k.shape[-1] != keys.buffer.shape[-1]
                                        or v.shape[-1] != values.buffer.shape[-1]):
            raise ValueError(
                f"cache holds keys of shape (B, g, T, d) = {tuple(self.k.shape)}; new keys of shape "
                f"{tuple(k.shape)} do not match in batch, heads or head_dim (use a new KVCache)"
            )
        self._check_against_cache(k, "keys and values")
        self._check_room(k.shape[-2])
        return keys.append((k,), self.capacity), values.append((v,), self.capacity)


class LatentCache(_Cache):
    """The cache of multi-head latent attention (mha.MultiHeadLatentAttention, DeepSeek-V2).

    Per token it stores only the latent c_KV (kv_latent_dim values) and the RoPE key shared
    by all heads (rope_dim values, already rotated): kv_latent_dim + rope_dim values per
    token and layer, whatever the number of heads. Keys and values are rebuilt from c_KV (or,
    in the absorbed form, never built at all). New tokens get the positions that follow the
    cached ones: len(cache), len(cache) + 1, ...

    Each token's latent and RoPE key sit side by side in one row of a buffer, `entries`
    (B, T, kv_latent_dim + rope_dim): the one key head of the absorbed form, read in place.
    `c_kv` and `k_rope` are views of its columns. Stored like KVCache: written in place into
    a buffer that doubles when full, or one of `capacity` positions; the views share the
    cache's memory (clone one before writing into it).

    Use one LatentCache per attention layer.
    """

    _names = ("c_kv", "k_rope")

    def _new_timelines(self):
        return (_Timeline(),)

    def _width(self) -> int:
        return self._timelines[0].buffer.shape[-1] - self._rope_dim

    @property
    def entries(self) -> torch.Tensor | None:
        """The cached rows [c_KV; k_R], (B, T, kv_latent_dim + rope_dim); None when empty."""
        return self._timelines[0].view()

    @property
    def c_kv(self) -> torch.Tensor | None:
        """The cached latents (B, T, kv_latent_dim), a view of `entries`; None when empty."""
        return None if self._timelines[0].buffer is None else self._timelines[0].view(0, self._width())

    @property
    def k_rope(self) -> torch.Tensor | None:
        """The cached RoPE keys (B, T, rope_dim), a view of `entries`; None when empty."""
        return None if self._timelines[0].buffer is None else self._timelines[0].view(self._width(), self._rope_dim)

    def update(self, c_kv: torch.Tensor, k_rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append c_kv (B, T_new, kv_latent_dim) and k_rope (B, T_new, rope_dim); return all so far."""
        if (isinstance(c_kv, torch.Tensor) and isinstance(k_rope, torch.Tensor)
                and c_kv.shape[:-1] != k_rope.shape[:-1]):
            raise ValueError(f"c_kv and k_rope must agree in batch and length, got shapes {tuple(c_kv.shape)} "
                             f"and {tuple(k_rope.shape)}")
        self._check_pair(c_kv, k_rope, 3, "(B, T_new, width)")
        timeline = self._timelines[0]
        if timeline.buffer is not None and (c_kv.shape[0] != timeline.buffer.shape[0]
                                            or c_kv.shape[-1] != self._width() or k_rope.shape[-1] != self._rope_dim):
            raise ValueError(
                f"cache holds c_kv of shape (B, T, d_c) = {tuple(self.c_kv.shape)} and k_rope of shape "
                f"{tuple(self.k_rope.shape)}; new shapes {tuple(c_kv.shape)} and {tuple(k_rope.shape)} do not "
                f"match in batch or width (use a new LatentCache)"
            )
        self._check_against_cache(c_kv, "latents and RoPE keys")
        self._check_room(c_kv.shape[-2])
        self._rope_dim = k_rope.shape[-1]
        rows = timeline.append((c_kv, k_rope), self.capacity)
        d_c = c_kv.shape[-1]
        return rows.narrow(-1, 0, d_c), rows.narrow(-1, d_c, self._rope_dim)
