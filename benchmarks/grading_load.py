"""Does a busy machine cost a correct submission points? Grade a correct whole-course
notebook N times (default 200) while busy processes keep every core loaded, and count
the gradings that did not get full marks.

    .venv/bin/python benchmarks/grading_load.py [--n 200] [--jobs 2] [--busy 2]

The notebook solves every exercise with its reference (``mha.grading.answer_key``);
every grading draws fresh hidden inputs. Any lost point is printed with its reason
(a timeout, a worker "crashed", a wrong value). Not part of the test run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from mha.exercises import select
from mha.grading import extract, reports
from mha.grading.answer_key import answer_key_markdown
from mha.grading.grader import grade_many

BUSY = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def whole_course_notebook(folder: Path, copies: int) -> list[Path]:
    """``copies`` copies of one notebook (.ipynb) that solves every exercise."""
    cells = extract.markdown_cells(answer_key_markdown())
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    paths = []
    for i in range(copies):
        path = folder / f"student{i:04d}.ipynb"
        nbformat.write(nb, path)
        paths.append(path)
    return paths


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="gradings")
    ap.add_argument("--jobs", type=int, default=2, help="submissions graded at a time")
    ap.add_argument("--busy", type=int, default=2, help="busy processes (one per core)")
    args = ap.parse_args(argv)
    exercises = select()
    busy = [subprocess.Popen([sys.executable, "-c", BUSY.format(seconds=24 * 3600)]) for _ in range(args.busy)]
    lost, statuses, done = [], collections.Counter(), [0]
    start = time.perf_counter()

    def on_done(r, n, total):
        done[0] = n
        for e in r.exercises:
            statuses[e.status] += 1
        if r.score < r.max_score:
            lost.append(r)
            print(f"[{n}/{total}] LOST {r.max_score - r.score:g} points\n{reports.details(r)}",
                  file=sys.stderr, flush=True)
        elif n % 25 == 0:
            print(f"[{n}/{total}] {time.perf_counter() - start:.0f} s, load {os.getloadavg()[0]:.1f}",
                  file=sys.stderr, flush=True)

    try:
        with tempfile.TemporaryDirectory() as tmp:
            paths = whole_course_notebook(Path(tmp), args.n)
            reps = grade_many(paths, exercises, jobs=args.jobs, on_done=on_done)
    finally:
        for p in busy:
            p.send_signal(signal.SIGKILL)
            p.wait()
    seconds = time.perf_counter() - start
    print(json.dumps({
        "gradings": len(reps), "exercises_each": len(exercises), "lost_scores": len(lost),
        "points_lost": round(sum(r.max_score - r.score for r in lost), 2),
        "statuses": dict(statuses), "busy_processes": args.busy, "jobs": args.jobs,
        "seconds": round(seconds, 1), "seconds_per_grading": round(seconds / max(len(reps), 1), 2),
        "median_seconds_each": sorted(r.seconds for r in reps)[len(reps) // 2] if reps else None,
        "load_average_1min_at_end": os.getloadavg()[0], "cpus": os.cpu_count(),
    }, indent=2))


if __name__ == "__main__":
    main()
