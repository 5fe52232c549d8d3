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
    """Not cached then: MyST-NB executes it again and fails the build with the error.
    (The same in a forked kernel: test_forked_kernels below.)"""
    from myst_nb.core.config import NbParserConfig

    nb = notebook("print('first cell ran')", "raise ValueError('a bug in the lesson')", "print('never')")
    config = NbParserConfig(execution_timeout=60, execution_allow_errors=False)
    executed, seconds, traceback = parallel_execution._execute(nb, str(tmp_path), config)
    assert executed is None
    assert "ValueError" in traceback and "a bug in the lesson" in traceback
    assert seconds > 0


def test_a_module_to_preload_that_cannot_be_imported_is_named():
    from sphinx.errors import ConfigError

    assert parallel_execution._importable(["json", "email.mime"]) == ["json", "email.mime"]
    for wrong in ["no_such_module", "json.no_such_part", "", 42]:
        with pytest.raises(ConfigError, match=f"parallel_execution_preload: {wrong!r} is not a module"):
            parallel_execution._importable(["json", wrong])


@pytest.mark.parametrize("times, order", [
    ({}, ["a", "b", "c"]),                                   # a first build: reading order
    ({"a": 1.0, "b": 9.0, "c": 5.0}, ["b", "c", "a"]),       # longest first
    ({"a": 1.0, "c": 5.0}, ["b", "c", "a"]),                 # a new notebook before the rest
])
def test_notebooks_start_longest_first(times, order):
    assert parallel_execution._order(["a", "b", "c"], times) == order


# Run in a process of its own: preload() imports modules and sets matplotlib's backend for
# the kernels it will fork, which a pytest worker must not inherit.
FORKED_KERNELS = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
from myst_nb.core.config import NbParserConfig
from test_parallel_execution import notebook, parallel_execution
from preloaded_kernels import preload

def run(nb, timeout=60):
    config = NbParserConfig(execution_timeout=timeout, execution_allow_errors=False)
    executed, seconds, traceback = parallel_execution._execute(nb, sys.argv[2], config, forked=True)
    outputs = [[o.get("text") or sorted(o.get("data", {})) for o in c.outputs] for c in nb.cells]
    return {"ok": executed is not None, "traceback": traceback, "outputs": outputs}

preload(["fractions", "matplotlib.pyplot"])
results = {"worker": os.getpid()}
results["first"] = run(notebook(
    "import os, sys; print(os.getpid(), os.getppid(), os.getcwd(), 'matplotlib.pyplot' in sys.modules)",
    "import fractions; fractions.LEFT_BEHIND = 1",
    "import matplotlib.pyplot as plt; plt.plot([0, 1]);"))
results["second"] = run(notebook("import fractions; print(hasattr(fractions, 'LEFT_BEHIND'))"))
results["raises"] = run(notebook("print('ran')", "raise ValueError('a bug in the lesson')"))
results["too_slow"] = run(notebook("import time; time.sleep(60)"), timeout=2)
results["interrupted"] = run(notebook("import os, signal; os.kill(os.getpid(), signal.SIGINT)"))
results["after"] = run(notebook("print('still fine')"))
try:
    os.waitpid(-1, os.WNOHANG)
    results["children_left"] = True
except ChildProcessError:  # no child process, running or exited
    results["children_left"] = False
print(json.dumps(results))
"""


def test_forked_kernels(tmp_path):
    """book/_ext/preloaded_kernels.py: each notebook runs in a process of its own, forked
    from the worker, in the notebook's folder, with the preloaded modules already imported;
    nothing one notebook does reaches the next, nor does a signal sent to a kernel reach
    the worker; figures show; errors and timeouts come back as failures, and no kernel is
    left running."""
    import json
    import subprocess

    run = subprocess.run([sys.executable, "-c", FORKED_KERNELS, str(ROOT / "tests"), str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    results = json.loads(run.stdout.splitlines()[-1])
    first = results["first"]
    assert first["ok"], first["traceback"]
    pid, parent, cwd, preloaded = first["outputs"][0][0].split()
    assert int(pid) != results["worker"] and int(parent) == results["worker"]
    assert cwd == str(tmp_path) and preloaded == "True"
    assert "image/png" in first["outputs"][2][-1], first["outputs"][2]
    assert results["second"]["ok"] and results["second"]["outputs"][0] == ["False\n"]
    assert not results["raises"]["ok"] and "a bug in the lesson" in results["raises"]["traceback"]
    assert not results["too_slow"]["ok"] and "Timeout" in results["too_slow"]["traceback"]
    # A signal to a kernel stays there (the parent's event loop shared its wake-up pipe).
    assert not results["interrupted"]["ok"] and "KeyboardInterrupt" in results["interrupted"]["traceback"]
    assert results["after"]["ok"] and results["after"]["outputs"] == [["still fine\n"]]
    assert "never retrieved" not in run.stderr, run.stderr
    assert not results["children_left"]
