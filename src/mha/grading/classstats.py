"""The numbers of the class report, as plain data: what the class as a whole got wrong.

``build`` reads a grades document (``mha.grading.grades``: one grading run, or several
merged) and works out, per exercise, the distribution of scores, the named mistakes and the
exercise's own diagnoses ranked by how many students got them, the wrong answers grouped by
their code (identical after names and formatting), the wrong answers no hint explains,
crashes, time-outs and forbidden calls, and item statistics (difficulty, discrimination,
the mean score of each fifth of the class); per lesson, per section of a roster and for the
class, the totals; per student, the totals and what went wrong, with overrides and late
penalties applied (``adjust``), who to contact, and identical submissions. ``numbers`` lists
every number under a key (``scope|id|measure``): the CSV, and the page's ``data-key``s.
Nothing here writes HTML (``classreport`` renders it).

Answer groups have a stable id (``g`` and the start of their code's fingerprint), the same in
every report of any class; wrong answers whose code differs but whose values on every public
check are the same (``value_fingerprint`` in the grades) form one *slip*, which counts as one
error in "What to teach again".
"""

from __future__ import annotations

import hashlib
import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field

from . import adjust
from .anonymise import fingerprint, mask_names, name_tokens
from .roster import RosterError, from_records
from .roster import Student as RosterStudent
from .roster import match as roster_match

EASY_SHARE = 0.9            # flagged "nearly everyone gets it" at or above this share with full marks
DISCRIMINATION_MIN = 0.2    # flagged "does not discriminate" below this (PrairieLearn's guidance: 20%)
TOP = 10                    # rows of "what to teach again"
GROUPS = 6                  # answer groups shown per exercise
TEACH_GROUP = 2             # an answer group (or slip) with no hint is in "what to teach again" from this size
IDENTICAL_MIN = 3           # answers written, for a submission to be compared whole with the others
IDENTICAL_WRONG = 2         # identical submissions are flagged with one answer no one else wrote, or this many wrong
SLOWEST = 5                 # exercises listed as the hardest and the slowest, for the class and per lesson
MAX_EXAMPLE_LINES = 40
QUINTILES = 5
# The statuses of an answer, in the order the page lists them (others, from a newer grader, follow).
STATUSES = ("not attempted", "missing", "wrong signature", "forbidden", "timeout", "crashed", "unreadable")
NOT_ON_ROSTER = "not on the roster"

# The kinds of a check's verdict (mha.autograde.Kind) the report reads: the grades hold their words.
MISTAKE, DIAGNOSIS, FORBIDDEN_CALL = "mistake", "diagnosis", "forbidden-call"
# The kinds of a row of "what to teach again" that no hint explains: one answer group, or a slip.
GROUP, SLIP = "answer group", "slip"
EMPTY_FOLDER = "empty folder"


# ----------------------------------------------------------------------------- the data

@dataclass
class Link:
    """Where a point is taught: ``href`` is None when there is no website to link to."""
    text: str
    href: str | None = None


@dataclass
class Hint:
    """A listed mistake of an exercise, or a hint of its own diagnosis, with how many students got it."""
    exercise: str
    kind: str                     # "mistake" or "diagnosis"
    key: str                      # the measure of its keys: the mistake's key, or the diagnosis' number
    label: str                    # what the page calls it: the mistake's name, or "diagnosis"
    hint: str
    taught: Link | None
    students: int
    sections: dict[str, int] = field(default_factory=dict)
    share: int = 0                # % of the exercise's wrong answers
    groups: list[int] = field(default_factory=list)  # for a row no hint explains: the numbers of its groups


@dataclass
class AnswerGroup:
    """Wrong answers with the same code, after names, formatting, comments and messages."""
    number: int
    answers: int
    sections: dict[str, int]
    hints: list[str]              # the labels of the hints these answers got (none: unexplained)
    failed: list[str]             # the checks they fail, by the grader's message, each with how many answers
    code: str                     # one of them, anonymised
    id: str = ""                  # stable: "g" and the start of the code's fingerprint
    slip: str = ""                # "s" and the start of the public checks' values' fingerprint ("" if none)
    members: list[str] = field(default_factory=list)   # the students' keys (never shown)
    source: str = ""              # the first answer's code as graded, for a draft mistake (never shown)
    message: str = ""             # the commonest failure's message, for "what to teach again"


@dataclass
class Tally:
    """Counts of one exercise over a set of students (the class, or a section)."""
    students: int = 0
    full: int = 0
    mean: float = 0.0
    graded: int = 0
    wrong: int = 0
    unexplained: int = 0
    forbidden_calls: int = 0
    status: dict[str, int] = field(default_factory=dict)
    mistakes: Counter = field(default_factory=Counter)
    diagnoses: Counter = field(default_factory=Counter)


@dataclass
class ExerciseStats:
    number: int                   # 1, 2, ...: as in the scatter plot and the grader's table
    id: str
    title: str
    lesson: str
    points: float
    checks: int                   # checks per answer (the points are split evenly over them)
    scores: list[float]
    tally: Tally
    sections: dict[str, Tally]
    discrimination: float | None  # correlation of the score with the rest of the total
    quintiles: list[float | None]  # mean score (share of the points) of each fifth of the class, weakest first
    hints: list[Hint]             # the listed mistakes made, then the diagnoses, most students first
    groups: list[AnswerGroup]     # the commonest kinds of wrong answer
    more_groups: tuple[int, int]  # (groups, answers) not shown
    unexplained_groups: list[int]  # sizes of the groups of unexplained answers, largest first
    seconds_median: float | None
    seconds_max: float | None
    flags: list[str] = field(default_factory=list)
    all_groups: list[AnswerGroup] = field(default_factory=list)  # every group, shown or not
    slips: dict[str, list[int]] = field(default_factory=dict)    # slip id -> its groups' numbers (2 or more)
    section: Link | None = None   # where the exercise is taught

    @property
    def difficulty(self) -> float:
        """Mean score as a share of the points (PrairieLearn's "difficulty", higher = easier)."""
        return self.tally.mean / self.points if self.points else 0.0

    @property
    def mistakes(self) -> list[Hint]:
        return [h for h in self.hints if h.kind == "mistake"]

    @property
    def diagnoses(self) -> list[Hint]:
        return [h for h in self.hints if h.kind == "diagnosis"]


