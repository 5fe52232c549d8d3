"""The class report (``mha grade ... --report DIR``) on a synthetic class (tests/synthetic_class.py):
the page and its CSV show the counts of the grader's JSON report, a planted mistake comes out
on top, crashes, time-outs and forbidden calls are counted, and the page passes the browser
and accessibility checks. One grading run (the command line, as an instructor runs it)
serves every test here.

The screenshot of the page shown on the instructors' page (book/images/class-report.png)
is the one this file's browser test takes: MHA_UPDATE_FIGURES=1 writes it there, otherwise
it goes to _build/artifacts.
"""

from __future__ import annotations

import csv
import html.parser
import json
import os
import random
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from mha.exercises import get
from mha.exercises._core import FORBIDDEN_CALL
from mha.exercises.feedback import call_outcome, traps_of
from mha.grading import classreport
from mha.grading.grader import CheckReport, ExerciseReport, SubmissionReport
from synthetic_class import EXERCISE_IDS, PLANTED, answer_pool, make_class

ROOT = Path(__file__).resolve().parents[1]
STUDENTS = 40
SEED = 5


@dataclass
class Graded:
    students: list
    data: dict          # the grader's JSON report
    page: str           # the report's HTML
    keyed: dict         # data-key -> text, from the page
    rows: list[dict]    # the CSV
    folder: Path


