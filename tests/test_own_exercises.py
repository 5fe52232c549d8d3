"""Exercises an instructor writes in a file of their own (book/examples/entropy_exercises.py,
the worked example of the instructors' page), end to end: loaded with the test-the-tests
checks, a file that fails them refused with what failed, graded by `mha grade --exercises`
with its named mistakes, turned into a student version by `mha assign` that holds no
reference and no hidden case, and checked in a fresh Python from that student version
alone, with the same verdicts as the grader's on the public checks."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mha.exercises import EXERCISES, ExerciseFileError, check, load_exercises
from mha.autograde import LOADED, unregister

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "book" / "examples" / "entropy_exercises.py"
ID = "entropy.attention_entropy"

# Answers, as students would write them (each a submission file of its own).
ANSWERS = {
    "correct": """
import torch

def attention_entropy(weights):
    w = weights.double()
    logs = torch.where(w > 0, w.log(), torch.zeros_like(w))
    return (-(w * logs).sum(-1)).to(weights.dtype)
""",
    "nan": """
import torch

def attention_entropy(weights):
    return -(weights * torch.log(weights)).sum(dim=-1)
""",
    "bits": """
import torch

def attention_entropy(weights):
    return -torch.special.xlogy(weights, weights).sum(-1) / torch.log(torch.tensor(2.0))
""",
    "mean": """
import torch

def attention_entropy(weights):
    return -torch.special.xlogy(weights, weights).mean(-1)
""",
    "forbidden": """
import torch

def attention_entropy(weights):
    return torch.distributions.Categorical(probs=weights).entropy()
""",
}
NAMED = {"correct": None, "nan": "nan at zero weights", "bits": "bits, not nats", "mean": None}


@pytest.fixture
def forget():
    """Whatever a test loads is forgotten after it: other tests in this process see the course only."""
    before = dict(EXERCISES)
    yield
    for origin in set(LOADED.values()):
        unregister(origin)
    assert EXERCISES == before


def run(*args, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "mha.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


# ----------------------------------------------------------------------------- loading

def test_the_worked_example_loads_and_check_knows_it(forget, capsys):
    [ex] = load_exercises(EXAMPLE)
    assert ex.id == ID and EXERCISES[ID] is ex
    ns: dict = {}
    exec(ANSWERS["bits"], ns)
    result = check(ID, ns["attention_entropy"])
    out = capsys.readouterr().out
    assert result.passed == 0 and "Hint (bits, not nats): that is the entropy in bits" in out
    exec(ANSWERS["correct"], ns)
    assert check(ID, ns["attention_entropy"]).ok
    assert load_exercises(EXAMPLE) and EXERCISES[ID] is not ex, "loading the file again replaces its exercises"


BROKEN = {
    "a reference that fails its own checks": (
        ('note="float64"),\n    ]', 'note="float64"),\n        Case((-torch.ones(2, 3),), raises="ValueError", note="negative"),\n    ]'),
        "the reference does not get full marks: check 4 (negative) of the public checks fails (should raise ValueError"),
    "a mistake that gives the right answer": (
        ('lambda w: torch.special.xlogy(w, w).sum(dim=-1), name="sign"', 'attention_entropy, name="sign"'),
        "'sign' (entropy is minus the sum of w log w: every log ...) gets full marks on the public checks and "
        "hidden draw 0: add a case on which it gives another answer than the reference"),
    "two mistakes an answer cannot tell apart": (
        ('name="summed over the queries"),', 'name="summed over the queries"),\n'
         '        Mistake("another hint", lambda w: -torch.special.xlogy(w, w).sum(dim=-2) + 0),'),
        "'mistake 4' (another hint) gives the answers of 'summed over the queries' on every check: it is that "
        "mistake, whose hint these answers get already; leave it out"),
    "an id of the course's": (('id="entropy.attention_entropy"', 'id="dims.split_heads"'),
                              "has the id of an exercise of the course"),
    "a function name of the course's": (('function="attention_entropy"', 'function="split_heads"'),
                                        "asks for a function called 'split_heads', as exercise dims.split_heads does"),
    "points that are not positive": (("points=2,", "points=0,"), "points must be a positive number, got 0"),
    "cases with the wrong number of arguments": (("Case((_weights(g, tq, tk),))", "Case((_weights(g, tq, tk), 1))"),
                                                 "a hidden Case has 2 arguments, and attention_entropy takes 1"),
    "a file that raises": (("import math\n", "import math\nraise RuntimeError('oops')\n"),
                           "entropy_exercises.py, line 9: loading the file raised RuntimeError: oops"),
    "a file without exercises": (("ENTROPY = Exercise(", "NOT_AN_EXERCISE = dict("),
                                 "defines no exercise: write module-level mha.exercises.Exercise"),
    "two exercises with one id": (
        ('forbidden=("torch.distributions",),  # Categorical(probs=w).entropy() would do it all\n)',
         'forbidden=("torch.distributions",),  # Categorical(probs=w).entropy() would do it all\n)\n'
         'import dataclasses\nTWIN = dataclasses.replace(ENTROPY, function="entropy_twin")'),
        "two exercises have the id 'entropy.attention_entropy'"),
}


@pytest.mark.parametrize("what", BROKEN)
def test_a_file_that_fails_its_checks_is_refused_with_what_failed(what, tmp_path, forget):
    """Refused by load_exercises (mha grade --exercises) and by mha assign alike: a handout
    that the student's load_exercises would refuse is never written."""
    from mha.exercises import write_student_version

    (old, new), message = BROKEN[what]
    text = EXAMPLE.read_text()
    assert text.count(old) == 1, old
    path = tmp_path / "entropy_exercises.py"
    path.write_text(text.replace(old, new))
    with pytest.raises(ExerciseFileError) as e:
        load_exercises(path, draws=5)
    assert message in str(e.value)
    assert ID not in EXERCISES
    with pytest.raises(ExerciseFileError) as e:
        write_student_version(path, tmp_path / "handout", draws=5)
    assert message in str(e.value) and not (tmp_path / "handout").exists()


