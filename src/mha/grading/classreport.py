"""The class report (``mha grade ... --report DIR``): what the class as a whole got wrong.

From the graded submissions it works out, per exercise, the distribution of scores, the
named mistakes ranked by how many students made them (each check that fails carries the
name of the listed mistake its answer makes, see ``CheckReport.mistake``), the wrong
answers that no named mistake explains (with a few anonymised examples), crashes,
time-outs and forbidden calls, and item statistics (difficulty and discrimination); per
lesson and for the class, the totals. It writes one self-contained HTML page (figures as
inline SVG images with alt text; no script, no network) and a CSV of every number the page
shows, each under the same key (``scope|id|measure``), so that a test, or an instructor's
spreadsheet, can check the page against the grader's JSON report.

Building it is separate from grading: nothing here runs unless a report is asked for.
"""

from __future__ import annotations

import ast
import base64
import csv
import datetime
import html
import math
import random
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from mha.exercises import Exercise
from mha.exercises._core import FORBIDDEN_CALL

from . import extract
from .grader import ExerciseReport, SubmissionReport

HTML_NAME = "class-report.html"
CSV_NAME = "class-report.csv"

EASY_SHARE = 0.9            # flagged "nearly everyone gets it" at or above this share with full marks
DISCRIMINATION_MIN = 0.2    # flagged "does not discriminate" below this (PrairieLearn's guidance: 20%)
EXAMPLES = 3                # anonymised examples of unexplained wrong answers, per exercise
SLOWEST = 5                 # exercises listed as the slowest, for the class and per lesson
MAX_EXAMPLE_LINES = 30

# How each status of ExerciseReport is counted on the page.
STATUSES = ("not attempted", "missing", "wrong signature", "forbidden", "timeout", "crashed", "unreadable")


# ----------------------------------------------------------------------------- the numbers

@dataclass
class MistakeCount:
    name: str
    hint: str
    section: str          # where the point is taught: "" or a URL / "<lesson>#<anchor>"
    students: int         # how many students' answers make it (on at least one failed check)


@dataclass
class Example:
    """A kind of wrong answer that no listed mistake explains: the checks it fails (names
    and the grader's messages, never an input or a value) and how many answers fail so."""

    failed: list[str]
    answers: int
    code: str = ""        # one such answer's function, as the grader ran it (comments dropped)


@dataclass
class ExerciseStats:
    id: str
    title: str
    lesson: str
    points: float
    students: int
    scores: list[float]
    full: int                     # students with full marks
    mean: float                   # mean score, in points
    discrimination: float | None  # correlation of the score with the rest of the total
    status: dict[str, int]        # STATUSES -> students
    graded: int                   # answers that ran and were judged
    wrong: int                    # of those, answers that lost points
    forbidden_calls: int          # answers that reached a forbidden function while running
    mistakes: list[MistakeCount]  # listed mistakes made, most frequent first
    diagnosed: list[tuple[str, int]]  # hints of the exercise's own diagnosis (``explain``), with students
    unexplained: int              # wrong answers without a hint on any failed check
    examples: list[Example]
    seconds_median: float | None  # time the answers ran on the checks, over those that ran
    seconds_max: float | None
    checks: int = 0               # checks per answer (the points are split evenly over them)
    flags: list[str] = field(default_factory=list)

    @property
    def difficulty(self) -> float:
        """Mean score as a share of the points (PrairieLearn's "difficulty", higher = easier)."""
        return self.mean / self.points if self.points else 0.0

    @property
    def forbidden(self) -> int:
        return self.status["forbidden"] + self.forbidden_calls


@dataclass
class GroupStats:
    """Totals of a lesson, or of the whole class."""

    id: str
    points: float
    totals: list[float]
    mean: float
    median: float
    full: int
    exercises: list[str]


@dataclass
class ClassReport:
    submissions: int
    exercises: list[ExerciseStats]
    lessons: list[GroupStats]
    whole: GroupStats
    students: list[tuple[str, float, dict[str, float], list[str]]]  # name, total, lesson totals, problems
    pseudonymised: bool
    site_url: str | None
    created: str


