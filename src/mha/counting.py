"""Counting parameters, FLOPs and KV-cache bytes, and the configurations of known models."""

from __future__ import annotations

from dataclasses import dataclass

from ._checks import check_int


def count_parameters(embed_dim: int, num_heads: int, *, num_kv_heads: int | None = None,
                     bias: bool = False, kdim: int | None = None, vdim: int | None = None) -> int:
    """Parameters of one attention layer (W_Q, W_K, W_V, W_O and optional biases).

    With plain multi-head attention this is 4 C^2 (+ 4 C with biases), whatever num_heads is.
    With g = num_kv_heads < h, W_K and W_V shrink to C x (g * C / h).
    Equals sum(p.numel()) of mha.MultiHeadAttention with the same arguments.
    """
    check_int("embed_dim", embed_dim)
    check_int("num_heads", num_heads)
    if embed_dim % num_heads:
        raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}")
    g = num_heads if num_kv_heads is None else check_int("num_kv_heads", num_kv_heads)
    if num_heads % g:
        raise ValueError(f"num_heads={num_heads} must be divisible by num_kv_heads={g}")
    kdim = embed_dim if kdim is None else check_int("kdim", kdim)
    vdim = embed_dim if vdim is None else check_int("vdim", vdim)
    kv = g * (embed_dim // num_heads)
    weights = embed_dim * embed_dim + kdim * kv + vdim * kv + embed_dim * embed_dim
    biases = embed_dim + kv + kv + embed_dim if bias else 0
    return weights + biases


def attention_flops(batch: int, seq_len: int, embed_dim: int, *, kv_len: int | None = None,
                    num_heads: int | None = None, num_kv_heads: int | None = None) -> int:
    """Floating-point operations of one attention layer's forward pass (a multiply-add = 2).

    Projections: Q and O on seq_len rows, each 2 * C^2 per row; K and V on kv_len rows, each
    2 * C * w per row, where w = C for multi-head attention and w = num_kv_heads * C /
    num_heads with grouped-query attention (pass both num_heads and num_kv_heads).
    Attention: Q K^T and weights @ V, each 2 * seq_len * kv_len * C (summed over the query
    heads, so the number of heads does not change it, nor does sharing K/V heads). With
    kv_len = seq_len = T and multi-head attention: 8 B T C^2 + 4 B T^2 C. Softmax and
    masking are ignored (lower order).
    """
    for name, v in (("batch", batch), ("seq_len", seq_len), ("embed_dim", embed_dim)):
        check_int(name, v)
    kv_len = seq_len if kv_len is None else check_int("kv_len", kv_len)
    kv_width = embed_dim
    if num_kv_heads is not None or num_heads is not None:
        if num_heads is None or num_kv_heads is None:
            raise ValueError("attention_flops needs num_heads and num_kv_heads together (the K/V width is "
                             f"num_kv_heads * embed_dim // num_heads), got num_heads={num_heads!r}, "
                             f"num_kv_heads={num_kv_heads!r}")
        check_int("num_heads", num_heads)
        check_int("num_kv_heads", num_kv_heads)
        if embed_dim % num_heads or num_heads % num_kv_heads:
            raise ValueError(f"num_heads={num_heads} must divide embed_dim={embed_dim}, and num_kv_heads="
                             f"{num_kv_heads} must divide num_heads")
        kv_width = num_kv_heads * (embed_dim // num_heads)
    projections = 2 * batch * embed_dim * (2 * seq_len * embed_dim + 2 * kv_len * kv_width)
    attention = 2 * 2 * batch * seq_len * kv_len * embed_dim
    return projections + attention


def kv_cache_bytes(layers: int, kv_heads: int, head_dim: int, seq_len: int, *, batch: int = 1,
                   bytes_per_element: int = 2) -> int:
    """Bytes of a KV cache: 2 (K and V) x layers x kv_heads x head_dim x seq_len x batch x bytes."""
    for name, v in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim), ("seq_len", seq_len),
                    ("batch", batch), ("bytes_per_element", bytes_per_element)):
        check_int(name, v)
    return 2 * layers * kv_heads * head_dim * seq_len * batch * bytes_per_element


@dataclass(frozen=True)
class ModelConfig:
    """The attention shape of a published model. `source` says where the numbers come from.

    `context` is the fixed context length in tokens, or None for a model that has none
    (the original Transformer: sinusoidal positions, batches built by token count).
    """

    name: str
    d_model: int
    num_heads: int
    num_kv_heads: int
    num_layers: int
    context: int | None
    bias: bool
    source: str

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    def attention_parameters(self) -> int:
        """Parameters of one attention layer."""
        return count_parameters(self.d_model, self.num_heads, num_kv_heads=self.num_kv_heads, bias=self.bias)

    def kv_cache_bytes(self, seq_len: int | None = None, *, batch: int = 1, bytes_per_element: int = 2) -> int:
        """KV-cache bytes at seq_len tokens (default: the full context)."""
        if seq_len is None and self.context is None:
            raise ValueError(f"{self.name} has no fixed context length: pass seq_len (a positive int)")
        return kv_cache_bytes(self.num_layers, self.num_kv_heads, self.head_dim,
                              self.context if seq_len is None else seq_len,
                              batch=batch, bytes_per_element=bytes_per_element)