@dataclass
class GroupStats:
    """Totals of a lesson, or of the whole class, over a set of students."""
    id: str
    points: float
    totals: list[float]
    mean: float
    median: float
    full: int
    exercises: list[str]


@dataclass
class StudentRow:
    key: str                      # the grading run's name (or the roster id of one who submitted nothing)
    shown: str                    # the name on the page: the key, the roster's name, or a pseudonym
    section: str
    roster_id: str
    submitted: bool               # something was graded (not only on the roster, an empty folder, a broken file)
    total: float                  # as graded, overrides included
    lessons: dict[str, float | None]
    problems: list[str]
    path: str = ""
    name: str = ""                # the roster's name ("" without one)
    fifth: int | None = None      # 1 (weakest) to 5, by total, among those who submitted
    penalty: float = 0.0          # what the late penalty takes
    hours_late: float = 0.0
    untouched: list[str] = field(default_factory=list)   # lessons handed in with every answer not attempted
    overrides: int = 0

    @property
    def final(self) -> float:
        return round(max(0.0, self.total - self.penalty), 2)


@dataclass
class Identical:
    """Students whose answers are the same code, once names, formatting, comments and messages
    are set aside, on every exercise they answered, wrong answers included."""
    students: list[StudentRow]
    answers: int                  # answers written by each
    wrong: int                    # of them, wrong answers
    unique: int                   # of them, answers no other student wrote


@dataclass
class Taught:
    """A section of a lesson, and the students whose answers got a hint that points there."""
    link: Link
    students: int
    answers: int
    hints: int


@dataclass
class ClassReport:
    submissions: int
    exercises: list[ExerciseStats]
    lessons: list[GroupStats]
    whole: GroupStats
    by_section: dict[str, GroupStats]         # section -> class totals
    lesson_sections: dict[str, dict[str, GroupStats]]  # lesson -> section -> totals
    students: list[StudentRow]
    sections: list[str]                       # of the roster ([] without one)
    teach: list[Hint]                         # what to teach again, most students first
    teach_more: list[Hint]                    # tied with the last of ``teach``, not shown in the table
    taught: list[Taught]                      # the same, by section of the lessons
    pseudonymised: bool
    site_url: str | None
    graded: str
    roster: bool = False
    nothing: list[StudentRow] = field(default_factory=list)     # on the roster or given, nothing graded
    forbidden: list[StudentRow] = field(default_factory=list)   # used a forbidden function
    unmatched: list[StudentRow] = field(default_factory=list)   # submissions not on the roster
    notes: list[str] = field(default_factory=list)
    key: list[dict] = field(default_factory=list)               # pseudonym -> student, when pseudonymised
    isolation: str = ""        # the weakest isolation a graded submission ran with (sandbox.LEVELS), or "not recorded"
    due: dict[str, str] = field(default_factory=dict)           # lesson ("" for all) -> due date
    policy: str = ""                                            # the late penalty, as given
    trail: list[dict] = field(default_factory=list)             # every override, with the page's names
    identical: list[Identical] = field(default_factory=list)    # (not when pseudonymised)
    contact: dict[str, list[StudentRow]] = field(default_factory=dict)  # why -> whom
    everyone: list[StudentRow] = field(default_factory=list)    # every student, roster's included
    functions: dict[str, str] = field(default_factory=dict)     # exercise id -> the function it asks for
    # the sections with a student in a row of "what to teach again" (its columns: a column of
    # zeros, "not on the roster" usually, would crowd the widest table for nothing)
    teach_sections: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- building