def build(reports: list[SubmissionReport], exercises: list[Exercise], *, pseudonymise: bool = False,
          site_url: str | None = None, sections: dict | None = None, rng: random.Random | None = None) -> ClassReport:
    """Work out every number of the report from the graded submissions. ``sections`` maps
    (exercise id, mistake index) to where the point is taught, for mistakes that do not say
    (default: the course's own table, ``mha.exercises._sections``)."""
    if sections is None:
        from mha.exercises._sections import SECTIONS as sections
    by_id = {e.id: e for e in exercises}
    rows = [{e.id: e for e in r.exercises} for r in reports]
    totals = [sum(row[i].score for i in by_id if i in row) for row in rows]
    stats = [_exercise(ex, [row.get(ex.id) for row in rows], totals, reports, sections) for ex in exercises]

    lessons = []
    for lesson in dict.fromkeys(e.lesson for e in exercises):
        ids = [e.id for e in exercises if e.lesson == lesson]
        lessons.append(_group(lesson, ids, by_id, rows))
    whole = _group("class", list(by_id), by_id, rows)

    names = _unique([r.student for r in reports])
    if pseudonymise:
        order = list(range(len(names)))
        (rng or random.SystemRandom()).shuffle(order)
        width = len(str(len(names)))
        names = [""] * len(order)
        for k, i in enumerate(order):
            names[i] = f"student {k + 1:0{width}d}"
    students = []
    for name, row, total in zip(names, rows, totals):
        per_lesson = {g.id: round(sum(row[i].score for i in g.exercises if i in row), 2) for g in lessons}
        problems = [f"{i}: {row[i].status}" for i in by_id if i in row and row[i].status in ("timeout", "crashed")]
        students.append((name, round(total, 2), per_lesson, problems))
    students.sort(key=lambda s: _natural(s[0]))
    return ClassReport(len(reports), stats, lessons, whole, students, pseudonymise, site_url,
                       datetime.datetime.now().strftime("%Y-%m-%d %H:%M"))


def local_site() -> str | None:
    """The course website built in this source checkout (``make book``), as a file URL, or None."""
    root = Path(__file__).resolve().parents[3]
    index = root / "_build" / "html" / "index.html"
    return index.parent.as_uri() if (root / "pyproject.toml").is_file() and index.is_file() else None


def _unique(names: list[str]) -> list[str]:
    """The names, a second "ada" (from another folder) shown as "ada (2)", so that every
    student has a row and a key of their own."""
    seen: Counter = Counter()
    out = []
    for name in names:
        seen[name] += 1
        out.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    return out


def _natural(name: str):
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", name)]


def _group(gid: str, ids: list[str], by_id: dict, rows: list[dict]) -> GroupStats:
    points = sum(by_id[i].points for i in ids)
    totals = [round(sum(row[i].score for i in ids if i in row), 2) for row in rows]
    return GroupStats(gid, float(points), totals, _mean(totals), statistics.median(totals) if totals else 0.0,
                      sum(t >= points for t in totals), ids)


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


def _exercise(ex: Exercise, answers: list[ExerciseReport | None], totals: list[float], reports, sections) -> ExerciseStats:
    present = [(a, t, r) for a, t, r in zip(answers, totals, reports) if a is not None]
    scores = [a.score for a, _, _ in present]
    status = {s: sum(a.status == s for a, _, _ in present) for s in STATUSES}
    graded = [(a, r) for a, _, r in present if a.status == "graded"]
    wrong = [(a, r) for a, r in graded if a.score < a.max_score]
    forbidden_calls = sum(any(not c.passed and c.message.startswith(FORBIDDEN_CALL) for c in a.checks) for a, _ in graded)

    made: Counter = Counter()
    diagnosed: Counter = Counter()
    unexplained = []
    for a, r in wrong:
        names = {c.mistake for c in a.checks if not c.passed and c.mistake}
        hints = {hint_of(c.message) for c in a.checks if not c.passed and c.explained}
        made.update(names)
        diagnosed.update(hints)
        if not names and not hints:
            unexplained.append((a, r))
    listed = {ex.mistake_name(k): (k, m) for k, m in enumerate(ex.mistakes)}
    mistakes = []
    for name, n in sorted(made.items(), key=lambda item: (-item[1], listed.get(item[0], (1 << 30,))[0])):
        k, m = listed.get(name, (None, None))
        section = (m.section or sections.get((ex.id, k), "")) if m is not None else ""
        mistakes.append(MistakeCount(name, m.hint if m is not None else "", section, n))

    ran = [a.seconds for a, _, _ in present if a.seconds is not None]
    discrimination = correlation(scores, [t - s for s, (_, t, _) in zip(scores, present)])
    out = ExerciseStats(
        ex.id, ex.title, ex.lesson, float(ex.points), len(present), scores,
        sum(a.score >= a.max_score for a, _, _ in present), _mean(scores), discrimination, status,
        len(graded), len(wrong), forbidden_calls, mistakes, sorted(diagnosed.items(), key=lambda kv: -kv[1]),
        len(unexplained), _examples(ex, unexplained),
        statistics.median(ran) if ran else None, max(ran) if ran else None,
        max((len(a.checks) for a, _ in graded), default=0))
    if out.students and out.full >= EASY_SHARE * out.students:
        out.flags.append("nearly everyone gets it")
    if out.students >= 3 and (discrimination is None or discrimination < DISCRIMINATION_MIN):
        out.flags.append("does not discriminate")
    return out


def hint_of(message: str) -> str:
    """The hint a check's message ends with (see ``_core._with_hint``)."""
    return message.split(". Hint: ", 1)[1] if ". Hint: " in message else message


