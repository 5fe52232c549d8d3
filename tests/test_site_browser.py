"""The built website in a real browser, as a whole: the home page, navigation, search,
one search box, dark mode with legible figures, and the accessibility check itself. Each
page on its own (its attention explorers included) is checked in tests/test_site_pages.py.
Screenshots go to _build/artifacts.

Without Debian's chromium the tests are skipped, except in CI (the environment variable
CI is set), where a missing browser is a failure.
"""

from __future__ import annotations

import pytest

from browsing import axe_problems
from conftest import ARTIFACTS
from test_site import LESSONS

HOME = "book/intro.html"  # index.html is a redirect to it


def test_index_redirects_to_the_home_page_with_typeset_maths_and_one_search_box(tab, site_url):
    # The home page has a formula on purpose, so the per-page maths check is never vacuous.
    tab.page.goto(f"{site_url}/index.html")
    tab.page.wait_for_url(f"**/{HOME}")
    tab.settle()
    assert tab.page.locator("main mjx-container").count() >= 1
    assert visible_search_boxes(tab.page) == 1
    assert tab.errors == []


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


def visible_search_boxes(page) -> int:
    return page.evaluate(
        """() => Array.from(document.querySelectorAll(
                '.search-button-field, form.bd-search, input[type="search"]'))
            .filter(el => !el.closest('.search-button__wrapper'))  // the Ctrl+K dialog
            .filter(el => el.checkVisibility() && el.getBoundingClientRect().width > 0)
            .length"""
    )


def test_the_first_lesson_has_one_search_box_and_a_screenshot(tab, site_url):
    tab.open(f"{site_url}/{LESSONS[0]}.html")
    assert visible_search_boxes(tab.page) == 1
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    target = ARTIFACTS / "lesson-01.png"
    tab.page.screenshot(path=str(target))
    assert target.stat().st_size > 10_000


def test_dark_mode_follows_the_system_and_figures_stay_legible(reused_tab, site_url):
    """A reader whose system is dark gets the dark theme; figures sit on a white panel."""
    tab = reused_tab
    tab.reset(dark=True)
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


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_axe_still_sees_text_of_poor_contrast(reused_tab, site_url, axe_source, dark):
    """The accessibility check of every page (tests/test_site_pages.py) merges code tokens
    of the same colour and checks the contrast of one element per style, and only of styles
    that no earlier page had: a code token or a paragraph given too little contrast must
    still be reported, on a page whose styles were all checked before."""
    tab = reused_tab
    tab.reset(dark=dark)
    page = f"{site_url}/book/grading.html"  # a short page with highlighted code
    tab.open(page)
    cls = tab.page.evaluate(  # a kind of token with letters (axe skips punctuation)
        "() => Array.from(document.querySelectorAll('.highlight pre span[class]'))"
        ".filter(s => /^[A-Za-z_]\\w+$/.test(s.textContent)).map(s => s.className).pop()"
    )
    contrast = ["color-contrast"]  # the rule this is about
    checked = set()
    assert axe_problems(tab.page, axe_source, rules=contrast, checked_styles=checked) == []
    assert len(checked) > 5, checked
    faint = "#777" if dark else "#bbb"
    for target in (f".highlight pre span.{cls}", "main p"):
        tab.open(page)
        tab.page.add_style_tag(content=f"{target} {{ color: {faint} !important }}")
        problems = axe_problems(tab.page, axe_source, rules=contrast, checked_styles=set(checked))
        assert any("color-contrast" in p for p in problems), (target, problems)
