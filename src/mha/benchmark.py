"""Speed and memory of the course's attention against PyTorch's, measured in one run.

    mha bench                       # CPU: B=4, C=512, h=8, causal, fp32, 2 threads
    mha bench --device cuda --dtype bfloat16 --lengths 1024 2048 4096 8192
    mha bench --backends tiled raw-sdpa --block-size 128   # FlashAttention's forward, in torch
    mha bench --backends flash      # the Triton kernels against SDPA on a GPU (mha.flash_bench)

Compared, on the same inputs and weights:
    mha-sdpa     mha.MultiHeadAttention(backend="sdpa")
    mha-naive    mha.MultiHeadAttention(backend="naive")   (materialises the (B, h, T, T) weights)
    torch-mha    torch.nn.MultiheadAttention(batch_first=True), need_weights=False
    raw-sdpa     the floor: F.linear + view/transpose + F.scaled_dot_product_attention + F.linear,
                 no checks and no module
    tiled        as raw-sdpa with mha.tiled_attention (FlashAttention's forward in plain torch,
                 --block-size) in place of F.scaled_dot_product_attention; not run unless
                 named: mha bench --backends tiled raw-sdpa. Its backward is autograd's
                 through the loop, which keeps every tile: only its forward saves memory.
Times are medians (torch.utils.benchmark); ratios are to torch-mha within this run. Peak
memory of one forward+backward is measured in a fresh process per (backend, T): on CPU the
rise of the process's peak resident memory (VmHWM), on CUDA torch.cuda.max_memory_allocated.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils import benchmark as tb

from .counting import attention_flops
from .module import MultiHeadAttention
from .tiled import tiled_attention

BACKENDS = ("mha-sdpa", "mha-naive", "torch-mha", "raw-sdpa")   # the default set
CHOICES = BACKENDS + ("tiled", "flash")   # flash: the kernel benchmark of mha.flash_bench
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build(backend: str, embed_dim: int, num_heads: int, device: str, dtype: torch.dtype,
          block_size: int = 64):
    """A callable x -> y for one backend, all with the same weights (seed 0). ``block_size``
    is the tile size of the "tiled" backend."""
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(embed_dim, num_heads, bias=True, batch_first=True, device=device, dtype=dtype)
    if backend == "torch-mha":
        def run(x, mask):
            return ref(x, x, x, attn_mask=mask, is_causal=True, need_weights=False)[0]
        return run, ref
    if backend in ("raw-sdpa", "tiled"):
        h = num_heads

        def run(x, mask):
            B, T, C = x.shape
            q, k, v = F.linear(x, ref.in_proj_weight, ref.in_proj_bias).split(C, dim=-1)
            q, k, v = (t.view(B, T, h, C // h).transpose(1, 2) for t in (q, k, v))
            if backend == "tiled":
                y = tiled_attention(q, k, v, is_causal=True, block_size=block_size)
            else:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return F.linear(y.transpose(1, 2).reshape(B, T, C), ref.out_proj.weight, ref.out_proj.bias)
        return run, ref
    module = MultiHeadAttention.from_torch(ref, backend=backend.removeprefix("mha-"))
    return (lambda x, mask: module(x, is_causal=True)), module


def inputs(batch, seq_len, embed_dim, device, dtype, grad):
    torch.manual_seed(1)
    x = torch.randn(batch, seq_len, embed_dim, device=device, dtype=dtype, requires_grad=grad)
    # torch.nn.MultiheadAttention wants the mask as well as is_causal=True (True = blocked).
    mask = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)
    return x, mask


def prepare(backend, args, seq_len, backward: bool):
    """A no-argument callable running one forward (or forward+backward), already warmed up."""
    fn, _ = build(backend, args.embed_dim, args.num_heads, args.device, DTYPES[args.dtype],
                  getattr(args, "block_size", 64))
    x, mask = inputs(args.batch, seq_len, args.embed_dim, args.device, DTYPES[args.dtype], backward)

    def stmt():
        if backward:
            fn(x, mask).sum().backward()
        else:
            with torch.no_grad():
                fn(x, mask)
        if args.device == "cuda":
            torch.cuda.synchronize()
    stmt()
    return stmt


def time_all(args, seq_len, backward: bool, rounds: int = 3) -> dict[str, float]:
    """Median time per backend. Backends take turns over several rounds, so a slow spell of
    the machine falls on all of them rather than on one."""
    stmts = {b: prepare(b, args, seq_len, backward) for b in args.backends}
    samples = {b: [] for b in stmts}
    for _ in range(rounds):
        for b, stmt in stmts.items():
            timer = tb.Timer(stmt="stmt()", globals={"stmt": stmt}, num_threads=torch.get_num_threads())
            samples[b] += timer.blocked_autorange(min_run_time=args.min_time / rounds).raw_times
    return {b: sorted(t)[len(t) // 2] for b, t in samples.items()}


def peak_memory(backend, args, seq_len) -> int:
    """Peak bytes of one forward+backward, in a fresh process."""
    code = ("import sys, json; from mha.benchmark import peak_here; "
            "print(json.dumps(peak_here(*json.loads(sys.argv[1]))))")
    payload = json.dumps([backend, args.batch, seq_len, args.embed_dim, args.num_heads, args.device, args.dtype,
                          getattr(args, "block_size", 64)])
    out = subprocess.run([sys.executable, "-c", code, payload], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _proc_status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024


def peak_here(backend, batch, seq_len, embed_dim, num_heads, device, dtype, block_size=64) -> int:
    """Peak extra bytes of one forward+backward of ``backend`` in this process (call it in a
    fresh one: `peak_memory` does). The peak is reset first, so several calls in one process
    each measure their own."""
    torch.set_num_threads(1)
    fn, _ = build(backend, embed_dim, num_heads, device, DTYPES[dtype], block_size)
    x, mask = inputs(batch, seq_len, embed_dim, device, DTYPES[dtype], True)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fn(x, mask).sum().backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    # Not ru_maxrss: Linux carries it over from the parent across fork and exec.
    # Writing 5 to clear_refs resets this process's peak resident size (VmHWM).
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _proc_status_bytes("VmRSS")
    fn(x, mask).sum().backward()
    return _proc_status_bytes("VmHWM") - before


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    results = {"config": {**vars(args), "torch": torch.__version__, "python": platform.python_version(),
                          "machine": platform.machine(), "processor": platform.processor(),
                          "device_name": torch.cuda.get_device_name() if args.device == "cuda" else "cpu"},
               "rows": []}
    for T in args.lengths:
        flops = attention_flops(args.batch, T, args.embed_dim)
        for mode in ("forward", "forward+backward"):
            times = time_all(args, T, mode != "forward")
            for b, t in times.items():
                row = {"T": T, "mode": mode, "backend": b, "median_s": t,
                       "vs_torch_mha": t / times["torch-mha"] if "torch-mha" in times else None,
                       "vs_raw_sdpa": t / times["raw-sdpa"] if "raw-sdpa" in times else None,
                       # forward+backward is about 3x the forward's work
                       "tflops": flops * (1 if mode == "forward" else 3) / t / 1e12}
                results["rows"].append(row)
                print(f"T={T:5d} {mode:17s} {b:10s} {t * 1e3:9.2f} ms  x{row['vs_torch_mha'] or 0:5.2f} vs torch-mha",
                      flush=True)
        if args.memory:
            for b in args.backends:
                results["rows"].append({"T": T, "mode": "peak-memory", "backend": b,
                                        "bytes": peak_memory(b, args, T)})
    return results


def table(results: dict) -> str:
    rows = results["rows"]
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    lines = ["| T | mode | " + " | ".join(backends) + " |", "|---|---|" + "---|" * len(backends)]
    for T in dict.fromkeys(r["T"] for r in rows):
        for mode in ("forward", "forward+backward", "peak-memory"):
            cells = {r["backend"]: r for r in rows if r["T"] == T and r["mode"] == mode}
            if not cells:
                continue
            if mode == "peak-memory":
                text = [f"{cells[b]['bytes'] / 2**20:.0f} MiB" for b in backends]
            else:
                text = [f"{cells[b]['median_s'] * 1e3:.2f} ms" + (f" ({cells[b]['vs_torch_mha']:.2f}x)"
                        if cells[b]["vs_torch_mha"] is not None else "") for b in backends]
            lines.append(f"| {T} | {mode} | " + " | ".join(text) + " |")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mha bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024, 2048])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--embed-dim", type=int, default=512)
    p.add_argument("--num-heads", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=CHOICES)
    p.add_argument("--block-size", type=int, default=64, help="tile size of the tiled backend (default 64)")
    p.add_argument("--min-time", type=float, default=0.5, help="seconds of timing per measurement")
    p.add_argument("--no-memory", dest="memory", action="store_false", help="skip the peak-memory runs")
    p.add_argument("--json", default="benchmarks/results/attention.json", help="where to write the results")
    return p


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if _asks_for_flash(argv):
        from . import flash_bench

        return flash_bench.main(argv)
    args = parser().parse_args(argv)
    if args.block_size < 1:
        print(f"error: --block-size must be >= 1, got {args.block_size}", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda, but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    if "torch-mha" not in args.backends:
        args.backends.append("torch-mha")
    start = time.perf_counter()
    results = run(args)
    results["seconds"] = time.perf_counter() - start
    print()
    print(table(results))
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=1)
    print(f"\nwrote {args.json} ({results['seconds']:.0f} s)")
    return 0


def _asks_for_flash(argv) -> bool:
    """`mha bench --backends flash` is the kernel benchmark (mha.flash_bench), with its own
    options; flash together with the layer backends is an error of that benchmark."""
    if "--backends" not in argv:
        return False
    named = []
    for word in argv[argv.index("--backends") + 1:]:
        if word.startswith("-"):
            break
        named.append(word)
    return "flash" in named


if __name__ == "__main__":
    sys.exit(main())
