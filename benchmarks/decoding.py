"""Decoding costs of the caches and of multi-head latent attention, on one thread.

    .venv/bin/python benchmarks/decoding.py [--repeats 3]

1. Appending one token at a time to an empty mha.KVCache ((1, 8, T, 64) keys and values) and
   to an empty mha.LatentCache ((1, T, 512) latents and (1, T, 64) RoPE keys), 4,096 and
   16,384 times: total thread CPU time, and the ratio of the two (4 for a linear cost).
2. One decoding step of mha.MultiHeadLatentAttention (embed_dim 2048, 32 heads of 64,
   kv_latent_dim 256, rope_dim 32), explicit and absorbed, after 256 and 2,048 cached tokens,
   the two forms taking turns: median thread CPU time, and the largest output difference.

All times are thread CPU time (time.thread_time) with torch.set_num_threads(1), so CPU-bound
neighbours disturb them little; neighbours that compete for memory bandwidth still do. The
script uses only the public API, so it runs against any version of the package (put another
checkout's src first on PYTHONPATH to compare). Not part of the test run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import mha


def append_seconds(kind: str, n: int) -> float:
    """Thread CPU seconds to append n tokens one at a time to an empty cache."""
    cache = mha.KVCache() if kind == "KVCache" else mha.LatentCache()
    a, b = ((torch.randn(1, 8, 1, 64), torch.randn(1, 8, 1, 64)) if kind == "KVCache"
            else (torch.randn(1, 1, 512), torch.randn(1, 1, 64)))
    with torch.inference_mode():
        start = time.thread_time()
        for _ in range(n):
            cache.update(a, b)
        return time.thread_time() - start


def mla_steps(cached: int, rounds: int = 7) -> tuple[float, float, float]:
    """Median ms of one explicit and one absorbed decoding step after `cached` tokens, and the
    largest difference of their outputs."""
    torch.manual_seed(0)
    E, H, D, DC, DR = 2048, 32, 64, 256, 32
    layer = mha.MultiHeadLatentAttention(E, H, head_dim=D, kv_latent_dim=DC, rope_dim=DR).eval()
    x = torch.randn(1, cached + rounds, E)
    times = {False: [], True: []}
    outs = {False: [], True: []}
    with torch.inference_mode():
        caches = {absorb: mha.LatentCache() for absorb in times}
        for cache in caches.values():
            cache.update(layer.w_dkv(x[:, :cached]), mha.apply_rope(layer.w_kr(x[:, :cached]), torch.arange(cached)))
        for t in range(cached, cached + rounds):
            for absorb in times:
                start = time.thread_time()
                outs[absorb].append(layer(x[:, t:t + 1], cache=caches[absorb], absorb=absorb))
                times[absorb].append(time.thread_time() - start)
    diff = float((torch.cat(outs[True], 1) - torch.cat(outs[False], 1)).abs().max())
    return 1e3 * statistics.median(times[False][1:]), 1e3 * statistics.median(times[True][1:]), diff


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each measurement; the fastest is kept")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"mha from {mha.__file__}")
    for kind in ("KVCache", "LatentCache"):
        t = {n: min(append_seconds(kind, n) for _ in range(args.repeats)) for n in (4096, 16384)}
        print(f"{kind:12s} append 4,096 tokens {t[4096]:7.3f} s, 16,384 tokens {t[16384]:7.3f} s "
              f"(ratio {t[16384] / t[4096]:.1f})")
    for cached in (256, 2048):
        runs = [mla_steps(cached) for _ in range(args.repeats)]
        explicit, absorbed = min(r[0] for r in runs), min(r[1] for r in runs)
        print(f"MLA step after {cached:5,d} tokens: explicit {explicit:6.2f} ms, absorbed {absorbed:6.2f} ms "
              f"(ratio {absorbed / explicit:.2f}), outputs differ by {max(r[2] for r in runs):.1e}")


if __name__ == "__main__":
    main()
