"""An instructor's whole round, end to end, on a class of 42 in three sections
(tests/synthetic_class.py) with a roster of 44 (two no-shows, one extension), graded from the
command line as an instructor would:

- a main run, and a late run of two students graded on its own (``--submitted-at``);
- an overrides file (a regrade request answered twice, a late penalty waived);
- due dates and a late penalty;
- planted repeats: six students who return a float mask from ``causal_mask`` in three ways of
  writing it (an error no hint of the course explains), and one student's whole submission
  copied by another, with comments and other names;
- ``mha report`` merging the runs with every output: Canvas's gradebook import, a plain LMS
  CSV, feedback pages, the grader's CSV, Gradescope's files, draft mistakes;
- the draft-mistakes loop: the planted group becomes a draft ``Mistake``, its hint is written,
  the class is graded again with it, and its students get the new name.

Every number the LMS files hold is worked out again here, from the grades files, the roster,
the overrides and the policy, independently of mha.grading.
"""

from __future__ import annotations

import ast
import csv
import datetime
import html
import json
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from mha.grading import classreport
from synthetic_class import EXERCISE_IDS, make_class

ROOT = Path(__file__).resolve().parents[1]
SITE = (ROOT / "_build" / "html").as_uri()
SECTIONS = ("A", "B", "C")
STUDENTS = 42
ONLY = [a for i in EXERCISE_IDS for a in ("--only", i)]
LESSON_OF = {"heads.single_head": "01-one-head", "heads.batched_head": "01-one-head",
             "onehead.stable_softmax": "01-one-head", "masking.causal_mask": "05-causal-masking"}
DUE, ON_TIME, LATE_AT, EXTENDED_TO = "2024-03-01 23:59", "2024-03-01 12:00", "2024-03-03 10:00", "2024-03-04 23:59"
POLICY = "10%/day,max=50%"
HINT = ("the mask is float: build it as booleans, dtype=torch.bool (True = may attend), so that it can select "
        "and combine with other masks")

# The planted error: a float mask, bottom-right, in three hands; and a fourth, odd way that gives the same values.
FLOAT_MASKS = [
    "def causal_mask(q_len, k_len):\n    return torch.ones(q_len, k_len).tril(diagonal=k_len - q_len)\n",
    "def causal_mask(q_len, k_len):\n    import torch as th\n    allowed = th.ones(q_len, k_len).tril(diagonal=k_len - q_len)"
    "\n    return allowed\n",
    'def causal_mask(q_len: int, k_len: int):\n    """Bottom-right."""\n    # ones below the shifted diagonal\n'
    "    out = torch.ones(q_len, k_len).tril(diagonal = k_len - q_len)  # float\n    return out\n",
]
ODD_MASK = "def causal_mask(q_len, k_len):\n    return torch.ones(q_len, k_len).tril(diagonal=k_len - q_len) * 1.0\n"


@dataclass
class Round:
    folder: Path
    students: list          # synthetic_class.Student, as planted
    roster: list[dict]      # id, name, section, due
    planted: list[str]      # ids of the students with a float mask (the copier's included)
    copied: tuple[str, str]  # ids: the original and the copy
    late: list[str]         # ids graded in the late run: excused, extended, penalised
    extended: str           # the id with an extension
    graded: subprocess.CompletedProcess
    reported: subprocess.CompletedProcess
    overrides: list[dict]


