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
        benchmark.parser().parse_args(["--backends", "flash"])