def build(doc: dict, *, roster: list[RosterStudent] | None = None, pseudonymise: bool = False,
          site_url: str | None = None, notes: list[str] | None = None) -> ClassReport:
    """Every number of the report, from a grades document (``mha.grading.grades``), with its
    adjustments (``mha.grading.adjust``) applied. ``roster``: the class list (default: the one
    the document keeps, if any)."""
    if roster is None and doc.get("roster"):
        roster = from_records(doc["roster"])
    rows = _students(doc, roster, pseudonymise)
    doc, finals, trail = adjust.apply(doc, _owner(rows), {r.key: r.due for r in rows if r.due})
    by_key = {s["student"]: s for s in doc["submissions"]}
    for r in rows:
        if r.answers:
            r.answers = {e["id"]: e for e in by_key[r.key]["exercises"]}
    exercises = doc["exercises"]
    by_id = {e["id"]: e for e in exercises}
    graded = [r for r in rows if r.submitted and r.answers]
    sections = list(dict.fromkeys(s.section for s in roster)) if roster else []
    if roster and any(r.section == NOT_ON_ROSTER for r in graded):
        sections.append(NOT_ON_ROSTER)
    sections = [s for s in sections if s]

    totals = {r.key: sum(a["score"] for a in r.answers.values()) for r in graded}
    everyone = frozenset().union(*(r.tokens for r in rows))  # a classmate's name may be written in code too
    stats = [_exercise(k + 1, e, graded, totals, sections, site_url, everyone) for k, e in enumerate(exercises)]
    lessons = list(dict.fromkeys(e["lesson"] for e in exercises))
    groups = [_group(lesson, [e["id"] for e in exercises if e["lesson"] == lesson], by_id, graded)
              for lesson in lessons]
    whole = _group("class", list(by_id), by_id, graded)
    by_section = {s: _group("class", list(by_id), by_id, [r for r in graded if r.section == s]) for s in sections}
    lesson_sections = {g.id: {s: _group(g.id, g.exercises, by_id, [r for r in graded if r.section == s])
                              for s in sections} for g in groups}

    fifths = _fifths(graded, totals)
    students = []
    for r in rows:
        lesson_totals = {g.id: _lesson_total(r, g) for g in groups}
        applied = finals.get(r.key)
        row = StudentRow(r.key, r.shown, r.section, r.roster_id, r.submitted and bool(r.answers),
                         round(sum(a["score"] for a in r.answers.values()), 2), lesson_totals,
                         _problems(r, groups, by_id), r.path, r.roster_name, fifths.get(r.key),
                         untouched=_untouched(r, groups))
        if applied is not None and row.submitted:
            row.penalty, row.hours_late = applied.penalty, applied.hours_late
            row.overrides = sum(t["exercise"] != adjust.LATE for t in applied.overrides)
            if applied.no_time:
                row.problems.append("no time of submission recorded: not counted late")
        students.append(row)
    students.sort(key=lambda s: (sections.index(s.section) if s.section in sections else -1, _natural(s.shown)))

    teach, more = _teach_again(stats)
    report = ClassReport(
        submissions=len(graded), exercises=stats, lessons=groups, whole=whole, by_section=by_section,
        lesson_sections=lesson_sections, students=[s for s in students if s.submitted],
        sections=sections, teach=teach, teach_more=more, taught=_taught(stats, graded),
        pseudonymised=pseudonymise, site_url=site_url, graded=doc.get("graded", ""), roster=bool(roster),
        notes=list(notes or []), isolation=_isolation(doc))
    report.everyone = students
    report.teach_sections = [s for s in sections if any(h.sections.get(s) for h in teach)]
    report.functions = {e["id"]: e.get("function", "") for e in exercises}
    report.nothing = [s for s in students if not s.submitted]
    report.forbidden = [s for s in students if any("forbidden" in p for p in s.problems)]
    report.unmatched = [s for s in students if roster and s.section == NOT_ON_ROSTER]
    adjustments = doc.get("adjustments") or {}
    report.due, report.policy = dict(adjustments.get("due") or {}), adjustments.get("late_penalty", "")
    shown = {r.key: r.shown for r in rows}
    by_text = {x: r.shown for r in rows for x in (r.roster_id, r.key) if x}
    report.trail = [{**t, "shown": shown.get(t["submission"]) or by_text.get(t["student"], t["student"])}
                    for t in trail]
    report.contact = _contact(report)
    if not pseudonymise:
        report.identical = _identical(report.students, graded)
    if pseudonymise:
        report.key = [{"pseudonym": r.shown, "student": r.key, "path": r.path, "id": r.roster_id,
                       "name": r.roster_name, "section": r.section}
                      for r in sorted(rows, key=lambda r: _natural(r.shown))]
    return report


@dataclass
class _Row:
    key: str
    shown: str
    path: str
    section: str
    roster_id: str
    roster_name: str
    submitted: bool
    answers: dict[str, dict]
    files: list[str]
    tokens: frozenset
    due: str = ""
    empty: bool = False
    columns: dict = field(default_factory=dict)   # the roster's other columns


def _students(doc: dict, roster, pseudonymise: bool) -> list[_Row]:
    """Every student: those who submitted (in the document's order), then the roster's who did not."""
    rows = []
    matched: dict[str, str] = {}
    for s in doc["submissions"]:
        entry = roster_match(roster, s) if roster else None
        if entry is not None:
            if entry.id in matched:
                raise RosterError(f"{matched[entry.id]} and {s['path']} both belong to {entry.name} ({entry.id}) "
                                  "of the roster: leave one out (of two grading runs, --replace keeps the later)")
            matched[entry.id] = s["path"]
        files = s.get("files", [])
        readable = bool(files) and not all(e["status"] == "unreadable" for e in s["exercises"])
        section = entry.section if entry else (NOT_ON_ROSTER if roster else "")
        shown = entry.name if entry else s["student"]
        tokens = name_tokens(s["student"], *((entry.name, entry.id) if entry else ()))
        empty = not files and any("nothing to grade" in n for n in s.get("notes", []))
        rows.append(_Row(s["student"], shown, s["path"], section, entry.id if entry else "",
                         entry.name if entry else "", readable,
                         {e["id"]: e for e in s["exercises"]} if readable else {}, files, tokens,
                         _iso_due(entry.due) if entry and entry.due else "", empty,
                         dict(entry.extra) if entry else {}))
    for entry in roster or []:
        if entry.id not in matched:
            rows.append(_Row(entry.id, entry.name, "", entry.section, entry.id, entry.name, False, {}, [],
                             name_tokens(entry.name, entry.id), columns=dict(entry.extra)))
    shown = Counter(r.shown for r in rows)
    for r in rows:  # two students of one name: their ids, or their files, tell them apart
        if shown[r.shown] > 1:
            r.shown = f"{r.shown} ({r.roster_id or r.key})"
    if pseudonymise:
        seed = str(doc.get("pseudonym_seed", ""))
        order = sorted(rows, key=lambda r: hashlib.sha256(f"{seed}|{r.roster_id or r.key}".encode()).hexdigest())
        width = len(str(len(rows)))
        for k, r in enumerate(order):
            r.shown = f"student {k + 1:0{width}d}"
    return rows


