"""The grade book: one row per student of the roster (and per submission not on it), with
the final points an instructor uploads, and the files that carry them.

``entries`` reads a grades document (``mha.grading.grades``) with its roster and adjustments
(overrides, due dates, a late penalty: ``mha.grading.adjust``) and gives each student their
id, name, section, what became of their submission, their points per exercise and per
lesson, what the late penalty took and the final total. The writers put that into:

- the grader's CSV (``--csv``): one row per submission, as before, with the roster's ``id``,
  ``name``, ``section`` and ``status`` columns and a row for each student who submitted
  nothing, when there is a roster;
- a plain gradebook CSV any LMS imports (``--lms-csv``): id, name, section, status, the
  points per lesson, total, late penalty, final, max; one row per student of the roster;
- Canvas's gradebook import (``--canvas``): the columns ``Student``, ``ID``, ``SIS User ID``,
  ``SIS Login ID`` and ``Section``, a "Points Possible" line, and one column per lesson (or
  one for the total, ``--canvas-assignment "NAME"``), a student who submitted nothing at 0;
- Gradescope's ``results.json`` per submission (``--gradescope``), with the roster's id,
  name and section under ``extra_data``, and ``index.csv`` naming every folder's student,
  no-shows included.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

from . import adjust
from .classstats import EMPTY_FOLDER, NOT_ON_ROSTER, _owner, _students
from .roster import RosterError, from_records

GRADED, NOTHING, UNREADABLE = "graded", "submitted nothing", "could not be read"


@dataclass
class Entry:
    key: str                      # the grader's name for the submission ("" for one who submitted nothing)
    path: str
    id: str
    name: str
    section: str
    status: str                   # graded, submitted nothing, empty folder, could not be read
    on_roster: bool
    exercises: dict[str, dict] = field(default_factory=dict)   # exercise id -> the answer, overrides applied
    lessons: dict[str, float] = field(default_factory=dict)    # lesson -> points, late penalty taken
    graded: float = 0.0           # the total as graded, overrides included
    penalty: float = 0.0
    hours_late: float = 0.0
    max: float = 0.0
    late: list = field(default_factory=list)                   # adjust.Late, per late lesson
    overrides: list[dict] = field(default_factory=list)
    submission: dict | None = None                             # the grades' record, overrides applied
    columns: dict[str, str] = field(default_factory=dict)      # the roster's other columns

    @property
    def final(self) -> float:
        return round(max(0.0, self.graded - self.penalty), 2)


def entries(doc: dict, roster=None) -> list[Entry]:
    """The grade book of a grades document: its submissions in order (each with its roster
    student, if any), then the roster's students who submitted nothing."""
    if roster is None and doc.get("roster"):
        roster = from_records(doc["roster"])
    rows = _students(doc, roster, False)
    adjusted, finals, _ = adjust.apply(doc, _owner(rows), {r.key: r.due for r in rows if r.due})
    subs = {s["student"]: s for s in adjusted["submissions"]}
    exercises = adjusted["exercises"]
    lessons = list(dict.fromkeys(e["lesson"] for e in exercises))
    lesson_of = {e["id"]: e["lesson"] for e in exercises}
    points = round(sum(float(e["points"]) for e in exercises), 2)
    out = []
    for r in rows:
        on_roster = bool(r.roster_id)
        if r.key not in subs:  # on the roster, nothing submitted
            out.append(Entry("", "", r.roster_id, r.roster_name, r.section, NOTHING, True,
                             lessons={lesson: 0.0 for lesson in lessons}, max=points, columns=r.columns))
            continue
        s = subs[r.key]
        applied = finals[r.key]
        status = GRADED if r.submitted else UNREADABLE if r.files else EMPTY_FOLDER if r.empty else NOTHING
        answers = {e["id"]: e for e in s["exercises"]}
        by_lesson = {lesson: round(sum(a["score"] for i, a in answers.items() if lesson_of[i] == lesson), 2)
                     for lesson in lessons}
        taken = _lesson_penalties(applied, lessons)
        e = Entry(r.key, s["path"], r.roster_id, r.roster_name or "", "" if r.section == NOT_ON_ROSTER else r.section,
                  status, on_roster, answers,
                  {lesson: round(max(0.0, by_lesson[lesson] - taken[lesson]), 2) for lesson in lessons},
                  applied.graded, applied.penalty, applied.hours_late, points, applied.late, applied.overrides, s,
                  r.columns)
        out.append(e)
    return out


