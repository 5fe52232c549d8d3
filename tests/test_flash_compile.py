"""The kernels of mha.flash_attention compile for an H100 (sm_90), on a machine without a
GPU: Triton's frontend, its IR passes, LLVM and ptxas (shipped in Triton's wheel) all run on
the CPU (mha.gpu_compile, in a child process where the interpreter is off). The interpreter
does not catch what only the compiler refuses (a global that is not a constexpr, a block
shape that is not a power of two, a type mismatch between the two branches of an if), so
this test does. The binaries are those a real launch builds: 16-byte aligned pointers, so
that the loads of the key loop are pipelined."""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("triton") is None:
    pytest.skip("Triton publishes wheels for Linux only", allow_module_level=True)

from mha.gpu_compile import H100_SHARED_BYTES, Config, resources  # noqa: E402


def test_kernels_compile_for_an_h100_without_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))    # a real compile, every time
    configs = [  # bfloat16 and causal: every kernel; float16, not causal, d = 48 padded to 64, the
        # row max and sum saved: the other branch of key_range, query_range and the row statistics
        Config("flash_forward_kernel", num_stages=1), Config("flash_forward_kernel", num_stages=3),
        Config("flash_backward_kernel", block_m=32, block_n=64, num_stages=2),
        Config("flash_backward_delta_kernel", block_m=64),
        Config("flash_forward_kernel", dtype="fp16", head_dim=48, causal=False, max_and_sum=True),
        Config("flash_backward_kernel", dtype="fp16", head_dim=48, block_m=32, block_n=64, num_stages=2,
               causal=False, max_and_sum=True),
    ]
    try:
        compiled = resources(configs)
    except RuntimeError as e:
        if "ptxas" in str(e) and "not found" in str(e).lower():
            pytest.skip("this Triton wheel has no ptxas for this machine")
        raise
    assert [c["kernel"] for c in compiled] == [c.kernel for c in configs]
    for c in compiled:
        assert c["binary_bytes"] > 1000, c
        assert c["shared_bytes"] <= H100_SHARED_BYTES, c
        assert c["spilled_bytes"] == 0, c                   # these configurations fit in registers
    one_stage, three_stages, backward = compiled[:3]
    # Loads pipelined three deep: the K and V tiles of later blocks arrive while the tensor
    # cores work on the current one, so shared memory holds more tiles at once.
    assert one_stage["async_copies"] == 0 < three_stages["async_copies"]
    assert three_stages["shared_bytes"] > one_stage["shared_bytes"]
    assert three_stages["tensor_core_ops"] > 0 and backward["tensor_core_ops"] > 0     # tl.dot on tensor cores
