"""The batch grader: full marks, partial credit, bad input, reports, command line."""

from __future__ import annotations

import csv
import inspect
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from mha.exercises import EXERCISES, get, select
from mha.grading import extract, reports, sandbox
from mha.grading.answer_key import function_source, write_answer_key
from mha.grading.grader import grade_many, grade_submission
from mha.grading.sandbox import Limits
from mha.notebooks import STUB, write_student_notebooks

ROOT = Path(__file__).resolve().parents[1]
TOTAL = sum(e.points for e in EXERCISES.values())
FAST = Limits(exercise_s=10, startup_s=60, submission_s=180)


def fill_stubs(nb_path: Path, out: Path) -> Path:
    """A student notebook whose stubbed exercise functions are replaced by the model answers
    (the references, or a kernel exercise's kernel; with the helpers they use)."""
    nb = nbformat.read(nb_path, as_version=4)
    by_reference = {e.model_answer().__name__: e for e in EXERCISES.values()}
    for cell in nb.cells:
        names = re.findall(r"^def (\w+)\(", cell.source, re.M)
        if cell.cell_type == "code" and STUB in cell.source:
            ex = next((by_reference[n] for n in reversed(names) if n in by_reference), None)
            if ex is not None:
                cell.source = function_source(ex.model_answer(), ex.function)
    nbformat.write(nb, out)
    return out


def notebook(path: Path, *cells: str) -> Path:
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)
    return path


PARTIAL = '''
import math
import torch

def batched_head(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v      # forgot the scaling

def split_heads(x, num_heads):
    B, T, C = x.shape
    return x.view(B, T, num_heads, C // num_heads).transpose(1, 2)

def shapes(batch, seq_len, embed_dim, num_heads):
    B, T, C, h = batch, seq_len, embed_dim, num_heads
    return {"qkv": (B, T, 3 * C), "q_heads": (B, h, T, C // h), "scores": (B, h, T, T), "merged": (B, T, C)}

def mha_params(embed_dim, num_heads, bias):
    return 4 * embed_dim ** 2                      # forgot the biases

def causal_mask(q_len, k_len):
    return torch.ones(q_len, k_len).tril(k_len - q_len)   # float, not bool

def heads_into_batch(x, num_heads):
    raise IndexError("oops")

def max_kv_heads(memory_bytes, layers, num_heads, head_dim, seq_len, batch):
    return 0

def cross_gqa_params(embed_dim, num_heads, num_kv_heads, kdim, bias):
    return (4 * embed_dim ** 2) / 1.0
'''


