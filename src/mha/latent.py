"""Multi-head latent attention (MLA), the attention of DeepSeek-V2 (DeepSeek-AI 2024).

Shapes: B batch, T length, C = embed_dim, h = num_heads, d = head_dim, d_c = kv_latent_dim,
d_r = rope_dim, d_q = q_latent_dim. Names of the weights follow the paper.

    c_KV = W_DKV x                    (B, T, d_c)    the only thing cached, with k_R
                                                     (RMSNorm(W_DKV x) with latent_norm=True)
    k_C  = W_UK c_KV,  v = W_UV c_KV  (B, h, T, d)   keys and values rebuilt from the latent
    k_R  = RoPE(W_KR x)               (B, T, d_r)    ONE RoPE key, shared by all heads
    c_Q  = W_DQ x  (or x itself when q_latent_dim is None; RMSNorm(W_DQ x) with latent_norm=True)
    q_C  = W_UQ c_Q,  q_R = RoPE(W_QR c_Q)           (B, h, T, d) and (B, h, T, d_r)
    head i: softmax([q_C; q_R] . [k_C; k_R] / sqrt(d + d_r)) v,  then W_O over all heads

RoPE cannot live inside k_C: a rotation that depends on the key's position would sit between
W_UK and c_KV, so W_UK could no longer be folded into the queries. The rotated part is kept
apart (the "decoupled" RoPE key) and cached as it is.

Absorbed form (absorb=True, for decoding): q_C . (W_UK_i c) = (W_UK_i^T q_C) . c, so each
head's query moves into the latent space and attends directly to the cached c_KV; and
W_O_i (W_UV_i sum_j p_j c_j) lets W_UV act once on the attended latent instead of on every
cached token. Attention then runs on ONE key head [c_KV; k_R] of width d_c + d_r and ONE
value head c_KV: multi-query attention over the cache, computed here with every head's
queries as rows of one matrix against that key head (no copy of the cache per head). Same
numbers as the explicit form.

W_UV could also be multiplied into W_O once and for all (the paper's "absorbed into W_O"),
but that product is C x h d_c, d_c / d times larger than W_O, so reading it at every step
costs more than the two small products it replaces (DeepSeek-V2's d_c = 4 d). This module,
like vLLM's decoding path, applies W_UK to the queries and W_UV to the attended latents
with the weights as they are: nothing is precomputed, so nothing can go stale when the
weights change (training, load_state_dict, an optimizer step), and gradients flow as in
the explicit form. The explicit form costs less for long chunks of new tokens (a prefill):
it rebuilds keys and values once per token instead of widening every query to d_c + d_r.
DeepSeek-V2 (and V3, with the same attention) adds an RMSNorm after each latent: "we employ
additional RMS Norm layers after the compressed latent vectors" (DeepSeek-AI 2024, section
3.1.2). ``latent_norm=True`` adds them, each with its own weight, applied to c_Q (when the
queries are compressed) and to c_KV before it is cached, as DeepSeek's code does; with it a
DeepSeek-V2 attention layer's weights map onto this module exactly. Off by default.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_int, check_tensor
from .cache import LatentCache
from .heads import merge_heads, split_heads
from .masks import causal_mask
from .module import _init_linears, _linear
from .rope import _check_base, apply_rope


class MultiHeadLatentAttention(nn.Module):
    """Multi-head latent attention with decoupled RoPE (DeepSeek-V2's MLA).

    Args:
        embed_dim: C, width of the input and of the output.
        num_heads: h.
        kv_latent_dim: d_c, width of the latent c_KV from which keys and values are rebuilt.
        rope_dim: d_r (even), width of each head's RoPE query part and of the RoPE key that
            all heads share.
        head_dim: d, width of each head's non-RoPE query/key part and of its value
            (default embed_dim // num_heads; h * d need not equal embed_dim, as in
            DeepSeek-V2, where W_O maps h * d back to embed_dim).
        q_latent_dim: d_q, width of the query latent c_Q; None means no query compression
            (W_UQ and W_QR then read x directly).
        bias: biases on every projection.
        rope_base: RoPE's base (theta_i = base ** (-2i / d_r)); interleaved layout.
        latent_norm: an RMSNorm (with a learned weight, initialised to ones) after W_DKV, and
            after W_DQ when q_latent_dim is given, as in DeepSeek-V2: ``kv_norm`` and
            ``q_norm`` (None when off, or for q without query compression).
        norm_eps: the RMSNorms' epsilon, x / sqrt(mean(x^2) + norm_eps) (DeepSeek-V2: 1e-6).

    A cache costs kv_latent_dim + rope_dim values per token (`cache_width`), whatever h is.
    """

    def __init__(self, embed_dim: int, num_heads: int, *, kv_latent_dim: int, rope_dim: int,
                 head_dim: int | None = None, q_latent_dim: int | None = None, bias: bool = False,
                 rope_base: float = 10000.0, latent_norm: bool = False, norm_eps: float = 1e-6,
                 device=None, dtype=None):
        super().__init__()
        check_int("embed_dim", embed_dim)
        check_int("num_heads", num_heads)
        check_int("kv_latent_dim", kv_latent_dim)
        check_int("rope_dim", rope_dim)
        if rope_dim % 2:
            raise ValueError(f"rope_dim must be even (RoPE rotates pairs of features), got {rope_dim}")
        if head_dim is None:
            head_dim = embed_dim // num_heads       # MLA's heads need not tile embed_dim
            if head_dim < 1:
                raise ValueError(f"head_dim defaults to embed_dim // num_heads = {embed_dim} // {num_heads} = 0: "
                                 f"pass head_dim (an int >= 1) explicitly")
        check_int("head_dim", head_dim)
        if q_latent_dim is not None:
            check_int("q_latent_dim", q_latent_dim)
        try:
            _check_base(rope_base)
        except (TypeError, ValueError) as err:
            raise type(err)(str(err).replace("base", "rope_base", 1)) from None
        if not isinstance(latent_norm, bool):
            raise TypeError(f"latent_norm must be a bool, got {type(latent_norm).__name__} ({latent_norm!r})")
        if isinstance(norm_eps, bool) or not isinstance(norm_eps, (int, float)) or not 0 < norm_eps < 1:
            raise ValueError(f"norm_eps must be a number with 0 < norm_eps < 1, got {norm_eps!r}")

        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, head_dim
        self.kv_latent_dim, self.rope_dim, self.q_latent_dim = kv_latent_dim, rope_dim, q_latent_dim
        self.bias, self.rope_base = bias, float(rope_base)
        h, d, d_c, d_r = num_heads, head_dim, kv_latent_dim, rope_dim
        f = dict(device=device, dtype=dtype)
        q_in = embed_dim if q_latent_dim is None else q_latent_dim
        self.w_dq = None if q_latent_dim is None else _linear(embed_dim, q_latent_dim, bias, **f)
        self.w_uq = _linear(q_in, h * d, bias, **f)        # q_C
        self.w_qr = _linear(q_in, h * d_r, bias, **f)      # q_R before RoPE
        self.w_dkv = _linear(embed_dim, d_c, bias, **f)    # c_KV
        self.w_uk = _linear(d_c, h * d, bias, **f)         # k_C
        self.w_uv = _linear(d_c, h * d, bias, **f)         # v
        self.w_kr = _linear(embed_dim, d_r, bias, **f)     # k_R before RoPE
        self.w_o = _linear(h * d, embed_dim, bias, **f)
        layers = [self.w_uq, self.w_qr, self.w_dkv, self.w_uk, self.w_uv, self.w_kr, self.w_o]
        _init_linears(*([self.w_dq] if self.w_dq is not None else []), *layers)
        self.latent_norm, self.norm_eps = latent_norm, float(norm_eps)
        norm = lambda width: nn.RMSNorm(width, eps=self.norm_eps, **f) if latent_norm else None  # noqa: E731
        self.q_norm = norm(q_latent_dim) if q_latent_dim is not None else None
        self.kv_norm = norm(kv_latent_dim)

    @property
    def cache_width(self) -> int:
        """Values cached per token: kv_latent_dim + rope_dim (576 for DeepSeek-V2)."""
        return self.kv_latent_dim + self.rope_dim

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, head_dim={self.head_dim}, "
                f"kv_latent_dim={self.kv_latent_dim}, rope_dim={self.rope_dim}, q_latent_dim={self.q_latent_dim}, "
                f"latent_norm={self.latent_norm}")

    def forward(self, x, *, is_causal: bool = False, cache: LatentCache | None = None, absorb: bool = False):
        """x (B, T, embed_dim) -> (B, T, embed_dim).

        Args:
            is_causal: block later positions, aligned bottom-right (a chunk that follows
                len(cache) cached tokens sees them all).
            cache: a LatentCache; the new tokens' c_KV and RoPE key are appended to it, and
                their positions continue from len(cache). More than one new token needs
                is_causal=True.
            absorb: the decoding form (W_UK absorbed into the queries, W_UV applied to the
                attended latents, one key head [c_KV; k_R] read in place from the cache);
                same numbers, much less work per new token over a long cache. Not available
                with bias=True.
        """
        check_tensor("x", x, dims=3, floating=True)
        if x.shape[-1] != self.embed_dim:
            raise ValueError(f"x must have shape (B, T, {self.embed_dim}), got {tuple(x.shape)}")
        if cache is not None:
            if not isinstance(cache, LatentCache):
                raise TypeError(f"cache must be a mha.LatentCache, got {type(cache).__name__}")
            if x.shape[1] > 1 and not is_causal:
                raise ValueError("cache= with more than one new token needs is_causal=True: without it "
                                 "earlier tokens of the chunk would see later ones")
        if absorb and self.bias:
            raise ValueError("absorb=True needs bias=False: the absorbed form folds W_UK and W_UV as "
                             "plain matrices")
        h, T = self.num_heads, x.shape[1]
        start = len(cache) if cache is not None else 0
        positions = torch.arange(start, start + T, device=x.device)            # (T,)

        c_q = x if self.w_dq is None else self.w_dq(x)                          # (B, T, d_q)
        if self.q_norm is not None:
            c_q = self.q_norm(c_q)
        q_c = split_heads(self.w_uq(c_q), h)                                    # (B, h, T, d)
        q_r = apply_rope(split_heads(self.w_qr(c_q), h), positions)            # (B, h, T, d_r)
        c_kv = self.w_dkv(x)                                                    # (B, T, d_c)
        if self.kv_norm is not None:
            c_kv = self.kv_norm(c_kv)                                           # normalised before it is cached
        k_r = apply_rope(self.w_kr(x), positions)                               # (B, T, d_r)
        if cache is not None:
            c_kv, k_r = cache.update(c_kv, k_r)                                 # (B, Tk, d_c), (B, Tk, d_r)

        scale = 1.0 / math.sqrt(self.head_dim + self.rope_dim)
        if absorb:
            keys = cache.entries if cache is not None else torch.cat([c_kv, k_r], dim=-1)   # (B, Tk, d_c + d_r)
            return self._absorbed(q_c, q_r, keys, scale, is_causal)
        k_c = split_heads(self.w_uk(c_kv), h)                                   # (B, h, Tk, d)
        v = split_heads(self.w_uv(c_kv), h)                                     # (B, h, Tk, d)
        q = torch.cat([q_c, q_r], dim=-1)                                       # (B, h, T, d + d_r)
        k = torch.cat([k_c, k_r[:, None].expand(-1, h, -1, -1)], dim=-1)        # (B, h, Tk, d + d_r)
        out = _attend(q, k, v, scale, is_causal)                                # (B, h, T, d)
        return self.w_o(merge_heads(out))                                       # (B, T, C)

    def _absorbed(self, q_c, q_r, keys, scale, is_causal):
        """Attention in the latent space. keys (B, Tk, d_c + d_r) = [c_KV; k_R] per token, the
        one key head; its first d_c columns are the one value head."""
        h, d, d_c = self.num_heads, self.head_dim, self.kv_latent_dim
        B, T, Tk = q_c.shape[0], q_c.shape[2], keys.shape[1]
        q_lat = q_c @ self.w_uk.weight.view(h, d, d_c)              # (B, h, T, d) @ (h, d, d_c): W_UK absorbed
        rows = torch.cat([q_lat, q_r], dim=-1).reshape(B, h * T, d_c + q_r.shape[-1])   # every head's queries as rows
        scores = (rows @ keys.transpose(-2, -1)) * scale            # (B, h T, Tk): one key head for all rows
        if is_causal and T > 1:
            allowed = causal_mask(T, Tk, device=keys.device)        # (T, Tk), bottom-right
            scores = scores.view(B, h, T, Tk).masked_fill(~allowed, float("-inf")).view(B, h * T, Tk)
        lat = torch.softmax(scores, dim=-1) @ keys[..., :d_c]       # (B, h T, d_c): the one value head
        v = lat.view(B, h, T, d_c) @ self.w_uv.weight.view(h, d, d_c).transpose(-2, -1)   # (B, h, T, d): W_UV per head
        return self.w_o(merge_heads(v))                             # (B, T, C)


def _attend(q, k, v, scale, is_causal):
    """softmax(q k^T * scale) v, causal mask aligned bottom-right. q (B, h, Tq, e), v (B, h, Tk, e_v)."""
    Tq, Tk = q.shape[-2], k.shape[-2]
    mask = causal_mask(Tq, Tk, device=q.device) if is_causal and Tq > 1 else None   # (Tq, Tk), True = may attend
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
