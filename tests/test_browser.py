"""The built website in a real browser: no JavaScript errors, maths typeset, images
loaded, navigation and search working, nothing fetched from the internet; one search box,
dark mode with legible figures, no sideways scrolling on a phone, no serious axe-core
(WCAG 2 A/AA) problem in either colour mode; the attention explorer driven by mouse and
keyboard, on a page the test writes and on the site. Screenshots go to _build/artifacts.

Drives Debian's headless `chromium` through the `playwright` package, against the site
served from 127.0.0.1. Without chromium the tests are skipped, except in CI (the
environment variable CI is set), where a missing browser is a failure.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from urllib.parse import urlparse

import pytest

from conftest import ARTIFACTS
from test_site import LESSONS
from test_site import PAGES as TOC_PAGES

CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]


@pytest.fixture(scope="session")  # session: checked before the site is built
def chromium_path():
    path = shutil.which("chromium")
    if path is None:
        message = "Debian's chromium is not installed (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message + "; it is required in CI")
        pytest.skip(message)
    return path


@pytest.fixture(scope="module")
def site_url(built_site):
    """Serve _build/html on a free local port for the duration of the module."""

    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(QuietHandler, directory=str(built_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


class Tab:
    """A fresh browser tab that records JavaScript errors and requests leaving the site.

    width: the viewport's width in CSS pixels (390: a phone); dark: the reader's system asks
    for dark colours (prefers-color-scheme), as a new visitor with a dark system would.
    """

    def __init__(self, browser, site_url, *, width: int = 1280, dark: bool = False):
        self.context = browser.new_context(
            viewport={"width": width, "height": 900}, color_scheme="dark" if dark else "light"
        )
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.external: list[str] = []
        host = urlparse(site_url).netloc
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.page.on(
            "console",
            lambda msg: msg.type == "error" and self.errors.append(f"console: {msg.text}"),
        )

        def block_external(route):
            if urlparse(route.request.url).netloc not in (host, ""):
                self.external.append(route.request.url)
                route.abort()
            else:
                route.continue_()

        self.context.route("**/*", block_external)

    def open(self, url: str):
        self.page.goto(url, wait_until="load")
        self.settle()

    def settle(self):
        """Wait until MathJax (where the page has maths) has finished typesetting."""
        self.page.wait_for_load_state("load")
        self.page.evaluate(
            "async () => { if (window.MathJax && MathJax.startup && MathJax.startup.promise)"
            " { await MathJax.startup.promise; } }"
        )

    def close(self):
        self.context.close()


@pytest.fixture
def tab(browser, site_url):
    tab = Tab(browser, site_url)
    yield tab
    tab.close()


HOME = "book/intro.html"  # index.html is a redirect to it
PAGES = [HOME] + [f"{lesson}.html" for lesson in LESSONS]
ALL_PAGES = [f"{page}.html" for page in TOC_PAGES]


def test_index_redirects_to_the_home_page(tab, site_url):
    tab.page.goto(f"{site_url}/index.html")
    tab.page.wait_for_url(f"**/{HOME}")
    assert tab.errors == []


@pytest.mark.parametrize("path", ALL_PAGES)
def test_page_loads_without_javascript_errors(tab, site_url, path):
    tab.open(f"{site_url}/{path}")
    assert tab.page.locator("main h1").count() >= 1, f"{path}: no page title rendered"
    assert tab.errors == [], f"{path}: JavaScript errors: {tab.errors}"
    assert tab.external == [], f"{path}: requests to the internet: {tab.external}"


@pytest.mark.parametrize("path", PAGES)
def test_maths_is_typeset(tab, site_url, path):
    tab.open(f"{site_url}/{path}")
    math = tab.page.locator("main .math")
    if math.count() == 0:
        pytest.skip(f"{path} has no maths")
    untypeset = tab.page.evaluate(
        "() => Array.from(document.querySelectorAll('main .math'))"
        ".filter(el => !el.querySelector('mjx-container')).map(el => el.textContent)"
    )
    assert untypeset == [], f"{path}: raw TeX left on the page: {untypeset[:3]}"


def test_home_page_shows_typeset_maths(tab, site_url):
    # The home page has a formula on purpose, so the maths check above is never vacuous.
    tab.open(f"{site_url}/{HOME}")
    assert tab.page.locator("main mjx-container").count() >= 1


@pytest.mark.parametrize("path", PAGES)
def test_every_image_loads(tab, site_url, path):
    tab.open(f"{site_url}/{path}")
    broken = tab.page.evaluate(
        """async () => {
            const images = Array.from(document.images);
            for (const img of images) { img.loading = "eager"; }
            await Promise.all(images.map(img => img.decode().catch(() => null)));
            return images.filter(img => img.naturalWidth === 0).map(img => img.src);
        }"""
    )
    assert broken == [], f"{path}: images that did not load: {broken}"


def test_next_previous_and_sidebar_navigation(tab, site_url):
    first, second, last = LESSONS[0], LESSONS[1], LESSONS[-1]
    tab.open(f"{site_url}/{first}.html")
    tab.page.locator("a.right-next").click()
    tab.page.wait_for_url(f"**/{second}.html")
    tab.page.locator("a.left-prev").click()
    tab.page.wait_for_url(f"**/{first}.html")
    name = last.split("/")[-1]
    tab.page.locator(f'nav.bd-docs-nav a[href$="{name}.html"]').first.click()
    tab.page.wait_for_url(f"**/{last}.html")
    tab.settle()
    assert tab.errors == []


def test_search_finds_the_lessons(tab, site_url):
    tab.open(f"{site_url}/search.html?q=attention")
    results = tab.page.locator("#search-results ul.search li")
    results.first.wait_for(timeout=20_000)
    links = results.locator("a").evaluate_all("links => links.map(a => a.href)")
    assert any("/lessons/" in link for link in links), links
    assert tab.errors == []


def test_screenshot_of_the_first_lesson(tab, site_url):
    tab.open(f"{site_url}/{LESSONS[0]}.html")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    target = ARTIFACTS / "lesson-01.png"
    tab.page.screenshot(path=str(target))
    assert target.stat().st_size > 10_000


# --- accessibility: axe-core --------------------------------------------------------------
# axe-core's engine (axe.min.js) comes from the PyPI package axe-playwright-python, a dev
# dependency installed into the venv with everything else: no download at test time.
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]


@pytest.fixture(scope="session")
def axe_source() -> str:
    try:
        from importlib.resources import files

        return (files("axe_playwright_python") / "axe.min.js").read_text(encoding="utf-8")
    except ModuleNotFoundError:
        message = "axe-core is missing: pip install axe-playwright-python (a dev dependency)"
        if os.environ.get("CI"):
            pytest.fail(message + "; it is required in CI")
        pytest.skip(message)


def axe_problems(page, axe_source: str, impacts=("serious", "critical")) -> list[str]:
    """axe-core's WCAG 2 A/AA violations of the given impacts on the open page, one line each."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(content=axe_source)
    violations = page.evaluate(
        """async (tags) => {
            const result = await axe.run(document, {runOnly: {type: "tag", values: tags},
                                                    resultTypes: ["violations"]});
            return result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.map(n => n.target.join(" "))}));
        }""",
        AXE_TAGS,
    )
    return [
        f"{v['impact']}: {v['id']} ({v['help']}) at {v['nodes'][:4]}"
        for v in violations
        if v["impact"] in impacts
    ]