def _iso_due(text: str) -> str:
    try:
        return adjust.parse_when(text, "the roster's due column").isoformat(timespec="seconds")
    except adjust.AdjustError as e:
        raise RosterError(str(e)) from None


def _owner(rows: list[_Row]):
    """The function that finds the submission an override names: by roster id, roster name
    (as written, any case) or the grader's name for it; "" for a student of the roster with
    nothing graded in these grades (a late run not merged yet)."""
    def owner(o) -> str:
        text = o.student.strip()
        found = [r for r in rows if text in (r.roster_id, r.key)] or \
                [r for r in rows if r.roster_name and r.roster_name.casefold() == text.casefold()]
        where = f"overrides, line {o.line}"
        if not found:
            raise adjust.AdjustError(f"{where}: no student {text!r} (give a roster id, a roster name, or the "
                                     "name the grader gave the submission)")
        if len(found) > 1:
            raise adjust.AdjustError(f"{where}: {text!r} names {len(found)} students "
                                     f"({', '.join(r.roster_id or r.key for r in found)}): give the id")
        if not found[0].submitted or not found[0].answers:
            return ""  # on the roster, nothing graded in these grades (yet): the row waits, in the trail
        return found[0].key
    return owner


def _fifths(graded: list[_Row], totals: dict) -> dict[str, int]:
    """Each student's fifth of the class by total, 1 the weakest (as the quintiles cut them)."""
    order = [graded[k] for k in sorted(range(len(graded)), key=lambda k: (totals[graded[k].key], k))]
    n, out, start = len(order), {}, 0
    if n < QUINTILES:
        return {}
    for q in range(QUINTILES):
        size = n // QUINTILES + (q < n % QUINTILES)
        for r in order[start:start + size]:
            out[r.key] = q + 1
        start += size
    return out


def _untouched(r: _Row, groups: list[GroupStats]) -> list[str]:
    """The lessons a student handed in with every answer not attempted (the handout untouched)."""
    out = []
    for g in groups:
        answers = [r.answers[i] for i in g.exercises if i in r.answers]
        if answers and all(a["status"] == "not attempted" for a in answers):
            out.append(g.id)
    return out


def _contact(report: ClassReport) -> dict[str, list[StudentRow]]:
    """Who an instructor should write to, and why: in the order the page lists them."""
    out = {"submitted nothing or an empty folder": list(report.nothing),
           "handed in a lesson untouched": [s for s in report.students if s.untouched],
           "a forbidden call, a crash or a time-out": [s for s in report.students if any(
               re.search(r"forbidden call|crashed|timed out", p) for p in s.problems)],
           "the weakest fifth by total": sorted((s for s in report.students if s.fifth == 1),
                                                 key=lambda s: (s.total, _natural(s.shown)))}
    return {why: who for why, who in out.items() if who}


def _identical(students: list[StudentRow], graded: list[_Row]) -> list[Identical]:
    """Students whose every answer has the same fingerprint (``code_fingerprint``), with at
    least ``IDENTICAL_MIN`` answers written, wrong ones included, that share an answer no
    other student wrote or ``IDENTICAL_WRONG`` wrong answers (the right answers everyone
    writes alike are no sign of copying)."""
    of = {}
    for r in graded:
        prints = tuple((i, a.get("code_fingerprint", "")) for i, a in sorted(r.answers.items()))
        if sum(bool(p) for _, p in prints) >= IDENTICAL_MIN:
            of[r.key] = prints
    writers = Counter(p for prints in of.values() for p in prints if p[1])
    sets: dict[tuple, list[str]] = {}
    for key, prints in of.items():
        sets.setdefault(prints, []).append(key)
    rows = {s.key: s for s in students}
    answers = {r.key: r.answers for r in graded}
    out = []
    for prints, keys in sets.items():
        if len(keys) < 2:
            continue
        written = [p for p in prints if p[1]]
        first = answers[keys[0]]
        wrong = sum(first[i]["status"] == "graded" and first[i]["score"] < first[i]["max_score"] - 1e-9
                    for i, _ in written)
        unique = sum(writers[p] == len(keys) for p in written)
        if not unique and wrong < IDENTICAL_WRONG:
            continue  # the commonest answers, the same by chance as often as not
        out.append(Identical(sorted((rows[k] for k in keys), key=lambda s: _natural(s.shown)), len(written),
                             wrong, unique))
    return sorted(out, key=lambda x: (-x.unique, -x.wrong, -len(x.students), _natural(x.students[0].shown)))


def _natural(name: str):
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", name)]


def _lesson_total(r: _Row, g: GroupStats) -> float | None:
    scores = [r.answers[i]["score"] for i in g.exercises if i in r.answers]
    return round(sum(scores), 2) if scores else None


def _problems(r: _Row, groups: list[GroupStats], by_id: dict) -> list[str]:
    """What went wrong for a student, apart from wrong answers: crashes, time-outs, forbidden
    calls, exercises missing, lessons not handed in."""
    if not r.submitted:
        return ["could not be read"] if r.files else [EMPTY_FOLDER] if r.empty else ["submitted nothing"]
    out = []
    for g in groups:
        answers = [r.answers[i] for i in g.exercises if i in r.answers]
        if answers and all(a["status"] == "not attempted" for a in answers):
            out.append(f"lesson {g.id.split('-', 1)[0]}: handed in untouched (no answer written)")
            continue
        if answers and all(a["status"] == "missing" for a in answers):
            prefix = g.id.split("-", 1)[0]
            by_lesson = any(re.match(r"\d\d-", f) for f in r.files)  # files named after lessons
            no_file = by_lesson and not any(f.startswith(prefix) for f in r.files)
            out.append(f"lesson {prefix}: " + ("no notebook" if no_file else "none of its functions"))
            continue
        for a in answers:
            function = by_id[a["id"]].get("function") or a.get("function", "")
            if a["status"] in ("timeout", "crashed", "unreadable"):
                out.append(f"{a['id']}: {'timed out' if a['status'] == 'timeout' else a['status']}")
            elif a["status"] == "forbidden" or _forbidden_call(a):
                out.append(f"{a['id']}: forbidden call")
            elif a["status"] == "missing":
                out.append(f"{a['id']}: no {function}")
            elif a["status"] == "wrong signature":
                out.append(f"{a['id']}: wrong signature")
            elif a["status"] not in ("graded", "not attempted"):
                out.append(f"{a['id']}: {a['status']}")
    return out