def test_wrong_argument_counts_are_found_before_any_check_runs(tmp_path, forget, monkeypatch):
    """A field error in a file's last exercise is reported without first running the slow
    checks of the others."""
    import mha.autograde.instructor as load

    text = EXAMPLE.read_text()
    text += ('\nimport dataclasses\nSECOND = dataclasses.replace(ENTROPY, id="entropy.second", '
             'function="second_entropy", public=lambda g: [Case((torch.ones(2, 3), 1))])\n')
    path = tmp_path / "two.py"
    path.write_text(text)
    ran = []
    monkeypatch.setattr(load, "check_exercise", lambda ex, **kw: ran.append(ex.id))
    with pytest.raises(ExerciseFileError, match="a public Case has 2 arguments, and second_entropy takes 1"):
        load_exercises(path)
    assert ran == []


def test_an_exercise_file_imports_a_helper_module_beside_it(tmp_path, forget):
    import sys

    folder = tmp_path / "course"
    folder.mkdir()
    (folder / "entropy_helpers.py").write_text("import torch\n\ndef weights(g, tq, tk):\n"
                                               "    return torch.rand(tq, tk, generator=g).softmax(-1)\n")
    text = EXAMPLE.read_text().replace("import torch\n", "import torch\nfrom entropy_helpers import weights\n", 1)
    (folder / "entropy_exercises.py").write_text(text)
    before = list(sys.path)
    [ex] = load_exercises(folder / "entropy_exercises.py", draws=2)
    assert ex.id == ID and sys.path == before, "the folder is on the path only while the file loads"


def test_the_grader_hides_the_folder_of_the_file_that_defines_the_exercises(forget):
    from mha.grading.grader import exercise_dirs

    assert str(EXAMPLE.parent) in exercise_dirs(load_exercises(EXAMPLE))


# ----------------------------------------------------------------------------- grading

@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """`mha grade --exercises` on one submission per answer, with the class report."""
    folder = tmp_path_factory.mktemp("own")
    for name, text in ANSWERS.items():
        (folder / "submissions").mkdir(exist_ok=True)
        (folder / "submissions" / f"{name}.py").write_text(text)
    r = run("grade", folder / "submissions", "--exercises", EXAMPLE, "--json", folder / "grades.json",
            "--report", folder / "report", "--quiet")
    assert r.returncode == 0, r.stderr
    data = json.loads((folder / "grades.json").read_text())
    return {Path(s["path"]).stem: s for s in data["submissions"]}, folder


def test_mha_grade_exercises_grades_the_file_with_its_named_mistakes(graded):
    subs, folder = graded
    assert set(subs) == set(ANSWERS)
    for name, sub in subs.items():
        [e] = sub["exercises"]
        assert e["id"] == ID
        if name == "correct":
            assert e["score"] == e["max_score"] == 2
        elif name == "forbidden":
            assert e["status"] == "forbidden" and e["score"] == 0
        else:
            failed = [c for c in e["checks"] if not c["passed"]]
            assert failed and e["score"] < 2
            assert {c["mistake"] for c in failed} == {NAMED[name]}, (name, failed)
    page = (folder / "report" / "class-report.html").read_text()
    assert ">nan at zero weights<" in page and 'href="https://example.org/week-3/entropy#zero-weights"' in page


def test_mha_grade_and_mha_assign_refuse_a_broken_file_or_a_student_version(tmp_path, capsys, forget):
    from mha.cli import main

    broken = tmp_path / "broken.py"
    broken.write_text(EXAMPLE.read_text().replace("points=2,", "points=-1,"))
    (tmp_path / "sub.py").write_text(ANSWERS["correct"])
    assert main(["grade", str(tmp_path / "sub.py"), "--exercises", str(broken)]) == 2
    assert "mha grade: --exercises: broken.py: exercise 'entropy.attention_entropy': points must be a positive " \
           "number, got -1" in capsys.readouterr().err
    assert main(["assign", str(broken), "--out", str(tmp_path / "out")]) == 2
    assert "points must be a positive number, got -1" in capsys.readouterr().err and not (tmp_path / "out").exists()
    (tmp_path / "handout.json").write_text("{}")
    assert main(["grade", str(tmp_path / "sub.py"), "--exercises", str(tmp_path / "handout.json")]) == 2
    assert "that is a student version" in capsys.readouterr().err