def mha(*args, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mha.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def replace_function(path: Path, source: str) -> None:
    """Put ``source`` in the place of the file's ``causal_mask`` (the answer's function, under
    its own name, and the line that names it causal_mask), with torch imported."""
    tree = ast.parse(path.read_text())
    tree.body = [s for s in tree.body if not (isinstance(s, ast.FunctionDef) and s.name.startswith("causal_mask"))
                 and not (isinstance(s, ast.Assign) and any(getattr(t, "id", "") == "causal_mask" for t in s.targets))]
    path.write_text("import torch\n\n" + ast.unparse(tree) + "\n\n\n" + source)


def solved() -> str:
    """A submission of the course's reference answers to the four exercises."""
    from mha.exercises import get
    from mha.grading.answer_key import source_chunks

    chunks = {}
    for exercise_id in EXERCISE_IDS:
        ex = get(exercise_id)
        for name, text in source_chunks(ex.reference, ex.function):
            chunks.setdefault(text if text.startswith(("import ", "from ")) else name, text)
    return "\n\n".join(chunks.values()) + "\n"


def stamp(path: Path, when: str) -> None:
    t = datetime.datetime.fromisoformat(when).timestamp()
    os.utime(path, (t, t))


@pytest.fixture(scope="module")
def round_(tmp_path_factory) -> Round:
    folder = tmp_path_factory.mktemp("round")
    students = make_class(folder / "subs", STUDENTS, 11, sections=SECTIONS, crashes=0, timeouts=0)
    by_id = {s.id: s for s in students}
    ids = [s.id for s in students]
    # planted: six float masks, two per section, three ways of writing it
    planted = [s.id for s in students if s.section == "A"][:2] + [s.id for s in students if s.section == "B"][:2] \
        + [s.id for s in students if s.section == "C"][:2]
    for k, sid in enumerate(planted):
        replace_function(by_id[sid].path, FLOAT_MASKS[k % 3])
    # a whole submission copied, in another section, with comments and other names
    original, copy = [s.id for s in students if s.section == "A"][2], [s.id for s in students if s.section == "C"][2]
    replace_function(by_id[original].path, ODD_MASK)
    text = by_id[original].path.read_text()
    by_id[copy].path.write_text("# my own work\n\n" + text.replace("\n\n\n", "\n\n\n# next\n"))
    planted += [original, copy]
    # a late run: three students handed in after the due date, one with an extension, one excused
    late = [s.id for s in students if s.section == "B"][3:6]
    by_id[late[2]].path.write_text(solved())  # the penalised one: full marks, so that the penalty shows
    for sid in late:
        target = folder / "late" / by_id[sid].section / by_id[sid].path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(by_id[sid].path, target)
        by_id[sid].path = target
    visitor = folder / "subs" / "C" / "visitor.py"  # a submission not on the roster
    visitor.write_text("# sitting in\n" + solved())
    stamp(visitor, ON_TIME)
    for s in students:
        if s.id not in late:
            stamp(s.path, ON_TIME)
    extended = late[1]
    roster = [{"id": s.id, "name": s.name.replace("_", " ").title(), "section": s.section,
               "due": EXTENDED_TO if s.id == extended else ""} for s in students]
    roster += [{"id": "20990001", "name": "Absent One", "section": "A", "due": ""},
               {"id": "20990002", "name": "Absent Two", "section": "C", "due": ""}]
    with open(folder / "roster.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["id", "name", "section", "due"])
        w.writeheader()
        w.writerows(roster)
    regraded = ids[7]
    overrides = [{"student": regraded, "exercise": "heads.single_head", "points": "2", "reason": "regrade request",
                  "by": "TA", "date": "2024-03-05"},
                 {"student": regraded, "exercise": "heads.single_head", "points": "3", "reason": "second look: right",
                  "by": "lecturer", "date": "2024-03-06"},
                 {"student": late[0], "exercise": "late", "points": "0", "reason": "illness, certified", "by": "",
                  "date": ""}]
    with open(folder / "overrides.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["student", "exercise", "points", "reason", "by", "date"])
        w.writeheader()
        w.writerows(overrides)
    adjust = ["--overrides", folder / "overrides.csv", "--due", DUE, "--late-penalty", POLICY]
    graded = mha("grade", *(folder / "subs" / s for s in SECTIONS), *ONLY, "--jobs", "2", "--json",
                 folder / "grades.json", "--roster", folder / "roster.csv", "--report", folder / "while-grading",
                 "--site-url", SITE, "--quiet", *adjust)
    assert graded.returncode == 0, graded.stderr
    r = mha("grade", *(folder / "late" / s for s in ("B",)), *ONLY, "--jobs", "2", "--json", folder / "late.json",
            "--roster", folder / "roster.csv", "--submitted-at", LATE_AT, "--quiet")
    assert r.returncode == 0, r.stderr
    reported = mha("report", folder / "grades.json", folder / "late.json", "--out", folder / "report",
                   "--roster", folder / "roster.csv", "--site-url", SITE, *adjust,
                   "--canvas", folder / "canvas.csv", "--lms-csv", folder / "lms.csv", "--csv", folder / "grades.csv",
                   "--feedback", folder / "feedback", "--gradescope", folder / "gs", "--json", folder / "merged.json",
                   "--draft-mistakes", folder / "drafts.py")
    assert reported.returncode == 0, reported.stderr
    return Round(folder, students, roster, planted, (original, copy), late, extended, graded, reported, overrides)


def runs(round_) -> dict[str, dict]:
    """Every graded submission of both runs, by roster id (its file's name is the student's)."""
    by_name = {s.path.stem: s.id for s in round_.students}
    out = {}
    for name in ("grades.json", "late.json"):
        for sub in json.loads((round_.folder / name).read_text())["submissions"]:
            if Path(sub["path"]).stem in by_name:  # not the visitor, who is not on the roster
                out[by_name[Path(sub["path"]).stem]] = sub
    return out


def expected_points(round_) -> dict[str, dict[str, float]]:
    """Per roster id, per lesson: the points the LMS should get, worked out here."""
    subs = runs(round_)
    last = {}
    for o in round_.overrides:
        last[(o["student"], o["exercise"])] = float(o["points"])
    due = datetime.datetime.fromisoformat(DUE)
    out = {}
    for row in round_.roster:
        sid = row["id"]
        lessons = {"01-one-head": 0.0, "05-causal-masking": 0.0}
        if sid in subs:
            for e in subs[sid]["exercises"]:
                lessons[LESSON_OF[e["id"]]] += last.get((sid, e["id"]), e["score"])
            if sid in round_.late and (sid, "late") not in last:
                deadline = datetime.datetime.fromisoformat(row["due"]) if row["due"] else due
                late_s = (datetime.datetime.fromisoformat(LATE_AT) - deadline).total_seconds()
                share = min(0.5, 0.1 * math.ceil(late_s / 86400)) if late_s > 0 else 0.0
                lessons = {k: round(v - round(share * v, 2), 2) for k, v in lessons.items()}
        out[sid] = {k: round(v, 2) for k, v in lessons.items()}
    return out


# ----------------------------------------------------------------------------- the LMS

def test_canvas_s_import_gets_the_right_points_for_every_roster_id(round_):
    rows = list(csv.reader(open(round_.folder / "canvas.csv", newline="")))
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "01-one-head", "05-causal-masking"]
    assert rows[1][0].strip() == "Points Possible" and rows[1][5:] == ["9", "3"]
    expected = expected_points(round_)
    got = {r[2]: {"01-one-head": float(r[5]), "05-causal-masking": float(r[6])} for r in rows[2:]}
    assert len(rows) - 2 == len(round_.roster) == STUDENTS + 2, "one row per student of the roster, no other"
    assert "--canvas" in round_.reported.stderr and "left out 1 submission(s) not on the roster (visitor)" in \
        round_.reported.stderr
    assert got == expected
    assert got["20990001"] == got["20990002"] == {"01-one-head": 0.0, "05-causal-masking": 0.0}, "no-shows: 0"
    section = {r[2]: r[4] for r in rows[2:]}
    assert all(section[row["id"]] == row["section"] for row in round_.roster)
    penalised = round_.late[2]
    subs = runs(round_)
    graded = sum(e["score"] for e in subs[penalised]["exercises"])
    assert graded == 12 and sum(got[penalised].values()) == pytest.approx(9.6), "34 hours late: 2 days, 20% off"


def test_the_plain_lms_csv_has_every_roster_id_its_status_and_final_points(round_):
    rows = list(csv.DictReader(open(round_.folder / "lms.csv", newline="")))
    expected = expected_points(round_)
    [visitor] = [r for r in rows if not r["id"]]
    assert visitor["name"] == "visitor" and visitor["status"] == "graded (not on the roster)"
    rows.remove(visitor)
    assert {r["id"] for r in rows} == set(expected)
    for r in rows:
        assert float(r["final"]) == pytest.approx(sum(expected[r["id"]].values()), abs=0.011), r
        assert r["max"] == "12"
    status = {r["id"]: r["status"] for r in rows}
    assert status["20990001"] == status["20990002"] == "submitted nothing"
    penalised = round_.late[2]
    assert {r["id"] for r in rows if float(r["late penalty"]) > 0} == {penalised}, "one excused, one extended"
    assert {r["id"] for r in rows if float(r["hours late"]) > 0} == {round_.late[0], penalised}
    assert float(next(r for r in rows if r["id"] == penalised)["hours late"]) == 34.0


def test_the_grader_s_csv_and_gradescope_files_carry_the_roster(round_):
    rows = list(csv.DictReader(open(round_.folder / "grades.csv", newline="")))
    assert {r["id"] for r in rows} == {row["id"] for row in round_.roster} | {""}
    assert all(r["section"] for r in rows if r["id"]) and sum(r["status"] == "submitted nothing" for r in rows) == 2
    index = list(csv.DictReader(open(round_.folder / "gs" / "index.csv", newline="")))
    assert {r["id"] for r in index} == {row["id"] for row in round_.roster} | {""}
    one = next(r for r in index if r["folder"])
    data = json.loads((round_.folder / "gs" / one["folder"] / "results.json").read_text())
    assert data["extra_data"] == {"id": one["id"], "name": one["name"], "section": one["section"]}
    assert data["score"] == float(one["score"])
    merged = json.loads((round_.folder / "merged.json").read_text())
    assert {s["id"] for s in merged["roster"]} == {row["id"] for row in round_.roster}
    assert len(merged["adjustments"]["overrides"]) == 3, "the trail, every row"


def test_every_number_of_the_page_is_in_the_csv_under_its_key_and_no_other(round_):
    page = (round_.folder / "report" / classreport.HTML_NAME).read_text()
    keys = {html.unescape(k) for k in re.findall(r'data-key="([^"]+)"', page)}
    rows = list(csv.reader(open(round_.folder / "report" / classreport.CSV_NAME, newline="")))[1:]
    assert keys == {"|".join(r[:3]) for r in rows} and len(rows) > 500
    assert any(k.startswith("slip|") for k in keys) and any(k.startswith("contact|") for k in keys)
    assert any(" (not on the roster)|" in k for k in keys)


def test_overrides_and_lateness_are_on_the_page_with_their_trail(round_):
    page = html.unescape((round_.folder / "report" / classreport.HTML_NAME).read_text())
    part = page.split('id="adjustments"', 1)[1].split("<h2", 1)[0]
    assert "regrade request" in part and "replaced by line 3" in part and "second look: right" in part
    assert "illness, certified" in part and f"late penalty {POLICY}" in part


# ----------------------------------------------------------------------------- feedback

def test_feedback_pages_exist_for_every_submitter_and_hold_nothing_of_anyone_else(round_):
    folder = round_.folder / "feedback"
    index = list(csv.DictReader(open(folder / "index.csv", newline="")))
    submitted = {s.id for s in round_.students}
    assert {r["id"] for r in index} == submitted | {""} and len(index) == STUDENTS + 1
    index = [r for r in index if r["id"]]
    names = {row["id"]: row["name"] for row in round_.roster}
    stems = {s.id: s.path.stem for s in round_.students}
    subs = runs(round_)
    for r in index:
        page = html.unescape((folder / r["file"]).read_text())
        assert r["file"] == f"{r['id']}.html" and names[r["id"]] in page
        others = [x for x in names if x != r["id"] and x not in ("20990001", "20990002")]
        for other in others:
            assert other not in page and names[other] not in page and stems[other] not in page, (r["id"], other)
        for e in subs[r["id"]]["exercises"]:
            for c in e["checks"]:
                assert html.unescape(c["message"]) in page or not c["message"]
        assert "<script" not in page and "http" not in page.replace(SITE, "")
        assert "def " not in page, "no code"


def test_a_feedback_page_shows_the_override_and_the_section_to_reread(round_):
    regraded = round_.overrides[0]["student"]
    page = html.unescape((round_.folder / "feedback" / f"{regraded}.html").read_text())
    assert "your instructor changed it to 3: second look: right" in page
    assert "To reread:" in page or all(
        "failed" not in line for line in page.splitlines()), "a page with a failed check names what to reread"


# ----------------------------------------------------------------------------- the class report

def test_the_report_made_from_the_grades_equals_the_one_made_while_grading(round_, tmp_path):
    folder = round_.folder
    r = mha("report", folder / "grades.json", "--out", tmp_path / "again", "--roster", folder / "roster.csv",
            "--site-url", SITE, "--overrides", folder / "overrides.csv", "--due", DUE, "--late-penalty", POLICY)
    assert r.returncode == 0, r.stderr
    for name in (classreport.HTML_NAME, classreport.CSV_NAME):
        assert (tmp_path / "again" / name).read_text() == (folder / "while-grading" / name).read_text()
    r = mha("report", folder / "grades.json", "--out", tmp_path / "from-the-file", "--site-url", SITE)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "from-the-file" / classreport.CSV_NAME).read_text() == \
        (folder / "while-grading" / classreport.CSV_NAME).read_text(), "the grades file keeps roster and adjustments"


def test_the_copied_submission_is_flagged_on_the_named_page_only(round_, tmp_path):
    page = (round_.folder / "report" / classreport.HTML_NAME).read_text()
    flags = page.split('id="identical"', 1)[1].split("</ul>", 1)[0]
    names = {row["id"]: row["name"] for row in round_.roster}
    original, copy = round_.copied
    [item] = [li for li in flags.split("<li>") if names[original] in li]
    assert names[copy] in item
    r = mha("report", round_.folder / "grades.json", round_.folder / "late.json", "--out", tmp_path / "shared",
            "--pseudonymise", "--site-url", SITE)
    assert r.returncode == 0, r.stderr
    shared = (tmp_path / "shared" / classreport.HTML_NAME).read_text()
    assert 'id="identical"' not in shared and "Identical" not in shared
    assert not (tmp_path / "shared" / classreport.KEY_NAME).exists()


def test_the_planted_float_mask_is_ranked_with_the_hints_by_its_count(round_):
    """No hint of the course names a float mask: its eight students (three hands, an odd way
    that gives the same values, and the copy) are one slip, ranked among the class's errors
    by its count (below only the synthetic class's planted mistake, made by 40% of it)."""
    rows = list(csv.reader(open(round_.folder / "report" / classreport.CSV_NAME, newline="")))
    page = html.unescape((round_.folder / "report" / classreport.HTML_NAME).read_text())
    monday = page.split('id="monday"', 1)[1].split("</table>", 1)[0]
    counts = [int(c) for c in re.findall(r'<tr><td class="n"><span data-key="[^"]+">(\d+)<', monday)]
    row = next(r for r in monday.split("<tr>") if "masking.causal_mask" in r and "same values" in r)
    assert "no hint" in row and "wrong dtype float32" in row
    count = int(re.search(r'data-key="slip\|masking.causal_mask\|s\w+">(\d+)<', row).group(1))
    assert count == len(round_.planted) == 8
    assert counts == sorted(counts, reverse=True) and count in counts[:2]
    assert any(r[0] == "slip" and r[1] == "masking.causal_mask" and int(r[3]) == count for r in rows)


# ----------------------------------------------------------------------------- the course learns from its class

def test_the_draft_mistakes_loop_names_the_planted_error_for_its_students(round_, tmp_path, request):
    folder = round_.folder
    text = (folder / "drafts.py").read_text()
    assert "'masking.causal_mask': [" in text
    [block] = [b for b in text.split("\n\n# ") if b.startswith("masking.causal_mask") and "float32" in b]
    number = re.search(r"def _causal_mask_draft_(\d+)\(\)", block).group(1)
    [line] = [x for x in text.splitlines() if f"_causal_mask_draft_{number}()" in x and "Mistake(" in x]
    assert f"# {len(round_.planted)} students" in line
    r = mha("grade", folder / "subs" / "A", "--only", "masking.causal_mask", "--exercises", folder / "drafts.py",
            "--exercises-draws", "2", "--quiet")
    assert r.returncode == 2 and "still has the draft's hint" in r.stderr
    # the instructor writes the hint and a name, and keeps this draft only
    head, _, _ = text.partition("MISTAKES = {")
    entry = line.replace('Mistake("WRITE THE HINT"', f"Mistake({HINT!r}").replace(f'name="draft-{number}"',
                                                                                 'name="float-mask"')
    (tmp_path / "mistakes.py").write_text(head + "MISTAKES = {\n    'masking.causal_mask': [\n" + entry + "\n    ],\n}\n")
    subs = [folder / "subs" / s for s in SECTIONS] + [folder / "late" / "B"]
    r = mha("grade", *subs, *ONLY, "--jobs", "2", "--exercises", tmp_path / "mistakes.py", "--json",
            tmp_path / "regraded.json", "--roster", folder / "roster.csv", "--report", tmp_path / "report",
            "--feedback", tmp_path / "feedback", "--site-url", SITE, "--quiet", "--exercises-draws", "5")
    assert r.returncode == 0, r.stderr
    data = json.loads((tmp_path / "regraded.json").read_text())
    by_name = {s.path.stem: s.id for s in round_.students}
    named = set()
    for sub in data["submissions"]:
        mask = next(e for e in sub["exercises"] if e["id"] == "masking.causal_mask")
        if any(c["mistake"] == "float-mask" for c in mask["checks"]):
            named.add(by_name[Path(sub["path"]).stem])
            assert "Hint (float-mask): " + HINT in " ".join(c["message"] for c in mask["checks"])
    assert named == set(round_.planted), "exactly the planted students, no one else"
    page = html.unescape((tmp_path / "feedback" / f"{round_.planted[0]}.html").read_text())
    assert "Hint (float-mask)" in page
    rows = list(csv.reader(open(tmp_path / "report" / classreport.CSV_NAME, newline="")))
    assert ["mistake", "masking.causal_mask", "float-mask", str(len(round_.planted)), HINT] in rows
    report = html.unescape((tmp_path / "report" / classreport.HTML_NAME).read_text())
    monday = report.split('id="monday"', 1)[1].split("</table>", 1)[0]
    row = next(r for r in monday.split("<tr>") if "float-mask" in r)
    assert HINT in row and f'data-key="mistake|masking.causal_mask|float-mask">{len(round_.planted)}<' in row
    assert not any("masking.causal_mask" in r and "no hint" in r and "float32" in r for r in monday.split("<tr>")), \
        "no longer an error without a hint"
    if shutil.which("chromium"):  # the screenshot needs the browser; the loop's checks above do not
        shot_loop(tmp_path / "report", request.getfixturevalue("browser"))


def shot_loop(report: Path, browser) -> None:
    """The regraded report's "What to teach again", for the instructors' page: into
    _build/artifacts, and book/images with MHA_UPDATE_FIGURES=1. In the test process's own browser
    (conftest.py): a second Playwright in one process fails."""
    from conftest import ARTIFACTS

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "class-report-loop.png"
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto((report / classreport.HTML_NAME).as_uri())
        top = page.locator("#monday").evaluate("h => h.getBoundingClientRect().top + window.scrollY")
        bottom = page.locator("#monday ~ .scroll").first.evaluate("t => t.getBoundingClientRect().bottom + scrollY")
        left, width = page.locator("main").evaluate("m => [m.getBoundingClientRect().left, m.clientWidth]")
        page.screenshot(path=str(shot), full_page=True,
                        clip={"x": left, "y": top - 16, "width": width, "height": min(900, bottom - top + 24)})
    finally:
        page.close()
    if os.environ.get("MHA_UPDATE_FIGURES"):
        shutil.copyfile(shot, ROOT / "book" / "images" / "class-report-loop.png")


# ----------------------------------------------------------------------------- in a browser

@pytest.fixture(scope="module")
def loop_tab(browser):
    from browsing import Tab

    tab = Tab(browser, "file:///")
    yield tab
    tab.close()


CHECKED = {False: set(), True: set()}


@pytest.mark.parametrize("page", ["report", "feedback"])
@pytest.mark.parametrize("width,dark", [(1280, False), (1280, True), (390, False), (390, True)],
                         ids=["1280-light", "1280-dark", "390-light", "390-dark"])
def test_the_report_and_a_feedback_page_pass_the_browser_checks(round_, loop_tab, axe_source, page, width, dark):
    """The report with everything on it (overrides, lateness, students to contact, identical
    submissions, slips) and one feedback page, at a desktop's and a phone's width, light and dark."""
    from browsing import COLOUR_RULES, axe_problems

    target = (round_.folder / "report" / classreport.HTML_NAME if page == "report"
              else round_.folder / "feedback" / f"{round_.planted[0]}.html")
    loop_tab.open_afresh(target.as_uri(), width=width, dark=dark)
    loop_tab.page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
    widths = loop_tab.page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert widths[0] == widths[1] == width, f"the page scrolls sideways: {widths}"
    assert axe_problems(loop_tab.page, axe_source, impacts=("minor", "moderate", "serious", "critical"),
                        rules=COLOUR_RULES if dark else None, checked_styles=CHECKED[dark]) == []
    assert loop_tab.errors == [] and loop_tab.external == []


# ----------------------------------------------------------------------------- drafts refused at loading

DRAFT = '''from mha.exercises import Mistake


def _draft():
    import torch

    def causal_mask(q_len, k_len):
{body}
    return causal_mask


MISTAKES = {{"masking.causal_mask": [Mistake({hint!r}, _draft(), name="draft-1")]}}
'''


@pytest.mark.parametrize("body,hint,message", [
    ("        return torch.ones(q_len, k_len).tril(diagonal=k_len - q_len)", "WRITE THE HINT",
     "'draft-1' still has the draft's hint"),
    ("        return torch.ones(q_len, k_len, dtype=torch.bool).tril()", HINT,
     "'draft-1' (the mask is float: build it as booleans, dtype=...) gives the answers of 'top-left' on every "
     "check: it is that mistake"),
    ("        return torch.ones(q_len, k_len, dtype=torch.bool).tril(diagonal=k_len - q_len)", HINT,
     "'draft-1' (the mask is float: build it as booleans, dtype=...) gets full marks on the public checks"),
])
def test_a_draft_is_refused_unless_it_is_a_new_mistake_with_a_hint(tmp_path, body, hint, message):
    from mha.autograde import ExerciseFileError, get, load_exercises

    before = get("masking.causal_mask")
    path = tmp_path / "drafts.py"
    path.write_text(DRAFT.format(body=body, hint=hint))
    with pytest.raises(ExerciseFileError, match=re.escape(message)):
        load_exercises(path, draws=2)
    assert get("masking.causal_mask") is before, "nothing registered"


def test_a_draft_with_its_hint_adds_a_named_mistake_until_its_file_is_unloaded(tmp_path, capsys):
    from mha.autograde import check, get, load_exercises, unregister
    from mha.autograde.instructor import DRAFT_HINT
    from mha.grading import drafts

    assert drafts.render([], placeholder=DRAFT_HINT) == drafts.render([]), "one placeholder, in both places"
    before = get("masking.causal_mask")
    path = tmp_path / "drafts.py"
    path.write_text(DRAFT.format(body="        return torch.ones(q_len, k_len).tril(diagonal=k_len - q_len)",
                                 hint=HINT).replace("draft-1", "float-mask"))
    try:
        [ex] = load_exercises(path, draws=2)
        assert get("masking.causal_mask") is ex and ex.mistakes[-1].name == "float-mask"
        assert len(ex.mistakes) == len(before.mistakes) + 1

        def causal_mask(q_len, k_len):
            import torch
            return torch.ones(q_len, k_len).tril(diagonal=k_len - q_len)

        check("masking.causal_mask", causal_mask)
        assert "Hint (float-mask): " + HINT in capsys.readouterr().out
    finally:
        unregister(path)
    assert get("masking.causal_mask") is before


def test_three_shapes_answers_with_different_wrong_keys_are_three_groups(tmp_path):
    """The review's three dims.shapes answers, graded: a key misspelt, another, two swapped."""
    head = ("def shapes(batch, seq_len, embed_dim, num_heads):\n    if embed_dim % num_heads != 0:\n"
            '        raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}")\n'
            "    B, T, C, h = batch, seq_len, embed_dim, num_heads\n")
    keys = [("q_heads", "merge"), ("q_head", "merged"), ("merged", "q_heads")]
    for k, (a, b) in enumerate(keys):
        (tmp_path / f"s{k}.py").write_text(head + f'    return {{"qkv": (B, T, 3 * C), "{a}": (B, h, T, C // h), '
                                                  f'"scores": (B, h, T, T), "{b}": (B, T, C)}}\n')
    r = mha("grade", *sorted(tmp_path.glob("s*.py")), "--only", "dims.shapes", "--report", tmp_path / "report",
            "--quiet")
    assert r.returncode == 0, r.stderr
    rows = [row for row in csv.reader(open(tmp_path / "report" / classreport.CSV_NAME, newline=""))
            if row[:2] == ["answer group", "dims.shapes"]]
    assert [row[3] for row in rows] == ["1", "1", "1"]
    told = " ".join(row[4] for row in rows)
    assert "no key 'merged'" in told and "no key 'q_heads'" in told and "'q_heads' is wrong" in told


@pytest.mark.parametrize("options,message", [
    (["--overrides", "{tmp}/o.csv"], "the first line must name the columns student, exercise, points and reason (and by, "
                                     "date if you like); it lacks reason"),
    (["--overrides", "{tmp}/p.csv"], "line 2: points must be a number, got 'full'"),
    (["--overrides", "{tmp}/u.csv"], "line 2: no student 'nobody'"),
    (["--due", "next friday"], "--due next friday: 'next friday' is not a date and time: write 2024-03-01 23:59"),
    (["--due", DUE, "--late-penalty", "10 per day"], "start with a share per unit of lateness, e.g. 10%/day"),
    (["--due", DUE, "--late-penalty", "10%/day,cap=5"], "'cap=5' is not max=PERCENT% or grace=DURATION"),
    (["--late-penalty", "10%/day"], "--late-penalty needs --due"),
    (["--pseudonymise", "--pseudonym-key", "{tmp}/out/key.csv"], "the key must not be inside the report's folder"),
])
def test_bad_adjustments_are_refused_with_what_would_do(round_, tmp_path, options, message):
    (tmp_path / "o.csv").write_text("student,exercise,points\n1,heads.single_head,3\n")
    (tmp_path / "p.csv").write_text("student,exercise,points,reason\n20230001,heads.single_head,full,why\n")
    (tmp_path / "u.csv").write_text("student,exercise,points,reason\nnobody,heads.single_head,3,why\n")
    r = mha("report", round_.folder / "grades.json", "--out", tmp_path / "out",
            *[o.format(tmp=tmp_path) for o in options])
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_canvas_needs_a_roster(round_, tmp_path):
    doc = json.loads((round_.folder / "grades.json").read_text())
    del doc["roster"], doc["adjustments"]
    (tmp_path / "g.json").write_text(json.dumps(doc))
    r = mha("report", tmp_path / "g.json", "--out", tmp_path / "out", "--canvas", tmp_path / "c.csv")
    assert r.returncode == 2 and "--canvas needs --roster" in r.stderr
