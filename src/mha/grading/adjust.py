"""What an instructor changes after grading: overrides (regrades by hand, with a reason),
due dates and a late penalty.

- **Overrides** (``--overrides FILE``): a CSV whose first line names the columns ``student``,
  ``exercise``, ``points`` and ``reason`` (and, if you like, ``by`` and ``date``). ``student``
  is a roster id, a roster name, or the name the grader gave the submission; ``exercise`` an
  exercise id, or ``late`` for the points the late penalty takes (``0`` waives it). Every row
  is kept, in order, as the trail; the last row for a student and an exercise counts.
- **Due dates** (``--due WHEN`` for every lesson, ``--due LESSON=WHEN`` for one; a roster's
  ``due`` column gives a student their own) and a **late penalty** (``--late-penalty
  "10%/day,max=50%,grace=15min"``): a lesson handed in after its due date loses that share of
  the points it earned, per started hour, day or week late, up to ``max``. A lesson's time is
  that of its newest notebook (``05-...``; else the submission's newest file), as the grades
  recorded it (``mha grade --submitted-at WHEN`` sets it for a whole run).

The grades stay as graded: :func:`apply` works out the final points from them and these
adjustments, which the grades file keeps under ``adjustments`` (so that ``mha report`` makes
the same report, and every output, from the file alone).
"""

from __future__ import annotations

import copy
import datetime
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .roster import read_table

LATE = "late"  # the exercise column of an override of the late penalty
UNITS = {"hour": 3600, "day": 86400, "week": 7 * 86400}
DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|sec|min|m|h|hour|hours|d|day|days)$")


class AdjustError(ValueError):
    """An overrides file, a due date or a late policy that cannot be used: the message says why."""


@dataclass
class Override:
    student: str
    exercise: str
    points: float
    reason: str
    by: str = ""
    date: str = ""
    line: int = 0


@dataclass
class Policy:
    """A late penalty: ``share`` of the earned points per started ``unit`` (seconds) late, at most
    ``cap``; nothing within ``grace`` seconds of the due date."""
    share: float = 0.0
    unit: int = UNITS["day"]
    cap: float = 1.0
    grace: float = 0.0
    text: str = ""

    def penalty(self, seconds_late: float) -> float:
        if seconds_late <= self.grace or not self.share:
            return 0.0
        return min(self.cap, self.share * math.ceil(seconds_late / self.unit))


# ----------------------------------------------------------------------------- reading

def read_overrides(path) -> list[Override]:
    path = Path(path)
    header, rows = read_table(path, "--overrides", "student, exercise, points and reason", AdjustError)
    missing = [h for h in ("student", "exercise", "points", "reason") if h not in header]
    if missing:
        raise AdjustError(f"--overrides {path}: the first line must name the columns student, exercise, points and "
                          f"reason (and by, date if you like); it lacks {', '.join(missing)}")
    out = []
    for n, row in enumerate(rows[1:], 2):
        if not any(c.strip() for c in row):
            continue
        cell = lambda h: row[header.index(h)].strip() if h in header and header.index(h) < len(row) else ""  # noqa: E731
        where = f"--overrides {path}, line {n}"
        if not cell("student") or not cell("exercise"):
            raise AdjustError(f"{where}: give a student and an exercise (an exercise id, or {LATE!r} for the late "
                              "penalty)")
        try:
            points = float(cell("points"))
        except ValueError:
            raise AdjustError(f"{where}: points must be a number, got {cell('points')!r}") from None
        if not math.isfinite(points) or points < 0:
            raise AdjustError(f"{where}: points must be a number of 0 or more, got {cell('points')!r}")
        if not cell("reason"):
            raise AdjustError(f"{where}: give a reason (the trail says why each grade changed)")
        out.append(Override(cell("student"), cell("exercise"), points, cell("reason"), cell("by"), cell("date"), n))
    return out


