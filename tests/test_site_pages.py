"""Every page of the built website in a real browser, light colours: it loads without
JavaScript errors or requests to the internet, its maths is typeset, its images load, it
does not scroll sideways on a phone, and axe-core (WCAG 2 A/AA) finds no serious
problem. Each page is opened once for all of these. Dark colours: tests/test_site_dark.py.
"""

from __future__ import annotations

import pytest

from browsing import Tab, axe_problems
from test_site import PAGES as TOC_PAGES

ALL_PAGES = [f"{page}.html" for page in TOC_PAGES]
PHONE = 390


@pytest.fixture(scope="module", params=ALL_PAGES)
def page(request, browser, site_url):
    """One page, opened once for every test of this module (pytest runs them together)."""
    tab = Tab(browser, site_url)
    tab.path = request.param
    tab.open(f"{site_url}/{request.param}")
    yield tab
    tab.close()


def test_page_loads_without_javascript_errors(page):
    assert page.page.locator("main h1").count() >= 1, f"{page.path}: no page title rendered"
    assert page.errors == [], f"{page.path}: JavaScript errors: {page.errors}"
    assert page.external == [], f"{page.path}: requests to the internet: {page.external}"


def test_maths_is_typeset(page):
    if page.page.locator("main .math").count() == 0:
        pytest.skip(f"{page.path} has no maths")
    untypeset = page.page.evaluate(
        "() => Array.from(document.querySelectorAll('main .math'))"
        ".filter(el => !el.querySelector('mjx-container')).map(el => el.textContent)"
    )
    assert untypeset == [], f"{page.path}: raw TeX left on the page: {untypeset[:3]}"


def test_every_image_loads(page):
    broken = page.page.evaluate(
        """async () => {
            const images = Array.from(document.images);
            for (const img of images) { img.loading = "eager"; }
            await Promise.all(images.map(img => img.decode().catch(() => null)));
            return images.filter(img => img.naturalWidth === 0).map(img => img.src);
        }"""
    )
    assert broken == [], f"{page.path}: images that did not load: {broken}"


def test_no_page_scrolls_sideways_on_a_phone(page):
    """At 390 px only code cells, display maths and wide tables scroll, inside their boxes."""
    page.page.set_viewport_size({"width": PHONE, "height": 900})
    try:
        width, viewport = page.page.evaluate(
            "() => [document.documentElement.scrollWidth, window.innerWidth]"
        )
    finally:
        page.page.set_viewport_size({"width": 1280, "height": 900})
    assert viewport == PHONE
    assert width <= viewport, f"{page.path}: the page is {width} px wide on a {viewport} px phone"
    assert page.errors == []


def test_axe_finds_no_serious_accessibility_problem(page, axe_source):
    problems = axe_problems(page.page, axe_source)  # last: it merges code tokens (see browsing.py)
    assert problems == [], f"{page.path}: axe-core (WCAG 2 A/AA): " + "\n".join(problems)


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_axe_still_sees_a_code_token_of_poor_contrast(browser, site_url, axe_source, dark):
    """The check above merges code tokens of the same colour before axe runs; a token
    colour with too little contrast must still be reported."""
    tab = Tab(browser, site_url, dark=dark)
    page = f"{site_url}/book/grading.html"  # a short page with highlighted code
    try:
        tab.open(page)
        cls = tab.page.evaluate(  # a kind of token with letters (axe skips punctuation)
            "() => Array.from(document.querySelectorAll('.highlight pre span[class]'))"
            ".filter(s => /^[A-Za-z_]\\w+$/.test(s.textContent)).map(s => s.className).pop()"
        )
        assert axe_problems(tab.page, axe_source) == []
        tab.open(page)
        faint = "#777" if dark else "#bbb"
        tab.page.add_style_tag(content=f".highlight pre span.{cls} {{ color: {faint} !important }}")
        problems = axe_problems(tab.page, axe_source)
        assert any("color-contrast" in p for p in problems), (cls, problems)
    finally:
        tab.close()