# --- the attention explorer, on a page written by the test ---------------------------------
# Fast (no site build): two explorers on one page, a self-attention one with four heads and
# a cross-attention one, read back through the browser and compared with Python's numbers.

EXPLORER_TOKENS = ["the", "cat", "sat", "on", "the", "mat"]
CROSS_QUERIES = ["le", "chat", "assis"]


def explorer_weights():
    import torch

    g = torch.Generator().manual_seed(13)
    self_w = torch.softmax(3 * torch.randn(4, 6, 6, generator=g), dim=-1)
    cross_w = torch.softmax(2 * torch.randn(2, 3, 6, generator=g), dim=-1)
    return self_w, cross_w


@pytest.fixture(scope="module")
def explorer_page(tmp_path_factory):
    """A standalone page with two explorers, light or dark by the reader's system setting."""
    from mha.plotting import attention_explorer

    self_w, cross_w = explorer_weights()
    first = attention_explorer(self_w, EXPLORER_TOKENS)
    second = attention_explorer(cross_w, EXPLORER_TOKENS, query_tokens=CROSS_QUERIES,
                                titles=["cross 0", "cross 1"])
    page = tmp_path_factory.mktemp("explorer") / "explorer.html"
    page.write_text(
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>Attention explorer</title><style>"
        "body{font-family:sans-serif;margin:1em;background:#fff;color:#222}"
        "@media (prefers-color-scheme: dark){body{background:#121212;color:#ced6dd}}"
        "</style></head><body><main><h1>Attention explorer</h1>"
        f"<section id='self'><h2>Self-attention</h2>{first._repr_html_()}</section>"
        f"<section id='cross'><h2>Cross-attention</h2>{second._repr_html_()}</section>"
        "</main></body></html>",
        encoding="utf-8",
    )
    return page.as_uri()


