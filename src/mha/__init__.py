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
    explorer.py   attention_explorer: the interactive figure of attention weights (with explorer.js)
    book.py       glue: computed values into a lesson's prose
    benchmark.py  `mha bench`: time and memory against torch.nn.MultiheadAttention
    flash_bench.py  `mha bench --backends flash`: the Triton kernels against PyTorch's, on a GPU
    gpu_compile.py  the kernels compiled for an NVIDIA GPU on a CPU-only machine, and their resources
    _checks.py    argument checks shared by the package (errors name the argument)
    autograde/    the exercise format and the judge that `check` and `mha grade` share
    exercises/    the course's graded exercises, one file per lesson
    notebooks.py  student notebooks (solutions stubbed) and the Sphinx extension linking them
    grading/      `mha grade`: the sandboxed batch grader, reports, Gradescope
    cli.py        the `mha` command
"""

import importlib
import importlib.util

# Where each name of the package's interface is defined. A name is imported on first use
# (PEP 562), so that commands that need no torch (``mha report``, ``mha --help``) start in a
# fraction of a second; ``from mha import MultiHeadAttention`` works as usual.
_HOME = {
    "safe_softmax": "attention", "scaled_dot_product_attention": "attention",
    "attention_backward": "backward",
    "KVCache": "cache", "LatentCache": "cache",
    "PRESETS": "counting", "ModelConfig": "counting", "attention_flops": "counting",
    "count_parameters": "counting", "kv_cache_bytes": "counting", "LATENT_PRESETS": "counting",
    "LatentConfig": "counting", "latent_cache_bytes": "counting",
    "merge_heads": "heads", "split_heads": "heads",
    "causal_mask": "masks", "combine_masks": "masks", "mask_from_torch": "masks",
    "padding_mask": "masks", "to_additive": "masks",
    "MultiHeadLatentAttention": "latent",
    "MultiHeadAttention": "module", "SingleHeadAttention": "module",
    "apply_rope": "rope",
    "tiled_attention": "tiled",
    "flash_attention": "flash",
}


def __getattr__(name: str):
    """A name of ``__all__`` from its module, or a submodule (``mha.masks``), imported now."""
    if name in _HOME:
        value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
        globals()[name] = value
        return value
    if importlib.util.find_spec(f".{name}", __name__) is not None:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'mha' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_HOME))


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
