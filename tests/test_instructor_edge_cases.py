"""What goes wrong in a real class, graded end to end from the notebooks the course hands out
(``mha notebooks``), one folder per student in two section folders: two students with one
name, an answer signed in its docstring and its messages, a notebook copied by Jupyter
(``-Copy1``) beside the untouched handout, an empty student folder, a lesson not handed
in, a cell that does not parse, and a mistake the exercise's own diagnosis names for
several students. No grade is overwritten or lost, nothing a student wrote in words
reaches the page to share, and the pseudonyms have a key.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from mha.exercises import get
from mha.grading import classreport
from mha.grading.answer_key import function_source
from mha.notebooks import STUB, write_student_notebooks

ROOT = Path(__file__).resolve().parents[1]
LESSONS = ("01-one-head", "03-dimension-math", "05-causal-masking")
ONLY = ("onehead.stable_softmax", "dims.heads_into_batch", "masking.causal_mask")

SIGNED = '''import torch

def stable_softmax(scores):
    """Written by Victor Leblanc, student id 20231147"""
    if scores.dim() == 0:
        raise ValueError(f"this needs a row of scores -- Victor ({scores.shape})")
    victor_exp = torch.exp(scores)  # Victor Leblanc's first try
    return victor_exp / victor_exp.sum(dim=-1, keepdim=True)
'''
VIEW = '''def heads_into_batch(x, num_heads):
    T, B, C = x.shape
    return x.view(T, B * num_heads, C // num_heads).transpose(0, 1)
'''
TOP_LEFT = '''import torch

def causal_mask(q_len, k_len):
    return torch.ones(q_len, k_len, dtype=torch.bool).tril()
'''
SITE = (ROOT / "_build" / "html").as_uri()  # given to every run: by default, links depend on a build being there


def correct(exercise_id: str) -> str:
    ex = get(exercise_id)
    return function_source(ex.reference, ex.function)


def mha(*args, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mha.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def handout(stubs: dict[str, Path], lesson: str, folder: Path, answers: dict[str, str], name: str | None = None,
            extra_cell: str | None = None) -> Path:
    """The handed-out notebook of ``lesson``, with the stubs of ``answers``' functions replaced."""
    nb = nbformat.read(stubs[lesson], as_version=4)
    for cell in nb.cells:
        for function, source in answers.items():
            if cell.cell_type == "code" and STUB in cell.source and re.search(rf"^def {function}\(", cell.source, re.M):
                cell.source = source
    if extra_cell:
        nb.cells.append(nbformat.v4.new_code_cell(extra_cell))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name or lesson}.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    """The class, graded once: (folder, exit, stderr, grades JSON, report page, key rows)."""
    root = tmp_path_factory.mktemp("edge")
    lessons = [ROOT / "lessons" / f"{x}.md" for x in LESSONS]
    stubs = {p.stem: p for p in write_student_notebooks(root / "handout", lessons)}
    subs = root / "submissions"
    full = {"stable_softmax": correct("onehead.stable_softmax"), "heads_into_batch": correct("dims.heads_into_batch"),
            "causal_mask": correct("masking.causal_mask")}

    def student(section, name, answers, lessons=LESSONS, **kw):
        for lesson in lessons:
            handout(stubs, lesson, subs / section / name, answers, **kw)

    student("section-a", "li_wei", full)
    student("section-b", "li_wei", {**full, "causal_mask": TOP_LEFT, "stable_softmax": STUB_FREE_OVERFLOW})
    student("section-a", "victor_leblanc", {"stable_softmax": SIGNED}, lessons=LESSONS[:1])
    student("section-a", "ana_silva", full, lessons=LESSONS[:2])           # lesson 05 below: a copy and the stub
    handout(stubs, LESSONS[2], subs / "section-a" / "ana_silva", full, name=f"{LESSONS[2]}-Copy1")
    handout(stubs, LESSONS[2], subs / "section-a" / "ana_silva", {})
    for k in range(3):
        student("section-b", f"view_{k}", {**full, "heads_into_batch": VIEW},
                extra_cell="def half_typed(x:\n" if k == 0 else None)
    (subs / "section-b" / "ghost").mkdir()
    roster = root / "roster.csv"
    roster.write_text("id,name,section\n1,Li Wei,section-a\n2,Li Wei,section-b\n20231147,Victor Leblanc,section-a\n"
                      "4,Ana Silva,section-a\n5,View 0,section-b\n6,View 1,section-b\n7,View 2,section-b\n"
                      "8,Ghost,section-b\n9,Never Came,section-a\n")
    only = [a for i in ONLY for a in ("--only", i)]
    r = mha("grade", *sorted((subs / "section-a").iterdir()), *sorted((subs / "section-b").iterdir()), "--by-folder",
            *only, "--jobs", "2", "--json", root / "grades.json", "--gradescope", root / "gs", "--report",
            root / "report", "--roster", roster, "--pseudonymise", "--site-url", SITE, "--quiet")
    page = (root / "report" / classreport.HTML_NAME).read_text()
    assert not (root / "report" / classreport.KEY_NAME).exists(), "the key is never in the folder one shares"
    with open(classreport.key_path(root / "report"), newline="") as f:
        key = list(csv.DictReader(f))
    return root, r, json.loads((root / "grades.json").read_text()), page, key


