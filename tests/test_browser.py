"""The built website in a real browser: no JavaScript errors, maths typeset, images
loaded, navigation and search working, nothing fetched from the internet.

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
    """A fresh browser tab that records JavaScript errors and requests leaving the site."""

    def __init__(self, browser, site_url):
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
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
