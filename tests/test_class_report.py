"""The class report (``mha grade ... --report DIR``, ``mha report GRADES.json --out DIR``) on a
synthetic class of 36 in two sections with a roster (tests/synthetic_class.py): the page and
its CSV show the counts of the grader's JSON report, for the class and for each section; a
planted mistake comes out on top and its answers form one answer group; crashes, time-outs
and forbidden calls are counted; the roster's absentees are named; ``mha report`` makes the
same report from the JSON alone, merges runs, and pseudonymises with a key; the page passes
the browser and accessibility checks at 1280 and 390 px, light and dark. One grading run (the
command line, as an instructor runs it) serves every test here.

The screenshots of the page shown on the instructors' page (book/images/class-report.png
and class-report-top.png) are the ones this file's browser test takes: MHA_UPDATE_FIGURES=1
writes them there, otherwise they go to _build/artifacts.
"""

from __future__ import annotations

import csv
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from mha.exercises import get
from mha.autograde import FORBIDDEN_CALL, call_outcome, traps_of
from mha.grading import classreport, classstats
from synthetic_class import EXERCISE_IDS, PLANTED, answer_pool, make_class, write_roster

ROOT = Path(__file__).resolve().parents[1]
STUDENTS = 36
SECTIONS = ("section-a", "section-b")
TWINS = 1       # the last student has the name of the first, in the other section
ABSENT = 2      # on the roster, nothing submitted
SEED = 5
SITE = (ROOT / "_build" / "html").as_uri()  # given to every run: by default, links depend on a build being there


@dataclass
class Graded:
    students: list
    absent: list        # roster rows of those who submitted nothing
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


