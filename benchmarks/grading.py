"""How fast does the grader go? Grade solved student notebooks with 2 jobs and report
submissions per minute (target: at least 300 on 2 CPU cores).

    .venv/bin/python benchmarks/grading.py [--submissions 39] [--jobs 2] [--lesson ID ...]
                                           [--whole-course] [--mixed] [--no-zygote]

By default every lesson of ``lessons/`` is graded in turn, as an instructor grades an
assignment: the lesson's student notebook (the one the site offers), with every exercise
answered by its reference solution, ``--submissions`` copies of it, graded with
``mha grade --only <lesson>``. ``--whole-course`` grades instead a notebook that holds
all the course's exercises (``mha.grading.answer_key``), against all of them: the
hardest case, 45 exercises per submission. With ``--mixed``, a third of the notebooks
are solved, a third half solved, a third untouched. ``--no-zygote`` grades with a fresh
Python worker per submission (the slower path the grader falls back to), for comparison.
Each submission differs from the others by a comment, as a class's do. Not part of the
test run.
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

from mha.exercises import EXERCISES, select
from mha.grading.answer_key import function_source, write_answer_key
from mha.grading import sandbox
from mha.grading.grader import grade_many
from mha.notebooks import STUB, write_student_notebooks

ROOT = Path(__file__).resolve().parent.parent


def make_submissions(folder: Path, n: int, mixed: bool = False, lesson: Path | None = None) -> list[Path]:
    """``n`` student notebooks of ``lesson`` (default: the answer key) with the exercises
    answered by the model answers (the references, or a kernel exercise's kernel)."""
    source = lesson or write_answer_key(folder / "key" / "all_exercises.md")
    [stub] = write_student_notebooks(folder / "stub", [source])
    by_reference = {e.model_answer().__name__: e for e in EXERCISES.values()}
    paths = []
    for i in range(n):
        nb = nbformat.read(stub, as_version=4)
        solved = 0
        for cell in nb.cells:
            names = [m for m in re.findall(r"^def (\w+)\(", cell.source, re.M) if m in by_reference]
            if cell.cell_type == "code" and STUB in cell.source and names:
                if not mixed or i % 3 == 0 or (i % 3 == 1 and solved % 2 == 0):
                    ex = by_reference[names[-1]]
                    cell.source = function_source(ex.model_answer(), ex.function)
                solved += 1
        nb.cells[-1].source += f"\n# student {i}"
        path = folder / f"student{i:03d}.ipynb"
        nbformat.write(nb, path)
        paths.append(path)
    return paths


def grade_batch(paths, exercises, jobs: int) -> dict:
    before = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    start = time.perf_counter()
    reports = grade_many(paths, exercises, jobs=jobs)
    seconds = time.perf_counter() - start
    usage = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu = sum(u.ru_utime + u.ru_stime - b.ru_utime - b.ru_stime for u, b in zip(usage, before))
    scores = [r.score for r in reports]
    return {"submissions": len(reports), "exercises": len(exercises), "seconds": round(seconds, 2),
            "per_minute": round(60 * len(reports) / seconds, 1),
            "cpu_seconds_each": round(cpu / len(reports), 3),  # grading only, workers included
            "scores": [min(scores), max(scores), reports[0].max_score]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--submissions", "--n", dest="n", type=int, default=39, help="per lesson")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--lesson", action="append", help="lesson ids (default: all); e.g. 06-the-layer-step-by-step")
    ap.add_argument("--whole-course", action="store_true", help="one notebook holding all the exercises")
    ap.add_argument("--mixed", action="store_true", help="a third solved, a third half solved, a third untouched")
    ap.add_argument("--no-zygote", action="store_true", help="a fresh Python worker per submission")
    args = ap.parse_args(argv)
    if args.no_zygote:
        os.environ["MHA_GRADER_ZYGOTE"] = "0"
    batches = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.whole_course:
            paths = make_submissions(Path(tmp), args.n, args.mixed)
            batches["whole course"] = grade_batch(paths, select(), args.jobs)
        else:
            lessons = sorted({e.lesson for e in EXERCISES.values()})
            for lesson in args.lesson or lessons:
                folder = Path(tmp) / lesson
                paths = make_submissions(folder, args.n, args.mixed, ROOT / "lessons" / f"{lesson}.md")
                batches[lesson] = grade_batch(paths, select([lesson]), args.jobs)
    n = sum(b["submissions"] for b in batches.values())
    seconds = sum(b["seconds"] for b in batches.values())
    result = {
        "notebooks": "whole course" if args.whole_course else "whole lesson",
        "submissions": n, "jobs": args.jobs, "zygote": not args.no_zygote, "mixed": args.mixed,
        "seconds": round(seconds, 1), "per_minute": round(60 * n / seconds, 1),
        "cpu_seconds_each": round(sum(b["cpu_seconds_each"] * b["submissions"] for b in batches.values()) / n, 3),
        "load_average": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(), "machine": platform.machine(), "root": os.getuid() == 0,
        "isolation": sandbox.probe(),  # the level the workers confined themselves at (book/grading.md)
        "batches": batches,
    }
    for name, b in batches.items():
        print(f"{name:28} {b['submissions']:4} notebooks x {b['exercises']:2} exercises: {b['per_minute']:7.1f}/min, "
              f"{b['cpu_seconds_each']:.3f} CPU-s each, scores {b['scores'][0]:g}-{b['scores'][1]:g} of {b['scores'][2]:g}")
    print(json.dumps({k: v for k, v in result.items() if k != "batches"}, indent=2))


if __name__ == "__main__":
    main()
