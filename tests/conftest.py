"""Shared fixtures: the built website, built once per test run.

The site tests and the browser tests live in separate modules and, under
``pytest -n 2 --dist loadfile``, may run in different worker processes at the same time.
A file lock makes the first worker build the site while the other waits; a marker file
keyed on the run's id (pytest-xdist's ``testrun_uid``) lets the second reuse the build.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build"
HTML = BUILD / "html"
ARTIFACTS = BUILD / "artifacts"


@pytest.fixture(scope="module")
def one_thread():
    """torch on one thread for the module's tests: tiny tensors run many times faster on
    one thread than on several when the machine is busy."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def built_site(testrun_uid: str) -> Path:
    """Run the build that `make book` runs (`make site`) once per run; return _build/html.

    MHA_BUILT_SITE=DIR tests a site built before (DIR holds its HTML) instead of building:
    quick runs of the site and browser tests while working on them. CI never sets it.
    """
    prebuilt = os.environ.get("MHA_BUILT_SITE")
    if prebuilt:
        html = Path(prebuilt).resolve()
        if not (html / "index.html").is_file():
            pytest.fail(f"MHA_BUILT_SITE={prebuilt} holds no built site (no index.html)")
        return html
    BUILD.mkdir(exist_ok=True)
    marker = BUILD / ".site-build.json"
    log = BUILD / "site-build.log"
    with open(BUILD / ".site-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        info = json.loads(marker.read_text()) if marker.exists() else {}
        if info.get("run") != testrun_uid:
            # BIN: the environment running the tests also runs the build.
            cmd = ["make", "--no-print-directory", "site", f"BIN={Path(sys.executable).parent}"]
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            log.write_text(proc.stdout + proc.stderr)
            info = {"run": testrun_uid, "returncode": proc.returncode}
            marker.write_text(json.dumps(info))
    if info["returncode"] != 0:
        tail = "\n".join(log.read_text().splitlines()[-60:])
        pytest.fail(f"the site build (make site) failed; full log in {log}:\n{tail}")
    return HTML


# ----------------------------------------------------------------------------- slow lessons

# Seconds a lesson may take to execute on 2 idle cores (the induction-heads lesson trains
# a model, so it gets more). Over the limit is reported, not failed: timings on a busy
# machine are noisy, and a reader should still get the page.
TIME_LIMIT_S = {"lessons/13-induction-heads": 45.0}
DEFAULT_LIMIT_S = 30.0


def pytest_terminal_summary(terminalreporter, config):
    """Name every lesson whose execution in this run's site build went over its limit."""
    times = ARTIFACTS / "execution-times.txt"
    started = getattr(config, "_mha_started", None)
    if not times.is_file() or started is None or times.stat().st_mtime < started:
        return  # no site build in this run
    rows = [line.split("\t") for line in times.read_text().splitlines()[1:] if line.strip()]
    slow = [(doc, float(t)) for doc, t, *_ in rows
            if doc.startswith("lessons/") and float(t) > TIME_LIMIT_S.get(doc, DEFAULT_LIMIT_S)]
    terminalreporter.section("lesson execution times")
    if slow:
        for doc, t in slow:
            limit = TIME_LIMIT_S.get(doc, DEFAULT_LIMIT_S)
            terminalreporter.write_line(f"SLOW LESSON: {doc} took {t:.1f} s to execute (limit {limit:.0f} s)")
    else:
        worst = max(((float(t), doc) for doc, t, *_ in rows if doc.startswith("lessons/")), default=None)
        if worst:
            terminalreporter.write_line(f"every lesson executed within its limit (slowest: {worst[1]}, {worst[0]:.1f} s)")
    terminalreporter.write_line(f"per-lesson times: {times}")


def pytest_configure(config):
    import time

    config._mha_started = time.time()