@pytest.fixture
def explorer_tab(browser, explorer_page):
    tab = Tab(browser, explorer_page)
    tab.open(explorer_page)
    yield tab
    assert tab.errors == [], f"JavaScript errors: {tab.errors}"
    tab.close()


def readout_of(explorer, i: int, j: int) -> str:
    explorer.locator(f'rect[data-i="{i}"][data-j="{j}"]').hover()
    return explorer.locator(".readout").inner_text()


def test_explorer_readout_shows_the_hovered_weight_of_the_selected_head(explorer_tab):
    self_w, _ = explorer_weights()
    explorer = explorer_tab.page.locator("#self .attention-explorer")
    slider = explorer.locator('input[type="range"]')
    for h in range(4):
        slider.fill(str(h))
        cells = [(i, j) for i in range(6) for j in range(6)] if h == 2 else [(0, 0), (5, 5), (3, 1)]
        for i, j in cells:
            want = f"head {h}: {EXPLORER_TOKENS[i]} -> {EXPLORER_TOKENS[j]} = {float(self_w[h, i, j]):.4f}"
            assert readout_of(explorer, i, j) == want


def test_explorer_slider_recolours_the_cells(explorer_tab):
    from mha.explorer import _colour

    self_w, _ = explorer_weights()
    explorer = explorer_tab.page.locator("#self .attention-explorer")
    for h in (3, 1):
        explorer.locator('input[type="range"]').fill(str(h))
        fills = explorer.locator("rect[data-i]").evaluate_all(
            "rects => rects.map(r => [+r.dataset.i, +r.dataset.j, r.getAttribute('fill')])"
        )
        assert len(fills) == 36
        assert all(fill == _colour(float(self_w[h, i, j])) for i, j, fill in fills)


def test_explorer_cross_attention_reads_query_and_key_tokens(explorer_tab):
    _, cross_w = explorer_weights()
    explorer = explorer_tab.page.locator("#cross .attention-explorer")
    explorer.locator('input[type="range"]').fill("1")
    for i, j in [(0, 0), (2, 5), (1, 3)]:
        want = f"cross 1: {CROSS_QUERIES[i]} -> {EXPLORER_TOKENS[j]} = {float(cross_w[1, i, j]):.4f}"
        assert readout_of(explorer, i, j) == want