def _lesson_penalties(applied, lessons: list[str]) -> dict[str, float]:
    """What the late penalty takes from each lesson (an override of the penalty shared out
    in proportion to what the policy took, or put on the first late lesson)."""
    taken = {lesson: 0.0 for lesson in lessons}
    for x in applied.late:
        taken[x.lesson] += x.points
    policy_total = sum(taken.values())
    if abs(policy_total - applied.penalty) > 1e-9:
        if policy_total:
            taken = {k: round(v * applied.penalty / policy_total, 2) for k, v in taken.items()}
        else:
            first = applied.late[0].lesson if applied.late else lessons[0]
            taken = {k: (applied.penalty if k == first else 0.0) for k in taken}
    return taken


def _fmt(x: float) -> str:
    return f"{round(x, 2):g}"


# ----------------------------------------------------------------------------- the files

def write_csv(book: list[Entry], exercises: list[dict], path, *, roster: bool, due: bool) -> None:
    """The grader's CSV: one row per submission (``student``, ``file``, points per exercise,
    ``total``, ``max``); with a roster, the columns ``id``, ``name``, ``section`` and ``status``
    too, and a row for each student who submitted nothing; with due dates, ``late penalty``
    and ``final``."""
    ids = [e["id"] for e in exercises]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student", "file"] + (["id", "name", "section", "status"] if roster else []) + ids
                   + ["total", "max"] + (["late penalty", "final"] if due else []))
        for e in book:
            if not e.key and not roster:
                continue
            cells = [_fmt(e.exercises[i]["score"]) if i in e.exercises else ("0" if not e.key else "") for i in ids]
            w.writerow([e.key, e.path] + ([e.id, e.name, e.section, _status(e)] if roster else []) + cells
                       + [_fmt(e.graded), _fmt(e.max)] + ([_fmt(e.penalty), _fmt(e.final)] if due else []))


def _status(e: Entry) -> str:
    return e.status if e.on_roster else f"{e.status} ({NOT_ON_ROSTER})"