STUB_FREE_OVERFLOW = '''import torch

def stable_softmax(scores):
    e = torch.exp(scores)
    return e / e.sum(dim=-1, keepdim=True)
'''


def submission(data: dict, path_end: str) -> dict:
    [s] = [s for s in data["submissions"] if s["path"].endswith(path_end)]
    return s


def test_two_students_of_one_name_each_keep_their_grade_in_every_report(klass):
    root, r, data, _, _ = klass
    a, b = submission(data, "section-a/li_wei"), submission(data, "section-b/li_wei")
    assert (a["student"], b["student"]) == ("li_wei (section-a)", "li_wei (section-b)")
    assert a["score"] == a["max_score"] == 9 and b["score"] < 9
    written = sorted((root / "gs").glob("*/results.json"))
    assert len(written) == len(data["submissions"]) == 8
    scores = {p.parent.name: json.loads(p.read_text())["score"] for p in written}
    assert scores["li_wei (section-a)"] == 9 and scores["li_wei (section-b)"] == b["score"]
    assert re.search(r"^li_wei \(section-a\)\s.*9/9$", r.stdout, re.M), r.stdout


def test_nothing_a_student_wrote_in_words_reaches_the_shared_page(klass):
    _, _, data, page, _ = klass
    low = page.lower()
    for word in ("victor", "leblanc", "20231147", "first try", "written by", "needs a row"):
        assert word not in low, word
    code = submission(data, "victor_leblanc")["exercises"][0]["code"]
    assert "Victor" not in code and "victor" not in code and "20231147" not in code
    assert "torch.exp(scores)" in code and "raise ValueError('...')" in code
    assert "<pre" in page and "torch.exp(scores)" in page, "the answer's code is shown, anonymised"


def test_the_pseudonyms_have_a_key_outside_the_folder_of_the_report(klass):
    root, r, data, page, key = klass
    assert str(classreport.key_path(root / "report")) in r.stderr
    assert classreport.key_path(root / "report").parent == (root / "report").resolve().parent
    assert {row["pseudonym"] for row in key} == {f"student {k}" for k in range(1, 10)}
    [victor] = [row for row in key if row["id"] == "20231147"]
    assert victor["name"] == "Victor Leblanc" and victor["path"].endswith("victor_leblanc")
    assert f'data-key="student|{victor["pseudonym"]}|total"' in page
    [never] = [row for row in key if row["name"] == "Never Came"]
    assert never["path"] == "" and never["pseudonym"] in page.split('id="who"', 1)[1].split("<h2", 1)[0]


def test_a_copy_of_a_notebook_beside_the_untouched_handout_is_graded_with_a_note(klass):
    _, _, data, _, _ = klass
    ana = submission(data, "ana_silva")
    mask = next(e for e in ana["exercises"] if e["id"] == "masking.causal_mask")
    assert mask["status"] == "graded" and mask["score"] == mask["max_score"]
    assert any("causal_mask is defined in 05-causal-masking-Copy1.ipynb and 05-causal-masking.ipynb; graded the one "
               "in 05-causal-masking-Copy1.ipynb (the other is the unanswered stub)" in n for n in ana["notes"])


def test_an_empty_folder_is_named_and_is_not_a_student_of_the_statistics(klass):
    _, r, data, page, key = klass
    assert r.returncode == 1
    assert re.search(r"section-b/ghost: not graded: nothing to grade", r.stderr)
    ghost = submission(data, "section-b/ghost")
    assert ghost["files"] == [] and ghost["score"] == 0, "the grade book keeps the row, with 0"
    assert 'data-key="class||submissions">7<' in page
    [row] = [row for row in key if row["id"] == "8"]
    who = page.split('id="who"', 1)[1].split("<h2", 1)[0]
    assert row["pseudonym"] in who.split("submitted nothing", 1)[1].split("</p>", 1)[0]