def _forbidden_call(a: dict) -> bool:
    return any(c["kind"] == FORBIDDEN_CALL for c in a["checks"])


def _group(gid: str, ids: list[str], by_id: dict, rows: list[_Row]) -> GroupStats:
    points = sum(float(by_id[i]["points"]) for i in ids)
    totals = [round(sum(r.answers[i]["score"] for i in ids if i in r.answers), 2) for r in rows]
    return GroupStats(gid, float(points), totals, _mean(totals), statistics.median(totals) if totals else 0.0,
                      sum(t >= points - 1e-9 for t in totals), ids)


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else 0.0


def correlation(xs: list[float], ys: list[float]) -> float | None:
    """Pearson's correlation of two lists; None when either does not vary (or n < 3)."""
    n = len(xs)
    if n < 3:
        return None
    mx, my = _mean(xs), _mean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx <= 1e-12 or syy <= 1e-12:
        return None
    return sxy / math.sqrt(sxx * syy)


def quintiles(scores: list[float], totals: list[float], points: float, parts: int = QUINTILES) -> list[float | None]:
    """The mean score, as a share of ``points``, of each fifth of the students ranked by
    their total (weakest first; the first fifths take one student more where the count
    does not divide); None for every fifth when there are fewer students than fifths."""
    n = len(scores)
    if n < parts or not points:
        return [None] * parts
    order = sorted(range(n), key=lambda k: (totals[k], k))
    out, start = [], 0
    for q in range(parts):
        size = n // parts + (q < n % parts)
        chunk = [scores[k] for k in order[start:start + size]]
        start += size
        out.append(_mean(chunk) / points)
    return out


def _mistake_label(rec: dict) -> str:
    """A listed mistake's label: its short name where the grades carry one, else its key."""
    return rec.get("name") or rec["key"]


def _diagnoses(checks: list[dict]) -> set[str]:
    """The hints of the diagnoses the failed ``checks`` got."""
    return {c["hint"] for c in checks if c["kind"] == DIAGNOSIS}


def _mistakes(checks: list[dict]) -> set[str]:
    """The keys of the listed mistakes the failed ``checks`` make."""
    return {c["mistake"] for c in checks if c["kind"] == MISTAKE and c["mistake"]}


def _tally(answers: list[dict]) -> Tally:
    t = Tally(students=len(answers))
    t.full = sum(a["score"] >= a["max_score"] - 1e-9 for a in answers)
    t.mean = _mean(a["score"] for a in answers)
    status = Counter(a["status"] for a in answers)
    t.status = {s: status.get(s, 0) for s in STATUSES}
    t.status.update({s: n for s, n in status.items() if s not in t.status and s != "graded"})
    graded = [a for a in answers if a["status"] == "graded"]
    t.graded = len(graded)
    wrong = [a for a in graded if a["score"] < a["max_score"] - 1e-9]
    t.wrong = len(wrong)
    t.forbidden_calls = sum(_forbidden_call(a) for a in graded)
    for a in wrong:
        failed = [c for c in a["checks"] if not c["passed"]]
        names = _mistakes(failed)
        hints = _diagnoses(failed)
        t.mistakes.update(names)
        t.diagnoses.update(hints)
        t.unexplained += not names and not hints
    return t


def link(section: str, text: str, site_url: str | None) -> Link | None:
    """A link to where a point is taught: a URL as it is; ``<lesson>#<anchor>`` under the
    course website's address, or text alone when there is none."""
    if not section:
        return None
    if re.match(r"https?://|file:", section):
        return Link(text or section, section)
    if not site_url:
        return Link(text)
    lesson, _, anchor = section.partition("#")
    return Link(text, f"{site_url.rstrip('/')}/lessons/{lesson}.html" + (f"#{anchor}" if anchor else ""))