VIEWS = '''
def heads_into_batch(x, num_heads):
    T, B, C = x.shape
    return x.view(T, B * num_heads, C // num_heads).transpose(0, 1)   # right only while x is contiguous
'''


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade a batch of sample submissions once; return {name: report}."""
    d = tmp_path_factory.mktemp("subs")
    key = write_answer_key(tmp_path_factory.mktemp("key") / "all_exercises.md")
    student = tmp_path_factory.mktemp("student")
    [stub_nb] = write_student_notebooks(student, [key])
    subs = {
        "stub": stub_nb,
        "full": fill_stubs(stub_nb, d / "full.ipynb"),
        "lesson": key,  # the answer key itself, solutions included (.md)
        "lessons": ROOT / "lessons",  # every lesson with its solutions, as one folder
        "views": d / "views.py",
        "partial": (d / "partial.py"),
        "not_json": d / "not_json.ipynb",
        "not_notebook": d / "not_notebook.ipynb",
        "empty": notebook(d / "empty.ipynb"),
        "renamed": notebook(d / "renamed.ipynb", "def split_head(x, num_heads):\n    return x",
                            "def heads_into_batch(x, extra, more):\n    return x"),
        "syntax": notebook(d / "syntax.ipynb", "def split_heads(x, num_heads)\n    return x",
                           "import torch\n%matplotlib inline\ndef heads_into_batch(x, num_heads):\n    return torch.zeros(1)"),
    }
    subs["partial"].write_text(PARTIAL)
    subs["views"].write_text(VIEWS)
    subs["not_json"].write_text("this is not JSON {")
    subs["not_notebook"].write_text(json.dumps([1, 2, 3]))
    reps = grade_many(list(subs.values()), limits=FAST, jobs=2)
    return dict(zip(subs, reps))


def by_id(report):
    return {e.id: e for e in report.exercises}


def test_filling_every_stub_with_the_reference_gets_full_marks(graded):
    r = graded["full"]
    assert r.score == r.max_score == TOTAL, reports.details(r)
    assert all(e.status == "graded" and all(c.passed for c in e.checks) for e in r.exercises)
    assert any(c.hidden for e in r.exercises for c in e.checks)


def test_a_lesson_in_markdown_with_its_solutions_gets_full_marks(graded):
    assert graded["lesson"].score == TOTAL, reports.details(graded["lesson"])


def test_the_lessons_folder_with_its_solutions_gets_full_marks_on_every_exercise_it_checks(graded):
    r = graded["lessons"]
    checked = set(re.findall(r'check\("([\w.]+)"', "".join(p.read_text() for p in (ROOT / "lessons").glob("*.md"))))
    mine = [e for e in r.exercises if e.id in checked]
    assert mine, "no lesson checks an exercise"
    assert all(e.score == e.max_score for e in mine), reports.details(r)


def test_an_answer_that_views_its_input_loses_points_on_non_contiguous_inputs(graded):
    e = by_id(graded["views"])["dims.heads_into_batch"]
    assert 0 < e.score < e.max_score, reports.details(graded["views"])
    failed = [c for c in e.checks if not c.passed]
    assert failed and all("use .reshape, or .contiguous() before .view" in c.message for c in failed)
    assert any(c.hidden for c in failed)


def test_every_hidden_draw_catches_a_view_of_a_non_contiguous_input():
    """The answer above fails a hidden check whatever the seed (it once passed them all
    when both non-contiguous draws had d = 1)."""
    import torch

    from mha.autograde.wire import noncontiguous

    ns = {"torch": torch}
    exec(VIEWS, ns)
    ex = EXERCISES["dims.heads_into_batch"]
    for seed in range(200):
        caught = False
        for case in ex.hidden_cases(seed):
            if case.noncontiguous:
                try:
                    ns["heads_into_batch"](noncontiguous(case.args[0]), case.args[1])
                except RuntimeError:
                    caught = True
        assert caught, seed


def test_a_failure_of_the_grader_itself_is_retried_and_never_stops_the_batch(monkeypatch, tmp_path):
    from mha.grading import grader

    calls = []
    real = grader.grade_submission

    def flaky(path, *args, **kwargs):
        calls.append(Path(path).name)
        if Path(path).name == "bad.py" or calls.count("good.py") == 1:
            raise SystemError("AST constructor recursion depth mismatch")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(grader, "grade_submission", flaky)
    (tmp_path / "good.py").write_text("def mha_params(embed_dim, num_heads, bias):\n    return 0\n")
    (tmp_path / "bad.py").write_text("x = 1\n")
    good, bad = grade_many([tmp_path / "good.py", tmp_path / "bad.py"], [get("params.mha_params")], jobs=1)
    assert calls.count("good.py") == 2 and good.exercises[0].status == "graded"
    assert calls.count("bad.py") == 2 and bad.score == 0 and bad.exercises[0].status == "crashed"
    assert "the grader failed on this submission (SystemError)" in bad.notes[0]


def test_lines_still_in_the_pipe_when_the_worker_exits_are_read(monkeypatch, tmp_path):
    """The watcher pauses after a select that timed out (until the worker has exited):
    the worker's last progress lines are then still in the pipe, and must count."""
    monkeypatch.setattr(sandbox, "PAUSE_AFTER_SELECT_TIMEOUT_S", 30.0)
    exercises = select(["dims"])
    sub = tmp_path / "dims.py"
    sub.write_text("".join(function_source(e.reference, e.function) for e in exercises))
    r = grade_submission(sub, exercises, limits=FAST, seed=3)
    assert r.score == r.max_score, reports.details(r)