PRESETS: dict[str, ModelConfig] = {c.name: c for c in [
    ModelConfig("Transformer (base)", 512, 8, 8, 6, None, True,
                "Vaswani et al. 2017, Table 3 (base): d_model 512, h 8, d_k = d_v = 64, N = 6 layers "
                "in the encoder and 6 in the decoder; counted here as 6 layers of self-attention. No "
                "fixed context: sinusoidal positions (section 3.5), batches of about 25,000 source and "
                "25,000 target tokens grouped by length (section 5.1)"),
    ModelConfig("GPT-2 small", 768, 12, 12, 12, 1024, True,
                "Radford et al. 2019, Table 2 (117M model: 12 layers, d_model 768); 12 heads and a "
                "1024-token context from the released configuration (n_head, n_ctx)"),
    ModelConfig("BERT-base", 768, 12, 12, 12, 512, True,
                "Devlin et al. 2019, section 3: L = 12, H = 768, A = 12; 512 positions"),
    ModelConfig("Llama-2-7B", 4096, 32, 32, 32, 4096, False,
                "Touvron et al. 2023, Table 1 (context 4k, GQA only for 34B/70B) and the released "
                "configuration: hidden 4096, 32 heads, 32 layers"),
    ModelConfig("Llama-2-70B", 8192, 64, 8, 80, 4096, False,
                "Touvron et al. 2023, Table 1 and section 2.2 (GQA with 8 KV projections); released "
                "configuration: hidden 8192, 64 heads, 80 layers"),
    ModelConfig("Llama-3-8B", 4096, 32, 8, 32, 8192, False,
                "Llama Team, AI @ Meta 2024, 'The Llama 3 Herd of Models', Table 3: 32 layers, "
                "model dimension 4096, 32 attention heads, 8 key/value heads; 8K context at release"),
    ModelConfig("Llama-3-70B", 8192, 64, 8, 80, 8192, False,
                "Llama Team, AI @ Meta 2024, 'The Llama 3 Herd of Models', Table 3: 80 layers, "
                "model dimension 8192, 64 attention heads, 8 key/value heads; 8K context at release"),
    ModelConfig("Mistral-7B", 4096, 32, 8, 32, 8192, False,
                "Jiang et al. 2023, 'Mistral 7B', Table 1: dim 4096, n_layers 32, head_dim 128, n_heads 32, "
                "n_kv_heads 8, context_len 8192; its sliding window (4096) and rolling buffer cap the "
                "cache at 4096 positions, which this count ignores"),
]}


def latent_cache_bytes(layers: int, kv_latent_dim: int, rope_dim: int, seq_len: int, *, batch: int = 1,
                       bytes_per_element: int = 2) -> int:
    """Bytes of a multi-head latent attention cache (mha.LatentCache, one per layer).

    Per token and layer it holds the latent c_KV and the shared RoPE key:
    (kv_latent_dim + rope_dim) x layers x seq_len x batch x bytes, whatever the number of heads.
    """
    for name, v in (("layers", layers), ("kv_latent_dim", kv_latent_dim), ("rope_dim", rope_dim),
                    ("seq_len", seq_len), ("batch", batch), ("bytes_per_element", bytes_per_element)):
        check_int(name, v)
    return (kv_latent_dim + rope_dim) * layers * seq_len * batch * bytes_per_element


@dataclass(frozen=True)
class LatentConfig:
    """The attention shape of a published model with multi-head latent attention (MLA).

    Its heads are not embed_dim / num_heads wide, so it is not a ModelConfig. `source` says
    where the numbers come from.
    """

    name: str
    d_model: int
    num_heads: int
    head_dim: int           # d_h: non-RoPE query/key part and value, per head
    kv_latent_dim: int      # d_c
    rope_dim: int           # d_h^R: RoPE part of each query, and the shared RoPE key
    q_latent_dim: int | None
    num_layers: int
    context: int
    source: str

    def cache_elements_per_token(self) -> int:
        """Values cached per token and layer: kv_latent_dim + rope_dim."""
        return self.kv_latent_dim + self.rope_dim

    def kv_cache_bytes(self, seq_len: int | None = None, *, batch: int = 1, bytes_per_element: int = 2) -> int:
        """Cache bytes at seq_len tokens (default: the full context)."""
        return latent_cache_bytes(self.num_layers, self.kv_latent_dim, self.rope_dim,
                                  self.context if seq_len is None else seq_len,
                                  batch=batch, bytes_per_element=bytes_per_element)


LATENT_PRESETS: dict[str, LatentConfig] = {c.name: c for c in [
    LatentConfig("DeepSeek-V2", 5120, 128, 128, 512, 64, 1536, 60, 131072,
                 "DeepSeek-AI 2024, 'DeepSeek-V2', section 3.1.2: 60 layers, hidden dimension 5120, "
                 "n_h = 128 heads of d_h = 128, d_c = 512, d_c' = 1536, d_h^R = 64; a 128K context "
                 "(abstract), taken as 128 x 1024 tokens; Table 1: MLA caches (d_c + d_h^R) l = 9/2 d_h l elements per token"),
]}