def _exercise(number: int, e: dict, rows: list[_Row], totals: dict, sections: list[str], site_url,
              tokens: frozenset = frozenset()) -> ExerciseStats:
    present = [r for r in rows if e["id"] in r.answers]
    answers = [r.answers[e["id"]] for r in present]
    tally = _tally(answers)
    by_section = {s: _tally([r.answers[e["id"]] for r in present if r.section == s]) for s in sections}
    for t in by_section.values():  # every status of the class, in every section's column
        t.status = {status: t.status.get(status, 0) for status in tally.status}
    scores = [a["score"] for a in answers]
    ranked = [totals[r.key] for r in present]
    points = float(e["points"])

    listed = {m["key"]: (k, m) for k, m in enumerate(e["mistakes"])}
    hints = []
    for key, n in sorted(tally.mistakes.items(), key=lambda kv: (-kv[1], listed.get(kv[0], (1 << 30,))[0])):
        k, m = listed.get(key, (None, {"key": key, "hint": "", "section": "", "taught": ""}))
        taught = link(m["section"], m["taught"], site_url)
        hints.append(Hint(e["id"], MISTAKE, key, _mistake_label(m), m["hint"], taught,
                          n, {s: t.mistakes.get(key, 0) for s, t in by_section.items()}))
    diagnosis = e.get("diagnosis") or {}
    own = link(diagnosis.get("section", ""), diagnosis.get("taught", ""), site_url)
    for k, (hint, n) in enumerate(sorted(tally.diagnoses.items(), key=lambda kv: (-kv[1], kv[0]))):
        hints.append(Hint(e["id"], DIAGNOSIS, str(k + 1), "diagnosis", hint, own, n,
                          {s: t.diagnoses.get(hint, 0) for s, t in by_section.items()}))
    for h in hints:
        h.share = round(100 * h.students / tally.wrong) if tally.wrong else 0

    every, slips = _answer_groups(e, present, listed, tokens)
    shown = every[:GROUPS]
    rest = every[GROUPS:]
    unexplained = sorted((g.answers for g in every if not g.hints), reverse=True)
    ran = [a["seconds"] for a in answers if a.get("seconds") is not None]
    out = ExerciseStats(
        number, e["id"], e["title"], e["lesson"], points,
        max((len(a["checks"]) for a in answers if a["status"] == "graded"), default=0),
        scores, tally, by_section, correlation(scores, [t - s for s, t in zip(scores, ranked)]),
        quintiles(scores, ranked, points), hints, shown, (len(rest), sum(g.answers for g in rest)), unexplained,
        statistics.median(ran) if ran else None, max(ran) if ran else None, all_groups=every, slips=slips,
        section=own)
    if out.tally.students and out.tally.full >= EASY_SHARE * out.tally.students:
        out.flags.append("nearly everyone gets it")
    if out.tally.students >= 3 and (out.discrimination is None or out.discrimination < DISCRIMINATION_MIN):
        out.flags.append("does not discriminate")
    return out


def _slip(answer: dict) -> str:
    """The fingerprint of what an answer gave on the public checks, when it fails one of them
    and every public check has a value fingerprint; else ""."""
    public = [c for c in answer["checks"] if not c.get("hidden", c["name"].startswith("hidden"))]
    prints = [c.get("value_fingerprint", "") for c in public]
    if not public or not all(prints) or all(c["passed"] for c in public):
        return ""
    return "s" + hashlib.sha256("|".join(prints).encode()).hexdigest()[:10]


def _answer_groups(e: dict, present: list[_Row], listed: dict,
                   tokens: frozenset = frozenset()) -> tuple[list[AnswerGroup], dict[str, list[int]]]:
    """Every group of wrong answers with the same shape of code (``anonymise.fingerprint``),
    largest first (unexplained before explained among equals); an answer whose code is not in
    the grades forms a group of its own. The code shown holds no identifier or string that has
    a word of a student's name or id (``tokens``: everyone's, words of the course's code left out,
    compared as whole words). Also the slips: groups whose answers gave the same values on
    every public check (2 groups or more), by slip id."""
    kinds: dict[str, list[tuple[_Row, dict]]] = {}
    for r in present:
        a = r.answers[e["id"]]
        if a["status"] != "graded" or a["score"] >= a["max_score"] - 1e-9:
            continue
        shape = a.get("code_fingerprint") if a.get("code") and a.get("code_fingerprint") else ""
        shape = shape or fingerprint(a.get("code", ""), e.get("function", "")) or f"no code: {r.key}"
        kinds.setdefault(shape, []).append((r, a))

    def labels(members) -> list[str]:
        found = Counter()
        for _, a in members:
            failed = [c for c in a["checks"] if not c["passed"]]
            found.update({_mistake_label(listed[m][1]) if m in listed else m for m in _mistakes(failed)})
            found.update("diagnosis" for c in failed if c["kind"] == DIAGNOSIS)
        return [name for name, _ in found.most_common()]

    ranked = sorted(kinds.items(), key=lambda kv: (-len(kv[1]), bool(labels(kv[1])), kv[1][0][0].key))
    groups = []
    for number, (shape, members) in enumerate(ranked, 1):
        first_row, first = members[0]
        code = mask_names(first.get("code", ""), first_row.tokens | tokens, keep={e.get("function", "")})
        lines = code.splitlines()
        if len(lines) > MAX_EXAMPLE_LINES:
            lines = lines[:MAX_EXAMPLE_LINES] + [f"# ... {len(lines) - MAX_EXAMPLE_LINES} more lines"]
        failed, message = _failed(e, [a for _, a in members])
        slips = Counter(_slip(a) for _, a in members)
        slip, n = slips.most_common(1)[0]
        gid = first.get("answer_group") or (("g" + shape[:10]) if not shape.startswith("no code") else
                                            "n" + hashlib.sha256(shape.encode()).hexdigest()[:10])
        groups.append(AnswerGroup(number, len(members), dict(Counter(r.section for r, _ in members)), labels(members),
                                  failed, "\n".join(lines), gid, slip if n * 2 > len(members) else "",
                                  [r.key for r, _ in members], first.get("code", ""), message))
    by_slip: dict[str, list[int]] = {}
    for g in groups:
        if g.slip:
            by_slip.setdefault(g.slip, []).append(g.number)
    return groups, {s: ns for s, ns in by_slip.items() if len(ns) > 1}


def _failed(e: dict, answers: list[dict]) -> tuple[list[str], str]:
    """The checks the answers fail, by the grader's message, each with how many of the
    answers fail it where not all do: "public checks 1, 3 (note); hidden check 2: wrong values
    (2 of 3 answers)"; and the message most of them got."""
    notes = e.get("notes", {})
    by_message: dict[str, list[str]] = {}
    count: Counter = Counter()
    for answer in answers:
        mine = set()
        for c in answer["checks"]:
            if not c["passed"]:
                note = f" ({notes[c['name']]})" if c["name"] in notes else ""
                names = by_message.setdefault(c["message"], [])
                if c["name"] + note not in names:
                    names.append(c["name"] + note)
                mine.add(c["message"])
        count.update(mine)
    out = []
    for message, names in by_message.items():
        tail = f" ({count[message]} of {len(answers)} answers)" if count[message] < len(answers) else ""
        out.append(f"{_names(_ordered(names))}: {message}{tail}")
    commonest = max(by_message, key=lambda m: (count[m], -list(by_message).index(m)), default="")
    return out, commonest


