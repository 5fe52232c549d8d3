"""Shared fixtures: the built website, built once per test run, and the browser.

The site build (``make site``, which executes every lesson) is the longest single step
of the run, so it starts as soon as the tests are collected, in the background, while
the library's tests run; the tests that need the site are ordered last. Under
``pytest -n 2 --dist loadfile`` both workers collect: the first to take a file lock
starts the build and holds the lock until it ends; a marker file keyed on the run's id
(pytest-xdist's ``testrun_uid``) tells every test of the run that the build is done.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
import threading
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


MARKER = BUILD / ".site-build.json"
LOCK = BUILD / ".site-build.lock"
LOG = BUILD / "site-build.log"


def run_id(config) -> str:
    """The test run's id: pytest-xdist's ``testrun_uid`` in a worker, one made up at start
    in a run without workers."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput["testrunuid"] if workerinput else config._mha_run


def _start_build() -> subprocess.Popen:
    """``make site``, writing its log. The caller holds the lock."""
    # BIN: the environment running the tests also runs the build.
    cmd = ["make", "--no-print-directory", "site", f"BIN={Path(sys.executable).parent}"]
    with open(LOG, "w") as log:
        return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def _finish_build(proc: subprocess.Popen, run: str) -> None:
    """Wait for the build, then write the marker that says this run has built the site."""
    MARKER.write_text(json.dumps({"run": run, "returncode": proc.wait()}))


def _built_in(run: str):
    info = json.loads(MARKER.read_text()) if MARKER.exists() else {}
    return info if info.get("run") == run else None


_background: dict = {}  # the build this process started: {"proc": ..., "thread": ...}