@pytest.mark.skipif(os.getuid() != 0, reason="the worker hides folders only when the grader runs as root")
def test_a_submission_cannot_read_the_instructors_file(tmp_path, forget):
    from mha.grading.grader import grade_submission

    [ex] = load_exercises(EXAMPLE)
    probe = tmp_path / "probe.py"
    probe.write_text(f"""
import torch

def attention_entropy(weights):
    try:
        open({str(EXAMPLE)!r}).read()
        return torch.zeros(1)         # the reference's file is readable: no points
    except OSError:
        return -torch.special.xlogy(weights, weights).sum(-1)
""")
    r = grade_submission(probe, [ex], seed=1)
    assert r.score == r.max_score, r.exercises[0]


# ----------------------------------------------------------------------------- the student version

STUDENT = r"""
import json, sys
import nbformat

nb = nbformat.read(sys.argv[1], as_version=4)
code = [c.source for c in nb.cells if c.cell_type == "code"]
for answer in ["stub"] + sys.argv[2:]:
    print("==== ANSWER", answer, flush=True)
    ns = {}
    exec(code[0], ns)                                                # load_exercises('entropy_exercises.json')
    exec(open(answer + ".py").read() if answer != "stub" else code[1], ns)  # the student's function, or the stub
    result = eval(code[2], ns)                           # check('entropy.attention_entropy', attention_entropy)
    print("VERDICTS", json.dumps([v.passed for v in result.verdicts]), flush=True)
"""


def test_the_student_version_holds_no_reference_and_check_uses_it_in_a_fresh_process(graded, tmp_path, forget):
    from mha.cli import main

    assert main(["assign", str(EXAMPLE), "--out", str(tmp_path / "made")]) == 0
    assert sorted(p.name for p in (tmp_path / "made").iterdir()) == ["entropy_exercises.ipynb", "entropy_exercises.json"]
    handout = tmp_path / "handout"  # what a student gets, and nothing else
    handout.mkdir()
    for name in ("entropy_exercises.json", "entropy_exercises.ipynb"):
        shutil.copy(tmp_path / "made" / name, handout)
    text = (handout / "entropy_exercises.json").read_text()
    data = json.loads(text)
    [ex] = data["exercises"]
    assert len(ex["cases"]) == 3, "the public cases only"
    assert "def " not in text and "xlogy(weights" not in text and "_hidden" not in text
    assert all(c["expected"] is not None for c in ex["cases"])

    (tmp_path / "script.py").write_text(STUDENT)
    names = ["correct", "nan", "bits", "mean"]
    for name in names:
        (handout / f"{name}.py").write_text(ANSWERS[name])
    p = subprocess.run([sys.executable, str(tmp_path / "script.py"), "entropy_exercises.ipynb", *names],
                       cwd=handout, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    printed = dict(re.findall(r"==== ANSWER (\w+)\n(.*?)(?=\n==== ANSWER|\Z)", p.stdout, re.S))
    verdicts = {name: json.loads(re.search(r"VERDICTS (.*)", out).group(1)) for name, out in printed.items()}
    assert "not attempted yet" in printed["stub"] and verdicts["stub"] == []
    subs, _ = graded
    for name in names:
        public = [c["passed"] for c in subs[name]["exercises"][0]["checks"] if not c["hidden"]]
        assert verdicts[name] == public, f"check and the grader disagree on {name}"
        if NAMED[name]:
            hint = next(m["hint"] for m in ex["mistakes"] if m["name"] == NAMED[name])
            assert f"Hint ({NAMED[name]}): {hint}" in printed[name]
    assert "all 3 public checks pass" in printed["correct"]


def test_the_gradescope_autograder_zip_grades_the_file_too(tmp_path, forget):
    import zipfile

    from mha.grading.autograder import build_zip

    z = zipfile.ZipFile(build_zip(tmp_path / "ag.zip", exercises=[EXAMPLE]))
    assert z.read("exercises/entropy_exercises.py") == EXAMPLE.read_bytes()
    assert "--exercises /autograder/source/exercises/entropy_exercises.py" in z.read("run_autograder").decode()
    assert ID not in EXERCISES
    broken = tmp_path / "entropy_exercises.py"
    broken.write_text(EXAMPLE.read_text().replace("points=2,", "points=0,"))
    with pytest.raises(ExerciseFileError, match="points must be a positive number"):
        build_zip(tmp_path / "bad.zip", exercises=[broken])