def test_explorer_works_from_the_keyboard(explorer_tab):
    self_w, _ = explorer_weights()
    page = explorer_tab.page
    explorer = page.locator("#self .attention-explorer")
    readout = explorer.locator(".readout")
    page.keyboard.press("Tab")  # the slider comes first, then the grid
    assert page.evaluate("() => document.activeElement.type") == "range"
    page.keyboard.press("ArrowRight")  # head 1
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.classList.contains('ae-grid')")
    for key in ["ArrowDown", "ArrowDown", "ArrowRight"]:
        page.keyboard.press(key)
    assert readout.inner_text() == f"head 1: sat -> cat = {float(self_w[1, 2, 1]):.4f}"
    assert readout.get_attribute("aria-live") == "polite"
    page.keyboard.press("Shift+Tab")  # back to the slider: the cursor stays on its cell
    page.keyboard.press("ArrowRight")  # head 2
    assert readout.inner_text() == f"head 2: sat -> cat = {float(self_w[2, 2, 1]):.4f}"


def test_explorers_on_one_page_do_not_interfere(explorer_tab):
    _, cross_w = explorer_weights()
    first = explorer_tab.page.locator("#self .attention-explorer")
    second = explorer_tab.page.locator("#cross .attention-explorer")
    ids = explorer_tab.page.evaluate(
        "() => Array.from(document.querySelectorAll('[id]')).map(e => e.id)"
    )
    assert len(ids) == len(set(ids)), "duplicate ids on the page"
    before = first.locator("rect[data-i]").evaluate_all("rs => rs.map(r => r.getAttribute('fill'))")
    first_readout = first.locator(".readout").inner_text()
    second.locator('input[type="range"]').fill("1")
    assert readout_of(second, 1, 1).endswith(f"= {float(cross_w[1, 1, 1]):.4f}")
    assert first.locator(".readout").inner_text() == first_readout
    after = first.locator("rect[data-i]").evaluate_all("rs => rs.map(r => r.getAttribute('fill'))")
    assert after == before


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_explorer_passes_axe_and_is_saved_as_a_screenshot(browser, explorer_page, axe_source, dark):
    tab = Tab(browser, explorer_page, dark=dark)
    try:
        tab.open(explorer_page)
        explorer = tab.page.locator("#self .attention-explorer")
        explorer.locator('input[type="range"]').fill("2")
        readout_of(explorer, 4, 1)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        target = ARTIFACTS / f"explorer-{'dark' if dark else 'light'}.png"
        explorer.screenshot(path=str(target))
        assert target.stat().st_size > 5_000
        assert axe_problems(tab.page, axe_source) == []
        assert tab.errors == []
    finally:
        tab.close()


def test_explorer_fits_a_phone(browser, explorer_page):
    tab = Tab(browser, explorer_page, width=390)
    try:
        tab.open(explorer_page)
        widths = tab.page.evaluate(
            "() => [document.documentElement.scrollWidth, window.innerWidth,"
            " document.querySelector('.attention-explorer svg').getBoundingClientRect().width]"
        )
        assert widths[0] <= widths[1] and widths[2] <= widths[1], widths
        explorer = tab.page.locator("#self .attention-explorer")
        assert readout_of(explorer, 5, 0).startswith("head 0: mat -> the = ")
    finally:
        tab.close()


# --- the site's finish: one search box, dark mode, phones, accessibility --------------------


def visible_search_boxes(page) -> int:
    return page.evaluate(
        """() => Array.from(document.querySelectorAll(
                '.search-button-field, form.bd-search, input[type="search"]'))
            .filter(el => !el.closest('.search-button__wrapper'))  // the Ctrl+K dialog
            .filter(el => el.checkVisibility() && el.getBoundingClientRect().width > 0)
            .length"""
    )


@pytest.mark.parametrize("path", [HOME, f"{LESSONS[0]}.html"])
def test_one_search_box_at_desktop_width(tab, site_url, path):
    tab.open(f"{site_url}/{path}")
    assert visible_search_boxes(tab.page) == 1


