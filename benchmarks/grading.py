"""How fast does the grader go? Grade N submissions (default 50) with 2 jobs and report
submissions per minute (target: at least 60 on 2 CPU cores).

    .venv/bin/python benchmarks/grading.py [--n 50] [--jobs 2]

The submissions are student notebooks made from a lesson that holds all twelve
exercises: a third solved, a third half solved, a third untouched. Not part of the test run.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import re
import resource
import tempfile
import time
from pathlib import Path

import nbformat

from mha.exercises import EXERCISES
from mha.grading.grader import grade_many
from mha.notebooks import STUB, write_student_notebooks

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests/fixtures/grading/all_exercises.md"


def make_submissions(folder: Path, n: int) -> list[Path]:
    [stub] = write_student_notebooks(folder / "stub", [FIXTURE])
    by_name = {e.function: e for e in EXERCISES.values()}
    paths = []
    for i in range(n):
        nb = nbformat.read(stub, as_version=4)
        solved = 0
        for cell in nb.cells:
            m = re.search(r"^def (\w+)\(", cell.source, re.M)
            if cell.cell_type == "code" and STUB in cell.source and m and m.group(1) in by_name:
                if i % 3 == 0 or (i % 3 == 1 and solved % 2 == 0):
                    cell.source = inspect.getsource(by_name[m.group(1)].reference)
                solved += 1
        path = folder / f"student{i:03d}.ipynb"
        nbformat.write(nb, path)
        paths.append(path)
    return paths


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_submissions(Path(tmp), args.n)
        start = time.perf_counter()
        reports = grade_many(paths, jobs=args.jobs)
        seconds = time.perf_counter() - start
    usage = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu = sum(u.ru_utime + u.ru_stime for u in usage)
    scores = [r.score for r in reports]
    result = {
        "submissions": len(reports), "jobs": args.jobs, "seconds": round(seconds, 1),
        "per_minute": round(60 * len(reports) / seconds, 1),
        "cpu_seconds_each": round(cpu / len(reports), 2),
        "per_minute_if_cores_idle": round(60 * len(reports) / (cpu / min(args.jobs, os.cpu_count() or 1)), 1),
        "load_average": os.getloadavg()[0],
        "median_seconds_each": sorted(r.seconds for r in reports)[len(reports) // 2],
        "scores": {"min": min(scores), "max": max(scores)},
        "cpus": os.cpu_count(), "machine": platform.machine(), "root": os.getuid() == 0,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