class Keys(html.parser.HTMLParser):
    """Every element with a data-key: key -> its text (the same wherever the key is shown)."""

    def __init__(self):
        super().__init__()
        self.found: dict[str, str] = {}
        self.open: list[list] = []

    def handle_starttag(self, tag, attrs):
        key = dict(attrs).get("data-key")
        if key is not None:
            self.open.append([key, ""])

    def handle_endtag(self, tag):
        if tag == "span" and self.open:
            key, text = self.open.pop()
            assert self.found.setdefault(key, text) == text, f"{key} shows {self.found[key]} and {text}"

    def handle_data(self, data):
        if self.open:
            self.open[-1][1] += data


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Graded:
    folder = tmp_path_factory.mktemp("class-report")
    students = make_class(folder / "submissions", STUDENTS, SEED)
    only = [a for i in EXERCISE_IDS for a in ("--only", i)]
    cmd = [sys.executable, "-m", "mha.cli", "grade", str(folder / "submissions"), *only, "--jobs", "2",
           "--exercise-timeout", "3", "--json", str(folder / "grades.json"), "--report", str(folder / "report"),
           "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    page = (folder / "report" / classreport.HTML_NAME).read_text()
    parser = Keys()
    parser.feed(page)
    with open(folder / "report" / classreport.CSV_NAME, newline="") as f:
        rows = list(csv.DictReader(f))
    return Graded(students, json.loads((folder / "grades.json").read_text()), page, parser.found, rows, folder)


def by_exercise(data: dict) -> dict[str, list[dict]]:
    """exercise id -> every submission's report of it, from the JSON."""
    out: dict[str, list[dict]] = {}
    for sub in data["submissions"]:
        for e in sub["exercises"]:
            out.setdefault(e["id"], []).append(e)
    return out


def fmt(x) -> str:
    x = round(float(x), 2)
    return str(int(x)) if x == int(x) else str(x)


# ----------------------------------------------------------------------------- the page and the CSV

def test_the_page_is_one_offline_file_with_every_figure_inline(graded):
    page = graded.page
    assert "<script" not in page and "<link" not in page and "@import" not in page
    sources = re.findall(r'\bsrc="([^"]*)"', page)
    assert sources and all(s.startswith("data:image/svg+xml;base64,") for s in sources)
    alts = re.findall(r'<img [^>]*alt="([^"]*)"', page)
    assert len(alts) == len(sources) and all(len(a) > 40 for a in alts)
    assert not re.search(r'(src|href)="https?://', page), "the page fetches nothing"


def test_the_csv_holds_every_number_of_the_page_under_the_same_key(graded):
    csv_keyed = {f"{r['scope']}|{r['id']}|{r['measure']}": r["value"] for r in graded.rows}
    page = {k: v.rstrip("%") for k, v in graded.keyed.items()}
    assert page.keys() == csv_keyed.keys()
    different = {k: (page[k], csv_keyed[k]) for k in page if page[k] != csv_keyed[k] and not
                 (k.endswith("|discrimination %") and csv_keyed[k] == "" and page[k] == "undefined")}
    assert not different, different


def test_the_counts_on_the_page_equal_the_counts_in_the_json_report(graded):
    """Worked out here from the JSON report alone, independently of mha.grading.classreport."""
    page = graded.keyed
    data = graded.data
    assert page["class||submissions"] == str(len(data["submissions"])) == str(STUDENTS)
    points = {e["id"]: e["points"] for e in data["exercises"]}
    wrong_in_all = unexplained_in_all = 0
    for exercise_id, answers in by_exercise(data).items():
        key = f"exercise|{exercise_id}|"
        statuses = Counter(a["status"] for a in answers)
        wrong = [a for a in answers if a["status"] == "graded" and a["score"] < a["max_score"]]
        made = Counter(m for a in wrong for m in {c["mistake"] for c in a["checks"] if not c["passed"] and c["mistake"]})
        unexplained = [a for a in wrong if not any(not c["passed"] and (c["mistake"] or c["explained"])
                                                   for c in a["checks"])]
        calls = sum(any(c["message"].startswith(FORBIDDEN_CALL) for c in a["checks"]) for a in answers)
        expected = {"students": len(answers), "full marks": sum(a["score"] == points[exercise_id] for a in answers),
                    "graded": statuses["graded"], "wrong": len(wrong), "unexplained": len(unexplained),
                    "forbidden calls": calls, **{s: statuses[s] for s in classreport.STATUSES},
                    "mean score": fmt(sum(a["score"] for a in answers) / len(answers))}
        for measure, value in expected.items():
            assert page[key + measure] == str(value), (exercise_id, measure, page[key + measure], value)
        wrong_in_all += len(wrong)
        unexplained_in_all += len(unexplained)
        assert {m: int(page[f"mistake|{exercise_id}|{m}"]) for m in made} == dict(made)
        shown = {k.split("|", 2)[2] for k in page if k.startswith(f"mistake|{exercise_id}|")}
        assert shown == set(made), "the page lists exactly the mistakes made"
        examples = [int(v) for k, v in page.items() if k.startswith(f"unexplained example|{exercise_id}|")]
        assert sum(examples) <= len(unexplained) and (examples or not unexplained)
    assert (page["class||wrong"], page["class||unexplained"]) == (str(wrong_in_all), str(unexplained_in_all))
    for sub in data["submissions"]:
        assert page[f"student|{sub['student']}|total"] == fmt(sub["score"])
    totals = [s["score"] for s in data["submissions"]]
    assert page["class||full marks"] == str(sum(t == sum(points.values()) for t in totals))
    assert page["class||mean total"] == fmt(sum(totals) / len(totals))


# ----------------------------------------------------------------------------- what the class did

def mistake_made_by(exercise_id: str, fn) -> str:
    """The name of the listed mistake ``fn`` makes on the public checks, found in this process."""
    ex = get(exercise_id)
    names = {ex.mistake_name(v.mistake) for c in ex.public_cases()
             for v in [ex.judge(c, call_outcome(fn, c, traps=tuple(traps_of(ex))))] if v.mistake is not None}
    assert len(names) == 1, names
    return names.pop()


def test_the_planted_mistake_comes_out_on_top(graded):
    exercise_id, name = PLANTED
    fn = next(f for _, f in answer_pool(exercise_id) if f.__name__ == name)
    mistake = mistake_made_by(exercise_id, fn)
    planted = sum(s.answers[exercise_id] == "planted" for s in graded.students)
    counts = {k.split("|", 2)[2]: int(v) for k, v in graded.keyed.items() if k.startswith(f"mistake|{exercise_id}|")}
    assert counts[mistake] >= planted >= 0.3 * STUDENTS
    assert max(counts, key=counts.get) == mistake
    # first in the exercise's table, and first in the class's "what to teach again"
    section = graded.page.split(f'id="ex-{classreport._anchor(exercise_id)}"', 1)[1]
    table = section.split("<caption>Named mistakes", 1)[1].split("</table>", 1)[0]
    assert f'<td class="name">{mistake}</td>' in table.split("<tbody>", 1)[1].split("</tr>", 1)[0]
    monday = graded.page.split('id="monday"', 1)[1].split("</table>", 1)[0]
    first_row = monday.split("<tbody>", 1)[1].split("</tr>", 1)[0]
    ex = get(exercise_id)
    hint = next(m.hint for k, m in enumerate(ex.mistakes) if ex.mistake_name(k) == mistake)   # named by its name
    assert exercise_id in first_row and hint[:40] in first_row.replace("&#x27;", "'")


def test_crashes_time_outs_forbidden_calls_and_missing_answers_are_counted(graded):
    page = graded.keyed
    for exercise_id in EXERCISE_IDS:
        kinds = Counter(s.answers[exercise_id] for s in graded.students)
        key = f"exercise|{exercise_id}|"
        assert int(page[key + "crashed"]) == kinds["crashes"]
        assert int(page[key + "timeout"]) == kinds["runs for ever"]
        assert int(page[key + "missing"]) == kinds["missing"]
        assert int(page[key + "not attempted"]) == kinds["not attempted"]
        assert int(page[key + "forbidden"]) + int(page[key + "forbidden calls"]) == kinds["forbidden"]
    assert sum(int(page[f"exercise|{i}|crashed"]) for i in EXERCISE_IDS) == 2
    assert sum(int(page[f"exercise|{i}|timeout"]) for i in EXERCISE_IDS) == 1


def test_every_named_mistake_links_to_where_its_lesson_teaches_it(graded):
    rows = re.findall(r'<tr><td class="n"><span data-key="mistake\|[^"]+">\d+</span></td>.*?</tr>', graded.page)
    assert rows
    for row in rows:
        cell = row.rsplit("<td>", 1)[1]
        assert re.search(r"lesson \d\d: \w", cell), row


def from_json(data: dict) -> list[SubmissionReport]:
    out = []
    for s in data["submissions"]:
        exercises = [ExerciseReport(**{**e, "checks": [CheckReport(**c) for c in e["checks"]]}) for e in s["exercises"]]
        out.append(SubmissionReport(**{**s, "exercises": exercises}))
    return out


def test_pseudonyms_hide_the_names_and_keep_the_numbers(graded):
    reports = from_json(graded.data)
    exercises = [get(i) for i in EXERCISE_IDS]
    report = classreport.build(reports, exercises, pseudonymise=True, rng=random.Random(1))
    page = classreport.render(report)
    for s in graded.students:
        assert s.name not in page
    names = [s[0] for s in report.students]
    assert names == [f"student {k:02d}" for k in range(1, STUDENTS + 1)]
    assert sorted(s[1] for s in report.students) == sorted(r.score for r in reports)
    plain = classreport.build(reports, exercises)
    assert [e.mistakes for e in report.exercises] == [e.mistakes for e in plain.exercises]
    assert plain.students != report.students


# ----------------------------------------------------------------------------- the statistics

def report_of(scores: dict[str, list[float]]) -> classreport.ClassReport:
    """A class report from made-up scores: exercise id -> one score per student (3 points each)."""
    ids = list(scores)
    n = len(scores[ids[0]])
    reports = []
    for k in range(n):
        exercises = [ExerciseReport(i, i, "f", scores[i][k], 3.0, "graded") for i in ids]
        reports.append(SubmissionReport(f"s{k}", "", sum(e.score for e in exercises), 3.0 * len(ids), exercises))
    from mha.exercises import Exercise

    exercises = [Exercise(i, i, "lesson", "f", (), 3, reference=None, public=lambda g: [], hidden=lambda g: [])
                 for i in ids]
    return classreport.build(reports, exercises)


def test_item_statistics_flag_what_everyone_gets_and_what_does_not_discriminate():
    ability = [0, 0, 1, 1, 2, 2, 3, 3, 3, 3]
    follows, also = [min(3, a) for a in ability], [3 * (a >= 2) for a in ability]  # the better students score higher
    stats = {e.id: e for e in report_of({"follows": follows, "also": also, "everyone": [3] * 9 + [0]}).exercises}
    assert stats["follows"].discrimination > 0.6 and stats["follows"].flags == []
    assert stats["everyone"].flags == ["nearly everyone gets it", "does not discriminate"]
    assert stats["everyone"].difficulty == pytest.approx(0.9)
    against = report_of({"follows": follows, "also": also, "against": [3 - a for a in ability]}).exercises[2]
    assert against.discrimination < -0.8 and against.flags == ["does not discriminate"]


def test_correlation():
    assert classreport.correlation([1, 2, 3], [2, 4, 7]) == pytest.approx(0.9933, abs=1e-4)
    assert classreport.correlation([1, 2, 3], [3, 2, 1]) == pytest.approx(-1)
    assert classreport.correlation([1, 1, 1], [1, 2, 3]) is None
    assert classreport.correlation([1, 2], [1, 2]) is None


def test_histograms_count_every_value_and_say_so_in_their_alt_text():
    svg, alt = classreport.histogram([0, 0, 1.5, 3, 3, 3], 3, label="scores", divisions=6)
    assert "0 points: 2; 0.5 points: 0; 1 points: 0; 1.5 points: 1; 2 points: 0; 2.5 points: 0; 3 points: 3" in alt
    assert svg.count('fill="#1f5f99"') == 7
    assert "0 points: 2; 1.5 points: 1; 3 points: 3." in classreport.histogram([0, 0, 1.5, 3, 3, 3], 3, label="s")[1]
    _, alt = classreport.histogram([0.5, 7.25, 11.5, 12], 12, label="totals")
    assert "0-1 points: 1" in alt and "11-12 points: 2" in alt


# ----------------------------------------------------------------------------- sections

def test_every_mistake_of_the_course_has_a_section_that_its_lesson_has():
    from mha.exercises import EXERCISES
    from mha.exercises._load import LOADED
    from mha.exercises._sections import SECTIONS, TAUGHT, anchor

    course = {i: e for i, e in EXERCISES.items() if i not in LOADED}
    assert set(TAUGHT) == set(course), "every exercise of the course says where its mistakes are taught"
    for exercise_id, (_, exceptions) in TAUGHT.items():
        assert all(0 <= k < len(course[exercise_id].mistakes) for k in exceptions), exercise_id
    headings: dict[str, set[str]] = {}
    for path in (ROOT / "lessons").glob("*.md"):
        headings[path.stem] = {anchor(m) for m in re.findall(r"^#{2,3} (.+)$", path.read_text(), re.M)}
    for (exercise_id, k), section in SECTIONS.items():
        lesson, _, slug = section.partition("#")
        assert slug in headings[lesson], f"{exercise_id} mistake {k + 1}: lesson {lesson} has no section {slug}"


# ----------------------------------------------------------------------------- in a browser

def test_the_page_passes_the_browser_and_accessibility_checks(graded, browser, axe_source):
    from browsing import Tab, axe_problems
    from conftest import ARTIFACTS

    tab = Tab(browser, "file:///", width=1280)
    try:
        tab.open((graded.folder / "report" / classreport.HTML_NAME).as_uri())
        images = tab.page.locator("img").evaluate_all(
            "imgs => imgs.map(i => [i.complete && i.naturalWidth > 0, i.alt.length])")
        assert images and all(ok and n > 40 for ok, n in images), images
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "class-report.png"  # the planted mistake's exercise, as the instructors' page shows it
        top = tab.page.locator(f"#ex-{classreport._anchor(PLANTED[0])}").evaluate(
            "h => h.getBoundingClientRect().top + window.scrollY")
        tab.page.screenshot(path=str(shot), full_page=True, clip={"x": 60, "y": top - 16, "width": 1160, "height": 860})
        assert shot.stat().st_size > 20_000
        if os.environ.get("MHA_UPDATE_FIGURES"):
            shutil.copyfile(shot, ROOT / "book" / "images" / "class-report.png")
        tab.page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
        assert axe_problems(tab.page, axe_source) == []
        narrow = Tab(browser, "file:///", width=390)
        try:
            narrow.open((graded.folder / "report" / classreport.HTML_NAME).as_uri())
            assert narrow.errors == []
        finally:
            narrow.close()
        assert tab.errors == [] and tab.external == []
    finally:
        tab.close()
