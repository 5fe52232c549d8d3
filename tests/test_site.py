"""The website: every page of the table of contents is built, executed and clean.

The build itself (`make site`, the command `make book` runs) happens once per test run
in the ``built_site`` fixture of conftest.py; it fails on any warning or cell error.
These tests check what a reader gets: the HTML.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import yaml
from bs4 import BeautifulSoup

from conftest import ARTIFACTS, ROOT


def toc_files() -> list[str]:
    """Every page listed in _toc.yml (root first), as paths without suffix."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return files


PAGES = toc_files()
LESSONS = [page for page in PAGES if page.startswith("lessons/")]
BIB_KEYS = re.findall(r"^@\w+\{([^,\s]+),", (ROOT / "book/references.bib").read_text(), re.M)


def soup(html_dir: Path, page: str) -> BeautifulSoup:
    path = html_dir / f"{page}.html"
    assert path.is_file(), f"{page} is in _toc.yml but {path} was not built"
    return BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")


COURSE_PLAN = [  # the fixed file names of the course plan, in order
    "01-one-head", "02-why-multiple-heads", "03-dimension-math", "04-parameter-counts",
    "05-causal-masking", "06-the-layer-step-by-step", "07-cross-attention", "08-gradients",
    "09-cost-of-attention", "10-flash-attention", "11-kv-cache-gqa-mla", "12-pytorch-built-ins",
    "13-induction-heads",
]


def test_toc_lists_the_lessons_of_the_course_plan_in_order():
    assert [Path(p).name for p in LESSONS] == COURSE_PLAN


@pytest.mark.parametrize("page", PAGES)
def test_every_toc_page_is_built(built_site, page):
    main = soup(built_site, page).select_one("main")
    assert main is not None and main.select_one("h1"), f"{page}: no main content with a title"


@pytest.mark.parametrize("page", LESSONS)
def test_lesson_shows_executed_outputs(built_site, page):
    outputs = soup(built_site, page).select("div.cell_output")
    assert outputs, f"{page}: no executed cell output in the HTML"


@pytest.mark.parametrize("page", PAGES)
def test_page_has_no_error_output(built_site, page):
    doc = soup(built_site, page)
    errors = doc.select(".output.error, .output.traceback, div.traceback")
    assert not errors, f"{page}: error output on the page: {errors[0].get_text()[:300]}"
    for block in doc.select(".output.stderr"):
        text = block.get_text()
        assert not re.search(r"Traceback|Error\b|Exception\b", text), (
            f"{page}: error written to stderr: {text[:300]}"
        )


@pytest.mark.parametrize("page", PAGES)
def test_every_image_file_exists(built_site, page):
    page_dir = (built_site / page).parent
    for img in soup(built_site, page).select("img"):
        src = img.get("src", "")
        if src.startswith("data:"):
            continue
        assert not urlparse(src).scheme, f"{page}: image loaded from the network: {src}"
        target = (page_dir / unquote(urlparse(src).path)).resolve()
        assert target.is_file(), f"{page}: <img src={src!r}> points to a missing file"


@pytest.mark.parametrize("page", PAGES)
def test_page_loads_no_script_or_style_from_the_network(built_site, page):
    doc = soup(built_site, page)
    urls = [tag.get("src") for tag in doc.select("script[src]")]
    urls += [tag.get("href") for tag in doc.select('link[rel~="stylesheet"], link[rel="preload"]')]
    remote = [url for url in urls if urlparse(url).scheme in ("http", "https") or url.startswith("//")]
    assert not remote, f"{page}: needs the network for {remote}"


def test_maths_uses_the_bundled_mathjax(built_site):
    doc = soup(built_site, "book/intro")
    assert doc.select(".math"), "the intro page is expected to contain maths"
    sources = [tag["src"] for tag in doc.select("script[src]")]
    assert any(src.endswith("_static/mathjax/tex-chtml.js") for src in sources), sources
    assert (built_site / "_static/mathjax/tex-chtml.js").is_file()


def test_thebe_configuration_is_declared_once(built_site):
    # Declared twice, `const THEBE_JS_URL` is a SyntaxError in every browser.
    html = (built_site / f"{LESSONS[0]}.html").read_text(encoding="utf-8")
    assert html.count("const THEBE_JS_URL") <= 1


def test_references_page_lists_every_bibliography_entry(built_site):
    entries = soup(built_site, "book/references").select("div.citation")
    assert len(BIB_KEYS) >= 13
    assert len(entries) == len(BIB_KEYS)


def test_status_page_reports_every_lesson_executed(built_site):
    """Every lesson has a row, every row is ✅; lesson run times are saved as an artifact."""
    rows = {}
    for tr in soup(built_site, "book/status").select("main table tbody tr"):
        cells = [td.get_text(strip=True) for td in tr.select("td")]
        rows[cells[0]] = cells  # document, modified, method, run time (s), status
    failed = {doc: cells[-1] for doc, cells in rows.items() if cells[-1] != "✅"}
    assert not failed, f"pages whose execution did not succeed: {failed}"
    lines = ["document\trun time (s)\tstatus"]
    for lesson in LESSONS:
        assert lesson in rows, f"{lesson} missing from the execution table"
        _, _, method, runtime, status = rows[lesson]
        assert status == "✅", f"{lesson}: execution status {status!r}"
        assert method == "force", f"{lesson}: executed with {method!r}, expected 'force'"
        lines.append(f"{lesson}\t{runtime}\t{status}")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "execution-times.txt").write_text("\n".join(lines) + "\n")
