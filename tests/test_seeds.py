"""`make seeds` (tools/seeds.py): every lesson re-executed by nbval with another SEED put right
after its `parameters` cell, and a table of what passed. The real lessons run in CI
(`.ci/run` calls `make seeds` after `make test`); here the machinery runs on small made-up
lessons, so that these tests stay quick."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("tools_seeds", ROOT / "tools" / "seeds.py")
seeds = sys.modules["tools_seeds"] = importlib.util.module_from_spec(spec)   # dataclasses look it up there
spec.loader.exec_module(seeds)

HEADER = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A lesson
"""


def lesson(path: Path, *cells: str) -> Path:
    """A MyST lesson with these code cells (a cell starting with ':tags:' keeps its options)."""
    body = "".join(f"\n```{{code-cell}} ipython3\n{textwrap.dedent(cell).strip()}\n```\n" for cell in cells)
    path.write_text(HEADER + body)
    return path


PARAMETERS = """\
:tags: [parameters]

SEED = 0
"""


def test_the_seed_goes_right_after_the_parameters_cell(tmp_path):
    nb = jupytext.read(lesson(tmp_path / "01-a.md", "import random", PARAMETERS, "x = SEED"))
    seeded = seeds.with_seed(nb, 7)
    sources = [cell.source for cell in seeded.cells if cell.cell_type == "code"]
    assert sources == ["import random", "SEED = 0", "SEED = 7", "x = SEED"]
    injected = seeded.cells[[c.source for c in seeded.cells].index("SEED = 7")]
    assert injected.metadata["tags"] == ["injected-parameters"]
    nbformat.validate(seeded)                       # a valid notebook (cell ids where the others have them)
    assert [c.source for c in nb.cells].count("SEED = 7") == 0   # the lesson itself is untouched


@pytest.mark.parametrize("cells, problem", [
    (("SEED = 0",), "no code cell tagged 'parameters'"),
    ((PARAMETERS, PARAMETERS), "2 code cells tagged 'parameters'"),
])
def test_a_lesson_without_exactly_one_parameters_cell_is_refused_by_name(tmp_path, cells, problem):
    nb = jupytext.read(lesson(tmp_path / "01-a.md", *cells))
    with pytest.raises(seeds.NoParametersCell, match=problem):
        seeds.with_seed(nb, 1)


def test_lessons_that_train_get_five_held_out_seeds_and_the_others_one(tmp_path):
    trains = lesson(tmp_path / "01-train.md", PARAMETERS, "import torch\nopt = torch.optim.Adam")
    plain = lesson(tmp_path / "02-plain.md", PARAMETERS, "x = 1")
    missing = lesson(tmp_path / "03-missing.md", "x = 1")
    runs = seeds.prepare([trains, plain, missing], None, tmp_path / "scratch")
    assert [(r.lesson, r.seed) for r in runs] == [
        *(("01-train", s) for s in seeds.TRAINING_SEEDS), *(("02-plain", s) for s in seeds.OTHER_SEEDS),
        ("03-missing", None)]
    # held out: no page trains SEED .. SEED + 40 with SEED = 0 near them
    assert len(seeds.TRAINING_SEEDS) >= 5 and min(seeds.TRAINING_SEEDS + seeds.OTHER_SEEDS) > 100
    assert runs[-1].problem and not runs[-1].ok
    assert all(r.notebook.is_file() for r in runs[:-1])
    assert seeds.prepare([plain], [5, 6], tmp_path / "other")[1].seed == 6


def test_failure_lines_name_the_assert_and_the_error():
    report = ("\x1b[94mCell 4: Cell execution caused an exception\n\nInput:\nassert x < 3\n\nTraceback:\n"
              "\x1b[32m----> \x1b[39m\x1b[32m2\x1b[39m \x1b[38;5;28;01massert\x1b[39;00m x < 3, f\"x={x}\"\n"
              "\n\x1b[31mAssertionError\x1b[39m: x=5\n")
    assert seeds.first_lines(report) == 'cell 4: assert x < 3, f"x={x}" | AssertionError: x=5'
    assert seeds.first_lines(report, injected_at=1).startswith("code cell 4:")   # after the SEED cell
    assert seeds.first_lines(report, injected_at=6).startswith("code cell 5:")   # before it, from 1


def test_a_run_executes_every_seed_and_reports_failures_without_stopping(tmp_path, capsys):
    lessons = tmp_path / "lessons"
    lessons.mkdir()
    lesson(lessons / "01-holds.md", PARAMETERS, "assert SEED >= 0")
    lesson(lessons / "02-only-small-seeds.md", PARAMETERS, 'assert SEED < 2, f"SEED={SEED}"', "print('after')")
    lesson(lessons / "03-no-parameters.md", "x = 1")
    status = seeds.main(["--lessons-dir", str(lessons), "--scratch", str(tmp_path / "scratch"),
                         "--seeds", "1", "2", "--workers", "1"])
    out = capsys.readouterr().out
    table = out[out.index("lesson "):]
    rows = {tuple(line.split()[:2]): line for line in table.splitlines()[2:] if line.strip() and line[0].isdigit()}
    assert status == 1
    assert "pass" in rows["01-holds", "1"] and "pass" in rows["01-holds", "2"]
    assert "pass" in rows["02-only-small-seeds", "1"]
    assert ('FAIL code cell 2: assert SEED < 2, f"SEED={SEED}" | AssertionError: SEED=2'
            in rows["02-only-small-seeds", "2"])                 # the lesson's second code cell
    assert "NOT RUN: no code cell tagged 'parameters'" in rows["03-no-parameters", "-"]
    assert "4 of 5 runs passed" not in out and "3 of 5 runs passed" in out
