"""How fast does the grader go? Grade N submissions (default 50) with 2 jobs and report
submissions per minute (target: at least 60 on 2 CPU cores).

    .venv/bin/python benchmarks/grading.py [--n 50] [--jobs 2]

The submissions are student notebooks made from the answer key, a lesson that holds every
exercise (``mha.grading.answer_key``): a third solved, a third half solved, a third
untouched. Not part of the test run.
"""

from __future__ import annotations

import argparse
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
from mha.grading.answer_key import function_source, write_answer_key
from mha.grading.grader import grade_many
from mha.notebooks import STUB, write_student_notebooks


def make_submissions(folder: Path, n: int) -> list[Path]:
    key = write_answer_key(folder / "key" / "all_exercises.md")
    [stub] = write_student_notebooks(folder / "stub", [key])
    by_reference = {e.reference.__name__: e for e in EXERCISES.values()}
    paths = []
    for i in range(n):
        nb = nbformat.read(stub, as_version=4)
        solved = 0
        for cell in nb.cells:
            names = [m for m in re.findall(r"^def (\w+)\(", cell.source, re.M) if m in by_reference]
            if cell.cell_type == "code" and STUB in cell.source and names:
                if i % 3 == 0 or (i % 3 == 1 and solved % 2 == 0):
                    ex = by_reference[names[-1]]
                    cell.source = function_source(ex.reference, ex.function)
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
