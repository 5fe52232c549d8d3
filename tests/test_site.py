"""The website: every page of the table of contents is built, executed and clean.

The build itself (`make site`, the command `make book` runs) happens once per test run
in the ``built_site`` fixture of conftest.py; it fails on any warning or cell error.
These tests check what a reader gets: the HTML.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

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


@functools.lru_cache(maxsize=None)
def soup(html_dir: Path, page: str) -> BeautifulSoup:
    """The parsed page, parsed once for all the tests that read it (none changes it)."""
    path = html_dir / f"{page}.html"
    assert path.is_file(), f"{page} is in _toc.yml but {path} was not built"
    return BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")


COURSE_PLAN = [  # the fixed file names of the course plan, in order
    "01-one-head", "02-why-multiple-heads", "03-dimension-math", "04-parameter-counts",
    "05-causal-masking", "06-the-layer-step-by-step", "07-cross-attention", "08-gradients",
    "09-cost-of-attention", "10-flash-attention", "11-kv-cache-gqa-mla", "12-pytorch-built-ins",
    "13-induction-heads", "14-flash-attention-in-triton",
]


def test_toc_lists_the_lessons_of_the_course_plan_in_order():
    assert [Path(p).name for p in LESSONS] == COURSE_PLAN


@pytest.mark.parametrize("page", [PAGES[0], LESSONS[0], PAGES[-1]])
def test_the_sidebar_names_the_book_once(built_site, page):
    """The title above the navigation links home; the home page is not listed again under it."""
    title = yaml.safe_load((ROOT / "_config.yml").read_text())["title"]
    sidebar = soup(built_site, page).select_one(".bd-sidebar-primary")
    assert sidebar is not None, "no primary sidebar"
    assert sidebar.get_text().count(title) == 1
    home = sidebar.select_one("a.navbar-brand")
    assert home is not None
    assert urljoin(f"/{page}.html", home["href"]).split("#")[0] == f"/{PAGES[0]}.html"


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


# An alt text that names a file, not what the figure shows: "../_images/3f9c....png",
# "figure_1.png", a bare hash. Lessons set alt text in the figure cell's metadata
# (mystnb: image: alt: ...); without it the build writes the image's file name.
FILE_NAME_ALT = re.compile(
    r"\.(png|jpe?g|gif|svg|webp|pdf)\b|^[\w./-]*/[\w./-]*$|^[0-9a-f]{12,}$|^[\w-]+$", re.I
)


def alt_problem(alt: str | None) -> str | None:
    """Why `alt` does not say what a figure shows, or None when it does."""
    if alt is None or not alt.strip():
        return "no alt text"
    if FILE_NAME_ALT.search(alt.strip()):
        return f"alt text is a file name: {alt!r}"
    if len(alt.split()) < 4:
        return f"alt text too short to say what the figure shows: {alt!r}"
    return None


@pytest.mark.parametrize("alt, ok", [
    ("../_images/5bd23eb01a8213b94415fae894cb65ccd7027d0dd34a3eb44.png", False),
    ("5bd23eb01a8213b94415fae894cb65ccd7027d", False), ("figure.png", False), ("", False),
    (None, False), ("plot", False), ("Heatmap of weights", False),
    ("Line plot of the entropy of the attention weights against d_h.", True),
])
def test_alt_text_rule_tells_a_description_from_a_file_name(alt, ok):
    assert (alt_problem(alt) is None) == ok


@pytest.mark.parametrize("page", LESSONS)
def test_every_lesson_figure_has_alt_text_that_says_what_it_shows(built_site, page):
    images = soup(built_site, page).select("main img")
    problems = [f"{img.get('src', '?').split('/')[-1][:16]}...: {alt_problem(img.get('alt'))}"
                for img in images if alt_problem(img.get("alt"))]
    assert not problems, (
        f"{page}: {len(problems)} of {len(images)} figures lack alt text (set it in the figure "
        f"cell's metadata, mystnb: image: alt: ...): {problems}"
    )


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
    """Every lesson has a row, every row is ✅; lesson run times are saved as an artifact.
    (That this run's build executed them: tests/test_executed_notebooks.py.)"""
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
        # "cache": MyST-NB took the outputs from the cache that the build filled
        assert method == "cache", f"{lesson}: executed with {method!r}, expected 'cache'"
        lines.append(f"{lesson}\t{runtime}\t{status}")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "execution-times.txt").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("page", PAGES)
def test_attention_explorers_on_the_page_are_shown_as_html(built_site, page):
    """Each explorer reaches the page as its HTML (not the PNG companion), data intact."""
    import json

    for explorer in soup(built_site, page).select(".attention-explorer"):
        data = json.loads(explorer.select_one('script[type="application/json"]').string)
        heads, keys = data["heads"], data["tokens"]
        queries = data.get("query_tokens", keys)
        assert all(len(head) == len(queries) and all(len(row) == len(keys) for row in head)
                   for head in heads), f"{page}: explorer weights do not match its tokens"
        assert len(explorer.select("svg rect[data-i][data-j]")) == len(queries) * len(keys)
        assert len(explorer.select('input[type="range"]')) == (len(heads) > 1)
        assert explorer.select_one(".readout")["aria-live"] == "polite"
        assert explorer.select_one("script:not([type])"), f"{page}: explorer without its script"


def _bare_glued_names(notebook: Path, lesson: Path) -> list[str]:
    """The names the lesson glues into its text that the notebook's text still shows as names."""
    import nbformat

    names = {n.split(":")[0] for n in re.findall(r"\{glue:?\w*\}`([^`]+)`", lesson.read_text(encoding="utf-8"))}
    text = "\n".join(c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "markdown")
    return sorted(n for n in names if f"`{n}`" in text or "{glue" in text)


def test_a_student_notebook_of_lesson_13_made_after_the_build_reads_like_the_page(built_site, tmp_path):
    """Lesson 13 glues whole sentences of its analysis: in a student notebook made after the
    build, by `mha notebooks` or by the build itself (the page's download), every one of them
    reads as on the page, with no name in its place."""
    from mha.notebooks import NOTEBOOK_DIR, write_student_notebooks

    lesson = ROOT / "lessons" / "13-induction-heads.md"
    [made] = write_student_notebooks(tmp_path, [lesson], build=built_site.parent)
    assert _bare_glued_names(made, lesson) == []
    downloaded = built_site.parent.parent / NOTEBOOK_DIR / "13-induction-heads.ipynb"
    if downloaded.is_file():
        assert _bare_glued_names(downloaded, lesson) == []