@pytest.mark.parametrize("path", ALL_PAGES)
def test_no_page_scrolls_sideways_on_a_phone(browser, site_url, path):
    """At 390 px only code cells, display maths and wide tables scroll, inside their boxes."""
    tab = Tab(browser, site_url, width=390)
    try:
        tab.open(f"{site_url}/{path}")
        width, viewport = tab.page.evaluate(
            "() => [document.documentElement.scrollWidth, window.innerWidth]"
        )
        assert width <= viewport, f"{path}: the page is {width} px wide on a {viewport} px phone"
        assert tab.errors == []
    finally:
        tab.close()


def test_dark_mode_follows_the_system_and_figures_stay_legible(browser, site_url):
    """A reader whose system is dark gets the dark theme; figures sit on a white panel."""
    tab = Tab(browser, site_url, dark=True)
    try:
        for lesson in LESSONS:
            tab.open(f"{site_url}/{lesson}.html")
            if tab.page.locator("main .cell_output img").count():
                break
        else:
            pytest.skip("no lesson shows a figure")
        assert tab.page.evaluate("() => document.documentElement.dataset.theme") == "dark"
        figures = tab.page.locator("main .cell_output img").evaluate_all(
            """imgs => imgs.map(img => { const s = getComputedStyle(img);
                return [s.backgroundColor, s.filter]; })"""
        )
        page_background = tab.page.evaluate("() => getComputedStyle(document.body).backgroundColor")
        assert page_background != "rgb(255, 255, 255)", "the page did not turn dark"
        assert all(figure == ["rgb(255, 255, 255)", "none"] for figure in figures), figures
        figure = tab.page.locator("main .cell_output img").first
        figure.scroll_into_view_if_needed()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        tab.page.screenshot(path=str(ARTIFACTS / "figure-dark.png"))
        assert tab.errors == []
    finally:
        tab.close()


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
@pytest.mark.parametrize("path", ALL_PAGES)
def test_axe_finds_no_serious_accessibility_problem(browser, site_url, axe_source, path, dark):
    tab = Tab(browser, site_url, dark=dark)
    try:
        tab.open(f"{site_url}/{path}")
        problems = axe_problems(tab.page, axe_source)
        assert problems == [], f"{path}: axe-core (WCAG 2 A/AA): " + "\n".join(problems)
    finally:
        tab.close()


def pages_with_explorers(html_dir) -> list[str]:
    return [
        path for path in ALL_PAGES
        if 'class="attention-explorer"' in (html_dir / path).read_text(encoding="utf-8")
    ]


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_explorers_on_the_site_read_back_their_weights(browser, site_url, built_site, dark):
    """Every explorer on every page: the last head, a corner cell, read-out vs its JSON."""
    import json

    paths = pages_with_explorers(built_site)
    if not paths:
        pytest.skip("no page shows an attention explorer yet")
    tab = Tab(browser, site_url, dark=dark)
    try:
        for path in paths:
            tab.open(f"{site_url}/{path}")
            explorers = tab.page.locator(".attention-explorer")
            for k in range(explorers.count()):
                explorer = explorers.nth(k)
                data = json.loads(explorer.locator('script[type="application/json"]').text_content())
                titles = json.loads(explorer.get_attribute("data-titles"))
                h, i, j = len(data["heads"]) - 1, len(data["heads"][0]) - 1, 0
                if h > 0:
                    explorer.locator('input[type="range"]').fill(str(h))
                queries = data.get("query_tokens", data["tokens"])
                want = f"{titles[h]}: {queries[i]} -> {data['tokens'][j]} = {data['heads'][h][i][j]:.4f}"
                assert readout_of(explorer, i, j) == want, f"{path}, explorer {k}"
                if path == paths[0] and k == 0:
                    ARTIFACTS.mkdir(parents=True, exist_ok=True)
                    mode = "dark" if dark else "light"
                    explorer.screenshot(path=str(ARTIFACTS / f"site-explorer-{mode}.png"))
            assert tab.errors == [], f"{path}: JavaScript errors: {tab.errors}"
    finally:
        tab.close()
