"""A Sphinx extension that executes the book's notebooks in parallel, once per build.

MyST-NB executes each notebook while Sphinx reads it, one after the other, so a build
on two cores leaves one idle for most of its run. Sphinx's own ``-j`` cannot help: a
Jupyter Book extension (sphinx-multitoc-numbering) is not declared parallel-safe.

With ``nb_execution_mode = "cache"``, MyST-NB looks each notebook up in a jupyter-cache
before executing it. This extension empties that cache as reading starts, so that every
build executes every notebook, as "force" would (a cache kept between builds would not
notice a change in src/mha). It then executes the notebooks in worker processes and
caches each one just before Sphinx reads it. MyST-NB then finds the outputs and their
execution time in the cache, and its execution table shows them.

The notebooks start longest first, by the times the emptied cache held (new ones first,
then in reading order): a long notebook started last would leave the other workers idle
at the end.

With ``parallel_execution_preload`` set, each worker imports those modules once and runs
its notebooks in kernels forked from itself, which start with them imported
(preloaded_kernels.py).

A notebook that fails is left out of the cache, and the failure is a warning (an error
under ``-W``) that quotes it. MyST-NB then executes the notebook itself and reports the error
as usual, with its traceback; if that second run passes, the warning still fails a ``-W``
build: a lesson that fails only when two run side by side is a flaky lesson, not a good one.

When the build ends, the slowest code cells of the run are listed, with the time each took
(nbclient's timestamps), so that a slow cell is seen in every build's output.

MyST-NB 1.4 in cache mode writes the notebook it read, not the one it took from the
cache, to _build/jupyter_execute: no outputs, no execution counts. This extension writes
the executed notebook there instead, as "force" mode does.
"""

from __future__ import annotations

import os
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from pathlib import Path, PurePosixPath
from tempfile import TemporaryDirectory

from preloaded_kernels import ForkingKernelManager, preload
from sphinx.errors import ConfigError
from sphinx.util import logging

logger = logging.getLogger(__name__)


def _execute(notebook, folder: str, config, forked: bool = False):
    """In a worker process: run every cell in ``folder`` (or a temporary one, as MyST-NB's
    ``execution_in_temp`` asks), in a kernel forked from this process if ``forked``
    (preloaded_kernels.py); (executed notebook or None, seconds, traceback)."""
    from jupyter_cache.executors.utils import single_nb_execution

    options = {"kernel_manager_class": ForkingKernelManager} if forked else {}
    with TemporaryDirectory() if config.execution_in_temp else nullcontext(folder) as cwd:
        result = single_nb_execution(notebook, cwd=cwd, timeout=config.execution_timeout,
                                     allow_errors=config.execution_allow_errors, record_timing=True, **options)
    return (notebook if result.err is None else None), result.time, result.exc_string


def _notebooks(app, docnames):
    """{docname: (path, notebook, its MyST-NB configuration)} for the documents MyST-NB
    would execute in cache mode, read as it reads them."""
    from myst_nb.core.read import create_nb_reader

    env = app.env
    found = {}
    for docname in docnames:
        path = Path(env.doc2path(docname))
        text = path.read_text(encoding="utf-8")
        reader = create_nb_reader(str(path), env.myst_config, env.mystnb_config, text)
        if reader is None:
            continue
        notebook = reader.read(text)
        config = env.mystnb_config
        overrides = dict(notebook.metadata.get(config.metadata_key, {}))  # as MyST-NB applies them
        overrides.pop("output_folder", None)
        try:
            config = config.copy(**overrides)
        except Exception:  # noqa: BLE001 -- MyST-NB warns about it when it reads the page
            pass
        excluded = any(PurePosixPath(path.as_posix()).match(p) for p in config.execution_excludepatterns)
        if (config.execution_mode == "cache" and not excluded
                and any(cell.cell_type == "code" for cell in notebook.cells)):
            found[docname] = (path, notebook, config)
    return found


def _previous_times(cache_path: Path) -> dict[str, float]:
    """{source path: seconds} of the notebooks the cache at ``cache_path`` holds."""
    from jupyter_cache import get_cache

    if not cache_path.is_dir():
        return {}
    try:
        return {record.uri: record.data.get("execution_seconds", 0.0)
                for record in get_cache(cache_path).list_cache_records()}
    except Exception:  # noqa: BLE001 -- a cache from another version of jupyter-cache: no hints
        return {}


def _start(app, env, docnames):
    """Empty the cache and start executing every notebook about to be read."""
    config = env.mystnb_config
    if config.execution_mode != "cache":
        return
    from jupyter_cache import get_cache

    cache_path = Path(config.execution_cache_path)
    previous = _previous_times(cache_path)
    shutil.rmtree(cache_path, ignore_errors=True)
    app._parallel_cache = get_cache(cache_path)
    notebooks = _notebooks(app, docnames)
    if not notebooks:
        return
    workers = min(app.config.parallel_execution_workers or os.cpu_count() or 1, len(notebooks))
    logger.info(f"executing {len(notebooks)} notebooks, {workers} at a time")
    # Forking a process that has loaded torch and matplotlib is safe on Linux; on macOS
    # system libraries may crash in a child forked without exec: new kernels there.
    modules = _importable(app.config.parallel_execution_preload) if sys.platform.startswith("linux") else []
    pool = ProcessPoolExecutor(max_workers=workers, initializer=preload if modules else None,
                               initargs=(modules,) if modules else ())
    app._parallel_pool = pool
    app._parallel_executed = {}
    app._parallel_runs = {}
    app._parallel_cell_times = []
    times = {docname: previous[str(path)] for docname, (path, *_) in notebooks.items() if str(path) in previous}
    for docname in _order(list(notebooks), times):
        path, notebook, nb_config = notebooks[docname]
        run = pool.submit(_execute, notebook, str(path.parent), nb_config, bool(modules))
        app._parallel_runs[docname] = (path, notebook, run)