def mha(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mha.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def read_report(folder: Path) -> tuple[str, dict, list[dict]]:
    page = (folder / classreport.HTML_NAME).read_text()
    parser = Keys()
    parser.feed(page)
    with open(folder / classreport.CSV_NAME, newline="") as f:
        rows = list(csv.DictReader(f))
    return page, parser.found, rows


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Graded:
    folder = tmp_path_factory.mktemp("class-report")
    students = make_class(folder / "submissions", STUDENTS, SEED, sections=SECTIONS, twins=TWINS)
    absent = write_roster(folder / "roster.csv", students, ABSENT)
    only = [a for i in EXERCISE_IDS for a in ("--only", i)]
    r = mha("grade", *(folder / "submissions" / s for s in SECTIONS), *only, "--jobs", "2", "--exercise-timeout", "3",
            "--json", folder / "grades.json", "--report", folder / "report", "--roster", folder / "roster.csv",
            "--site-url", SITE, "--quiet")
    assert r.returncode == 0, r.stderr
    page, keyed, rows = read_report(folder / "report")
    return Graded(students, absent, json.loads((folder / "grades.json").read_text()), page, keyed, rows, folder)


def by_exercise(submissions: list[dict]) -> dict[str, list[dict]]:
    """exercise id -> every submission's report of it, from the JSON."""
    out: dict[str, list[dict]] = {}
    for sub in submissions:
        for e in sub["exercises"]:
            out.setdefault(e["id"], []).append(e)
    return out


def fmt(x) -> str:
    x = round(float(x), 2)
    return str(int(x)) if x == int(x) else str(x)


def shown_name(student, students) -> str:
    """The name the page gives a student: the roster's, with the id where two share it."""
    name = student.name.replace("_", " ").title()
    return f"{name} ({student.id})" if sum(s.name == student.name for s in students) > 1 else name


# ----------------------------------------------------------------------------- the page and the CSV

def test_the_page_is_one_offline_file_with_every_figure_inline(graded):
    page = graded.page
    assert "<script" not in page and "<link" not in page and "@import" not in page and "<img" not in page
    figures = re.findall(r'<svg class="figure"[^>]*>', page)
    assert len(figures) == 1 + 1 + 2 + len(EXERCISE_IDS), "the class, the scatter, two lessons, each exercise"
    labels = [re.search(r'aria-label="([^"]*)"', f) for f in figures]
    assert all(' role="img"' in f for f in figures) and all(m and len(m.group(1)) > 40 for m in labels)
    assert not re.search(r'(src|href)="https?://', page), "the page fetches nothing"


def test_the_csv_holds_every_number_of_the_page_under_the_same_key(graded):
    csv_keyed = {f"{r['scope']}|{r['id']}|{r['measure']}": r["value"] for r in graded.rows}
    assert len(csv_keyed) == len(graded.rows), "every key once"
    page = {k: v.rstrip("%") for k, v in graded.keyed.items()}
    assert page.keys() == csv_keyed.keys()
    shown = {"discrimination %": "undefined"}
    different = {k: (page[k], csv_keyed[k]) for k in page if page[k] != csv_keyed[k] and not
                 (csv_keyed[k] == "" and page[k] in (shown.get(k.rsplit("|", 1)[1]), "–"))}
    assert not different, different


def test_the_page_says_with_what_isolation_the_submissions_ran(graded):
    from mha.grading import sandbox

    level = sandbox.probe()
    assert graded.data["sandbox"] == level and graded.keyed["class||isolation"] == level
    assert {s["sandbox"] for s in graded.data["submissions"] if s["sandbox"]} == {level}


def test_a_grades_file_without_the_isolation_says_it_was_not_recorded(graded):
    older = {**graded.data, "submissions": [{k: v for k, v in s.items() if k != "sandbox"}
                                            for s in graded.data["submissions"]]}
    assert classstats.build(older).isolation == "not recorded"


def test_the_counts_on_the_page_equal_the_counts_in_the_json_report(graded):
    """Worked out here from the JSON report and the roster alone, independently of mha.grading."""
    page = graded.keyed
    data = graded.data
    assert page["class||submissions"] == str(len(data["submissions"])) == str(STUDENTS)
    section_of = {str(s.path.resolve()): s.section for s in graded.students}
    points = {e["id"]: e["points"] for e in data["exercises"]}
    wrong_in_all = unexplained_in_all = 0
    for scope, subs in [("exercise", data["submissions"])] + [
            (f"exercise ({sec})", [s for s in data["submissions"] if section_of[s["source"]] == sec])
            for sec in SECTIONS]:
        for exercise_id, answers in by_exercise(subs).items():
            key = f"{scope}|{exercise_id}|"
            statuses = Counter(a["status"] for a in answers)
            wrong = [a for a in answers if a["status"] == "graded" and a["score"] < a["max_score"]]
            unexplained = [a for a in wrong if not any(c["kind"] in ("mistake", "diagnosis") for c in a["checks"])]
            calls = sum(any(c["message"].startswith(FORBIDDEN_CALL) for c in a["checks"]) for a in answers)
            expected = {"students": len(answers), "full marks": sum(a["score"] == points[exercise_id] for a in answers),
                        "graded": statuses["graded"], "wrong": len(wrong), "unexplained": len(unexplained),
                        "forbidden calls": calls, **{s: statuses[s] for s in classstats.STATUSES},
                        "mean score": fmt(sum(a["score"] for a in answers) / len(answers))}
            for measure, value in expected.items():
                assert page[key + measure] == str(value), (scope, exercise_id, measure, page[key + measure], value)
            made = Counter(m for a in wrong for m in {c["mistake"] for c in a["checks"]
                                                      if not c["passed"] and c["mistake"]})
            mistake_scope = scope.replace("exercise", "mistake")
            assert {m: int(page[f"{mistake_scope}|{exercise_id}|{m}"]) for m in made} == dict(made)
            if scope == "exercise":
                wrong_in_all += len(wrong)
                unexplained_in_all += len(unexplained)
                shown = {k.split("|", 2)[2] for k in page if k.startswith(f"mistake|{exercise_id}|")}
                assert shown == set(made), "the page lists exactly the mistakes made"
    assert (page["class||wrong"], page["class||unexplained"]) == (str(wrong_in_all), str(unexplained_in_all))
    score = {s["source"]: s["score"] for s in data["submissions"]}
    for s in graded.students:
        assert page[f"student|{shown_name(s, graded.students)}|total"] == fmt(score[str(s.path.resolve())])
    totals = [s["score"] for s in data["submissions"]]
    assert page["class||full marks"] == str(sum(t == sum(points.values()) for t in totals))
    assert page["class||mean total"] == fmt(sum(totals) / len(totals))
    for sec in SECTIONS:
        mine = [score[str(s.path.resolve())] for s in graded.students if s.section == sec]
        assert page[f"class ({sec})||students"] == str(len(mine))
        assert page[f"class ({sec})||mean total"] == fmt(sum(mine) / len(mine))


def test_two_students_of_one_name_keep_a_row_and_a_grade_each(graded):
    twin, first = graded.students[-1], graded.students[0]
    assert twin.name == first.name and twin.section != first.section
    names = [s["student"] for s in graded.data["submissions"]]
    assert len(set(names)) == STUDENTS
    assert {n for n in names if n.startswith(first.name)} == {f"{first.name} ({first.section})",
                                                              f"{first.name} ({twin.section})"}
    for s in (first, twin):
        assert f"student|{shown_name(s, graded.students)}|total" in graded.keyed


# ----------------------------------------------------------------------------- what the class did

def mistake_made_by(exercise_id: str, fn) -> str:
    """The key of the listed mistake ``fn`` makes on the public checks, found in this process."""
    ex = get(exercise_id)
    names = {ex.mistake_name(v.mistake) for c in ex.public_cases()
             for v in [ex.judge(c, call_outcome(fn, c, traps=tuple(traps_of(ex))))] if v.mistake is not None}
    assert len(names) == 1, names
    return names.pop()


def planted(graded) -> tuple[str, str, int]:
    exercise_id, name = PLANTED
    fn = next(f for _, f in answer_pool(exercise_id) if f.__name__ == name)
    n = sum(s.answers[exercise_id] == "planted" for s in graded.students)
    return exercise_id, mistake_made_by(exercise_id, fn), n


def test_the_planted_mistake_comes_out_on_top(graded):
    exercise_id, mistake, n = planted(graded)
    counts = {k.split("|", 2)[2]: int(v) for k, v in graded.keyed.items() if k.startswith(f"mistake|{exercise_id}|")}
    assert counts[mistake] >= n >= 0.3 * STUDENTS
    assert max(counts, key=counts.get) == mistake
    # first in the exercise's table, and first in the class's "what to teach again"
    section = graded.page.split(f'id="ex-{classreport.anchor(exercise_id)}"', 1)[1]
    table = section.split("<caption>Named mistakes", 1)[1].split("</table>", 1)[0]
    assert f'data-key="mistake|{exercise_id}|{mistake}"' in table.split("<tbody>", 1)[1].split("</tr>", 1)[0]
    monday = graded.page.split('id="monday"', 1)[1].split("</table>", 1)[0]
    first_row = monday.split("<tbody>", 1)[1].split("</tr>", 1)[0]
    assert f'data-key="mistake|{exercise_id}|{mistake}"' in first_row
    hint = next(m["hint"] for e in graded.data["exercises"] if e["id"] == exercise_id
                for m in e["mistakes"] if m["key"] == mistake)
    assert hint[:40] in first_row.replace("&#39;", "'")


def test_the_planted_answers_form_one_answer_group(graded):
    """They are one function, written into each student's file: one group, at least as large as
    the planted share, labelled with the mistake it makes, its code shown without a name."""
    exercise_id, mistake, n = planted(graded)
    groups = {k.rsplit("|", 1)[1]: int(v) for k, v in graded.keyed.items()
              if k.startswith(f"answer group|{exercise_id}|")}
    block = graded.page.split(f'id="group-{classreport.anchor(exercise_id)}-1"', 1)[1].split("</details>", 1)[0]
    first = re.search(rf'data-key="answer group\|{re.escape(exercise_id)}\|(g\w+)"', block).group(1)
    assert groups[first] >= n and groups[first] == max(groups.values())
    label = next(m["name"] or m["key"] for e in graded.data["exercises"] if e["id"] == exercise_id
                 for m in e["mistakes"] if m["key"] == mistake)
    assert f"hint: {label}" in block.split("</summary>", 1)[0]
    assert "stable_softmax" in block.split("<pre", 1)[1] and "torch.exp" in block
    wrong = int(graded.keyed[f"exercise|{exercise_id}|wrong"])
    in_groups = sum(groups.values())
    assert in_groups <= wrong and (in_groups == wrong or "more group" in graded.page.split(
        f'id="ex-{classreport.anchor(exercise_id)}"', 1)[1].split("<h3", 1)[0])


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


def test_the_roster_names_who_submitted_nothing_and_who_used_a_forbidden_function(graded):
    page = graded.keyed
    who = graded.page.split('id="who"', 1)[1].split("<h2", 1)[0]
    assert page["class||submitted nothing"] == str(ABSENT)
    for _, name, section in graded.absent:
        assert f"{name} ({section})" in who
    cheats = [s for s in graded.students if "forbidden" in s.answers.values()]
    assert page["class||used a forbidden function"] == str(len(cheats)) and cheats
    forbidden = who.split("used a forbidden function", 1)[1].split("</p>", 1)[0]
    assert sorted(re.findall(r"[A-Z]\w+ \d\d", forbidden)) == sorted(shown_name(s, graded.students)[:len(s.name)]
                                                                    for s in cheats)
    assert page["class||not on the roster"] == "0"


def test_every_table_of_counts_is_broken_down_by_section_and_the_sections_add_up(graded):
    page = graded.keyed
    for key, value in page.items():
        scope, id_, measure = key.split("|")
        if scope in ("exercise", "mistake", "diagnosis", "answer group") and measure not in (
                "mean score", "difficulty %", "number", "points", "checks", "discrimination %", "flags",
                "median seconds", "max seconds", "answer groups") and not measure.startswith("quintile"):
            parts = [page[f"{scope} ({s})|{id_}|{measure}"] for s in SECTIONS]
            assert sum(map(int, parts)) == int(value), (key, parts)


def test_every_named_mistake_links_to_where_its_lesson_teaches_it(graded):
    rows = re.findall(r'<tr><td class="n"><span data-key="mistake\|[^"]+">\d+</span></td>.*?</tr>', graded.page, re.S)
    assert rows
    for row in rows:
        cell = row.rsplit("<td>", 1)[1]
        assert re.search(r"lesson \d\d: \w", cell), row


def test_item_statistics_number_every_exercise_and_give_its_quintiles(graded):
    page = graded.keyed
    assert [int(page[f"exercise|{i}|number"]) for i in EXERCISE_IDS] == list(range(1, len(EXERCISE_IDS) + 1))
    for i in EXERCISE_IDS:
        quintiles = [page[f"exercise|{i}|quintile {q} %"].rstrip("%") for q in range(1, 6)]
        assert all(q.isdigit() for q in quintiles)
        assert int(quintiles[0]) <= int(quintiles[-1]), "the strongest fifth does at least as well as the weakest"
    scatter = re.search(r'<svg class="figure"[^>]*aria-label="Scatter plot[^"]*"', graded.page).group(0)
    for k, i in enumerate(EXERCISE_IDS, 1):
        assert f"{k} {i}: mean" in scatter


# ----------------------------------------------------------------------------- mha report

def test_the_report_from_the_grades_equals_the_one_made_while_grading(graded):
    out = graded.folder / "again"
    r = mha("report", graded.folder / "grades.json", "--out", out, "--roster", graded.folder / "roster.csv",
            "--site-url", SITE)
    assert r.returncode == 0, r.stderr
    page, keyed, rows = read_report(out)
    assert rows == graded.rows and len(rows) > 400
    assert keyed == graded.keyed
    assert page == graded.page


def test_a_pseudonymised_report_names_no_one_and_its_key_finds_everyone(graded):
    runs = []
    for k in range(2):
        out = graded.folder / f"pseudonymised-{k}"
        r = mha("report", graded.folder / "grades.json", "--out", out, "--roster", graded.folder / "roster.csv",
                "--pseudonymise", "--site-url", SITE)
        assert r.returncode == 0, r.stderr
        assert str(classreport.key_path(out)) in r.stderr and not (out / classreport.KEY_NAME).exists()
        runs.append((read_report(out), list(csv.DictReader(open(classreport.key_path(out))))))
    (page, keyed, rows), key = runs[0]
    assert runs[1][0][1] == keyed and runs[1][1] == key, "the same pseudonyms from the same grades"
    for s in graded.students:
        assert s.name not in page and s.name.replace("_", " ").title() not in page and s.id not in page
    for _, name, _ in graded.absent:
        assert name not in page
    n = STUDENTS + ABSENT
    assert sorted(row["pseudonym"] for row in key) == [f"student {k:02d}" for k in range(1, n + 1)]
    total = {row["pseudonym"]: keyed.get(f"student|{row['pseudonym']}|total") for row in key}
    for s in graded.students:
        [row] = [row for row in key if row["id"] == s.id]
        assert total[row["pseudonym"]] == graded.keyed[f"student|{shown_name(s, graded.students)}|total"]
        assert Path(row["path"]).name == s.path.name
    plain = {k: v for k, v in graded.keyed.items() if not k.startswith("student|")}
    assert {k: v for k, v in keyed.items() if not k.startswith("student|")} == plain


def split(graded, tmp: Path) -> tuple[Path, Path]:
    """The grades file cut in two, by section: as if each section had been graded on its own."""
    files = []
    for sec in SECTIONS:
        doc = dict(graded.data, submissions=[s for s in graded.data["submissions"]
                                             if Path(s["path"]).parent.name == sec])
        files.append(tmp / f"{sec}.json")
        files[-1].write_text(json.dumps(doc))
    return files[0], files[1]


def test_two_runs_merge_into_the_report_of_one(graded, tmp_path):
    a, b = split(graded, tmp_path)
    r = mha("report", a, b, "--out", tmp_path / "merged", "--roster", graded.folder / "roster.csv", "--site-url", SITE)
    assert r.returncode == 0, r.stderr
    _, keyed, rows = read_report(tmp_path / "merged")
    assert keyed == graded.keyed and rows == graded.rows


def test_mha_report_does_not_import_torch(graded, tmp_path):
    """Making the report again needs the grades alone: ``mha report`` starts in a fraction of
    a second, without torch (``import mha`` imports its names when they are first used)."""
    code = ("import sys; from mha import cli; status = cli.main(sys.argv[1:]); "
            "assert 'torch' not in sys.modules, 'mha report imported torch'; sys.exit(status)")
    r = subprocess.run([sys.executable, "-c", code, "report", str(graded.folder / "grades.json"),
                        "--out", str(tmp_path / "again"), "--site-url", SITE, "--lms-csv", str(tmp_path / "lms.csv"),
                        "--canvas", str(tmp_path / "canvas.csv"), "--feedback", str(tmp_path / "feedback"),
                        "--draft-mistakes", str(tmp_path / "drafts.py")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "again" / classreport.HTML_NAME).is_file()
    assert (tmp_path / "canvas.csv").is_file() and (tmp_path / "drafts.py").is_file()


def test_a_submission_in_two_runs_is_an_error_naming_both_files_unless_replace(graded, tmp_path):
    a, b = split(graded, tmp_path)
    doc = json.loads(b.read_text())
    victim = doc["submissions"][0]
    victim["score"] = 0.0
    victim["exercises"] = [dict(e, score=0.0, status="missing", checks=[], code="") for e in victim["exercises"]]
    regraded = tmp_path / "regraded.json"
    regraded.write_text(json.dumps(dict(doc, submissions=[victim])))
    r = mha("report", a, b, regraded, "--out", tmp_path / "no")
    assert r.returncode == 2 and str(b) in r.stderr and str(regraded) in r.stderr and "--replace" in r.stderr
    assert not (tmp_path / "no").exists()
    r = mha("report", a, b, regraded, "--out", tmp_path / "yes", "--replace")
    assert r.returncode == 0, r.stderr
    assert f"the grades of {b} are replaced by those of {regraded}" in r.stderr
    _, keyed, _ = read_report(tmp_path / "yes")
    [student] = [s for s in graded.students if str(s.path.resolve()) == victim["source"]]
    assert keyed[f"student|{shown_name(student, graded.students)}|total"] == "0", "named by the roster the grades keep"
    assert keyed["class||submissions"] == str(STUDENTS)


@pytest.mark.parametrize("content,message", [
    ("not json", "is not a grades file of mha grade --json (not JSON"),
    (json.dumps({"exercises": [], "submissions": []}), "was written by an older version of mha grade"),
    (json.dumps({"format": "mha-grades", "version": 99, "exercises": [], "submissions": []}),
     "was written by another version of mha grade (format version 99; this one reads 3 and 4)"),
    (json.dumps({"format": "mha-grades", "version": 3, "exercises": [], "submissions": [{"student": "x"}]}),
     "is damaged"),
])
def test_mha_report_refuses_a_file_it_cannot_use_and_says_why(tmp_path, content, message):
    bad = tmp_path / "grades.json"
    bad.write_text(content)
    r = mha("report", bad, "--out", tmp_path / "out")
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
    assert str(bad) in r.stderr


@pytest.mark.parametrize("roster,message", [
    ("name,section\nAda,a\n", "the first line must name the columns id and name"),
    ("id,name\n1,Ada\n1,Ben\n", "line 3: the id 1 is on line 2 too"),
    ("id,name\n,Ada\n", "line 2: no id"),
    ("", "is empty"),
])
def test_a_malformed_roster_is_refused_with_its_line(graded, tmp_path, roster, message):
    path = tmp_path / "roster.csv"
    path.write_text(roster)
    r = mha("report", graded.folder / "grades.json", "--out", tmp_path / "out", "--roster", path)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr


# ----------------------------------------------------------------------------- in a browser

SHOWN = "masking.causal_mask"  # the exercise the instructors' page shows, its answer groups open


def shoot(tab, start: str, end: str, name: str) -> None:
    """A screenshot of the page from ``start``'s heading to ``end``'s (at most 1800 px), into
    _build/artifacts, and into book/images with MHA_UPDATE_FIGURES=1."""
    from conftest import ARTIFACTS

    top, bottom = (tab.page.locator(sel).evaluate("h => h.getBoundingClientRect().top + window.scrollY")
                   for sel in (start, end))
    left, width = tab.page.locator("main").evaluate("m => [m.getBoundingClientRect().left, m.clientWidth]")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / name
    tab.page.screenshot(path=str(shot), full_page=True,
                        clip={"x": left, "y": top - 16, "width": width, "height": min(1800, bottom - top - 8)})
    assert shot.stat().st_size > 20_000
    if os.environ.get("MHA_UPDATE_FIGURES"):
        shutil.copyfile(shot, ROOT / "book" / "images" / name)

@pytest.fixture(scope="module")
def report_tab(browser):
    """One tab for the four views of the page below (Tab.open_afresh)."""
    from browsing import Tab

    tab = Tab(browser, "file:///")
    yield tab
    tab.close()


# The contrast styles checked so far, per colour scheme: each width checks only the styles
# the other did not show (tests/browsing.py, CONTRAST_SAMPLES).
CHECKED_STYLES = {False: set(), True: set()}


@pytest.mark.parametrize("width,dark", [(1280, False), (1280, True), (390, False), (390, True)],
                         ids=["1280-light", "1280-dark", "390-light", "390-dark"])
def test_the_page_passes_the_browser_and_accessibility_checks(graded, report_tab, axe_source, width, dark):
    """In dark colours only axe's colour rules run: the others see the same page as in light."""
    from browsing import COLOUR_RULES, axe_problems

    tab = report_tab
    tab.open_afresh((graded.folder / "report" / classreport.HTML_NAME).as_uri(), width=width, dark=dark)
    widths = tab.page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert widths[0] == widths[1] == width, f"the page scrolls sideways: {widths}"
    background = tab.page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    assert (background == "rgb(255, 255, 255)") != dark, background
    if width == 1280 and not dark:  # the pictures of the instructors' page
        tab.page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
        shoot(tab, "#monday", "#class", "class-report-top.png")
        shoot(tab, f"#ex-{classreport.anchor(SHOWN)}", "#students", "class-report.png")
    tab.page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
    widths = tab.page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert widths[0] == widths[1], f"with every example open, the page scrolls sideways: {widths}"
    assert axe_problems(tab.page, axe_source, rules=COLOUR_RULES if dark else None,
                        checked_styles=CHECKED_STYLES[dark]) == []
    assert tab.errors == [] and tab.external == []
