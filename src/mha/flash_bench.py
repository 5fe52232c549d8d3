"""`mha bench --backends flash`: the Triton kernels of mha.flash_attention against PyTorch's
own attention kernels, on a GPU.

    mha bench --backends flash                          # the whole grid (tens of minutes)
    mha bench --backends flash --goals                  # only the workloads the goals name
    mha bench --backends flash --lengths 4096 --head-dims 64 --dtypes bfloat16 --causal

Compared on the same (B, h, T, d) inputs, forward and forward+backward:
    flash        mha.flash_attention (Triton; the autotuner runs on the first call of each
                 head width, causal flag and power-of-two length, before timing)
    sdpa-flash   F.scaled_dot_product_attention held to its FLASH_ATTENTION backend
                 (FlashAttention-2 inside torch): the yardstick of the goals
    sdpa-cudnn   the same held to CUDNN_ATTENTION: reported as the ceiling, no goal attached
    tiled        mha.tiled_attention, lesson 10's loop in torch: up to T = 4096 (its backward
                 is autograd's through the loop, which keeps every tile)

Grid: bfloat16 and float16; head widths 64 and 128; T = 1024 ... 16384; causal and not;
B * T = 16384 tokens (B = 16384 // T) and 16 heads. Times are medians of CUDA-event timings.
FLOPs: 4 B h Tq Tk d for the forward (two matrix products), halved when causal (the tiles
above the diagonal are skipped), and 2.5 times that for the backward (five products), as
FlashAttention's papers count them. Peak memory: torch.cuda.max_memory_allocated during one
forward+backward, above what the inputs already held.

The results go to a JSON file (device, date, versions of torch, Triton and CUDA, every
measurement) and a PNG plot beside it. Lesson 14 plots the committed file
benchmarks/results/flash-gpu.json when it exists.

On a machine without a CUDA GPU there is nothing to time: mha.flash_attention runs in
Triton's interpreter there, and the interpreter's time is numpy executing the kernels'
programs one after another, which says nothing about a GPU. The command then checks the
kernels' numbers at a small size instead, and says so.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
BACKENDS = ("flash", "sdpa-flash", "sdpa-cudnn", "tiled")
TOKENS = 16384        # B * T
HEADS = 16
TILED_MAX_T = 4096

# The goals (one H100): the CS336 leaderboard workload, and ratios to SDPA's FlashAttention-2.
CS336_WORKLOAD = {"batch": 1, "heads": 16, "T": 16384, "head_dim": 64, "dtype": "bfloat16", "causal": True}
CS336_BEST_MS = 5.36            # best verified entry, spring 2025 (forward+backward)
GOAL_RATIO = {"forward": 1.0, "forward+backward": 1.15}   # flash / sdpa-flash, bfloat16, T >= 4096
GOAL_MEMORY_RATIO = 1.10

# An H100 SXM5's dense FP16 tensor-core peak, TFLOP/s, as Shah et al. 2024 (FlashAttention-3)
# give it for the GPU they measure on: typed from the paper, not measured here. (The PCIe
# H100 peaks lower.) Lessons 10 and 14 quote it.
H100_SXM_FP16_PEAK_TFLOPS = 989


def default_results_path() -> Path:
    """benchmarks/results/flash-gpu.json of the source checkout (where lesson 14 reads it)."""
    return Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "flash-gpu.json"


def load_results(path=None) -> dict | None:
    """The committed GPU results, or None when no GPU has produced them yet."""
    path = Path(path) if path is not None else default_results_path()
    if not path.is_file():
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def flops(batch, heads, T, head_dim, causal, mode) -> float:
    forward = 4.0 * batch * heads * T * T * head_dim * (0.5 if causal else 1.0)
    return forward * (1.0 if mode == "forward" else 3.5)


# ----------------------------------------------------------------------------- the backends

def attention_fn(backend: str, causal: bool):
    """A function (q, k, v) -> out for ``backend``."""
    if backend == "flash":
        from .flash import flash_attention
        return lambda q, k, v: flash_attention(q, k, v, is_causal=causal)
    if backend == "tiled":
        from .tiled import tiled_attention
        return lambda q, k, v: tiled_attention(q, k, v, is_causal=causal, block_size=128)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    which = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}[backend]

    def run(q, k, v):
        with sdpa_kernel(which):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def cuda_time_ms(fn, reps: int, warmup: int = 3) -> float:
    """Median milliseconds of ``fn()`` over ``reps`` runs, by CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def measure(backend, dtype, head_dim, T, causal, reps) -> list[dict]:
    """Forward and forward+backward rows for one configuration (an "error" row when the
    backend cannot run it)."""
    batch = max(1, TOKENS // T)
    base = {"backend": backend, "dtype": dtype, "head_dim": head_dim, "T": T, "batch": batch,
            "heads": HEADS, "causal": causal}
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(batch, HEADS, T, head_dim, device="cuda", dtype=DTYPES[dtype], generator=g)
               .requires_grad_() for _ in range(3))
    grad = torch.randn(q.shape, device="cuda", dtype=q.dtype, generator=g)
    fn = attention_fn(backend, causal)
    rows = []
    try:
        with torch.no_grad():
            out = fn(q, k, v)
            reference = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
            max_error = float((out.float() - reference).abs().max())
            del out, reference
        with torch.no_grad():
            forward_ms = cuda_time_ms(lambda: fn(q, k, v), reps)

        def step():
            q.grad = k.grad = v.grad = None
            fn(q, k, v).backward(grad)
        both_ms = cuda_time_ms(step, reps)
        q.grad = k.grad = v.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        peak_mib = (torch.cuda.max_memory_allocated() - before) / 2**20
    except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
        return [{**base, "mode": "error", "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}]
    for mode, ms in (("forward", forward_ms), ("forward+backward", both_ms)):
        rows.append({**base, "mode": mode, "ms": ms, "max_error": max_error, "peak_mib": peak_mib,
                     "tflops": flops(batch, HEADS, T, head_dim, causal, mode) / (ms * 1e-3) / 1e12})
    return rows


# ----------------------------------------------------------------------------- goals

def goal_report(rows: list[dict]) -> list[dict]:
    """The goals, each with the measured value and whether it is met (None: not measured)."""
    def find(backend, mode, **cfg):
        return next((r for r in rows if r["backend"] == backend and r["mode"] == mode
                     and all(r.get(key) == value for key, value in cfg.items())), None)

    goals = []
    w = {key: CS336_WORKLOAD[key] for key in ("T", "head_dim", "dtype", "causal")}
    row = find("flash", "forward+backward", **w)
    goals.append({"goal": f"CS336 workload (B 1, h 16, T 16384, d 64, bf16, causal), forward+backward "
                          f"under {CS336_BEST_MS} ms",
                  "value_ms": None if row is None else row["ms"],   # B = 16384 // T = 1 here
                  "met": None if row is None else row["ms"] < CS336_BEST_MS})
    for mode, limit in GOAL_RATIO.items():
        for r in rows:
            if r["backend"] != "flash" or r["mode"] != mode or r["dtype"] != "bfloat16" or r["T"] < 4096:
                continue
            ref = find("sdpa-flash", mode, dtype=r["dtype"], head_dim=r["head_dim"], T=r["T"], causal=r["causal"])
            if ref is None:
                continue
            ratio = r["ms"] / ref["ms"]
            goals.append({"goal": f"{mode} at most {limit}x sdpa-flash (bf16, d {r['head_dim']}, T {r['T']}, "
                                  f"{'causal' if r['causal'] else 'not causal'})",
                          "ratio": ratio, "met": ratio <= limit})
            if mode == "forward+backward":
                mem = r["peak_mib"] / ref["peak_mib"] if ref["peak_mib"] > 0 else None
                goals.append({"goal": f"peak memory within 10% of sdpa-flash (bf16, d {r['head_dim']}, "
                                      f"T {r['T']}, {'causal' if r['causal'] else 'not causal'})",
                              "ratio": mem, "met": None if mem is None else mem <= GOAL_MEMORY_RATIO})
    return goals


# ----------------------------------------------------------------------------- output

def versions() -> dict:
    import triton

    return {"torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
            "python": platform.python_version()}


def plot(results: dict, path: Path) -> None:
    """TFLOP/s against T, one panel per (dtype, head width, causal), solid forward and
    dashed forward+backward, one colour per backend."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results["rows"] if r["mode"] != "error"]
    panels = sorted({(r["dtype"], r["head_dim"], r["causal"]) for r in rows})
    if not panels:
        return
    cols = min(4, len(panels))
    fig, axes = plt.subplots(math.ceil(len(panels) / cols), cols, figsize=(4 * cols, 3.2 * math.ceil(len(panels) / cols)),
                             squeeze=False, constrained_layout=True)
    for ax, (dtype, d, causal) in zip(axes.flat, panels):
        for n, backend in enumerate(BACKENDS):
            for mode, style in (("forward", "-"), ("forward+backward", "--")):
                pts = sorted((r["T"], r["tflops"]) for r in rows if (r["backend"], r["dtype"], r["head_dim"],
                                                                     r["causal"], r["mode"]) ==
                             (backend, dtype, d, causal, mode))
                if pts:
                    ax.plot(*zip(*pts), style, marker="o", color=f"C{n}",
                            label=f"{backend} {'fwd' if mode == 'forward' else 'fwd+bwd'}")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{dtype}, d {d}, {'causal' if causal else 'not causal'}", fontsize=9)
        ax.set_xlabel("T")
        ax.set_ylabel("TFLOP/s")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"{results['device']}, {results['date'][:10]}")
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- entry point

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mha bench --backends flash", description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS,
                   help="flash alone runs all of " + ", ".join(BACKENDS))
    p.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    p.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    p.add_argument("--causal", dest="causal", action="store_const", const=[True], default=[False, True],
                   help="causal only (default: both)")
    p.add_argument("--goals", action="store_true", help="only the workloads that the goals name")
    p.add_argument("--reps", type=int, default=20, help="timed runs per measurement (median)")
    p.add_argument("--json", default=str(default_results_path()), help="where to write the results")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    # `mha bench --backends flash` means all of them; flash and others name those.
    backends = list(BACKENDS) if args.backends == ["flash"] else list(dict.fromkeys(args.backends))
    if not torch.cuda.is_available():
        return cpu_check()
    if args.goals:
        configs = [("bfloat16", 64, 16384, True)] + [("bfloat16", d, T, c) for d in (64, 128)
                                                     for T in (4096, 8192, 16384) for c in (False, True)]
        backends = ["flash", "sdpa-flash", "sdpa-cudnn"]
    else:
        configs = [(dt, d, T, c) for dt in args.dtypes for d in args.head_dims for T in args.lengths
                   for c in args.causal]
    results = {"device": torch.cuda.get_device_name(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
               "versions": versions(), "config": {"backends": backends, "tokens": TOKENS, "heads": HEADS,
                                                  "reps": args.reps}, "rows": []}
    for dtype, d, T, causal in dict.fromkeys(configs):
        for backend in backends:
            if backend == "tiled" and T > TILED_MAX_T:
                continue
            for row in measure(backend, dtype, d, T, causal, args.reps):
                results["rows"].append(row)
                if row["mode"] == "error":
                    print(f"{backend:10s} {dtype} d={d} T={T:5d} causal={causal!s:5}: {row['error']}", flush=True)
                else:
                    print(f"{backend:10s} {dtype} d={d:3d} T={T:5d} causal={causal!s:5} {row['mode']:16s} "
                          f"{row['ms']:8.3f} ms {row['tflops']:6.1f} TFLOP/s peak {row['peak_mib']:8.1f} MiB "
                          f"err {row['max_error']:.1e}", flush=True)
    results["goals"] = goal_report(results["rows"])
    print()
    for goal in results["goals"]:
        met = {True: "met", False: "NOT met", None: "not measured"}[goal["met"]]
        value = (f"{goal['value_ms']:.2f} ms" if goal.get("value_ms") else
                 f"{goal['ratio']:.2f}x" if goal.get("ratio") else "")
        print(f"{met:13s} {value:9s} {goal['goal']}")
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1))
    plot(results, path.with_suffix(".png"))
    print(f"\nwrote {path} and {path.with_suffix('.png')}")
    return 0


def cpu_check() -> int:
    """No GPU: say what the interpreter measures, and check the kernels' numbers instead."""
    print("No CUDA GPU here. mha.flash_attention runs in Triton's interpreter on a CPU, which measures "
          "correctness only: its time is numpy executing the kernels' programs one after another, and "
          "says nothing about a GPU. No timing is done and no results file is written; checking the "
          "kernels' numbers at a small size instead.")
    try:
        from .flash import flash_attention
        flash_attention(*(torch.zeros(1, 1, 1, 16),) * 3)
    except ImportError as e:
        print(f"cannot run the kernels here: {e}")
        return 1
    from .attention import scaled_dot_product_attention
    g = torch.Generator().manual_seed(0)
    worst = 0.0
    for Tq, Tk, d, causal in [(37, 53, 64, True), (53, 37, 32, True), (40, 40, 128, False)]:
        q, k, v = (torch.randn(1, 2, n, d, generator=g, requires_grad=True) for n in (Tq, Tk, Tk))
        out = flash_attention(q, k, v, is_causal=causal)
        out.sum().backward()
        grads = [t.grad for t in (q, k, v)]
        q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
        ref = scaled_dot_product_attention(q64, k64, v64, is_causal=causal)[0]
        ref.sum().backward()
        errors = [float((a.double() - b).abs().max()) for a, b in
                  zip([out.detach(), *grads], [ref.detach(), q64.grad, k64.grad, v64.grad])]
        worst = max(worst, *errors)
        print(f"Tq={Tq} Tk={Tk} d={d} causal={causal}: max |error| out, dq, dk, dv = "
              + ", ".join(f"{e:.1e}" for e in errors))
    print(f"float32 against float64: largest error {worst:.1e}")
    return 0 if worst < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