def _importable(modules) -> list[str]:
    """``modules``, checked before a worker would fail to import one of them."""
    from importlib.util import find_spec

    for name in modules:
        try:
            found = isinstance(name, str) and find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ConfigError(f"parallel_execution_preload: {name!r} is not a module this Python can import; "
                              "list importable module names, such as torch or matplotlib.pyplot")
    return list(modules)


def _order(docnames: list[str], seconds: dict[str, float]) -> list[str]:
    """Longest first by ``seconds``; those without a time first; else in the given order."""
    return sorted(docnames, key=lambda docname: -seconds.get(docname, float("inf")))  # stable


def _collect(app, docname, source):
    """Just before Sphinx reads a notebook: wait for its execution and cache it."""
    from jupyter_cache.base import CacheBundleIn

    runs = getattr(app, "_parallel_runs", {})
    if docname not in runs:
        return
    path, unexecuted, future = runs.pop(docname)
    notebook, seconds, error = future.result()
    if notebook is None:
        last = (error or "").strip().splitlines()[-1:] or ["no message"]
        logger.warning(f"{docname} failed in its parallel run ({last[0]}); MyST-NB executes it again to "
                       "report the error with its traceback")
        return
    app._parallel_cell_times.extend((s, docname, i, first) for s, i, first in cell_times(notebook))
    # The cache finds a notebook by a hash of its cells, metadata included: the timestamps
    # nbclient records in each cell would make it a different notebook, and MyST-NB would
    # execute the page a second time, one after the other.
    for cell in notebook.cells:
        cell.get("metadata", {}).pop("execution", None)
    app._parallel_cache.cache_notebook_bundle(
        CacheBundleIn(notebook, str(path), data={"execution_seconds": seconds}),
        check_validity=False, overwrite=True)
    try:
        app._parallel_cache.match_cache_notebook(unexecuted)
    except KeyError:
        logger.warning(f"{docname}: the notebook its parallel run executed is not the one MyST-NB reads, "
                       "so MyST-NB executes it again")
    app._parallel_executed[docname] = notebook


def _write_executed(app, doctree):
    """After MyST-NB has read a notebook: its executed version in the output folder."""
    import nbformat

    notebook = getattr(app, "_parallel_executed", {}).pop(app.env.docname, None)
    if notebook is not None:
        path = Path(app.env.mystnb_config.output_folder, f"{app.env.docname}.ipynb")
        path.write_text(nbformat.writes(notebook), encoding="utf-8")


def cell_times(notebook) -> list[tuple[float, int, str]]:
    """(seconds, code cell number from 0, its first line) for every executed code cell, from
    the timestamps nbclient records in each cell's metadata."""
    from datetime import datetime

    found = []
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    for i, cell in enumerate(code):
        timing = cell.get("metadata", {}).get("execution", {})
        start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
        if start and end:
            seconds = (datetime.fromisoformat(end.replace("Z", "+00:00"))
                       - datetime.fromisoformat(start.replace("Z", "+00:00"))).total_seconds()
            found.append((seconds, i, (cell.source.strip().splitlines() or [""])[0][:60]))
    return found


def _stop(app, exception):
    pool: ProcessPoolExecutor | None = getattr(app, "_parallel_pool", None)
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)
    slowest = sorted(getattr(app, "_parallel_cell_times", []), reverse=True)[:app.config.parallel_execution_report]
    if slowest:
        logger.info(f"the {len(slowest)} slowest code cells of this build:")
        for seconds, docname, i, first in slowest:
            logger.info(f"  {seconds:6.2f} s  {docname}, code cell {i}: {first}")


def setup(app):
    # None: one worker per CPU.
    app.add_config_value("parallel_execution_workers", None, "env", types=[int, type(None)])
    # Modules each worker imports once; its kernels are then forks of it that start with
    # them imported (preloaded_kernels.py). Empty: every kernel starts as a new process.
    app.add_config_value("parallel_execution_preload", [], "env", types=[list])
    # How many of the slowest code cells to list when the build ends.
    app.add_config_value("parallel_execution_report", 5, "env", types=[int])
    app.connect("env-before-read-docs", _start)
    app.connect("source-read", _collect)
    app.connect("doctree-read", _write_executed)
    app.connect("build-finished", _stop)
    # Reading in parallel (sphinx -j) would call _collect in forked processes.
    return {"parallel_read_safe": False, "parallel_write_safe": True}
