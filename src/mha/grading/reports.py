"""Reports: the terminal table, JSON, CSV, and Gradescope's results.json."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from mha.autograde import Exercise

from .grader import SubmissionReport


def _fmt(x: float) -> str:
    return f"{x:g}"


def table(reports: list[SubmissionReport], exercises: list[Exercise]) -> str:
    """One row per submission: points per exercise (numbered, legend below) and the total."""
    heads = [str(i + 1) for i in range(len(exercises))]
    name_w = max([7] + [len(r.student) for r in reports])
    cols = [max(len(h), 4) for h in heads]
    lines = ["student".ljust(name_w) + "  " + "  ".join(h.rjust(w) for h, w in zip(heads, cols)) + "   total"]
    for r in reports:
        cells = [(_fmt(e.score) if e.status == "graded" else _short(e.status)).rjust(w)
                 for e, w in zip(r.exercises, cols)]
        lines.append(r.student.ljust(name_w) + "  " + "  ".join(cells)
                     + f"   {_fmt(r.score)}/{_fmt(r.max_score)}")
    legend = ", ".join(f"{i + 1}={e.id} ({_fmt(e.points)})" for i, e in enumerate(exercises))
    lines.append("")
    lines.append("exercises: " + legend)
    lines.append("codes: -- not attempted, ?? missing, sig wrong signature, fbd forbidden call, "
                 "T/O timeout, die crashed, bad unreadable")
    return "\n".join(lines)


def _short(status: str) -> str:
    return {"not attempted": "--", "missing": "??", "wrong signature": "sig", "forbidden": "fbd",
            "timeout": "T/O", "crashed": "die", "unreadable": "bad"}.get(status, status[:4])


def details(report: SubmissionReport) -> str:
    lines = [f"{report.student}: {_fmt(report.score)}/{_fmt(report.max_score)} ({report.path})"]
    for note in report.notes:
        lines.append(f"  note: {note}")
    for e in report.exercises:
        lines.append(f"  {e.id}: {_fmt(e.score)}/{_fmt(e.max_score)} {e.status}"
                     + (f" - {e.message}" if e.message else ""))
        for c in e.checks:
            if not c.passed:
                lines.append(f"      {c.name}: {c.message}")
    return "\n".join(lines)


def write_json(reports: list[SubmissionReport], exercises: list[Exercise], path, doc: dict | None = None) -> None:
    """The grades document (``grades.document``): every check, and what the class report needs."""
    from . import grades

    grades.write(doc or grades.document(reports, exercises), path)


def write_csv(reports: list[SubmissionReport], exercises: list[Exercise], path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "file"] + [e.id for e in exercises] + ["total", "max"])
        for r in reports:
            w.writerow([r.student, r.path] + [_fmt(e.score) for e in r.exercises]
                       + [_fmt(r.score), _fmt(r.max_score)])


def gradescope(report: SubmissionReport) -> dict:
    """Gradescope's results.json for one submission: one test per check, grouped by exercise."""
    tests = []
    for e in report.exercises:
        if not e.checks:
            tests.append({"name": f"{e.id}: {e.title}", "score": e.score, "max_score": e.max_score,
                          "status": "passed" if e.score == e.max_score else "failed",
                          "output": f"{e.status}: {e.message}", "visibility": "visible"})
            continue
        per_check = e.max_score / len(e.checks)
        for c in e.checks:
            tests.append({"name": f"{e.id} {c.name}", "score": per_check if c.passed else 0.0,
                          "max_score": per_check, "status": "passed" if c.passed else "failed",
                          "output": c.message, "visibility": "visible"})
    out = "\n".join(report.notes)
    return {"score": report.score, "max_score": report.max_score, "output": out or "Graded.",
            "visibility": "visible", "stdout_visibility": "hidden", "tests": tests}


def write_gradescope(reports: list[SubmissionReport], directory) -> list[Path]:
    """``DIR/results.json`` for a single submission, else ``DIR/<student>/results.json``.
    Raises ValueError, naming both submissions, before writing anything, when two would be
    written to one file (one folder on a file system that ignores case, too)."""
    directory = Path(directory)
    targets = [directory / "results.json" if len(reports) == 1 else directory / r.student / "results.json"
               for r in reports]
    seen: dict[str, SubmissionReport] = {}
    for r, target in zip(reports, targets):
        other = seen.setdefault(str(target).casefold(), r)
        if other is not r:
            raise ValueError(f"{other.path} and {r.path} would both be written to {target}: give them names of "
                             "their own (see mha.grading.grader.unique_names)")
    for r, target in zip(reports, targets):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(gradescope(r), indent=2))
    return targets
