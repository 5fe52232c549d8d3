"""A student's path, as a new user walks it: from the built website only, into an empty
folder and a fresh virtual environment, install the package the site offers, run a
downloaded student notebook headlessly from top to bottom, then answer every lesson's
exercises and run each lesson's imports and exercises with the checks (the lessons one after
another in a shared kernel), and grade the answered notebooks with the grader of the
installed package. (The lessons' own code, above their exercises, runs in the site build;
running it a second time here would double the suite's cost.)

The website offers, next to each lesson's student notebook, the `mha` wheel that `make book`
builds, and the page "How to use this course" gives the command that installs it. Here the
CPU build of torch comes from `pip install torch==2.13.0` (what this machine's package index
serves) instead of the extra index the page names for students elsewhere, and goes into the
fresh environment while the site builds (tests/conftest.py), as it needs nothing of the site.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import unquote

import nbformat
import pytest
from bs4 import BeautifulSoup

from conftest import ARTIFACTS, ROOT, exercise_part, make_student_env, prepared_student_env, run_id, student_environ
from mha.grading import extract
from mha.notebooks import BEGIN, END, STUB

LESSON = "04-parameter-counts"  # a short lesson with three exercises
LESSONS = sorted(p.stem for p in (ROOT / "lessons").glob("*.md") if 'check("' in p.read_text())
RUNNER = """\
import sys, nbformat, nbclient
nb = nbformat.read(sys.argv[1], as_version=4)
nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=len(sys.argv) > 3).execute()
nbformat.write(nb, sys.argv[2])
"""


def downloads(html_dir: Path, page: str, suffix: str) -> list[Path]:
    """Files a page offers for download (Sphinx's {download} role) that end in ``suffix``."""
    page_path = html_dir / f"{page}.html"
    doc = BeautifulSoup(page_path.read_text(encoding="utf-8"), "html.parser")
    hrefs = [a["href"] for a in doc.select("a.download[href]") if a["href"].endswith(suffix)]
    return [(page_path.parent / unquote(h)).resolve() for h in hrefs]


def run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=student_environ(), **kw)


@pytest.fixture(scope="module")
def student_folder(built_site, tmp_path_factory) -> Path:
    """An empty folder holding only what a student downloads from the site: the wheel and
    every lesson's student notebook."""
    folder = tmp_path_factory.mktemp("student-path")
    wheels = downloads(built_site, "book/how-to-use", ".whl")
    assert len(wheels) == 1 and wheels[0].is_file(), f"how-to-use offers no wheel: {wheels}"
    shutil.copy(wheels[0], folder / wheels[0].name)
    for lesson in LESSONS:
        lesson_wheels = downloads(built_site, f"lessons/{lesson}", ".whl")
        assert [w.name for w in lesson_wheels] == [wheels[0].name], f"{lesson} must offer the same wheel"
        notebooks = downloads(built_site, f"lessons/{lesson}", ".ipynb")
        assert len(notebooks) == 1 and notebooks[0].is_file(), f"no student notebook on {lesson}: {notebooks}"
        shutil.copy(notebooks[0], folder / notebooks[0].name)
    return folder


@pytest.fixture(scope="module")
def fresh_env(request, student_folder) -> Path:
    """A new virtual environment with nothing of the project's in it, but torch (the CPU
    build), ipykernel and nbclient: made during the site build when that started with the
    run (conftest.py), else now."""
    env = prepared_student_env(run_id(request.config))
    if env is None:
        env = student_folder / "env"
        problem = make_student_env(env)
        assert not problem, problem
    return env


def test_install_command_on_the_site_names_the_offered_wheel(built_site, student_folder):
    wheel = next(student_folder.glob("*.whl")).name
    doc = BeautifulSoup((built_site / "book/how-to-use.html").read_text(encoding="utf-8"), "html.parser")
    commands = [pre.get_text() for pre in doc.select("pre")]
    assert any(f"python -m pip install {wheel} jupyterlab" in c for c in commands), commands


