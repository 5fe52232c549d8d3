"""How fast does the grader go? Grade N submissions (default 50) with 2 jobs and report
submissions per minute (target: at least 300 on 2 CPU cores).

    .venv/bin/python benchmarks/grading.py [--submissions 50] [--jobs 2] [--mixed] [--no-zygote]

The submissions are student notebooks made from the answer key, a lesson that holds every
exercise (``mha.grading.answer_key``), with every exercise answered; with ``--mixed``, a
third solved, a third half solved, a third untouched. ``--no-zygote`` grades with a fresh
Python worker per submission (the slower path the grader falls back to), for comparison.
Not part of the test run.
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


def make_submissions(folder: Path, n: int, mixed: bool = False) -> list[Path]:
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
                if not mixed or i % 3 == 0 or (i % 3 == 1 and solved % 2 == 0):
                    ex = by_reference[names[-1]]
                    cell.source = function_source(ex.reference, ex.function)
                solved += 1
        path = folder / f"student{i:03d}.ipynb"
        nbformat.write(nb, path)
        paths.append(path)
    return paths


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--submissions", "--n", dest="n", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--mixed", action="store_true", help="a third solved, a third half solved, a third untouched")
    ap.add_argument("--no-zygote", action="store_true", help="a fresh Python worker per submission")
    args = ap.parse_args(argv)
    if args.no_zygote:
        os.environ["MHA_GRADER_ZYGOTE"] = "0"
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_submissions(Path(tmp), args.n, args.mixed)
        before = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
        start = time.perf_counter()
        reports = grade_many(paths, jobs=args.jobs)
        seconds = time.perf_counter() - start
    usage = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu = sum(u.ru_utime + u.ru_stime - b.ru_utime - b.ru_stime for u, b in zip(usage, before))
    scores = [r.score for r in reports]
    result = {
        "submissions": len(reports), "jobs": args.jobs, "zygote": not args.no_zygote, "mixed": args.mixed, "seconds": round(seconds, 1),
        "per_minute": round(60 * len(reports) / seconds, 1),
        "cpu_seconds_each": round(cpu / len(reports), 3),  # grading only, workers included
        "per_minute_if_cores_idle": round(60 * len(reports) / (cpu / min(args.jobs, os.cpu_count() or 1)), 1),
        "load_average": os.getloadavg()[0],
        "median_seconds_each": sorted(r.seconds for r in reports)[len(reports) // 2],
        "scores": {"min": min(scores), "max": max(scores)},
        "cpus": os.cpu_count(), "machine": platform.machine(), "root": os.getuid() == 0,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