def _ordered(names: list[str]) -> list[str]:
    """Check names in order: public checks first, then hidden, each by number."""
    def key(n):
        kind, _, rest = n.partition(" check ")
        number = re.match(r"\d+", rest)
        return (kind != "public", int(number.group()) if number else 0, n)
    return sorted(names, key=key)


def _names(names: list[str]) -> str:
    """"public check 1", "public check 2", "hidden check 1" -> "public checks 1, 2; hidden check 1"."""
    groups: dict[str, list[str]] = {}
    for n in names:
        kind, _, rest = n.partition(" check ")
        groups.setdefault(kind, []).append(rest)
    return "; ".join(f"{kind} check{'s' if len(rest) > 1 else ''} {', '.join(rest)}" for kind, rest in groups.items())


def _teach_again(stats: list[ExerciseStats]) -> tuple[list[Hint], list[Hint]]:
    """Every error the class made, ranked by how many students made it: the listed mistakes,
    the diagnoses, and the errors no hint explains (an answer group, or a slip of several
    groups that give the same values, of ``TEACH_GROUP`` students or more); the first ``TOP``,
    and those tied with the last of them."""
    rows = [h for e in stats for h in e.hints] + [h for e in stats for h in _unexplained(e)]
    order = {MISTAKE: 0, DIAGNOSIS: 1, SLIP: 2, GROUP: 2}
    ranked = sorted(rows, key=lambda h: (-h.students, order[h.kind]))
    if len(ranked) <= TOP:
        return ranked, []
    cut = ranked[TOP - 1].students
    return ranked[:TOP], [h for h in ranked[TOP:] if h.students == cut]


def _unexplained(e: ExerciseStats) -> list[Hint]:
    """The rows of "what to teach again" for an exercise's errors that no hint explains: a
    slip (its groups together) or a group on its own, of ``TEACH_GROUP`` answers or more."""
    out = []
    in_slip = {n for ns in e.slips.values() for n in ns}
    by_number = {g.number: g for g in e.all_groups}
    units = [(SLIP, slip, [by_number[n] for n in ns]) for slip, ns in e.slips.items()]
    units += [(GROUP, g.id, [g]) for g in e.all_groups if g.number not in in_slip]
    for kind, key, groups in units:
        if any(g.hints for g in groups):
            continue
        n = sum(g.answers for g in groups)
        if n < TEACH_GROUP:
            continue
        sections = Counter()
        for g in groups:
            sections.update(g.sections)
        numbers = [g.number for g in groups]
        label = (f"no hint: group {numbers[0]}" if len(numbers) == 1 else
                 f"no hint: groups {', '.join(map(str, numbers[:-1]))} and {numbers[-1]} (same values)")
        h = Hint(e.id, kind, key, label, groups[0].message, e.section, n, dict(sections), groups=numbers)
        h.share = round(100 * n / e.tally.wrong) if e.tally.wrong else 0
        out.append(h)
    return out


def _taught(stats: list[ExerciseStats], rows: list[_Row]) -> list[Taught]:
    """The hints, and the errors no hint explains, rolled up by where their point is taught
    (an unexplained error under its exercise's own section): distinct students, answers."""
    by_link: dict[tuple, dict] = {}
    listed = {e.id: e for e in stats}
    unexplained = {e.id: _unexplained(e) for e in stats}
    for e in stats:
        for h in e.hints + unexplained[e.id]:
            if h.taught is None:
                continue
            entry = by_link.setdefault((h.taught.text, h.taught.href), {"students": set(), "answers": 0, "hints": 0})
            entry["answers"] += h.students
            entry["hints"] += 1
            if h.kind in (GROUP, SLIP):
                groups = {g.number: g for g in e.all_groups}
                for n in h.groups:
                    entry["students"].update(groups[n].members)
    for r in rows:  # distinct students: those with an answer that got one of the section's hints
        for exercise_id, a in r.answers.items():
            e = listed.get(exercise_id)
            if e is None or a["status"] != "graded":
                continue
            failed = [c for c in a["checks"] if not c["passed"]]
            keys = _mistakes(failed)
            hints = _diagnoses(failed)
            for h in e.hints:
                if h.taught is not None and ((h.kind == MISTAKE and h.key in keys)
                                             or (h.kind == DIAGNOSIS and h.hint in hints)):
                    by_link[(h.taught.text, h.taught.href)]["students"].add(r.key)
    out = [Taught(Link(text, href), len(v["students"]), v["answers"], v["hints"])
           for (text, href), v in by_link.items()]
    return sorted(out, key=lambda t: (-t.students, -t.answers, t.link.text))


def _isolation(doc: dict) -> str:
    """The weakest isolation level any submission of ``doc`` ran with (a merged document:
    the weakest of its runs); "not recorded" for a grades file of an older mha grade."""
    from .sandbox import weakest

    if any("sandbox" not in s for s in doc["submissions"]):
        return "not recorded"
    return weakest(s["sandbox"] for s in doc["submissions"]) or "no code ran"


# ----------------------------------------------------------------------------- the numbers, keyed