def write_lms_csv(book: list[Entry], lessons: list[str], path) -> int:
    """A plain gradebook CSV, one row per student of the roster (then the submissions not on
    it, without an id): id, name, section, status, points per lesson (late penalty taken),
    total as graded, hours late, late penalty, final, max. Someone who submitted nothing has 0
    and the status says so. Returns the rows written."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "name", "section", "status"] + lessons
                   + ["graded total", "hours late", "late penalty", "final", "max"])
        for e in book:
            w.writerow([e.id, e.name or e.key, e.section, _status(e)] + [_fmt(e.lessons.get(x, 0.0)) for x in lessons]
                       + [_fmt(e.graded), _fmt(e.hours_late), _fmt(e.penalty), _fmt(e.final), _fmt(e.max)])
    return len(book)


# Canvas's gradebook columns, in its order (those of its own export).
CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")


def write_canvas(book: list[Entry], lessons: list[str], max_of: dict[str, float], path,
                 assignment: str | None = None) -> list[str]:
    """Canvas's gradebook import: one row per student of the roster, ``Student``, ``ID``,
    ``SIS User ID``, ``SIS Login ID``, ``Section``, then one column per lesson graded (named
    after it: Canvas makes an assignment of a column it does not know) or, with
    ``assignment`` ("Homework 2 (12345)", as Canvas's export heads its column), one column of
    the final total; a "Points Possible" line first. A student who submitted nothing gets 0
    (Canvas leaves a blank cell ungraded). The roster's id goes in ``SIS User ID`` unless the
    roster is Canvas's own export, whose ``ID``, ``SIS User ID`` and ``SIS Login ID`` are
    written back as they were. Returns the submissions left out (not on the roster)."""
    columns = [assignment] if assignment else lessons
    possible = [_fmt(sum(max_of.values()))] if assignment else [_fmt(max_of[x]) for x in lessons]
    left_out = []
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(list(CANVAS_COLUMNS) + columns)
        w.writerow(["    Points Possible", "", "", "", ""] + possible)
        for e in book:
            if not e.on_roster:
                left_out.append(e.key)
                continue
            values = [_fmt(e.final)] if assignment else [_fmt(e.lessons.get(x, 0.0)) for x in lessons]
            canvas_id = e.columns.get("ID", "")  # the roster is Canvas's own export: its ids go back as they were
            sis = e.id if e.id != canvas_id else e.columns.get("SIS User ID", "")
            w.writerow([e.name, canvas_id, sis, e.columns.get("SIS Login ID", ""), e.section] + values)
    return left_out


def write_gradescope(book: list[Entry], exercises: list[dict], directory, *, single: bool) -> list[Path]:
    """``results.json`` per submission (``DIR/<student>/results.json``, or ``DIR/results.json``
    for a single one), overrides and late penalty in its score, the roster's id, name and
    section under ``extra_data``; with a roster, ``DIR/index.csv`` names every folder's
    student and lists those who submitted nothing. Raises ValueError before writing anything
    when two would be written to one file."""
    directory = Path(directory)
    graded = [e for e in book if e.key]
    targets = [directory / "results.json" if single else directory / e.key / "results.json" for e in graded]
    seen: dict[str, Entry] = {}
    for e, target in zip(graded, targets):
        other = seen.setdefault(str(target).casefold(), e)
        if other is not e:
            raise ValueError(f"{other.path} and {e.path} would both be written to {target}: give them names of "
                             "their own (see mha.grading.grader.unique_names)")
    titles = {x["id"]: x["title"] for x in exercises}
    for e, target in zip(graded, targets):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(results_json(e, titles), indent=2))
    if any(x.id for x in book) and not single:
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / "index.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["folder", "id", "name", "section", "status", "score", "max_score"])
            for e in book:
                w.writerow([e.key, e.id, e.name, e.section, _status(e), _fmt(e.final), _fmt(e.max)])
    return targets


def results_json(e: Entry, titles: dict[str, str]) -> dict:
    """Gradescope's results.json for one student: one test per check, grouped by exercise; an
    overridden exercise is one test with the override's points and reason; the late penalty a
    test of its own; the score the final total."""
    tests = []
    for eid, a in e.exercises.items():
        title = titles.get(eid, a.get("title", ""))
        if a.get("override"):
            o = a["override"]
            tests.append({"name": f"{eid}: {title}", "score": a["score"], "max_score": a["max_score"],
                          "status": "passed" if a["score"] >= a["max_score"] - 1e-9 else "failed",
                          "output": f"Graded {_fmt(a['graded_score'])}, changed to {_fmt(a['score'])} by the "
                                    f"instructor: {o['reason']}", "visibility": "visible"})
            continue
        if not a["checks"]:
            tests.append({"name": f"{eid}: {title}", "score": a["score"], "max_score": a["max_score"],
                          "status": "passed" if a["score"] == a["max_score"] else "failed",
                          "output": f"{a['status']}: {a.get('message', '')}", "visibility": "visible"})
            continue
        per_check = a["max_score"] / len(a["checks"])
        for c in a["checks"]:
            tests.append({"name": f"{eid} {c['name']}", "score": per_check if c["passed"] else 0.0,
                          "max_score": per_check, "status": "passed" if c["passed"] else "failed",
                          "output": c["message"], "visibility": "visible"})
    if e.penalty:
        late = "; ".join(f"lesson {x.lesson}: {x.hours:g} hours late" for x in e.late)
        tests.append({"name": "late penalty", "score": -e.penalty, "max_score": 0.0, "status": "failed",
                      "output": late or "set by the instructor", "visibility": "visible"})
    notes = "\n".join((e.submission or {}).get("notes", []))
    out = {"score": e.final, "max_score": e.max, "output": notes or "Graded.", "visibility": "visible",
           "stdout_visibility": "hidden", "tests": tests}
    if e.id:
        out["extra_data"] = {"id": e.id, "name": e.name, "section": e.section}
    return out