def _examples(ex: Exercise, unexplained: list) -> list[Example]:
    """The commonest ways of failing among ``unexplained`` answers (by the failed checks and
    their messages), with one answer's code each: no student is named."""
    notes = {}
    try:
        notes = {f"public check {k + 1}": c.note for k, c in enumerate(ex.public_cases()) if c.note}
    except Exception:  # an exercise whose cases cannot be made here: no notes
        pass
    kinds: dict[tuple, list] = {}
    for a, r in unexplained:
        by_message: dict[str, list[str]] = {}
        for c in a.checks:
            if not c.passed:
                by_message.setdefault(c.message, []).append(c.name + (f" ({notes[c.name]})" if c.name in notes else ""))
        failed = tuple(f"{_names(names)}: {message}" for message, names in by_message.items())
        kinds.setdefault(failed, []).append(r)
    ranked = sorted(kinds.items(), key=lambda kv: -len(kv[1]))[:EXAMPLES]
    return [Example(list(failed), len(subs), _code(subs[0].path, ex)) for failed, subs in ranked]


def _names(names: list[str]) -> str:
    """"public check 1", "public check 2", "hidden check 1" -> "public checks 1, 2; hidden check 1"."""
    groups: dict[str, list[str]] = {}
    for n in names:
        kind, _, rest = n.partition(" check ")
        groups.setdefault(kind, []).append(rest)
    return "; ".join(f"{kind} check{'s' if len(rest) > 1 else ''} {', '.join(rest)}" for kind, rest in groups.items())


def _code(path: str, ex: Exercise) -> str:
    """The function ``ex`` asks for, and the helpers it uses, as the grader ran them, from
    the submission at ``path``: unparsed, so comments (where names hide) are gone."""
    try:
        sub = extract.read_submission(path)
        stmts, _ = extract.parse_cells(sub.cells)
        info = extract.find_function(stmts, ex.function, ex.params)
        body = [s for s in info.statements if not isinstance(s, (ast.Import, ast.ImportFrom))]
        lines = ast.unparse(ast.Module(body=body, type_ignores=[])).splitlines()
    except Exception:  # the file has changed or gone since it was graded: no example code
        return ""
    if len(lines) > MAX_EXAMPLE_LINES:
        lines = lines[:MAX_EXAMPLE_LINES] + [f"# ... {len(lines) - MAX_EXAMPLE_LINES} more lines"]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the numbers, keyed

def numbers(report: ClassReport) -> list[tuple[str, str, str, object, str]]:
    """Every number the page shows, as (scope, id, measure, value, text): the CSV's rows, and
    the ``data-key`` ("scope|id|measure") of each number on the page."""
    rows: list[tuple[str, str, str, object, str]] = [
        ("class", "", "submissions", report.submissions, ""),
        ("class", "", "wrong", sum(e.wrong for e in report.exercises), ""),
        ("class", "", "unexplained", sum(e.unexplained for e in report.exercises), "")]
    for g in [report.whole] + report.lessons:
        scope = "class" if g is report.whole else "lesson"
        gid = "" if g is report.whole else g.id
        rows += [(scope, gid, "points", _num(g.points), ""), (scope, gid, "mean total", _num(g.mean), ""),
                 (scope, gid, "median total", _num(g.median), ""), (scope, gid, "full marks", g.full, "")]
    for e in report.exercises:
        rows += [("exercise", e.id, "points", _num(e.points), e.title),
                 ("exercise", e.id, "students", e.students, ""),
                 ("exercise", e.id, "full marks", e.full, ""),
                 ("exercise", e.id, "mean score", _num(e.mean), ""),
                 ("exercise", e.id, "difficulty %", _pct(e.difficulty), ""),
                 ("exercise", e.id, "discrimination %", "" if e.discrimination is None else _pct(e.discrimination), ""),
                 ("exercise", e.id, "flags", "; ".join(e.flags), ""),
                 ("exercise", e.id, "graded", e.graded, ""),
                 ("exercise", e.id, "wrong", e.wrong, ""),
                 ("exercise", e.id, "unexplained", e.unexplained, "")]
        rows += [("exercise", e.id, s, e.status[s], "") for s in STATUSES]
        rows += [("exercise", e.id, "forbidden calls", e.forbidden_calls, ""),
                 ("exercise", e.id, "median seconds", "" if e.seconds_median is None else _num(e.seconds_median, 3), ""),
                 ("exercise", e.id, "max seconds", "" if e.seconds_max is None else _num(e.seconds_max, 3), "")]
        rows += [("mistake", e.id, m.name, m.students, m.hint) for m in e.mistakes]
        rows += [("diagnosis", e.id, str(k + 1), n, hint) for k, (hint, n) in enumerate(e.diagnosed)]
        rows += [("unexplained example", e.id, str(k + 1), x.answers, " | ".join(x.failed))
                 for k, x in enumerate(e.examples)]
    for name, total, per_lesson, problems in report.students:
        rows.append(("student", name, "total", _num(total), "; ".join(problems)))
        rows += [("student", name, lesson, _num(v), "") for lesson, v in per_lesson.items()]
    return rows


def _num(x: float, digits: int = 2):
    x = round(float(x), digits)
    return int(x) if x == int(x) else x


def _pct(x: float) -> int:
    return round(100 * x)