def start_site_build(run: str) -> None:
    """Start the site build in the background unless another process has (it holds the
    lock) or this run has built it already. The lock is held until the build ends, so a
    test that needs the site waits for it by taking the lock."""
    BUILD.mkdir(exist_ok=True)
    lock = open(LOCK, "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return
    if _built_in(run):
        lock.close()
        return

    try:
        proc = _start_build()  # before this process lowers its priority: the build keeps the normal one
    except BaseException:
        lock.close()
        raise

    def finish():
        try:
            _finish_build(proc, run)
        finally:
            lock.close()

    _background["proc"] = proc
    _background["thread"] = threading.Thread(target=finish, name="site build", daemon=True)
    _background["thread"].start()
    start_student_env(run)


# The student's path (tests/test_student_path.py) needs a fresh virtual environment with
# torch and a notebook runner in it, which takes 20 s and needs nothing of the site: it is
# made beside the build, under the same kind of lock and marker.
STUDENT_ENV = BUILD / "student-env"
STUDENT_ENV_LOCK = BUILD / ".student-env.lock"
STUDENT_ENV_MARKER = BUILD / ".student-env.json"
STUDENT_ENV_PACKAGES = ["torch==2.13.0", "ipykernel", "nbclient"]


def student_environ() -> dict[str, str]:
    """The environment variables of a student's commands: these, but Python keeps the
    modules it compiles, as it does by default (a machine that says otherwise, with
    PYTHONDONTWRITEBYTECODE, would have every process of the student's environment compile
    matplotlib and the rest again)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def make_student_env(env: Path) -> str:
    """A new virtual environment at ``env`` with the CPU build of torch and what runs a
    notebook headlessly; "" or what failed. --no-compile: pip would byte-compile torch's
    thousands of modules (13 s here), which Python does anyway for the few it imports."""
    import shutil

    shutil.rmtree(env, ignore_errors=True)
    for cmd in ([sys.executable, "-m", "venv", str(env)],
                [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile", *STUDENT_ENV_PACKAGES]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=student_environ())
        if proc.returncode != 0:
            return f"{' '.join(cmd[:5])} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    return ""


def start_student_env(run: str) -> None:
    lock = open(STUDENT_ENV_LOCK, "w")
    fcntl.flock(lock, fcntl.LOCK_EX)  # taken at once: only the build's starter comes here

    def prepare():
        try:
            STUDENT_ENV_MARKER.write_text(json.dumps({"run": run, "problem": make_student_env(STUDENT_ENV)}))
        finally:
            lock.close()

    _background["student env"] = threading.Thread(target=prepare, name="student env", daemon=True)
    _background["student env"].start()


def prepared_student_env(run: str) -> Path | None:
    """The environment made beside this run's build (waiting for it), or None."""
    if not STUDENT_ENV_LOCK.exists():
        return None
    with open(STUDENT_ENV_LOCK) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        info = json.loads(STUDENT_ENV_MARKER.read_text()) if STUDENT_ENV_MARKER.exists() else {}
    if info.get("run") != run:
        return None
    assert not info["problem"], info["problem"]
    return STUDENT_ENV


def uses_site(item) -> bool:
    return "built_site" in item.fixturenames


# The order of the files. Both workers should run out of work together: a long file taken
# last keeps one worker busy while the other has nothing left to do. The student's path comes
# first: its worker waits for the build (the CPU goes to the build meanwhile) and then walks
# it, a minute of one worker, while the other runs the library's tests. Then the longest
# files (seconds alone, roughly), the others in file order, and the files that need the site
# last, as they wait for the build: the browser's tests of the site and the two halves of its
# pages, then the short ones (the same order shares them out evenly whether the pages are
# a sample, as in `make test`, or all of them: tests/test_site_pages.py).
FIRST = ["test_student_path.py"]  # 60, once the site is built
LONGEST_FIRST = ["test_the_tests.py",  # 35 (not in `make test`: make test-the-tests)
                 "test_grader.py", "test_exercises_notebooks.py", "test_grader_speed.py"]  # 10-15
SITE_FILES_LONGEST_FIRST = ["test_site_browser.py",  # 20
                            "test_site_pages.py", "test_site_pages_2.py",  # 10 and 10; 45 and 35 for all pages
                            "test_site.py", "test_executed_notebooks.py"]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Tests that need the built site are marked ``site`` (``-m "not site"`` leaves them
    out). Files are ordered as FIRST, LONGEST_FIRST and SITE_FILES_LONGEST_FIRST say."""
    site_files = set()
    for item in items:
        if uses_site(item):
            item.add_marker("site")
            site_files.add(item.path)

    def rank(item):
        name = item.path.name
        if name in FIRST:
            return 0, FIRST.index(name)
        order = SITE_FILES_LONGEST_FIRST if item.path in site_files else LONGEST_FIRST
        return 1 + (item.path in site_files), order.index(name) if name in order else len(order)

    items.sort(key=rank)  # stable: the same order in every worker


BUILD_FIRST_NICENESS = 10


def pytest_collection_finish(session):
    """Start the site build as soon as the tests that will run are known, so that the
    library's tests run while it builds. The build is the longest step and every site test
    waits for it, so the test processes then lower their own priority (the build, started
    before, keeps the normal one): on 2 cores it gets a whole core, the tests the rest."""
    config = session.config
    if (any(uses_site(item) for item in session.items) and not config.option.collectonly
            and not os.environ.get("MHA_BUILT_SITE")):
        start_site_build(run_id(config))
        lower_priority(BUILD_FIRST_NICENESS)


def lower_priority(niceness: int) -> None:
    """This process's niceness (its own, gone when it ends). Not its session's autogroup
    niceness, which the kernel would keep for the reader's terminal after the run."""
    os.nice(niceness)


def pytest_sessionfinish(session, exitstatus):
    """A worker that started the build waits for it before it leaves: the other worker
    may still need the site. On Ctrl-C the build is not waited for."""
    thread = _background.get("thread")
    if thread is None:
        return
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        _background["proc"].terminate()
    thread.join()
    _background["student env"].join()


@pytest.fixture(scope="session")
def built_site(request) -> Path:
    """The site that `make book` builds (`make site`), built once per run; _build/html.

    MHA_BUILT_SITE=DIR tests a site built before (DIR holds its HTML) instead of building:
    quick runs of the site and browser tests while working on them. CI never sets it.
    """
    prebuilt = os.environ.get("MHA_BUILT_SITE")
    if prebuilt:
        html = Path(prebuilt).resolve()
        if not (html / "index.html").is_file():
            pytest.fail(f"MHA_BUILT_SITE={prebuilt} holds no built site (no index.html)")
        return html
    run = run_id(request.config)
    BUILD.mkdir(exist_ok=True)
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # waits for a build in progress; released on close
        info = _built_in(run)
        if info is None:  # no build started at collection (or it did not finish): build now
            _finish_build(_start_build(), run)
            info = _built_in(run)
    if info["returncode"] != 0:
        tail = "\n".join(LOG.read_text().splitlines()[-60:])
        pytest.fail(f"the site build (make site) failed; full log in {LOG}:\n{tail}")
    return HTML


# ----------------------------------------------------------------------------- slow lessons

# Seconds a lesson may take to execute on 2 idle cores (the lessons that train several models,
# over several seeds, get more). Over the limit is reported, not failed: timings on a busy
# machine are noisy, and a reader should still get the page.
TIME_LIMIT_S = {lesson: 45.0 for lesson in ("lessons/02-why-multiple-heads", "lessons/07-cross-attention",
                                            "lessons/13-induction-heads")}
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
    if os.environ.get("MHA_SITE_PAGES", "sample") == "sample":
        terminalreporter.write_line("the browser checked a sample of the pages, one of each kind "
                                    "(MHA_SITE_PAGES=all make test checks every page, as CI does)")


def pytest_configure(config):
    import time
    import uuid

    if os.environ.get("PYTEST_XDIST_WORKER"):
        # `make test` runs one worker per core: one torch thread each, not two threads
        # per worker that wait on each other for the cores (the library's tests took 7%
        # less CPU time so).
        import torch

        torch.set_num_threads(1)

    # The grader's tests grade batch after batch in this process: the zygotes that one batch
    # started serve the next (mha.grading.sandbox); tests/test_grader_speed.py checks both ways.
    from mha.grading import sandbox

    sandbox.CLOSE_ZYGOTES_AFTER_BATCH = False

    config._mha_started = time.time()
    config._mha_run = uuid.uuid4().hex


# ----------------------------------------------------------------------------- the browser
# Debian's headless chromium driven through playwright (tests/browsing.py): one browser per
# test process, the built site served from 127.0.0.1.


@pytest.fixture(scope="session")  # session: checked before the site is built
def chromium_path():
    import shutil

    path = shutil.which("chromium")
    if path is None:
        message = "Debian's chromium is not installed (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message + "; it is required in CI")
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    from browsing import CHROMIUM_ARGS

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def site_url(built_site):
    """Serve the built site on a free local port for the rest of the session."""
    import functools
    import http.server

    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def send_error(self, code, *args, **kwargs):  # shown with a failing test's output
            print(f"site server: {code} for {self.path}", file=sys.stderr)
            super().send_error(code, *args, **kwargs)

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            if not isinstance(sys.exc_info()[1], ConnectionError):  # a tab closed mid-transfer
                super().handle_error(request, client_address)

    handler = functools.partial(QuietHandler, directory=str(built_site))
    server = Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def reused_tab(browser, site_url):
    from browsing import Tab

    tab = Tab(browser, site_url)
    yield tab
    tab.close()


@pytest.fixture
def tab(reused_tab):
    """A tab on the built site, as if new (Tab.reset): one tab serves every test of the process."""
    reused_tab.reset()
    return reused_tab


@pytest.fixture(scope="session")
def axe_source() -> str:
    """axe-core's engine, from the axe-playwright-python wheel (a dev dependency)."""
    try:
        from importlib.resources import files

        return (files("axe_playwright_python") / "axe.min.js").read_text(encoding="utf-8")
    except ModuleNotFoundError:
        message = "axe-core is missing: pip install axe-playwright-python (a dev dependency)"
        if os.environ.get("CI"):
            pytest.fail(message + "; it is required in CI")
        pytest.skip(message)


# ----------------------------------------------------------------------------- student notebooks

def exercise_part(nb):
    """The student notebook's setup cell, the lesson's first code cell (its imports) and
    every cell from "## Exercises" on. The rest of a lesson is the lesson's own code, which
    the site build executes (once per test run, tests/test_executed_notebooks.py); one
    whole student notebook runs top to bottom in tests/test_student_path.py."""
    import nbformat

    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    start = next((i for i, c in enumerate(nb.cells)
                  if c.cell_type == "markdown" and re.search(r"^#+ Exercises", c.source, re.M)), None)
    keep = set(code[:2]) | ({i for i in code if i > start} if start is not None else set(code))
    part = nbformat.v4.new_notebook(cells=[c for i, c in enumerate(nb.cells) if i in keep])
    part.metadata = nb.metadata
    return part
