"""Attention layers: one head, and many heads with grouped-query options.

Shapes: B batch, T sequence length, C = embed_dim, h = num_heads, d = C // h,
g = num_kv_heads (h for multi-head, 1 for multi-query, in between for grouped-query).
Inputs are batch-first. Masks: bool True = may attend, or additive float (see mha.masks).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_int, check_mask, check_tensor
from .attention import scaled_dot_product_attention
from .cache import KVCache
from .heads import merge_heads, split_heads
from .masks import causal_mask, combine_masks

BACKENDS = ("sdpa", "naive")


class Linear(nn.Linear):
    """An nn.Linear that draws no random numbers when it is built, so that `_init_linears`
    alone decides the weights, in a fixed order, and equal configurations built from one
    seed are equal. (torch.nn.utils.skip_init does the same, but its first call imports
    sympy, about a second of CPU in every fresh kernel.)"""

    def reset_parameters(self) -> None:
        pass


def _linear(fan_in: int, fan_out: int, bias: bool, **factory) -> nn.Linear:
    factory = {k: v for k, v in factory.items() if v is not None}
    return Linear(fan_in, fan_out, bias=bias, **factory)


def _init_linears(*layers: nn.Linear) -> None:
    """Weights ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) drawn in the order given; biases 0."""
    for layer in layers:
        bound = 1.0 / math.sqrt(layer.in_features)
        nn.init.uniform_(layer.weight, -bound, bound)
        if layer.bias is not None:
            nn.init.zeros_(layer.bias)


class SingleHeadAttention(nn.Module):
    """One attention head with its output projection.

    x (B, T, embed_dim) -> q, k, v (B, T, head_dim) -> attention -> out_proj -> (B, T, embed_dim).
    W_Q, W_K, W_V are stored side by side in one `in_proj` (3 * head_dim, embed_dim), so one
    matmul computes all three; `MultiHeadAttention(embed_dim, 1, backend="naive")` built from
    the same seed computes exactly (bit for bit) the same function.
    """

    def __init__(self, embed_dim: int, head_dim: int, *, bias: bool = False, dropout: float = 0.0,
                 device=None, dtype=None):
        super().__init__()
        check_int("embed_dim", embed_dim)
        check_int("head_dim", head_dim)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        f = dict(device=device, dtype=dtype)
        self.embed_dim, self.head_dim, self.dropout = embed_dim, head_dim, dropout
        self.in_proj = _linear(embed_dim, 3 * head_dim, bias, **f)
        self.out_proj = _linear(head_dim, embed_dim, bias, **f)
        _init_linears(self.in_proj, self.out_proj)

    def forward(self, x, *, mask=None, is_causal=False, need_weights=False):
        """x (B, T, embed_dim) -> (B, T, embed_dim), plus weights (B, T, T) if need_weights."""
        check_tensor("x", x, dims=3, floating=True)
        if x.shape[-1] != self.embed_dim:
            raise ValueError(f"x's last dimension must be embed_dim={self.embed_dim}, got shape {tuple(x.shape)}")
        q, k, v = self.in_proj(x).split(self.head_dim, dim=-1)  # each (B, T, head_dim)
        p = self.dropout if self.training else 0.0
        out, weights = scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal, dropout_p=p)
        out = self.out_proj(out)
        return (out, weights) if need_weights else out


class MultiHeadAttention(nn.Module):
    """Multi-head attention (MHA), with grouped-query (GQA) and multi-query (MQA) variants.

    Args:
        embed_dim: C, width of the queries and of the output.
        num_heads: h query heads; must divide embed_dim. Each head has width d = C // h.
        num_kv_heads: g key/value heads shared by groups of h // g query heads (default h).
        kdim, vdim: widths of the key and value inputs for cross-attention (default C).
        bias: biases on all four projections.
        dropout: probability of dropping each attention weight while training.
        backend: "sdpa" (torch's fused kernel) or "naive" (the explicit maths, mha.attention).
            Both give the same numbers; "sdpa" is faster and does not store the
            (B, h, T, T) weights. need_weights=True always takes the explicit path.
        max_len: if set, a call that attends over more than max_len keys raises ValueError.

    Self-attention (key and value omitted) uses one fused projection `in_proj` of shape
    (C + 2 * g * d, C); so does cross-attention when kdim == vdim == C, using its slices.
    Otherwise there are separate `q_proj`, `k_proj`, `v_proj`. `out_proj` is (C, C).
    """

    def __init__(self, embed_dim: int, num_heads: int, *, num_kv_heads: int | None = None,
                 kdim: int | None = None, vdim: int | None = None, bias: bool = False,
                 dropout: float = 0.0, backend: str = "sdpa", max_len: int | None = None,
                 device=None, dtype=None):
        super().__init__()
        check_int("embed_dim", embed_dim)
        check_int("num_heads", num_heads)
        if embed_dim % num_heads:
            raise ValueError(
                f"embed_dim={embed_dim} must be divisible by num_heads={num_heads} "
                f"(each head gets embed_dim / num_heads = {embed_dim / num_heads:.2f} features)")
        num_kv_heads = num_heads if num_kv_heads is None else check_int("num_kv_heads", num_kv_heads)
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads={num_heads} must be divisible by num_kv_heads={num_kv_heads}")
        kdim = embed_dim if kdim is None else check_int("kdim", kdim)
        vdim = embed_dim if vdim is None else check_int("vdim", vdim)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if max_len is not None:
            check_int("max_len", max_len)

        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.head_dim = embed_dim // num_heads
        self.kdim, self.vdim, self.bias = kdim, vdim, bias
        self.dropout, self.backend, self.max_len = dropout, backend, max_len
        kv_dim = num_kv_heads * self.head_dim
        self._sizes = [embed_dim, kv_dim, kv_dim]  # widths of q, k, v inside in_proj
        f = dict(device=device, dtype=dtype)
        if kdim == vdim == embed_dim:
            self.in_proj = _linear(embed_dim, embed_dim + 2 * kv_dim, bias, **f)
            self.q_proj = self.k_proj = self.v_proj = None
            projections = [self.in_proj]
        else:
            self.in_proj = None
            self.q_proj = _linear(embed_dim, embed_dim, bias, **f)
            self.k_proj = _linear(kdim, kv_dim, bias, **f)
            self.v_proj = _linear(vdim, kv_dim, bias, **f)
            projections = [self.q_proj, self.k_proj, self.v_proj]
        self.out_proj = _linear(embed_dim, embed_dim, bias, **f)
        _init_linears(*projections, self.out_proj)

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
                f"backend={self.backend!r}")

    def forward(self, query, key=None, value=None, *, mask=None, is_causal=False, need_weights=False,
                cache: KVCache | None = None):
        """Attend from query to key/value (self-attention when both are omitted).

        Args:
            query: (B, Tq, embed_dim).  key: (B, Tk, kdim).  value: (B, Tk, vdim).
            mask: bool (True = may attend) or additive float, broadcastable to (B, h, Tq, Tk),
                where Tk counts cached positions too.
            is_causal: block later positions, aligned bottom-right (query i of a chunk that
                follows len(cache) cached tokens sees keys up to len(cache) + i).
            need_weights: also return the attention weights (B, h, Tq, Tk).
            cache: a KVCache for incremental self-attention; the new keys and values are
                appended to it. Feeding several tokens at once needs is_causal=True.

        Returns:
            (B, Tq, embed_dim), or (output, weights) if need_weights.
        """
        self_attention = key is None and value is None
        key = query if key is None else key
        value = key if value is None else value
        self._check_inputs(query, key, value)
        if cache is not None:
            if not isinstance(cache, KVCache):
                raise TypeError(f"cache must be a mha.KVCache, got {type(cache).__name__}")
            if not self_attention:
                raise ValueError("cache= works with self-attention only (pass no key/value)")
            if query.shape[1] > 1 and not is_causal:
                raise ValueError("cache= with more than one new token needs is_causal=True: without it "
                                 "earlier tokens of the chunk would see later ones")

        # Check before touching the cache, so a rejected call leaves it as it was.
        B, Tq, h = query.shape[0], query.shape[1], self.num_heads
        Tk = key.shape[1] + (len(cache) if cache is not None else 0)
        if self.max_len is not None and Tk > self.max_len:
            raise ValueError(f"sequence of {Tk} positions exceeds max_len={self.max_len}")
        if mask is not None:
            check_mask(mask, (B, h, Tq, Tk), query.dtype)

        q, k, v = self._project(query, key, value, self_attention)
        q = split_heads(q, self.num_heads)      # (B, h, Tq, d)
        k = split_heads(k, self.num_kv_heads)   # (B, g, Tk, d)
        v = split_heads(v, self.num_kv_heads)   # (B, g, Tk, d)
        if cache is not None:
            k, v = cache.update(k, v)           # (B, g, T_cached + Tk, d)
        p = self.dropout if self.training else 0.0

        if need_weights or self.backend == "naive":
            if self.num_kv_heads != self.num_heads:
                # Query head i uses K/V head i // (h // g): repeat_interleave gives [0,0,1,1,...].
                k = k.repeat_interleave(h // self.num_kv_heads, dim=1)
                v = v.repeat_interleave(h // self.num_kv_heads, dim=1)
            out, weights = scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal, dropout_p=p)
        else:
            out, weights = self._sdpa(q, k, v, mask, is_causal, p), None
        out = self.out_proj(merge_heads(out))   # (B, Tq, C)
        return (out, weights) if need_weights else out

    def _sdpa(self, q, k, v, mask, is_causal, dropout_p):
        Tq, Tk = q.shape[-2], k.shape[-2]
        gqa = self.num_kv_heads != self.num_heads
        if is_causal and mask is None and Tq == Tk:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p, enable_gqa=gqa)
        if is_causal and Tq > 1:  # torch's is_causal aligns top-left; ours is bottom-right
            mask = combine_masks(mask, causal_mask(Tq, Tk, device=q.device))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, enable_gqa=gqa)

    def _project(self, query, key, value, self_attention):
        if self.in_proj is None:
            return self.q_proj(query), self.k_proj(key), self.v_proj(value)
        if self_attention:  # one matmul for all three
            return self.in_proj(query).split(self._sizes, dim=-1)
        weights = self.in_proj.weight.split(self._sizes)
        biases = self.in_proj.bias.split(self._sizes) if self.in_proj.bias is not None else (None,) * 3
        return tuple(F.linear(x, w, b) for x, w, b in zip((query, key, value), weights, biases))

    def _check_inputs(self, query, key, value):
        check_tensor("query", query, dims=3, floating=True)
        check_tensor("key", key, dims=3, floating=True)
        check_tensor("value", value, dims=3, floating=True)
        for name, x, width in (("query", query, self.embed_dim), ("key", key, self.kdim), ("value", value, self.vdim)):
            if x.shape[-1] != width:
                raise ValueError(f"{name} must have shape (B, T, {width}), got {tuple(x.shape)}")
        if not (query.shape[0] == key.shape[0] == value.shape[0]):
            raise ValueError(f"query, key and value must share the batch size, got "
                             f"{query.shape[0]}, {key.shape[0]}, {value.shape[0]}")
        if key.shape[1] != value.shape[1]:
            raise ValueError(f"key and value must have the same length, got {key.shape[1]} and {value.shape[1]}")

    # --- interoperability with torch.nn.MultiheadAttention ------------------------------

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention, *, backend: str = "sdpa") -> "MultiHeadAttention":
        """A copy of a torch.nn.MultiheadAttention's weights in this class.

        Its in_proj_weight is cat[W_q; W_k; W_v], the same layout as `in_proj.weight` here
        (no transpose). The copy is batch-first whatever the module's `batch_first` (that flag
        changes only the input layout, not the weights). add_bias_kv and add_zero_attn are
        not supported.
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(f"module must be a torch.nn.MultiheadAttention, got {type(module).__name__}")
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("modules built with add_bias_kv=True or add_zero_attn=True are not supported")
        w = module.out_proj.weight
        new = cls(module.embed_dim, module.num_heads, kdim=module.kdim, vdim=module.vdim,
                  bias=module.in_proj_bias is not None, dropout=module.dropout, backend=backend,
                  device=w.device, dtype=w.dtype)
        new._copy_weights(module, to_torch=False)
        return new

    def to_torch(self) -> nn.MultiheadAttention:
        """An equivalent torch.nn.MultiheadAttention (batch_first=True). Needs num_kv_heads == num_heads.

        With bias=False (this class's default) the module has no in_proj_bias, and torch then
        never takes its inference fast path (its reason string is left empty); build the
        layer with bias=True if that path matters.
        """
        if self.num_kv_heads != self.num_heads:
            raise ValueError("to_torch() needs num_kv_heads == num_heads: torch.nn.MultiheadAttention has no GQA")
        w = self.out_proj.weight
        module = nn.MultiheadAttention(self.embed_dim, self.num_heads, dropout=self.dropout, bias=self.bias,
                                       kdim=self.kdim, vdim=self.vdim, batch_first=True,
                                       device=w.device, dtype=w.dtype)
        self._copy_weights(module, to_torch=True)
        return module

    @torch.no_grad()
    def _copy_weights(self, module: nn.MultiheadAttention, *, to_torch: bool) -> None:
        if self.in_proj is not None:
            pairs = [(self.in_proj.weight, module.in_proj_weight)]
        else:
            pairs = [(self.q_proj.weight, module.q_proj_weight), (self.k_proj.weight, module.k_proj_weight),
                     (self.v_proj.weight, module.v_proj_weight)]
        pairs.append((self.out_proj.weight, module.out_proj.weight))
        if self.bias:
            if self.in_proj is not None:
                pairs.append((self.in_proj.bias, module.in_proj_bias))
            else:  # torch keeps one in_proj_bias even with separate weights; split() gives views
                mine = (self.q_proj.bias, self.k_proj.bias, self.v_proj.bias)
                pairs += list(zip(mine, module.in_proj_bias.split(self._sizes)))
            pairs.append((self.out_proj.bias, module.out_proj.bias))
        for ours, theirs in pairs:
            (theirs if to_torch else ours).copy_(ours if to_torch else theirs)
