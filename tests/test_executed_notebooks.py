"""The notebooks the site build executed: each lesson runs once per test run (in the build,
`make site`), and these tests check the notebooks of that one execution, so `make test`
does not execute the lessons a second time."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from conftest import BUILD, ROOT
from test_site import PAGES

EXECUTED = [page for page in PAGES if page.startswith(("lessons/", "book/"))]


def executed_notebook(page: str):
    path = BUILD / "jupyter_execute" / f"{page}.ipynb"
    return nbformat.read(path, as_version=4) if path.is_file() else None


def test_this_build_executed_every_lesson(built_site, request):
    """MyST-NB takes the outputs from a jupyter-cache (book/_ext/parallel_execution.py):
    every lesson's entry there must come from this run's build, which empties the cache
    before it executes the lessons, never from an earlier one."""
    import datetime
    import os

    from jupyter_cache import get_cache

    if os.environ.get("MHA_BUILT_SITE"):
        pytest.skip("MHA_BUILT_SITE: a site built before this run")
    started = datetime.datetime.fromtimestamp(request.config._mha_started, datetime.timezone.utc)
    listed = get_cache(BUILD / ".jupyter_cache").list_cache_records()
    records = {Path(r.uri).resolve(): r for r in listed}
    twice = sorted({r.uri for r in listed if sum(o.uri == r.uri for o in listed) > 1})
    # A second record: MyST-NB did not recognise the notebook of the parallel run (the cache
    # keys on every cell's metadata too) and executed the page again, after the others.
    assert not twice, f"executed twice, in the parallel run and again by MyST-NB: {twice}"
    for page in EXECUTED:
        record = records.get((ROOT / f"{page}.md").resolve())
        if page.startswith("lessons/"):
            assert record is not None, f"{page}: not executed into the cache"
        if record is not None:
            created = record.created.replace(tzinfo=datetime.timezone.utc)  # stored as naive UTC
            assert created >= started, f"{page}: cached at {created}, before this run began at {started}"
            assert record.data["execution_seconds"] > 0


@pytest.mark.parametrize("page", EXECUTED)
def test_every_code_cell_ran_without_error(built_site, page):
    nb = executed_notebook(page)
    if nb is None:
        assert not page.startswith("lessons/"), f"{page}: the build kept no executed notebook"
        pytest.skip(f"{page} has no code cells")
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code or not page.startswith("lessons/"), f"{page}: no code cells"
    for i, cell in enumerate(code):
        assert cell.get("execution_count"), f"{page}: code cell {i} did not run"
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert not errors, f"{page}: code cell {i} raised {errors[0].get('ename')}: {errors[0].get('evalue')}"


@pytest.mark.parametrize("page", [p for p in EXECUTED if p.startswith("lessons/")])
def test_every_check_in_a_lesson_passes_its_own_solution(built_site, page):
    """A lesson's check(...) cells run its solutions: every public check must pass."""
    nb = executed_notebook(page)
    checks = [c for c in nb.cells if c.cell_type == "code" and c.source.lstrip().startswith("check(")]
    assert len(checks) >= 3, f"{page}: fewer than three exercises checked"
    for cell in checks:
        text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        assert "public checks only" in text, f"{page}: {cell.source!r} printed {text[:300]!r}"
        assert re.search(r"all \d+ public checks pass", text) and "[FAIL]" not in text, (
            f"{page}: {cell.source.strip()} printed {text[:500]!r}")
