"""Compile the kernels of ``mha.flash_attention`` for an NVIDIA GPU on a machine without one,
and read what each program would get there: shared memory, registers, pipelined loads.

Triton's compiler runs on the CPU: its front end, its passes, LLVM, and NVIDIA's assembler
``ptxas`` (shipped in Triton's wheel). Only running the binary needs the GPU. The kernels are
compiled as a real launch compiles them: pointers aligned to 16 bytes (torch's allocations
are, and Triton specialises on it; without the hint no load is pipelined).

    from mha.gpu_compile import Config, resources
    resources([Config("flash_forward_kernel", num_stages=3)])
    # [{'kernel': 'flash_forward_kernel', ..., 'shared_bytes': 65536, 'registers': 118, ...}]

The compiler must run without Triton's interpreter, which ``mha.kernels`` switches on where
there is no GPU; so ``resources`` runs this file as a script in a child process, which loads
the kernels' source file directly (and imports Triton, not torch).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

KERNELS = Path(__file__).resolve().parent / "kernels" / "attention.py"
TENSORS = {"Q", "K", "V", "Out", "dOut", "dK", "dV"}            # in the input's dtype
FLOAT32 = {"RowStat", "InvSum", "Delta", "dQ"}                  # always float32
H100 = 90                                                       # compute capability 9.0
H100_SHARED_BYTES = 227 * 1024                                  # shared memory a block may use


@dataclass(frozen=True)
class Config:
    """One compilation: a kernel of ``mha.kernels.attention`` and its compile-time choices."""

    kernel: str
    dtype: str = "bf16"          # "bf16", "fp16" or "fp32"
    head_dim: int = 64
    block_m: int = 128
    block_n: int = 64
    num_stages: int = 3          # how many tiles a loop loads ahead of the one it computes on
    num_warps: int = 8
    causal: bool = True
    max_and_sum: bool = False    # what the forward saves per row, the backward reads (mha.flash.ROW_STATS)


def resources(configs: list[Config], arch: int = H100, timeout: float = 600.0) -> list[dict]:
    """Compile each config for compute capability ``arch`` (90: H100) and return, per config,
    its fields plus ``shared_bytes`` (shared memory per program), ``registers`` (per thread),
    ``spilled_bytes`` (registers spilled to memory), ``async_copies`` (cp.async instructions:
    pipelined loads from global to shared memory), ``tensor_core_ops`` (wgmma instructions)
    and ``binary_bytes``. Raises RuntimeError with the compiler's message if one fails."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    run = subprocess.run([sys.executable, __file__, str(arch)],         # as a script: no torch to import
                         input=json.dumps([asdict(c) for c in configs]), capture_output=True, text=True,
                         env=env, timeout=timeout)
    if run.returncode != 0:
        raise RuntimeError(f"compiling for sm_{arch} failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def _compile(kernels, config: dict, arch: int) -> dict:
    """In the child process: one config through triton.compile, then ptxas -v for registers."""
    import re
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler import ASTSource

    kernel = getattr(kernels, config["kernel"])
    d = config["head_dim"]
    given = {"HEAD_DIM": d, "BLOCK_D": max(16, 1 << (d - 1).bit_length()), "IS_CAUSAL": config["causal"],
             "PRECISION": "ieee", "BLOCK_M": config["block_m"], "BLOCK_N": config["block_n"],
             "WANT_DQ": True, "WANT_DKV": True, "MAX_AND_SUM": config["max_and_sum"]}
    given = {k: v for k, v in given.items() if k in kernel.arg_names}
    dtype = config["dtype"]
    signature = {name: "constexpr" if name in given else f"*{dtype}" if name in TENSORS
                 else "*fp32" if name in FLOAT32 else "fp32" if name == "scale" else "i32"
                 for name in kernel.arg_names}
    aligned = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(kernel.arg_names)
               if signature[name].startswith("*")}
    binary = triton.compile(ASTSource(kernel, signature, given, aligned), target=GPUTarget("cuda", arch, 32),
                            options={"num_warps": config["num_warps"], "num_stages": config["num_stages"],
                                     "enable_fp_fusion": True})
    ptx = binary.asm["ptx"]
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "kernel.ptx"
        source.write_text(ptx)
        suffix = "a" if arch >= 90 else ""
        report = subprocess.run([get_ptxas(arch).path, "-v", f"--gpu-name=sm_{arch}{suffix}", str(source),
                                 "-o", str(Path(tmp) / "kernel.cubin")], capture_output=True, text=True, check=True)
    text = report.stdout + report.stderr
    registers = int(re.search(r"Used (\d+) registers", text).group(1))
    spilled = sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", text))
    return {**config, "arch": arch, "shared_bytes": binary.metadata.shared, "registers": registers,
            "spilled_bytes": spilled, "async_copies": len(re.findall(r"\bcp\.async\.(?:ca|cg)\b", ptx)),
            "tensor_core_ops": len(re.findall(r"\bwgmma\.mma_async\b", ptx)),
            "binary_bytes": len(binary.asm["cubin"])}


def _main(arch: int) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("mha_kernels_attention", KERNELS)
    kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernels)
    configs = json.loads(sys.stdin.read())
    print(json.dumps([_compile(kernels, c, arch) for c in configs]))


if __name__ == "__main__":
    _main(int(sys.argv[1]))