def test_student_path_from_the_site_to_a_running_notebook(student_folder, fresh_env):
    py = fresh_env / "bin" / "python"
    wheel = next(student_folder.glob("*.whl"))
    notebook = student_folder / f"{LESSON}.ipynb"
    nb = nbformat.read(notebook, as_version=4)
    first_code = next(c for c in nb.cells if c.cell_type == "code")

    # 1. Without the package, the notebook's first code cell says exactly what to run.
    proc = run([py, "-c", first_code.source], cwd=student_folder)
    assert proc.returncode != 0
    assert "The course package `mha` is not installed" in proc.stderr
    assert f"python -m pip install {wheel.name} jupyterlab" in proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr

    # 2. Install the offered wheel (torch, the CPU build, and a notebook runner are in:
    # see fresh_env).
    proc = run([py, "-m", "pip", "install", "--quiet", "--no-compile", wheel.name], cwd=student_folder)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    proc = run([py, "-c", "import mha, sys; print(mha.__file__)"], cwd=student_folder)
    assert proc.returncode == 0 and str(fresh_env) in proc.stdout, "mha must come from the fresh environment"

    # 3. Run the downloaded notebook headlessly; every cell runs, the stubs are reported.
    (student_folder / "run.py").write_text(RUNNER)
    out = student_folder / "executed.ipynb"
    proc = run([py, "run.py", notebook.name, out.name], cwd=student_folder, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    executed = nbformat.read(out, as_version=4)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(out, ARTIFACTS / f"student-path-{LESSON}.ipynb")
    code = [c for c in executed.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "a cell did not run"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    checks = [c for c in code if c.source.lstrip().startswith("check(")]
    assert len(checks) >= 3
    for c in checks:
        text = "".join(o.get("text", "") for o in c.outputs)
        assert "not attempted" in text, text


def answer(notebook: Path, lesson: str, out: Path) -> int:
    """The downloaded notebook with every stub answered as a student who got it right would:
    the cell that defines the function, with the body the lesson's solution gives (taken from
    the lesson's source here, since the site hides it). Returns the number of answers."""
    solutions = {}
    for cell in extract.markdown_cells((ROOT / "lessons" / f"{lesson}.md").read_text()):
        if BEGIN in cell:
            body = "\n".join(line for line in cell.splitlines() if line.strip() not in (BEGIN, END))
            for name in re.findall(r"^def (\w+)\(", cell, re.M):
                solutions[name] = body
    nb = nbformat.read(notebook, as_version=4)
    answered = 0
    for cell in nb.cells:
        if cell.cell_type == "code" and STUB in cell.source:
            name = re.findall(r"^def (\w+)\(", cell.source, re.M)[-1]
            cell.source = solutions[name]
            answered += 1
    nbformat.write(nb, out)
    return answered


@pytest.fixture(scope="module")
def installed(student_folder, fresh_env) -> Path:
    """The fresh environment with the offered wheel installed: its python."""
    py = fresh_env / "bin" / "python"
    wheel = next(student_folder.glob("*.whl"))
    proc = run([py, "-m", "pip", "install", "--quiet", "--no-compile", wheel.name], cwd=student_folder)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (student_folder / "run.py").write_text(RUNNER)
    return py


def kernels_for(lessons: list[str]) -> list[list[str]]:
    """Which lessons share a kernel: all of them, but for those that use Triton's interpreter,
    which go together in a kernel of their own. The interpreter must be switched on before
    anything imports triton, and torch itself does when a lesson compiles (torch.compile,
    flex_attention); a student runs each lesson in its own kernel, where that never happens."""
    triton = [lesson for lesson in lessons
              if re.search(r"^import triton", (ROOT / "lessons" / f"{lesson}.md").read_text(), re.M)]
    return [group for group in ([x for x in lessons if x not in triton], triton) if group]


@pytest.fixture(scope="module")
def answered_course(student_folder, installed) -> dict:
    """Every lesson's downloaded notebook answered; the exercise parts of all of them (with
    each lesson's setup and imports cells) run in the fresh environment, one lesson after
    another in a shared kernel (kernels_for), errors recorded rather than raised so that each
    lesson's test names its own; and the answered notebooks, whole, graded by one call of the
    installed package's `mha grade` against every exercise of the course. Two kernels and one
    grader for the fourteen lessons: the checks of one run per lesson for a fraction of its
    time. Returns, per lesson: the number of answers, its executed cells, its graded exercises."""
    answers, executed = {}, []
    metadata = nbformat.read(student_folder / f"{LESSON}.ipynb", as_version=4).metadata
    for k, group in enumerate(kernels_for(LESSONS)):
        cells = []
        for lesson in group:
            answered = student_folder / f"{lesson}-answered.ipynb"
            answers[lesson] = answer(student_folder / f"{lesson}.ipynb", lesson, answered)
            for cell in exercise_part(nbformat.read(answered, as_version=4)).cells:
                if cell.cell_type == "code":
                    cell.metadata["lesson"] = lesson
                    cells.append(cell)
        nb = nbformat.v4.new_notebook(cells=cells, metadata=metadata)
        nbformat.write(nb, student_folder / f"exercises-{k}.ipynb")
        proc = run([installed, "run.py", f"exercises-{k}.ipynb", f"exercises-{k}-executed.ipynb", "allow errors"],
                   cwd=student_folder, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        executed += nbformat.read(student_folder / f"exercises-{k}-executed.ipynb", as_version=4).cells

    proc = run([installed, "-m", "mha.cli", "grade", *[f"{lesson}-answered.ipynb" for lesson in LESSONS],
                "--json", "grades.json", "--quiet"], cwd=student_folder, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((student_folder / "grades.json").read_text())
    lesson_of = {e["id"]: e["lesson"] for e in report["exercises"]}
    by_file = {Path(s["path"]).name: s for s in report["submissions"]}
    return {lesson: {"answers": answers[lesson],
                     "cells": [c for c in executed if c.metadata.get("lesson") == lesson],
                     "graded": [e for e in by_file[f"{lesson}-answered.ipynb"]["exercises"]
                                if lesson_of[e["id"]] == lesson]}
            for lesson in LESSONS}


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_lesson_answered_passes_its_checks_and_gets_full_marks(answered_course, lesson):
    """A downloaded notebook answered: its imports and its exercises run in the fresh
    environment without an error (the lesson needs nothing the offered wheel does not install),
    every check cell says that all public checks pass, and the installed package's
    `mha grade` gives the whole answered notebook full marks on every exercise of the lesson."""
    run_ = answered_course[lesson]
    n = run_["answers"]
    assert n >= 3, f"{lesson}: {n} exercises to answer"
    errors = [o for c in run_["cells"] for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{lesson}: {errors[0]['ename']}: {errors[0]['evalue']}"
    checks = [c for c in run_["cells"] if c.source.lstrip().startswith("check(")]
    assert len(checks) == n
    for c in checks:
        text = "".join(o.get("text", "") for o in c.outputs)
        assert re.search(r"all \d+ public checks pass", text) and "FAIL" not in text, text
    graded = run_["graded"]
    assert len(graded) == n
    assert all(e["score"] == e["max_score"] > 0 for e in graded), json.dumps(graded, indent=1)[:3000]
