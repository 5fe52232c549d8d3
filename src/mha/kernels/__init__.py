"""Triton kernels, and the choice between running them on a GPU or in Triton's interpreter.

Importing this package imports Triton and decides how its kernels run:

- on a machine with a CUDA GPU, Triton compiles them for the GPU;
- on a machine without one (or with ``TRITON_INTERPRET=1`` in the environment), they run
  in Triton's interpreter, which executes the same kernel source on the CPU with numpy:
  right for checking that a kernel is correct, and no guide at all to its speed.

The interpreter must be chosen before Triton is imported: ``@triton.jit`` reads the setting
when it decorates a function, and Triton's own library (``tl.zeros``, ``tl.sum``...) is made
of such functions, decorated on import. So this package imports Triton itself, after
choosing; the kernel modules (``attention``) are imported after it; and a notebook that
defines its own kernels imports ``mha.kernels`` before ``triton`` (``INTERPRETER`` then says
which way they run). A Triton imported earlier, without the interpreter, on a machine
without a GPU, cannot be switched over: that is an ImportError that says what to do.

Triton publishes wheels for Linux only. Where it does not install (macOS, Windows),
importing this package raises an ImportError that says so and names the plain-torch
alternative, ``mha.tiled_attention``; ``import mha`` itself never imports Triton.
"""

from __future__ import annotations

import contextlib
import os
import sys

import torch

NO_TRITON = (
    "mha.flash_attention and the kernels of lesson 14 need Triton, which publishes wheels for "
    "Linux only{why}. Install it with `pip install triton` on Linux; on macOS or Windows use "
    "mha.tiled_attention(q, k, v, is_causal=..., scale=...), the same algorithm (FlashAttention's "
    "forward) in plain torch, with the same numbers."
)


def _wants_interpreter() -> bool:
    """The interpreter when the environment asks for it, or when there is no CUDA GPU."""
    setting = os.environ.get("TRITON_INTERPRET", "").strip().lower()
    if setting in ("1", "true", "on", "yes"):
        return True
    return not torch.cuda.is_available()


def _import_triton(interpreter: bool):
    """Import Triton, with the interpreter switched on first when ``interpreter``: Triton's
    own library (tl.zeros, tl.sum, tl.cdiv...) is made of @triton.jit functions too, which
    are decorated when Triton is imported."""
    if interpreter:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton
        import triton.language as tl
    except ImportError as e:
        why = f" (this is {sys.platform})" if not sys.platform.startswith("linux") else " (not installed here)"
        raise ImportError(NO_TRITON.format(why=why)) from e
    if interpreter and type(tl.zeros).__name__ == "JITFunction":
        raise ImportError(
            "Triton was imported before its interpreter was switched on, so its own library is "
            "compiled for a GPU that this machine does not have. Import mha.kernels (or call "
            "mha.flash_attention) before importing triton, or start Python with TRITON_INTERPRET=1.")
    if interpreter and hasattr(triton, "knobs"):  # Triton >= 3.4 keeps the setting in a knob too
        triton.knobs.runtime.interpret = True
    return triton


INTERPRETER: bool = _wants_interpreter()
triton = _import_triton(INTERPRETER)



@contextlib.contextmanager
def bounds_checked():
    """Within this block, a kernel run by the interpreter stops with an IndexError (wrapped in
    Triton's InterpreterError) when a lane that its mask lets through loads, stores or adds
    outside the tensors it was given. The interpreter checks nothing by itself: such a lane
    reads or writes whatever lies there in this process, and can corrupt the heap. ``check``
    and the grader run every kernel exercise this way. Only launches on CPU tensors are
    checked: compiled for a GPU, or interpreted on copies of GPU tensors, kernels are not
    (NVIDIA's compute-sanitizer checks them there)."""
    from mha.autograde import calls

    saved = calls.watch_launches([0])
    try:
        yield
    finally:
        calls.restore(saved)


__all__ = ["INTERPRETER", "bounds_checked", "triton"]