def test_the_empty_stub_notebook_scores_zero_as_not_attempted(graded):
    r = graded["stub"]
    assert r.score == 0
    assert {e.status for e in r.exercises} == {"not attempted"}


def test_partial_credit_per_check_with_clear_messages(graded):
    r = graded["partial"]
    e = by_id(r)
    assert e["dims.split_heads"].score == e["dims.split_heads"].max_score
    assert 0 < e["dims.shapes"].score < e["dims.shapes"].max_score  # no ValueError
    assert any("should raise ValueError" in c.message for c in e["dims.shapes"].checks)
    assert e["params.mha_params"].score > 0  # right without biases
    assert any("biases" in c.message for c in e["params.mha_params"].checks)
    assert e["heads.batched_head"].score == 0
    assert any("sqrt(d)" in c.message for c in e["heads.batched_head"].checks)
    assert any("wrong dtype" in c.message for c in e["masking.causal_mask"].checks)
    assert all(c.message == "raised IndexError" for c in e["dims.heads_into_batch"].checks)
    assert e["params.max_kv_heads"].status == "wrong signature"
    assert "expected the signature max_kv_heads(memory_bytes" in e["params.max_kv_heads"].message
    assert any("return an int" in c.message for c in e["params.cross_gqa_params"].checks)
    assert e["masking.decoder_mask"].status == "missing"
    assert 0 < r.score < TOTAL


@pytest.mark.parametrize("name,words", [
    ("not_json", "not a Jupyter notebook (not JSON"),
    ("not_notebook", "not a Jupyter notebook (no list of cells)"),
])
def test_unreadable_files_score_zero_with_a_reason(graded, name, words):
    r = graded[name]
    assert r.score == 0 and words in r.notes[0]
    assert all(e.status == "unreadable" and words in e.message for e in r.exercises)


def test_an_empty_notebook_reports_every_function_missing(graded):
    r = graded["empty"]
    assert r.score == 0 and "no code cells" in " ".join(r.notes)
    assert {e.status for e in r.exercises} == {"missing"}


def test_renamed_functions_and_wrong_signatures_are_named(graded):
    e = by_id(graded["renamed"])
    assert "found split_head(...) - rename it to split_heads" in e["dims.split_heads"].message
    assert e["dims.heads_into_batch"].status == "wrong signature"


def test_a_rename_is_suggested_only_for_a_function_with_the_exercise_s_parameters():
    """A lesson's own helper with a similar name (one_head, ablated, half_losses) is not an answer
    under another name; a function with the stub's parameters is."""
    import ast

    from mha.grading.extract import find_function

    stmts = ast.parse("def one_head(x, w_q, w_k, w_v): pass\ndef ablated(layer, *heads, mean=None): pass\n"
                      "def half_losses(logits, tokens, half): pass\ndef split_head(x, num_heads): pass\n").body
    for name, params in (("combine_heads", ("head_outputs", "w_o")), ("ablate_head", ("head_outputs", "w_o", "head")),
                         ("alibi_slopes", ("num_heads",))):
        assert "rename" not in find_function(stmts, name, params).problem, name
    assert "found split_head(...) - rename it to split_heads" in find_function(stmts, "split_heads", ("x", "num_heads")).problem


def test_a_cell_with_a_syntax_error_is_skipped_and_magics_are_ignored(graded):
    r = graded["syntax"]
    assert any("syntax error" in n for n in r.notes)
    e = by_id(r)
    assert e["dims.split_heads"].status == "missing"
    assert e["dims.heads_into_batch"].status == "graded"  # ran, wrong shape
    assert all(c.message == "wrong shape" for c in e["dims.heads_into_batch"].checks)


def test_feedback_never_shows_hidden_inputs_or_expected_values(graded):
    for r in graded.values():
        for e in r.exercises:
            for c in e.checks:
                assert not re.search(r"expected (shape|dtype|\d)", c.message), c.message
                assert "got (" not in c.message and "got shape" not in c.message


