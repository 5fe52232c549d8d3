"""Student notebooks: stubs instead of solutions, plain Markdown, and they run."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from conftest import exercise_part
from mha.exercises import EXERCISES
from mha.grading.answer_key import write_answer_key
from mha.notebooks import STUB, myst_to_markdown, solution_blocks, stub_solutions, write_student_notebooks

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "lessons").glob("*.md"))
FIXTURE = ROOT / "tests/fixtures/grading/myst_syntax.md"  # MyST syntax to convert, no exercises
KEY = "answer_key"  # every exercise solved by its reference, made by mha.grading.answer_key
NAMES = [p.stem for p in LESSONS] + [FIXTURE.stem, KEY]


def test_stub_keeps_signature_and_docstring_and_drops_the_solution():
    src = 'def f(x):\n    """Doc."""\n    # BEGIN SOLUTION\n    y = x + 1\n    return y\n    # END SOLUTION\n'
    out = stub_solutions(src)
    assert out == f'def f(x):\n    """Doc."""\n    {STUB}'
    assert solution_blocks(src) == ["    y = x + 1\n    return y"]


@pytest.mark.parametrize("bad", ["# BEGIN SOLUTION\nx", "x\n# END SOLUTION",
                                 "# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION"])
def test_unbalanced_markers_are_an_error(bad):
    with pytest.raises(ValueError, match="SOLUTION"):
        stub_solutions(bad)


def test_myst_syntax_becomes_plain_markdown():
    md = myst_to_markdown(
        "(lbl)=\n```{exercise-start} Split\n:label: x\n```\nDo it {cite}`k1`.\n```{exercise-end}\n```\n"
        "```{solution-start} x\n:class: dropdown\n```\n"
        ":::{note}\nSee {ref}`this <lbl>` and {math}`a^2` and {glue:text}`val:.2f`.\n:::\n"
        "```{dropdown} More\nhidden text\n```\n```{math}\nx = 1\n```\n% a comment\n",
        {"k1": "Vaswani et al. 2017"})
    assert "**Exercise: Split**" in md and "(Vaswani et al. 2017)" in md
    assert "> **Note**" in md and "> See this and $a^2$ and `val` (printed as `val = ...` when you run" in md
    assert "<details><summary>More</summary>" in md and "$$\nx = 1\n$$" in md
    for myst in ("{", ":label:", ":class:", "(lbl)=", "% a comment", ":::"):
        assert myst not in md, myst


def _built_lesson(root: Path, text: str, glued: dict | None) -> Path:
    """A lesson at root/lessons/x.md and, for ``glued``, the record a site build leaves of it."""
    import json

    (root / "lessons").mkdir(parents=True)
    lesson = root / "lessons" / "x.md"
    lesson.write_text(text)
    if glued is not None:
        record = root / "_build" / "jupyter_execute" / "lessons"
        record.mkdir(parents=True)
        (record / "x.glue.json").write_text(json.dumps(
            {k: {"data": {"text/plain": v}, "metadata": {}, "output_type": "display_data"} for k, v in glued.items()}))
    return lesson


LESSON_WITH_VALUES = ("# A lesson\n\n```{code-cell} ipython3\nglue('share', 0.98351)\n```\n\n"
                      "The head puts {glue:text}`share:.0%` of its weight on {glue:}`token`; "
                      "{glue:text}`share:.2f` again, and {glue:text}`steps` steps.\n")


def test_a_student_notebook_made_after_the_site_build_shows_the_page_s_values(tmp_path):
    lesson = _built_lesson(tmp_path, LESSON_WITH_VALUES, {"share": "0.98351", "token": "'dog'", "steps": "265"})
    [path] = write_student_notebooks(tmp_path / "out", [lesson])
    text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    assert "The head puts 98% of its weight on dog; 0.98 again, and 265 steps." in text
    assert "website's run" in text


def test_without_a_site_build_a_student_notebook_says_once_where_each_value_is_printed(tmp_path):
    lesson = _built_lesson(tmp_path, LESSON_WITH_VALUES, None)
    [path] = write_student_notebooks(tmp_path / "out", [lesson])
    text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    assert text.count("`share` (printed as `share = ...` when you run the code above)") == 1
    assert "; `share` again" in text and "`steps` (printed as" in text and "stands for a value" in text


def test_a_site_build_older_than_the_lesson_is_not_used(tmp_path):
    import os

    lesson = _built_lesson(tmp_path, LESSON_WITH_VALUES, {"share": "0.5", "token": "'cat'", "steps": "1"})
    os.utime(lesson, (lesson.stat().st_mtime + 60,) * 2)
    [path] = write_student_notebooks(tmp_path / "out", [lesson])
    text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    assert "50%" not in text and "`share` (printed as" in text


def test_the_cells_after_a_prediction_that_reveal_its_answer_are_folded(tmp_path):
    lesson = _built_lesson(tmp_path, "# L\n\n```{code-cell} ipython3\ncheck('x', f)\n```\n\n"
                           '+++ {"tags": ["after-you-answer"]}\n\nThe measurement:\n\n'
                           "```{code-cell} ipython3\n:tags: [after-you-answer]\nassert measured == 48\n```\n\n"
                           '+++ {"tags": ["after-you-answer"]}\n\nIt is 48.\n\n+++\n\nNext.\n', None)
    [path] = write_student_notebooks(tmp_path / "out", [lesson])
    cells = nbformat.read(path, as_version=4).cells
    at = next(i for i, c in enumerate(cells) if c.source.startswith("check("))
    note, text, code, stated, after = cells[at + 1:at + 6]
    assert note.source.startswith("**After you answer.**")
    assert text.source.startswith("<details><summary>After you answer</summary>") and "The measurement" in text.source
    assert code.metadata["jupyter"]["source_hidden"] and "48" in code.source
    assert stated.source.startswith("<details>") and after.source == "Next."
    assert sum(c.source.startswith("**After you answer.**") for c in cells) == 1


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    """name -> student notebook, for every lesson, the fixture and the answer key."""
    key = write_answer_key(tmp_path_factory.mktemp("key") / f"{KEY}.md")
    out = tmp_path_factory.mktemp("student")
    return {p.stem: p for p in write_student_notebooks(out, LESSONS + [FIXTURE, key])}


def test_student_notebooks_have_no_solutions_and_no_myst(student):
    assert sorted(student) == sorted(NAMES)
    for path in student.values():
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        text = "\n".join(c.source for c in nb.cells)
        assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
        for c in nb.cells:
            if c.cell_type == "markdown":
                for myst in ("```{", ":::{", "{cite}", "{glue", "{ref}", ":label:"):
                    assert myst not in c.source, (path.name, myst)


def test_student_notebook_keeps_check_cells_and_stubs(student):
    nb = nbformat.read(student[KEY], as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert sum(STUB in c for c in code) == len(EXERCISES)
    assert sum(c.startswith("check(") for c in code) == len(EXERCISES)


def test_the_myst_fixture_becomes_plain_markdown(student):
    nb = nbformat.read(student[FIXTURE.stem], as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "> **Note**" in text and "Vaswani" in text


@pytest.fixture(scope="module")
def kernel():
    """One Jupyter kernel for every notebook of the module (starting one, with torch, takes
    seconds); each notebook starts with its namespace emptied (``%reset -f``) in a folder
    of its own, so nothing one notebook defined reaches the next."""
    from jupyter_client.manager import KernelManager

    km = KernelManager(kernel_name="python3")
    km.start_kernel()
    yield km
    km.shutdown_kernel(now=True)


@pytest.mark.parametrize("name", NAMES)
def test_student_notebook_exercises_run_and_report_the_stubs(student, name, tmp_path, kernel):
    """Every check cell reports 'not attempted' and the exercises run to the end on the
    lesson's imports alone (an exercise must not depend on the lesson's variables)."""
    from nbclient import NotebookClient

    nb = exercise_part(nbformat.read(student[name], as_version=4))
    fresh = nbformat.v4.new_code_cell(f"%reset -f\nimport os\nos.chdir({str(tmp_path)!r})\ndel os")
    nb.cells.insert(0, fresh)
    NotebookClient(nb, km=kernel, timeout=120).execute()
    nb.cells.remove(fresh)
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    n_checks = sum(c.source.startswith("check(") for c in nb.cells if c.cell_type == "code")
    assert n_checks >= (3 if name not in (FIXTURE.stem,) else 0)
    assert outputs.count("not attempted yet") == n_checks


@pytest.mark.parametrize("exercise_id", [i for i, ex in EXERCISES.items() if ex.prediction])
def test_what_reveals_a_prediction_s_answer_comes_after_its_check_folded(student, exercise_id):
    """In the student notebook, the cells after a prediction's check (the measurement, and the
    text that states the number) up to the next exercise are folded, "after you answer"."""
    from mha.notebooks import FOLDED_NOTE

    ex = EXERCISES[exercise_id]
    cells = nbformat.read(student[ex.lesson], as_version=4).cells
    at = next(i for i, c in enumerate(cells) if c.cell_type == "code" and c.source.startswith(f'check("{exercise_id}"'))
    after = []
    for c in cells[at + 1:]:
        if c.cell_type == "markdown" and c.source.startswith("**Exercise"):
            break
        after.append(c)
    assert after and after[0].source == FOLDED_NOTE, exercise_id
    for c in after[1:]:
        if c.cell_type == "code":
            assert c.metadata.get("jupyter", {}).get("source_hidden"), (exercise_id, c.source[:80])
        else:
            assert c.source.startswith("<details><summary>After you answer</summary>"), (exercise_id, c.source[:80])
