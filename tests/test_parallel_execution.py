"""book/_ext/parallel_execution.py, the build's parallel execution of the lessons, in parts.

The whole of it runs in every site build: tests/test_executed_notebooks.py checks that
this run's build executed every lesson, and the status page test that MyST-NB took the
outputs from the cache.
"""

from __future__ import annotations

import sys

import nbformat
import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "book" / "_ext"))
import parallel_execution  # noqa: E402


def notebook(*sources: str):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def test_the_times_of_the_previous_build_come_from_the_cache_it_left(tmp_path):
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache = get_cache(tmp_path / "cache")
    for uri, seconds, source in [("/book/a.md", 12.5, "1"), ("/book/b.md", 3.0, "2")]:
        cache.cache_notebook_bundle(CacheBundleIn(notebook(source), uri, data={"execution_seconds": seconds}),
                                    check_validity=False)
    assert parallel_execution._previous_times(tmp_path / "cache") == {"/book/a.md": 12.5, "/book/b.md": 3.0}
    assert parallel_execution._previous_times(tmp_path / "none") == {}
    assert not (tmp_path / "none").exists(), "reading the times must not create a cache"
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "global.db").write_text("not a database")
    assert parallel_execution._previous_times(tmp_path / "broken") == {}


def test_a_notebook_that_raises_comes_back_as_a_failure_with_its_traceback(tmp_path):
    """Not cached then: MyST-NB executes it again and fails the build with the error."""
    from myst_nb.core.config import NbParserConfig

    nb = notebook("print('first cell ran')", "raise ValueError('a bug in the lesson')", "print('never')")
    config = NbParserConfig(execution_timeout=60, execution_allow_errors=False)
    executed, seconds, traceback = parallel_execution._execute(nb, str(tmp_path), config)
    assert executed is None
    assert "ValueError" in traceback and "a bug in the lesson" in traceback
    assert seconds > 0


@pytest.mark.parametrize("times, order", [
    ({}, ["a", "b", "c"]),                                   # a first build: reading order
    ({"a": 1.0, "b": 9.0, "c": 5.0}, ["b", "c", "a"]),       # longest first
    ({"a": 1.0, "c": 5.0}, ["b", "c", "a"]),                 # a new notebook before the rest
])
def test_notebooks_start_longest_first(times, order):
    assert parallel_execution._order(["a", "b", "c"], times) == order
