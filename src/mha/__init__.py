"""mha: the multi-head attention package every lesson of the course imports.

One file per concept:
    attention.py  scaled dot-product attention, written out (returns the weights)
    heads.py      split_heads / merge_heads: (B, T, C) <-> (B, h, T, C // h)
    masks.py      causal and padding masks (True = may attend), converters from torch's convention
    module.py     SingleHeadAttention, MultiHeadAttention (GQA/MQA, cross-attention, two backends)
    cache.py      KVCache, LatentCache for incremental decoding
    rope.py       apply_rope: rotary position embedding (interleaved and half layouts)
    latent.py     MultiHeadLatentAttention: DeepSeek-V2's multi-head latent attention
    backward.py   attention_backward: the gradients of attention, derived by hand
    tiled.py      tiled_attention: FlashAttention's forward (tiles, online softmax) in plain torch
    flash.py      flash_attention: FlashAttention-2 forward and backward as Triton kernels
    kernels/      the Triton kernels (imported on first use: `import mha` never imports Triton)
    counting.py   parameters, FLOPs, KV-cache bytes, presets of published models
    plotting.py   figures for the lessons
    book.py       glue: computed values into a lesson's prose
    benchmark.py  `mha bench`: time and memory against torch.nn.MultiheadAttention
    exercises/    the graded exercises and the in-notebook `check`
    notebooks.py  student notebooks (solutions stubbed) and the Sphinx extension linking them
    grading/      `mha grade`: the sandboxed batch grader, reports, Gradescope
    cli.py        the `mha` command
"""

from .attention import safe_softmax, scaled_dot_product_attention
from .backward import attention_backward
from .cache import KVCache, LatentCache
from .counting import PRESETS, ModelConfig, attention_flops, count_parameters, kv_cache_bytes
from .counting import LATENT_PRESETS, LatentConfig, latent_cache_bytes
from .heads import merge_heads, split_heads
from .masks import causal_mask, combine_masks, mask_from_torch, padding_mask, to_additive
from .latent import MultiHeadLatentAttention
from .module import MultiHeadAttention, SingleHeadAttention
from .rope import apply_rope
from .tiled import tiled_attention
from .flash import flash_attention

__all__ = [
    "scaled_dot_product_attention", "safe_softmax", "split_heads", "merge_heads",
    "causal_mask", "padding_mask", "combine_masks", "mask_from_torch", "to_additive",
    "SingleHeadAttention", "MultiHeadAttention", "KVCache",
    "count_parameters", "attention_flops", "kv_cache_bytes", "PRESETS", "ModelConfig",
    "attention_backward",
    "apply_rope", "MultiHeadLatentAttention", "LatentCache", "latent_cache_bytes", "LATENT_PRESETS",
    "LatentConfig",
    "tiled_attention", "flash_attention",
]
__version__ = "0.1.0"
