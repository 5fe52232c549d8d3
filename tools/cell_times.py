"""Execute lessons one by one and print how long each code cell took, slowest first.

    python tools/cell_times.py lessons/02-why-multiple-heads.md          # the page's SEED
    python tools/cell_times.py lessons/13-*.md --seed 1000 --top 5       # another seed

Each lesson runs in a fresh kernel, in its own folder, as the site build runs it (nbclient;
its first cell pays for the kernel's imports, which the build's preloaded kernels do not).
A cell that raises stops that lesson and is reported with the cell's number. The exit status
is 1 if any lesson failed or any cell took longer than ``--limit`` seconds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jupytext
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "book" / "_ext")]
from parallel_execution import cell_times as timed_cells  # noqa: E402  (the build's own report)
from seeds import with_seed  # noqa: E402


def cell_times(path: Path, seed: int | None = None, timeout: int = 600):
    """[(seconds, code cell number, first line)] for every code cell run, and the error
    (None if every cell ran)."""
    nb = jupytext.read(path)
    if seed is not None:
        nb = with_seed(nb, seed)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=True,
                            resources={"metadata": {"path": str(path.parent)}})
    error = None
    try:
        client.execute()
    except CellExecutionError as e:
        error = str(e).strip().splitlines()[-1]
    return timed_cells(nb), error


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("lessons", nargs="+", type=Path)
    p.add_argument("--seed", type=int, help="put `SEED = s` after the parameters cell")
    p.add_argument("--top", type=int, default=5, help="how many cells to list per lesson (default 5)")
    p.add_argument("--limit", type=float, default=10.0, help="seconds a cell may take (default 10)")
    args = p.parse_args(argv)
    bad = False
    for path in args.lessons:
        times, error = cell_times(path, args.seed)
        total = sum(t for t, _, _ in times)
        print(f"{path.name}: {total:.1f} s in {len(times)} code cells" + (f"; FAILED: {error}" if error else ""))
        for seconds, i, first in sorted(times, reverse=True)[: args.top]:
            flag = "  over the limit" if seconds > args.limit and i > 0 else ""
            print(f"  {seconds:6.2f} s  code cell {i:2d}  {first}{flag}")
        bad |= bool(error) or any(t > args.limit for t, i, _ in times if i > 0)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