def test_a_lesson_not_handed_in_and_a_cell_that_does_not_parse_are_named(klass):
    _, _, data, page, key = klass
    [victor] = [row for row in key if row["id"] == "20231147"]
    row = page.split(f'<th scope="row">{victor["pseudonym"]}</th>', 1)[1].split("</tr>", 1)[0]
    assert "lesson 03: no notebook" in row and "lesson 05: no notebook" in row
    notes = submission(data, "view_0")["notes"]
    assert any(re.match(r"05-causal-masking\.ipynb, code cell \d+ has a syntax error", n) for n in notes), notes


def test_what_to_teach_again_ranks_the_exercises_own_diagnoses_too(klass):
    _, _, _, page, _ = klass
    monday = page.split('id="monday"', 1)[1].split("</table>", 1)[0]
    row = next(r for r in monday.split("<tr>") if "dims.heads_into_batch" in r)
    assert re.search(r'data-key="diagnosis\|dims.heads_into_batch\|1">3<', row)
    assert "non-contiguous" in row and "diagnosis" in row
    assert "lesson 03: Why view first, then transpose" in row


def test_a_folder_of_student_folders_is_graded_as_its_students(klass, tmp_path):
    root = klass[0]
    r = mha("grade", root / "submissions" / "section-a", "--only", "onehead.stable_softmax", "--quiet")
    assert r.returncode == 2 and "give --by-folder" in r.stderr
    r = mha("grade", root / "submissions" / "section-a", "--by-folder", "--only", "onehead.stable_softmax",
            "--quiet", "--json", tmp_path / "a.json")
    assert r.returncode == 0, r.stderr
    assert "holds no notebook but 3 folders that do: each is graded as one student's submission" in r.stderr
    students = [s["student"] for s in json.loads((tmp_path / "a.json").read_text())["submissions"]]
    assert students == ["ana_silva", "li_wei", "victor_leblanc"]


def test_the_report_is_made_again_from_the_grades_with_the_same_pseudonyms(klass, tmp_path):
    root, _, _, page, key = klass
    r = mha("report", root / "grades.json", "--out", tmp_path, "--roster", root / "roster.csv", "--pseudonymise",
            "--site-url", SITE)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / classreport.HTML_NAME).read_text() == page
    with open(classreport.key_path(tmp_path), newline="") as f:
        assert list(csv.DictReader(f)) == key


def test_a_class_laid_out_by_section_is_read_two_levels_down(klass, tmp_path):
    """``mha grade submissions --by-folder`` where submissions/ holds section folders of student
    folders: every student folder, the empty one too (no phantom student "submissions")."""
    root = klass[0]
    r = mha("grade", root / "submissions", "--by-folder", "--only", "onehead.stable_softmax", "--quiet",
            "--json", tmp_path / "all.json")
    assert r.returncode == 1, r.stderr  # the empty folder is named
    assert "holds no notebook but 7 folders in its folders (sections) that do, and 1 empty ones" in r.stderr
    students = sorted(s["student"] for s in json.loads((tmp_path / "all.json").read_text())["submissions"])
    assert students == ["ana_silva", "ghost", "li_wei (section-a)", "li_wei (section-b)", "victor_leblanc",
                        "view_0", "view_1", "view_2"]


def test_the_same_grades_file_given_twice_is_named(klass, tmp_path):
    root = klass[0]
    r = mha("report", root / "grades.json", root / "grades.json", "--out", tmp_path / "out")
    assert r.returncode == 2 and "grades.json is given twice" in r.stderr and "Traceback" not in r.stderr


def test_a_copy_of_an_exercise_file_among_the_submissions_is_not_a_student(tmp_path):
    example = ROOT / "book" / "examples" / "entropy_exercises.py"
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(example, subs / "entropy_exercises_copy.py")
    (subs / "student.py").write_text("import torch\n\ndef attention_entropy(weights):\n"
                                     "    return -(weights * weights.log()).sum(dim=-1)\n")
    r = mha("grade", subs, "--exercises", example, "--exercises-draws", "2", "--quiet", "--json",
            tmp_path / "g.json")
    assert r.returncode == 0, r.stderr
    assert "entropy_exercises_copy.py is an exercise file" in r.stderr
    assert [s["student"] for s in json.loads((tmp_path / "g.json").read_text())["submissions"]] == ["student"]