def numbers(report: ClassReport) -> list[tuple[str, str, str, object, str]]:
    """Every number the page shows, as (scope, id, measure, value, text): the CSV's rows, and
    the ``data-key`` ("scope|id|measure") of each number on the page. A section's numbers have
    the scope ``"<scope> (<section>)"``."""
    rows: list[tuple[str, str, str, object, str]] = [
        ("class", "", "submissions", report.submissions, ""),
        ("class", "", "isolation", report.isolation, ""),
        ("class", "", "wrong", sum(e.tally.wrong for e in report.exercises), ""),
        ("class", "", "unexplained", sum(e.tally.unexplained for e in report.exercises), "")]
    if report.roster or report.nothing:
        broken = sum(s.problems == ["could not be read"] for s in report.nothing)
        rows.append(("class", "", "submitted nothing", len(report.nothing) - broken, ""))
        if broken:
            rows.append(("class", "", "could not be read", broken, ""))
        empty = sum(s.problems == [EMPTY_FOLDER] for s in report.nothing)
        if empty:
            rows.append(("class", "", EMPTY_FOLDER, empty, ""))
    for why, who in report.contact.items():
        rows.append(("contact", "", why, len(who), ""))
    if report.roster:
        rows += [("class", "", "used a forbidden function", len(report.forbidden), ""),
                 ("class", "", "not on the roster", len(report.unmatched), "")]
    for g, scope, gid, parts in [(report.whole, "class", "", report.by_section)] + [
            (g, "lesson", g.id, report.lesson_sections.get(g.id, {})) for g in report.lessons]:
        rows += _totals(g, scope, gid)
        for s, part in parts.items():
            rows += [(f"{scope} ({s})", gid, m, v, t) for _, _, m, v, t in _totals(part, scope, gid) if m != "points"]
            rows.append((f"{scope} ({s})", gid, "students", len(part.totals), ""))
    for e in report.exercises:
        rows += [("exercise", e.id, "number", e.number, e.title),
                 ("exercise", e.id, "points", num(e.points), ""),
                 ("exercise", e.id, "checks", e.checks, ""),
                 ("exercise", e.id, "discrimination %", "" if e.discrimination is None else pct(e.discrimination), ""),
                 ("exercise", e.id, "flags", "; ".join(e.flags), "")]
        rows += [("exercise", e.id, f"quintile {q + 1} %", "" if v is None else pct(v), "")
                 for q, v in enumerate(e.quintiles)]
        rows += _tally_rows("exercise", e.id, e.tally, e.points)
        rows += [("exercise", e.id, "median seconds", "" if e.seconds_median is None else num(e.seconds_median, 3), ""),
                 ("exercise", e.id, "max seconds", "" if e.seconds_max is None else num(e.seconds_max, 3), ""),
                 ("exercise", e.id, "answer groups", len(e.all_groups), "")]
        for s, t in e.sections.items():
            rows += _tally_rows(f"exercise ({s})", e.id, t, e.points)
        for h in e.hints:
            rows.append((h.kind, e.id, h.key, h.students, h.hint))
            rows += [(f"{h.kind} ({s})", e.id, h.key, n, "") for s, n in h.sections.items()]
        for gr in e.groups:
            rows.append((GROUP, e.id, gr.id, gr.answers, f"group {gr.number}: " + " | ".join(gr.failed)))
            rows += [(f"{GROUP} ({s})", e.id, gr.id, gr.sections.get(s, 0), "") for s in report.sections]
        shown = {gr.id for gr in e.groups}
        for h in (h for h in report.teach if h.exercise == e.id and h.kind in (GROUP, SLIP)):
            if h.kind == SLIP or h.key not in shown:  # a row of "what to teach again" beyond the groups shown
                rows.append((h.kind, e.id, h.key, h.students, f"{h.label}: {h.hint}"))
                rows += [(f"{h.kind} ({s})", e.id, h.key, h.sections.get(s, 0), "") for s in report.teach_sections]
    for t in report.taught:
        rows += [("taught", t.link.text, "students", t.students, ""), ("taught", t.link.text, "answers", t.answers, "")]
    for s in report.students:
        rows.append(("student", s.shown, "total", num(s.total), "; ".join(s.problems)))
        rows += [("student", s.shown, lesson, "" if v is None else num(v), "") for lesson, v in s.lessons.items()]
        rows.append(("student", s.shown, "fifth", "" if s.fifth is None else s.fifth, ""))
        if report.due:
            rows += [("student", s.shown, "hours late", num(s.hours_late, 1), ""),
                     ("student", s.shown, "late penalty", num(s.penalty), report.policy),
                     ("student", s.shown, "final total", num(s.final), "")]
    for t in report.trail:
        if t.get("status") == "applied" and t["exercise"] != adjust.LATE:
            rows.append(("student", t["shown"], f"override {t['exercise']}", num(t["points"]),
                         f"graded {num(t['graded'])}"))
    return rows


def _totals(g: GroupStats, scope: str, gid: str) -> list:
    return [(scope, gid, "points", num(g.points), ""), (scope, gid, "mean total", num(g.mean), ""),
            (scope, gid, "median total", num(g.median), ""), (scope, gid, "full marks", g.full, "")]


def _tally_rows(scope: str, eid: str, t: Tally, points: float) -> list:
    rows = [(scope, eid, "students", t.students, ""), (scope, eid, "full marks", t.full, ""),
            (scope, eid, "mean score", num(t.mean), ""),
            (scope, eid, "difficulty %", pct(t.mean / points) if points and t.students else "", ""),
            (scope, eid, "graded", t.graded, ""), (scope, eid, "wrong", t.wrong, ""),
            (scope, eid, "unexplained", t.unexplained, ""), (scope, eid, "forbidden calls", t.forbidden_calls, "")]
    return rows + [(scope, eid, s, n, "") for s, n in t.status.items()]


def num(x: float, digits: int = 2):
    x = round(float(x), digits)
    return int(x) if x == int(x) else x


def pct(x: float) -> int:
    return round(100 * x)