def parse_when(text: str, what: str) -> datetime.datetime:
    """``2024-03-01 23:59``, ``2024-03-01T23:59:30`` or ``2024-03-01`` (the end of that day)."""
    text = text.strip()
    try:
        when = datetime.datetime.fromisoformat(text.replace(" ", "T", 1) if " " in text else text)
    except ValueError:
        raise AdjustError(f"{what}: {text!r} is not a date and time: write 2024-03-01 23:59 (or 2024-03-01 for "
                          "the end of that day)") from None
    if re.fullmatch(r"\d{4}-\d\d-\d\d", text):
        when = when.replace(hour=23, minute=59, second=59)
    return when.replace(tzinfo=None) if when.tzinfo is None else when.astimezone().replace(tzinfo=None)


def parse_due(values: list[str] | None) -> dict[str, str]:
    """``--due`` values: ``WHEN`` for every lesson (key ""), ``LESSON=WHEN`` for one, as ISO text."""
    out: dict[str, str] = {}
    for value in values or []:
        lesson, _, when = value.rpartition("=") if "=" in value else ("", "", value)
        out[lesson.strip()] = parse_when(when, f"--due {value}").isoformat(timespec="seconds")
    return out


def parse_policy(text: str | None) -> Policy:
    """``10%/day``, ``2%/hour,max=30%``, ``10%/day,max=50%,grace=15min``; "" or None: no penalty."""
    if not text:
        return Policy()
    where = f"--late-penalty {text!r}"
    parts = [p.strip() for p in text.split(",") if p.strip()]
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*%\s*/\s*(hour|day|week)", parts[0])
    if not m:
        raise AdjustError(f"{where}: start with a share per unit of lateness, e.g. 10%/day, 2%/hour or 20%/week")
    policy = Policy(float(m.group(1)) / 100, UNITS[m.group(2)], text=text)
    for part in parts[1:]:
        key, _, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if key == "max" and re.fullmatch(r"\d+(\.\d+)?\s*%", value):
            policy.cap = min(1.0, float(value.rstrip("% ")) / 100)
        elif key == "grace" and DURATION.fullmatch(value):
            number, unit = DURATION.fullmatch(value).groups()
            policy.grace = float(number) * {"s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600, "hour": 3600,
                                            "hours": 3600, "d": 86400, "day": 86400, "days": 86400}[unit]
        else:
            raise AdjustError(f"{where}: {part!r} is not max=PERCENT% or grace=DURATION (e.g. max=50%, grace=15min)")
    if not 0 <= policy.share <= 1:
        raise AdjustError(f"{where}: the share per unit must be between 0% and 100%")
    return policy


def record(overrides: list[Override] | None, due: dict[str, str] | None, policy: Policy | None) -> dict:
    """The adjustments as the grades file keeps them."""
    out: dict = {}
    if overrides:
        out["overrides"] = [asdict(o) for o in overrides]
    if due:
        out["due"] = dict(due)
    if policy and policy.text:
        out["late_penalty"] = policy.text
    return out


# ----------------------------------------------------------------------------- applying

@dataclass
class Late:
    lesson: str
    submitted: str
    due: str
    hours: float
    share: float
    points: float          # what the penalty takes
    waived: bool = False   # an override of the late penalty replaced it


@dataclass
class Applied:
    """The final points of one submission."""
    graded: float                                   # as graded, overrides included
    penalty: float = 0.0
    late: list[Late] = field(default_factory=list)
    overrides: list[dict] = field(default_factory=list)  # the rows that count, with what they replaced
    no_time: bool = False                           # due dates given, but no time of submission recorded

    @property
    def final(self) -> float:
        return round(max(0.0, self.graded - self.penalty), 2)

    @property
    def hours_late(self) -> float:
        return max((x.hours for x in self.late), default=0.0)