def write(report: ClassReport, directory) -> tuple[Path, Path]:
    """Write the page and the CSV into ``directory``; return their paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    page, table = directory / HTML_NAME, directory / CSV_NAME
    with open(table, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["scope", "id", "measure", "value", "text"])
        w.writerows(numbers(report))
    page.write_text(render(report), encoding="utf-8")
    return page, table


# ----------------------------------------------------------------------------- figures

BAR, INK, GRID, FLAG = "#1f5f99", "#1b1b1b", "#c8c8c8", "#a8321d"


def histogram(values: list[float], top: float, *, label: str, bins: int = 10,
              divisions: int | None = None) -> tuple[str, str]:
    """(SVG, alt text) of a bar chart of ``values`` in [0, top]: one bar per possible score
    when every value is a multiple of top / ``divisions`` (an exercise's points split over its
    checks; by default the fewest divisions up to 12 that fit the values), else bins of a
    round width. The alt text gives every bar's count."""
    fits = lambda n: all(abs(v * n / top - round(v * n / top)) < 1e-6 for v in values)  # noqa: E731
    steps = ([divisions] if divisions and fits(divisions) else [n for n in range(1, 13) if fits(n)]) if top else []
    if steps:  # one bar per multiple of top / n, empty ones included
        edges = [(top * k / steps[0], top * k / steps[0]) for k in range(steps[0] + 1)]
        names = [_fmt(lo) for lo, _ in edges]
    else:  # bins of a round width, at most ``bins`` + 2 of them
        width = next(w * 10 ** e for e in range(-1, 8) for w in (1, 2, 2.5, 5) if math.ceil(top / (w * 10 ** e)) <= bins + 2)
        edges = [(k * width, min(top, (k + 1) * width)) for k in range(math.ceil(top / width))]
        names = [f"{_fmt(lo)}-{_fmt(hi)}" for lo, hi in edges]
    counts = []
    for k, (lo, hi) in enumerate(edges):
        if lo == hi:
            counts.append(sum(abs(v - lo) < 1e-9 for v in values))
        else:
            last = k == len(edges) - 1
            counts.append(sum(lo - 1e-9 <= v < hi - 1e-9 or (last and abs(v - hi) < 1e-9) for v in values))
    alt = (f"Bar chart of {label}, {len(values)} students: "
           + "; ".join(f"{name} points: {c}" for name, c in zip(names, counts)) + ".")
    w, h, left, bottom, top_pad = 360, 150, 34, 30, 10
    peak = max(counts) if counts and max(counts) else 1
    slot = (w - left - 8) / max(1, len(counts))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
             f'font-family="sans-serif" font-size="11">',
             f'<rect width="{w}" height="{h}" fill="#ffffff"/>']
    plot_h = h - bottom - top_pad
    for tick in sorted({0, peak // 2, peak}):
        y = top_pad + plot_h * (1 - tick / peak)
        parts.append(f'<line x1="{left}" x2="{w - 8}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GRID}"/>')
        parts.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" fill="{INK}">{tick}</text>')
    for k, (name, c) in enumerate(zip(names, counts)):
        bh = plot_h * c / peak
        x = left + k * slot + slot * 0.12
        parts.append(f'<rect x="{x:.1f}" y="{top_pad + plot_h - bh:.1f}" width="{slot * 0.76:.1f}" '
                     f'height="{bh:.1f}" fill="{BAR}"/>')
        if len(names) <= 13 and slot >= 24 or k % 2 == 0:
            parts.append(f'<text x="{x + slot * 0.38:.1f}" y="{h - bottom + 14}" text-anchor="middle" '
                         f'fill="{INK}">{html.escape(name)}</text>')
    parts.append(f'<text x="{w / 2:.0f}" y="{h - 3}" text-anchor="middle" fill="{INK}">points</text>')
    parts.append("</svg>")
    return "".join(parts), alt


def scatter(stats: list[ExerciseStats]) -> tuple[str, str]:
    """Difficulty (mean score, %) against discrimination (%) of every exercise, the 20% line
    drawn; flagged exercises in red. The alt text names the flagged ones."""
    w, h, left, bottom, top_pad, right = 420, 260, 44, 36, 10, 10
    plot_w, plot_h = w - left - right, h - bottom - top_pad
    X = lambda d: left + plot_w * d  # noqa: E731 - difficulty in [0, 1]
    Y = lambda r: top_pad + plot_h * (1 - (r + 1) / 2)  # noqa: E731 - correlation in [-1, 1]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
             f'font-family="sans-serif" font-size="11">', f'<rect width="{w}" height="{h}" fill="#ffffff"/>']
    for r in (-1, -0.5, 0, 0.5, 1):
        parts.append(f'<line x1="{left}" x2="{w - right}" y1="{Y(r):.1f}" y2="{Y(r):.1f}" stroke="{GRID}"/>')
        parts.append(f'<text x="{left - 4}" y="{Y(r) + 4:.1f}" text-anchor="end" fill="{INK}">{r * 100:.0f}%</text>')
    for d in (0, 0.25, 0.5, 0.75, 1):
        parts.append(f'<text x="{X(d):.1f}" y="{h - bottom + 14}" text-anchor="middle" fill="{INK}">{d * 100:.0f}%</text>')
    parts.append(f'<line x1="{left}" x2="{w - right}" y1="{Y(DISCRIMINATION_MIN):.1f}" y2="{Y(DISCRIMINATION_MIN):.1f}" '
                 f'stroke="{FLAG}" stroke-dasharray="4 3"/>')
    shown = []
    for e in stats:
        r = e.discrimination if e.discrimination is not None else 0.0
        colour = FLAG if e.flags else BAR
        shape = (f'<rect x="{X(e.difficulty) - 4:.1f}" y="{Y(r) - 4:.1f}" width="8" height="8" fill="{colour}"/>'
                 if e.flags else f'<circle cx="{X(e.difficulty):.1f}" cy="{Y(r):.1f}" r="4" fill="{colour}"/>')
        parts.append(shape)
        shown.append(e)
    parts.append(f'<text x="{left + plot_w / 2:.0f}" y="{h - 4}" text-anchor="middle" fill="{INK}">'
                 'mean score (difficulty)</text>')
    parts.append(f'<text x="12" y="{top_pad + plot_h / 2:.0f}" text-anchor="middle" fill="{INK}" '
                 f'transform="rotate(-90 12 {top_pad + plot_h / 2:.0f})">discrimination</text>')
    parts.append("</svg>")
    flagged = [e for e in stats if e.flags]
    alt = (f"Scatter plot of the {len(stats)} exercises, mean score (difficulty) across, discrimination up, "
           f"with a dashed line at {DISCRIMINATION_MIN:.0%}. "
           + (("Flagged, as red squares: " + "; ".join(
               f"{e.id} (mean {_pct(e.difficulty)}%, discrimination "
               f"{'undefined' if e.discrimination is None else str(_pct(e.discrimination)) + '%'}: {', '.join(e.flags)})"
               for e in flagged) + ".") if flagged else "No exercise is flagged."))
    return "".join(parts), alt


def _img(svg_alt: tuple[str, str]) -> str:
    svg, alt = svg_alt
    data = base64.b64encode(svg.encode()).decode()
    return f'<img src="data:image/svg+xml;base64,{data}" alt="{html.escape(alt)}">'


def _fmt(x: float) -> str:
    return f"{round(x, 2):g}"


# ----------------------------------------------------------------------------- the page

CSS = """
body { font-family: system-ui, sans-serif; color: #1b1b1b; background: #fff; margin: 0; line-height: 1.45; }
main { max-width: 70rem; margin: 0 auto; padding: 1rem 1.5rem 3rem; }
h1 { margin-bottom: .2rem; } h2 { border-bottom: 2px solid #1f5f99; padding-bottom: .2rem; margin-top: 2.5rem; }
h3 { margin-top: 2rem; } h4 { margin-bottom: .3rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-size: .92rem; }
caption { text-align: left; font-weight: 600; padding: .3rem 0; }
th, td { border: 1px solid #bbb; padding: .25rem .5rem; text-align: left; vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
td.name { white-space: nowrap; }
thead th { background: #e8eef5; }
a { color: #0b4f8a; text-decoration: underline; }
.flag { color: #8a2414; font-weight: 600; }
.note { color: #444; font-size: .92rem; }
.figures { display: flex; flex-wrap: wrap; gap: 1rem; align-items: flex-start; }
figure { margin: 0; } figcaption { font-size: .85rem; color: #444; max-width: 360px; }
pre { background: #f4f4f4; border: 1px solid #ccc; padding: .5rem; overflow-x: auto; font-size: .85rem; }
nav ul { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: .3rem 1.2rem; }
details { margin: .3rem 0; }
"""


def render(report: ClassReport) -> str:
    """The report as one HTML page (inline CSS and images; no script, no external link but
    the lesson sections')."""
    esc = html.escape
    out = ['<!DOCTYPE html>', '<html lang="en">', '<head>', '<meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f'<title>Class report: {report.submissions} submissions</title>', f'<style>{CSS}</style>', '</head>',
           '<body>', '<main>', '<h1>Class report</h1>']

    def num(scope, id_, measure, value, text=None):
        shown = esc(str(value)) if text is None else text
        return f'<span data-key="{esc(scope)}|{esc(id_)}|{esc(measure)}">{shown}</span>'

    w = report.whole
    out.append(f'<p>{num("class", "", "submissions", report.submissions)} submissions graded on '
               f'{len(report.exercises)} exercises ({_fmt(w.points)} points), made {esc(report.created)}. '
               + ('Students are shown under pseudonyms. ' if report.pseudonymised else '')
               + 'The numbers on this page are in <code>class-report.csv</code> beside it, under the same keys.</p>')
    out.append('<nav aria-label="Contents"><ul>'
               '<li><a href="#monday">What to teach again</a></li><li><a href="#class">The class</a></li>'
               '<li><a href="#items">Item statistics</a></li>'
               + "".join(f'<li><a href="#lesson-{_anchor(g.id)}">Lesson {esc(g.id)}</a></li>' for g in report.lessons)
               + '<li><a href="#students">Students</a></li><li><a href="#definitions">How the numbers are made</a></li>'
               '</ul></nav>')

    # What to teach again: the commonest named mistakes of the class.
    out.append('<h2 id="monday">What to teach again</h2>')
    top = sorted(((m.students, e, m) for e in report.exercises for m in e.mistakes), key=lambda t: -t[0])[:10]
    if top:
        out.append('<table><caption>The ten commonest named mistakes of the class</caption><thead><tr>'
                   '<th scope="col" class="n">Students</th><th scope="col">Exercise</th><th scope="col">Mistake</th>'
                   '<th scope="col">Taught in</th></tr></thead><tbody>')
        for n, e, m in top:
            out.append(f'<tr><td class="n">{num("mistake", e.id, m.name, n)}</td>'
                       f'<td><a href="#ex-{_anchor(e.id)}">{esc(e.id)}</a></td>'
                       f'<td>{esc(m.hint)}</td><td>{_section_link(m.section, report.site_url)}</td></tr>')
        out.append('</tbody></table>')
    else:
        out.append('<p>No answer made a named mistake.</p>')
    unexplained = sum(e.unexplained for e in report.exercises)
    wrong = sum(e.wrong for e in report.exercises)
    out.append(f'<p>{num("class", "", "unexplained", unexplained)} of the {num("class", "", "wrong", wrong)} wrong '
               'answers got no hint (no named mistake, no diagnosis); each exercise below shows the commonest of '
               'them.</p>')

    # The class as a whole.
    out.append('<h2 id="class">The class</h2>')
    out.append(_group_html(w, report, "class", "", "totals of the class"))
    out.append(_ranked_tables(report.exercises, "the class"))

    # Item statistics.
    out.append('<h2 id="items">Item statistics</h2>')
    out.append(f'<p>Difficulty is the mean score as a share of the points; discrimination is the correlation '
               f'between the score on the exercise and the rest of the total. Flagged: exercises that '
               f'{EASY_SHARE:.0%} or more of the class gets right, and those whose discrimination is below '
               f'{DISCRIMINATION_MIN:.0%} (or undefined, when the scores do not vary).</p>')
    out.append(f'<figure>{_img(scatter(report.exercises))}<figcaption>Difficulty against discrimination, one '
               'mark per exercise; red squares are flagged.</figcaption></figure>')
    out.append('<table><caption>Every exercise</caption><thead><tr><th scope="col">Exercise</th>'
               '<th scope="col" class="n">Points</th><th scope="col" class="n">Students</th>'
               '<th scope="col" class="n">Full marks</th><th scope="col" class="n">Difficulty</th>'
               '<th scope="col" class="n">Discrimination</th><th scope="col">Flags</th></tr></thead><tbody>')
    for e in report.exercises:
        disc = "undefined" if e.discrimination is None else f"{_pct(e.discrimination)}%"
        out.append(f'<tr><th scope="row"><a href="#ex-{_anchor(e.id)}">{esc(e.id)}</a></th>'
                   f'<td class="n">{num("exercise", e.id, "points", _num(e.points))}</td>'
                   f'<td class="n">{num("exercise", e.id, "students", e.students)}</td>'
                   f'<td class="n">{num("exercise", e.id, "full marks", e.full)}</td>'
                   f'<td class="n">{num("exercise", e.id, "difficulty %", _pct(e.difficulty), f"{_pct(e.difficulty)}%")}</td>'
                   f'<td class="n">{num("exercise", e.id, "discrimination %", "" if e.discrimination is None else _pct(e.discrimination), disc)}</td>'
                   f'<td class="flag">{num("exercise", e.id, "flags", "; ".join(e.flags))}</td></tr>')
    out.append('</tbody></table>')

    # Lessons and their exercises.
    for g in report.lessons:
        out.append(f'<h2 id="lesson-{_anchor(g.id)}">Lesson {esc(g.id)}</h2>')
        out.append(_group_html(g, report, "lesson", g.id, f"totals of lesson {g.id}"))
        mine = [e for e in report.exercises if e.lesson == g.id]
        out.append(_ranked_tables(mine, f"lesson {g.id}"))
        for e in mine:
            out.append(_exercise_html(e, report, num))

    # Students.
    out.append('<h2 id="students">Students</h2>')
    if report.pseudonymised:
        out.append('<p>Pseudonyms, given in a random order for this report only: the grader\'s own reports '
                   '(<code>--csv</code>, <code>--json</code>) keep the names.</p>')
    out.append('<table><caption>Totals per student and lesson</caption><thead><tr><th scope="col">Student</th>'
               f'<th scope="col" class="n">Total (of {_fmt(w.points)})</th>'
               + "".join(f'<th scope="col" class="n">{esc(g.id)}</th>' for g in report.lessons)
               + '<th scope="col">Crashes and time-outs</th></tr></thead><tbody>')
    for name, total, per_lesson, problems in report.students:
        out.append(f'<tr><th scope="row">{esc(name)}</th><td class="n">{num("student", name, "total", _num(total))}</td>'
                   + "".join(f'<td class="n">{num("student", name, lid, _num(v))}</td>' for lid, v in per_lesson.items())
                   + f'<td>{esc("; ".join(problems))}</td></tr>')
    out.append('</tbody></table>')

    out.append('<h2 id="definitions">How the numbers are made</h2><ul>'
               '<li><strong>Full marks</strong>: every check of the exercise passes.</li>'
               '<li><strong>Wrong answers</strong>: answers that ran and lost points. An answer <strong>makes a '
               'named mistake</strong> when, on at least one check it fails, it gives exactly the answer of one of '
               'the exercise\'s listed mistakes (and of no other with a different hint): the grader then shows that '
               'mistake\'s hint. An answer may make several. Some exercises also <strong>diagnose</strong> answers '
               'no listed mistake gives (an error raised, a NaN), with a hint of their own. A wrong answer with '
               'neither is <strong>unexplained</strong>; the examples group them by the checks they fail, with one '
               'answer\'s code (comments dropped, no name).</li>'
               '<li><strong>Forbidden</strong>: refused before running for naming a forbidden function, or '
               'reaching one while running. <strong>Crashed</strong>: the worker died while the exercise ran. '
               '<strong>Timed out</strong>: it ran past the time limit.</li>'
               '<li><strong>Seconds</strong>: the wall-clock time the submission\'s function ran on all the '
               'exercise\'s checks, public and hidden, in the sandboxed worker.</li>'
               '<li><strong>Discrimination</strong>: Pearson\'s correlation between the exercise\'s score and the '
               'total of the other exercises graded, over the students.</li></ul>')
    out += ['</main>', '</body>', '</html>']
    return "\n".join(out)


def _anchor(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _section_link(section: str, site_url: str | None) -> str:
    """A link to where a point is taught: a URL as it is; ``<lesson>#<anchor>`` under the
    course site's address (``--site-url``), or as text when there is none."""
    esc = html.escape
    if not section:
        return ""
    if re.match(r"https?://|file:", section):
        return f'<a href="{esc(section)}">{esc(section)}</a>'
    lesson, _, anchor = section.partition("#")
    from mha.exercises._sections import TITLES

    title = TITLES.get(section) or anchor.replace("-", " ")
    text = f"lesson {lesson[:2]}: {title}" if lesson[:2].isdigit() else f"{lesson}: {title}"
    if not site_url:
        return esc(text)
    href = f"{site_url.rstrip('/')}/lessons/{lesson}.html" + (f"#{anchor}" if anchor else "")
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def _group_html(g: GroupStats, report: ClassReport, scope: str, gid: str, label: str) -> str:
    esc = html.escape
    key = lambda m: f'data-key="{esc(scope)}|{esc(gid)}|{esc(m)}"'  # noqa: E731
    return (f'<div class="figures"><figure>{_img(histogram(g.totals, g.points, label=label))}'
            f'<figcaption>Distribution of the {esc(label)}.</figcaption></figure>'
            f'<table><caption>Totals ({esc(scope if scope == "class" else "lesson " + gid)})</caption><tbody>'
            f'<tr><th scope="row">Points</th><td class="n"><span {key("points")}>{_num(g.points)}</span></td></tr>'
            f'<tr><th scope="row">Mean total</th><td class="n"><span {key("mean total")}>{_num(g.mean)}</span></td></tr>'
            f'<tr><th scope="row">Median total</th><td class="n"><span {key("median total")}>{_num(g.median)}</span></td></tr>'
            f'<tr><th scope="row">Students with full marks</th><td class="n"><span {key("full marks")}>{g.full}</span></td></tr>'
            '</tbody></table></div>')


def _ranked_tables(stats: list[ExerciseStats], where: str) -> str:
    """The hardest exercises (lowest mean score) and the slowest (longest median run)."""
    esc = html.escape
    hardest = sorted(stats, key=lambda e: e.difficulty)[:SLOWEST]
    timed = [e for e in stats if e.seconds_median is not None]
    slowest = sorted(timed, key=lambda e: -e.seconds_median)[:SLOWEST]
    parts = ['<div class="figures">', f'<table><caption>Hardest exercises of {esc(where)}</caption><thead><tr>'
             '<th scope="col">Exercise</th><th scope="col" class="n">Mean score</th></tr></thead><tbody>']
    parts += [f'<tr><td><a href="#ex-{_anchor(e.id)}">{esc(e.id)}</a></td><td class="n">{_pct(e.difficulty)}%</td></tr>'
              for e in hardest]
    parts.append('</tbody></table>')
    parts.append(f'<table><caption>Slowest exercises of {esc(where)}</caption><thead><tr><th scope="col">Exercise</th>'
                 '<th scope="col" class="n">Median seconds</th><th scope="col" class="n">Longest</th>'
                 '<th scope="col" class="n">Timed out</th></tr></thead><tbody>')
    parts += [f'<tr><td><a href="#ex-{_anchor(e.id)}">{esc(e.id)}</a></td><td class="n">{e.seconds_median:.3f}</td>'
              f'<td class="n">{e.seconds_max:.3f}</td><td class="n">{e.status["timeout"]}</td></tr>' for e in slowest]
    parts.append('</tbody></table></div>')
    return "".join(parts)


def _exercise_html(e: ExerciseStats, report: ClassReport, num) -> str:
    esc = html.escape
    parts = [f'<h3 id="ex-{_anchor(e.id)}">{esc(e.id)}: {esc(e.title)}</h3>']
    if e.flags:
        parts.append(f'<p class="flag">Flagged: {esc(", ".join(e.flags))}.</p>')
    share = f"{_pct(e.full / e.students)}%" if e.students else "no"
    parts.append(f'<div class="figures"><figure>{_img(histogram(e.scores, e.points, label=f"scores on {e.id}", divisions=e.checks if e.checks <= 12 else None))}'
                 f'<figcaption>Scores on {esc(e.id)} ({_fmt(e.points)} points).</figcaption></figure>')
    rows = [("Students", "students", e.students), ("Full marks", "full marks", e.full),
            ("Mean score", "mean score", _num(e.mean)), ("Answers that ran", "graded", e.graded),
            ("Wrong answers", "wrong", e.wrong), ("Wrong answers with no hint", "unexplained", e.unexplained),
            ("Not attempted", "not attempted", e.status["not attempted"]),
            ("Missing", "missing", e.status["missing"]), ("Wrong signature", "wrong signature", e.status["wrong signature"]),
            ("Refused: forbidden name", "forbidden", e.status["forbidden"]),
            ("Forbidden call while running", "forbidden calls", e.forbidden_calls),
            ("Crashed", "crashed", e.status["crashed"]), ("Timed out", "timeout", e.status["timeout"]),
            ("Unreadable", "unreadable", e.status["unreadable"])]
    parts.append(f'<table><caption>What the class did ({share} with full marks)</caption><tbody>')
    parts += [f'<tr><th scope="row">{label}</th><td class="n">{num("exercise", e.id, key, value)}</td></tr>'
              for label, key, value in rows]
    if e.seconds_median is not None:
        parts.append(f'<tr><th scope="row">Seconds (median, longest)</th><td class="n">'
                     f'{num("exercise", e.id, "median seconds", _num(e.seconds_median, 3))}, '
                     f'{num("exercise", e.id, "max seconds", _num(e.seconds_max, 3))}</td></tr>')
    parts.append('</tbody></table></div>')

    if e.mistakes:
        parts.append(f'<table><caption>Named mistakes in the {e.wrong} wrong answers to {esc(e.id)}</caption><thead><tr>'
                     '<th scope="col" class="n">Students</th><th scope="col" class="n">Share of wrong answers</th>'
                     '<th scope="col">Mistake</th><th scope="col">Hint the students got</th>'
                     '<th scope="col">Taught in</th></tr></thead><tbody>')
        for m in e.mistakes:
            parts.append(f'<tr><td class="n">{num("mistake", e.id, m.name, m.students)}</td>'
                         f'<td class="n">{_pct(m.students / e.wrong) if e.wrong else 0}%</td><td class="name">{esc(m.name)}</td>'
                         f'<td>{esc(m.hint)}</td><td>{_section_link(m.section, report.site_url)}</td></tr>')
        parts.append('</tbody></table>')
    elif e.wrong:
        parts.append('<p>No wrong answer makes a named mistake.</p>')
    if e.diagnosed:
        parts.append(f'<table><caption>Other hints the students got ({esc(e.id)}\'s own diagnosis of an answer, '
                     'not a listed mistake)</caption><thead><tr><th scope="col" class="n">Students</th>'
                     '<th scope="col">Hint</th></tr></thead><tbody>')
        parts += [f'<tr><td class="n">{num("diagnosis", e.id, str(k + 1), n)}</td><td>{esc(hint)}</td></tr>'
                  for k, (hint, n) in enumerate(e.diagnosed)]
        parts.append('</tbody></table>')
    if e.unexplained:
        parts.append(f'<p>{e.unexplained} of the {e.wrong} wrong answers '
                     f'({_pct(e.unexplained / e.wrong)}%) got no hint: no named mistake, no diagnosis. '
                     'The commonest, to write hints for:</p>')
        for k, x in enumerate(e.examples):
            parts.append(f'<details><summary>Example {k + 1}: '
                         f'{num("unexplained example", e.id, str(k + 1), x.answers)} '
                         f'{"answer fails" if x.answers == 1 else "answers fail"} these checks</summary><ul>'
                         + "".join(f"<li>{esc(f)}</li>" for f in x.failed) + '</ul>'
                         + (f'<pre tabindex="0"><code>{esc(x.code)}</code></pre>' if x.code else '') + '</details>')
    return "".join(parts)