def test_reports_json_csv_gradescope(graded, tmp_path):
    reps = [graded["full"], graded["partial"]]
    ex = select()
    reports.write_json(reps, ex, tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    assert [s["score"] for s in data["submissions"]] == [TOTAL, graded["partial"].score]
    reports.write_csv(reps, ex, tmp_path / "r.csv")
    rows = list(csv.reader(open(tmp_path / "r.csv")))
    assert rows[0][:2] == ["student", "file"] and rows[0][-2:] == ["total", "max"] and len(rows) == 3
    written = reports.write_gradescope(reps, tmp_path / "gs")
    gs = json.loads(written[0].read_text())
    assert gs["score"] == TOTAL and gs["max_score"] == TOTAL
    for t in gs["tests"]:
        assert set(t) >= {"name", "score", "max_score", "status", "output", "visibility"}
    assert abs(sum(t["score"] for t in gs["tests"]) - TOTAL) < 1e-6
    table = reports.table(reps, ex)
    assert "full" in table and f"{TOTAL:g}/{TOTAL:g}" in table


def test_single_submission_writes_gradescope_results_json(graded, tmp_path):
    [p] = reports.write_gradescope([graded["stub"]], tmp_path)
    assert p == tmp_path / "results.json"
    assert json.loads(p.read_text())["score"] == 0


def test_markdown_cells_are_read_with_their_options(tmp_path):
    md = "```{code-cell} ipython3\n---\ntags: [hide-input]\n---\nx = 1\n```\n" \
         "```{code-cell} ipython3\n:tags: [remove-cell]\ny = 2\n```\n"
    assert extract.markdown_cells(md) == ["x = 1", "y = 2"]


def test_pruning_keeps_only_what_the_functions_need():
    src = ("import torch\nimport matplotlib.pyplot as plt\nW = torch.ones(2)\nplt.plot([1])\n"
           "def helper(x):\n    return x * W\n"
           "def split_heads(x, num_heads):\n    return helper(x)\n"
           "torch.allclose = None\nprint('demo')\ncheck('dims.split_heads', split_heads)\n")
    stmts, _ = extract.parse_cells([src])
    prog = extract.program(stmts, {"split_heads"})
    assert "matplotlib" not in prog and "plot" not in prog and "print" not in prog
    assert "allclose" not in prog and "check(" not in prog
    assert "def helper" in prog and "W = torch.ones(2)" in prog and "import torch" in prog


def test_arrays_cross_as_raw_bytes_and_come_back_equal():
    import numpy as np

    from mha.autograde.wire import pack, unpack

    arrays = {"a0": np.arange(6, dtype=np.float32).reshape(2, 3), "a1": np.zeros((0, 4)),
              "a2": np.array(True), "a3": np.arange(5, dtype=np.int64)[::2], "a4": np.ones(3, np.float16)}
    index, data = pack(arrays)
    back = unpack(json.loads(json.dumps(index)), data)
    assert list(back) == list(arrays)
    for k, a in arrays.items():
        assert back[k].dtype == a.dtype and back[k].shape == a.shape and np.array_equal(back[k], a)
        assert not back[k].flags.writeable  # views of the bytes read from the worker


@pytest.mark.parametrize("index", [
    None, {"a0": 1}, [["a0", "float32", [2], 0, 1]],          # not a list of 4-item entries
    [["a0", "object", [1], 0]],                                # a dtype that could hold objects
    [["a0", "float32", [-1], 0]], [["a0", "float32", [2.0], 0]],  # impossible shapes
    [["a0", "float32", [1 << 40, 1 << 40], 0]],                # a size past the limit
    [["a0", "float64", [2], 0]],                               # more bytes than the buffer holds
    [["a0", "float32", [1], 9]], [["a0", "float32", [1], -4]],  # outside the buffer
    [["a" * 100, "float32", [1], 0]], [[0, "float32", [1], 0]],  # bad names
    [["a0", "float32", [1] * 40, 0]],                          # too many dimensions
])
def test_a_forged_array_index_is_refused(index):
    from mha.autograde.wire import MalformedResult, unpack

    with pytest.raises(MalformedResult):
        unpack(index, bytes(12))


def test_command_line_grades_and_writes_every_report(tmp_path):
    sub = tmp_path / "alice.py"
    sub.write_text(inspect.getsource(get("dims.split_heads").reference).replace("torch.Tensor", "object"))
    bad = tmp_path / "bob.ipynb"
    bad.write_text("nope")
    cmd = [sys.executable, "-m", "mha.cli", "grade", str(sub), str(bad), "--only", "dims.split_heads",
           "--json", str(tmp_path / "r.json"), "--csv", str(tmp_path / "r.csv"),
           "--gradescope", str(tmp_path / "gs"), "--jobs", "2"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, "one submission could not be read: " + r.stderr
    assert re.search(r"bob.ipynb: not graded: bob.ipynb is not a Jupyter notebook", r.stderr)
    assert re.search(r"alice\s+3\s+3/3", r.stdout) and re.search(r"bob\s+bad\s+0/3", r.stdout)
    assert "[2/2]" in r.stderr
    assert json.loads((tmp_path / "gs/alice/results.json").read_text())["score"] == 3
    assert (tmp_path / "r.csv").read_text().count("\n") == 3


def test_command_line_rejects_bad_arguments(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "mha.cli", *a], capture_output=True,  # noqa: E731
                                    text=True, timeout=120)
    r = run("grade", str(tmp_path / "missing.ipynb"))
    assert r.returncode == 2 and "no such file" in r.stderr
    (tmp_path / "x.py").write_text("")
    r = run("grade", str(tmp_path / "x.py"), "--only", "nothing")
    assert r.returncode == 2 and "no exercise matches" in r.stderr
    r = run("grade", str(tmp_path / "x.py"), str(tmp_path / "x.py"), "--only", "dims")
    assert r.returncode == 2 and "is given twice" in r.stderr
    r = run("grade", str(tmp_path / "x.py"), "--only", "dims", "--roster", str(tmp_path / "none.csv"))
    assert r.returncode == 2 and "--roster" in r.stderr and "cannot read it" in r.stderr
    # An output that cannot be written is named before any grading (nothing graded, no table).
    r = run("grade", str(tmp_path / "x.py"), "--only", "dims.split_heads", "--json", str(tmp_path / "x.py" / "g.json"))
    assert r.returncode == 2 and "--json" in r.stderr and "is a file, not a folder" in r.stderr and r.stdout == ""
    r = run("grade", str(tmp_path / "x.py"), "--csv", str(tmp_path))
    assert r.returncode == 2 and "--csv" in r.stderr and "is a folder" in r.stderr and r.stdout == ""
    r = run("grade", str(tmp_path / "x.py"), "--report", str(tmp_path / "x.py"))
    assert r.returncode == 2 and "--report" in r.stderr and "not a folder" in r.stderr and r.stdout == ""


def test_two_submissions_of_one_name_get_a_name_each_and_a_gradescope_file_each(tmp_path):
    from mha.grading.grader import SubmissionReport, unique_names

    paths = [tmp_path / "a" / "li_wei.ipynb", tmp_path / "b" / "li_wei.ipynb", tmp_path / "a" / "ana",
             tmp_path / "x" / "c" / "bo", tmp_path / "y" / "c" / "bo", tmp_path / "Li_Wei.py"]
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.touch() if p.suffix else p.mkdir()
    assert unique_names(paths) == ["li_wei (a)", "li_wei (b)", "ana", "bo (x, c)", "bo (y, c)",
                                   f"Li_Wei ({tmp_path.name})"]
    with pytest.raises(ValueError, match="is given twice"):
        unique_names([tmp_path / "a", tmp_path / "b" / ".." / "a"])
    assert unique_names([tmp_path / "a", tmp_path / "a", tmp_path / "ana"], repeats=True) == ["a", "a (2)", "ana"]
    reps = [SubmissionReport(n, str(p), 1.0, 3.0) for n, p in zip(unique_names(paths), paths)]
    written = reports.write_gradescope(reps, tmp_path / "gs")
    assert len({p.parent.name.casefold() for p in written}) == len(paths)
    assert json.loads((tmp_path / "gs" / "li_wei (b)" / "results.json").read_text())["score"] == 1.0
    clash = [SubmissionReport("li_wei", "a/li_wei"), SubmissionReport("Li_Wei", "b/Li_Wei")]
    with pytest.raises(ValueError, match="a/li_wei and b/Li_Wei would both be written to"):
        reports.write_gradescope(clash, tmp_path / "clash")
    assert not (tmp_path / "clash").exists(), "nothing is written"


STUB_CELL = 'def causal_mask(q_len, k_len):\n    """doc"""\n    raise NotImplementedError("Write your solution here")\n'
ANSWER_CELL = "import torch\ndef causal_mask(q_len, k_len):\n    return torch.ones(q_len, k_len).bool()\n"


def test_of_several_files_defining_a_function_the_answer_is_graded_not_the_stub():
    copy, handout = "05-causal-masking-Copy1.ipynb", "05-causal-masking.ipynb"
    stmts, notes = extract.parse_cells([ANSWER_CELL, "x = (", STUB_CELL], [copy, handout, handout])
    assert notes == [f"{handout}, code cell 1 has a syntax error (line 1: '(' was never closed); it was skipped"]
    assert extract.is_stub(stmts[-1]) and not extract.is_stub(stmts[1])
    kept, notes = extract.prefer_answers(stmts, ["causal_mask", "split_heads"])
    assert [extract.origin(s) for s in kept if getattr(s, "name", "") == "causal_mask"] == [copy]
    assert notes == [f"causal_mask is defined in {copy} and {handout}; graded the one in {copy} "
                     "(the other is the unanswered stub)"]
    both, notes = extract.prefer_answers(extract.parse_cells([ANSWER_CELL, ANSWER_CELL], ["a.ipynb", "b.ipynb"])[0],
                                         ["causal_mask"])
    assert [extract.origin(s) for s in both if getattr(s, "name", "") == "causal_mask"] == ["b.ipynb"]
    assert notes == ["causal_mask is defined in a.ipynb and b.ipynb; graded the one in b.ipynb"]


def test_an_exercise_file_among_the_submissions_is_not_graded_as_a_student(tmp_path):
    import shutil

    shutil.copy(ROOT / "book" / "examples" / "entropy_exercises.py", tmp_path / "entropy_exercises.py")
    (tmp_path / "alice.py").write_text("def attention_entropy(weights):\n    return weights.sum(-1)\n")
    r = subprocess.run([sys.executable, "-m", "mha.cli", "grade", str(tmp_path), "--exercises",
                        str(tmp_path / "entropy_exercises.py"), "--exercises-draws", "2", "--json",
                        str(tmp_path / "g.json")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "entropy_exercises.py is an exercise file given with --exercises: not graded as a submission" in r.stderr
    assert "on 2 hidden draws" in r.stderr
    assert [s["student"] for s in json.loads((tmp_path / "g.json").read_text())["submissions"]] == ["alice"]


def test_autograder_zip_holds_setup_run_and_the_course(tmp_path):
    from mha.grading.autograder import build_zip

    z = zipfile.ZipFile(build_zip(tmp_path / "ag.zip", only=["dims"]))
    names = set(z.namelist())
    assert {"setup.sh", "run_autograder", "course/pyproject.toml", "course/constraints.txt",
            "course/src/mha/grading/worker.py"} <= names
    setup = z.read("setup.sh").decode()
    assert "torch==2.13.0" in setup and "download.pytorch.org/whl/cpu" in setup
    run = z.read("run_autograder").decode()
    assert "/autograder/submission" in run and "--gradescope /autograder/results" in run
    assert "--only dims" in run
    assert z.getinfo("run_autograder").external_attr >> 16 & 0o111