def apply(doc: dict, owner, own_due: dict[str, str] | None = None) -> tuple[dict, dict[str, Applied], list[dict]]:
    """The document with the overrides of ``doc["adjustments"]`` applied to its scores (each
    changed answer keeps ``graded_score`` and gets ``override``), the final points of each
    submission (by its ``student``), and the trail: every override row, each with
    ``status`` ("applied", "replaced by line N") and what it changed. ``owner(text)`` finds
    the submission an override's ``student`` names (a roster id or name, or the grader's
    name), or raises AdjustError saying why not. ``own_due``: a student's own due date (an
    extension), by submission."""
    adjustments = doc.get("adjustments") or {}
    out = copy.deepcopy(doc)
    subs = {s["student"]: s for s in out["submissions"]}
    ids = {e["id"] for e in out["exercises"]}
    rows = [Override(**r) for r in adjustments.get("overrides", [])]
    trail: list[dict] = []
    last: dict[tuple[str, str], int] = {}
    course = None
    for k, o in enumerate(rows):
        key = owner(o)
        if o.exercise != LATE and o.exercise not in ids:
            if course is None:
                from .grades import course_ids

                course = course_ids()
            if o.exercise not in course:
                raise AdjustError(f"overrides, line {o.line}: {o.exercise!r} is not an exercise of these grades "
                                  f"({', '.join(sorted(ids))}) or of the course, nor {LATE!r} for the late penalty")
            trail.append({**asdict(o), "submission": key, "status": "waiting: the exercise is not graded here"})
            continue
        if not key:
            trail.append({**asdict(o), "submission": "", "status": "waiting: nothing of theirs is graded here"})
            continue
        if o.exercise != LATE:
            answer = next(e for e in subs[key]["exercises"] if e["id"] == o.exercise)
            if o.points > answer["max_score"] + 1e-9:
                raise AdjustError(f"overrides, line {o.line}: {o.points:g} points for {o.exercise}, which is worth "
                                  f"{answer['max_score']:g}")
        last[(key, o.exercise)] = k
        trail.append({**asdict(o), "submission": key})
    for (key, exercise), k in last.items():
        for j, t in enumerate(trail):
            if t["submission"] == key and key and t["exercise"] == exercise and j != k:
                t["status"] = f"replaced by line {rows[k].line}"
        trail[k]["status"] = "applied"
        if exercise == LATE:
            continue
        answer = next(e for e in subs[key]["exercises"] if e["id"] == exercise)
        trail[k]["graded"] = answer["score"]
        answer["graded_score"] = answer["score"]
        answer["score"] = round(rows[k].points, 2)
        answer["override"] = {"points": answer["score"], "reason": rows[k].reason, "by": rows[k].by,
                              "date": rows[k].date, "line": rows[k].line}
    finals: dict[str, Applied] = {}
    lessons = list(dict.fromkeys(e["lesson"] for e in out["exercises"]))
    lesson_of = {e["id"]: e["lesson"] for e in out["exercises"]}
    due = adjustments.get("due") or {}
    policy = parse_policy(adjustments.get("late_penalty"))
    for s in out["submissions"]:
        s["score"] = round(sum(e["score"] for e in s["exercises"]), 2)
        applied = Applied(s["score"], overrides=[t for t in trail if t["submission"] == s["student"]
                                                  and t.get("status") == "applied"])
        own = (own_due or {}).get(s["student"], "")
        if (due or own) and s.get("files"):
            times = s.get("submitted") or {}
            if not times:
                applied.no_time = True
            for lesson in lessons:
                when = _lesson_time(times, lesson)
                deadline = own or due.get(lesson) or due.get("")
                if not when or not deadline:
                    continue
                seconds = (datetime.datetime.fromisoformat(when) - datetime.datetime.fromisoformat(deadline)).total_seconds()
                if seconds <= 0:
                    continue
                earned = sum(e["score"] for e in s["exercises"] if lesson_of[e["id"]] == lesson)
                share = policy.penalty(seconds)
                applied.late.append(Late(lesson, when, deadline, round(seconds / 3600, 1), share,
                                         round(share * earned, 2)))
        applied.penalty = round(sum(x.points for x in applied.late), 2)
        waive = [t for t in applied.overrides if t["exercise"] == LATE]
        if waive:
            for x in applied.late:
                x.waived = True
            trail[trail.index(waive[-1])]["graded"] = applied.penalty
            applied.penalty = round(min(waive[-1]["points"], applied.graded), 2)
        finals[s["student"]] = applied
    return out, finals, trail


def _lesson_time(times: dict[str, str], lesson: str) -> str:
    """When a lesson was handed in: its newest notebook's time (``05-...``), else the
    submission's newest file's."""
    prefix = lesson.split("-", 1)[0]
    mine = [t for name, t in times.items() if name.startswith((lesson, prefix + "-"))]
    chosen = mine or list(times.values())
    return max(chosen) if chosen else ""
