"""`mha bench`'s tiled backend (mha.tiled_attention), at tiny sizes."""

from __future__ import annotations

import json

import pytest
import torch

from mha import benchmark

TINY = ["--lengths", "8", "--batch", "1", "--embed-dim", "8", "--num-heads", "2", "--threads", "1",
        "--min-time", "0.01"]


def test_default_backends_are_unchanged_and_tiled_is_opt_in():
    args = benchmark.parser().parse_args([])
    assert args.backends == ["mha-sdpa", "mha-naive", "torch-mha", "raw-sdpa"]
    assert args.block_size == 64
    assert benchmark.parser().parse_args(["--backends", "tiled"]).backends == ["tiled"]


@pytest.mark.parametrize("block_size", [1, 3, 64])
def test_tiled_backend_computes_what_raw_sdpa_computes(block_size):
    tiled, _ = benchmark.build("tiled", 16, 4, "cpu", torch.float32, block_size)
    raw, _ = benchmark.build("raw-sdpa", 16, 4, "cpu", torch.float32)
    x, mask = benchmark.inputs(2, 11, 16, "cpu", torch.float32, grad=False)
    torch.testing.assert_close(tiled(x, mask), raw(x, mask), atol=1e-5, rtol=0)


def test_bench_times_the_tiled_backend_and_reports_it(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert benchmark.main(TINY + ["--backends", "tiled", "--block-size", "4", "--no-memory",
                                  "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["config"]["block_size"] == 4
    rows = [(r["backend"], r["mode"]) for r in results["rows"]]
    for mode in ("forward", "forward+backward"):
        assert ("tiled", mode) in rows and ("torch-mha", mode) in rows   # torch-mha: the yardstick
    assert all(r["median_s"] > 0 for r in results["rows"])
    printed = capsys.readouterr().out
    assert "| T | mode | tiled | torch-mha |" in printed


def test_peak_memory_of_the_tiled_backend_is_measured_in_a_fresh_process():
    args = benchmark.parser().parse_args(TINY + ["--block-size", "4"])
    assert benchmark.peak_memory("tiled", args, 8) >= 0


def test_bad_block_size_and_unknown_backend_are_refused(capsys):
    assert benchmark.main(TINY + ["--backends", "tiled", "--block-size", "0", "--no-memory"]) == 2
    assert "--block-size must be >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        benchmark.parser().parse_args(["--backends", "nope"])


# ----------------------------------------------------------------------------- mha bench --backends flash

def test_flash_is_the_kernel_benchmark_with_its_own_options():
    from mha import flash_bench

    assert benchmark._asks_for_flash(["--backends", "flash"])
    assert benchmark._asks_for_flash(["--lengths", "8", "--backends", "raw-sdpa", "flash", "--batch", "1"])
    assert not benchmark._asks_for_flash(["--backends", "tiled", "--lengths", "8"])
    args = flash_bench.parser().parse_args(["--backends", "flash"])
    assert args.dtypes == ["bfloat16", "float16"] and args.head_dims == [64, 128]
    assert args.lengths == [1024, 2048, 4096, 8192, 16384] and args.causal == [False, True]


def test_flash_bench_counts_flops_as_flashattention_does():
    from mha import flash_bench

    forward = flash_bench.flops(1, 16, 16384, 64, False, "forward")
    assert forward == 4 * 16 * 16384 ** 2 * 64
    assert flash_bench.flops(1, 16, 16384, 64, True, "forward") == forward / 2
    assert flash_bench.flops(1, 16, 16384, 64, False, "forward+backward") == 3.5 * forward


def _row(backend, mode, ms, T=16384, d=64, causal=True, peak=100.0):
    return {"backend": backend, "mode": mode, "ms": ms, "T": T, "head_dim": d, "causal": causal,
            "dtype": "bfloat16", "batch": 16384 // T, "heads": 16, "tflops": 1.0, "peak_mib": peak,
            "max_error": 0.0}


def test_flash_bench_goals_are_judged_from_the_rows():
    from mha import flash_bench

    rows = [_row("flash", "forward", 2.0), _row("sdpa-flash", "forward", 2.5),
            _row("flash", "forward+backward", 6.0, peak=120.0), _row("sdpa-flash", "forward+backward", 5.0)]
    goals = {g["goal"].split(" (")[0]: g for g in flash_bench.goal_report(rows)}
    cs336 = goals["CS336 workload"]
    assert cs336["value_ms"] == 6.0 and cs336["met"] is False          # 6.0 ms > 5.36 ms
    assert goals["forward at most 1.0x sdpa-flash"]["met"] is True       # 0.8x
    both = goals["forward+backward at most 1.15x sdpa-flash"]
    assert both["ratio"] == pytest.approx(1.2) and both["met"] is False
    assert goals["peak memory within 10% of sdpa-flash"]["met"] is False  # 1.2x
    assert flash_bench.goal_report([])[0]["met"] is None                 # nothing measured


def test_flash_bench_plots_results(tmp_path):
    from mha import flash_bench

    results = {"device": "a GPU", "date": "2026-01-01T00:00:00", "rows": [
        _row(b, m, ms, T=T) for b in ("flash", "sdpa-flash") for m in ("forward", "forward+backward")
        for T, ms in ((1024, 0.1), (2048, 0.3))]}
    flash_bench.plot(results, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 1000


def test_flash_bench_on_a_cpu_checks_numbers_and_says_times_would_mean_nothing(tmp_path, capsys):
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        pytest.skip("Triton publishes wheels for Linux only")
    if torch.cuda.is_available():
        pytest.skip("this is the CPU path")
    out = tmp_path / "flash.json"
    assert benchmark.main(["--backends", "flash", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "measures correctness only" in printed and "float32 against float64: largest error" in printed
    assert not out.exists()
