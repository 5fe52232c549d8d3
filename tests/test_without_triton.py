"""Where Triton cannot be installed (macOS, Windows: it publishes wheels for Linux only), the
course still works: `import mha` does not import Triton, `mha.flash_attention` falls back
(tests/test_flash.py), lesson 14's notebook runs from top to bottom with a notice in place of
each cell that needs Triton, and the book builds with that page shown but not run
(book/_ext/needs_triton.py). Triton's absence is simulated by blocking its import."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "lessons" / "14-flash-attention-in-triton.md"

spec = importlib.util.spec_from_file_location("needs_triton", ROOT / "book" / "_ext" / "needs_triton.py")
needs_triton = importlib.util.module_from_spec(spec)
spec.loader.exec_module(needs_triton)


def test_lesson_14_runs_to_its_end_without_triton_and_says_why_cells_are_skipped():
    nb = jupytext.read(LESSON)
    nb.cells.insert(0, nbformat.v4.new_code_cell('import sys\nsys.modules["triton"] = None   # as on macOS'))
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(LESSON.parent)}}).execute()   # raises if a cell fails
    code = [cell for cell in nb.cells if cell.cell_type == "code"][1:]
    text = ["".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream") for cell in code]
    skipped = [t for t in text if t.startswith("Skipped: this cell needs Triton")]
    assert "Linux only" in text[0] and sys.platform in text[0]          # the first cell says why
    assert len(skipped) >= 15, len(skipped)                            # the kernels' cells
    ran = [t for t in text if t.strip() and not t.startswith("Skipped")]
    assert any("is a softmax row" in t for t in ran)                   # plain-torch cells still run
    assert any("ulps from m and l" in t for t in ran)


def test_a_page_that_needs_triton_is_built_with_a_note_and_no_glued_values():
    text = LESSON.read_text()
    assert needs_triton.GLUE_ROLE.search(text)
    built = needs_triton.without_triton(text, "darwin")
    assert not needs_triton.GLUE_ROLE.search(built)
    assert "*(computed on Linux)*" in built
    title_end = built.index("\n", built.index("\n# ") + 1)
    assert built[title_end:].lstrip().startswith("```{note}") and "darwin" in built


def test_the_page_needing_triton_is_listed_in_the_config():
    assert "needs_triton: [lessons/14-flash-attention-in-triton]" in (ROOT / "_config.yml").read_text()
