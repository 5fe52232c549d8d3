"""Every page of the built website in a real browser whose system asks for dark colours:
it loads without JavaScript errors, and axe-core (WCAG 2 A/AA) finds no serious problem,
contrast included, in the dark theme. Light colours: tests/test_site_pages.py.
"""

from __future__ import annotations

import pytest

from browsing import Tab, axe_problems
from test_site_pages import ALL_PAGES


@pytest.fixture(scope="module", params=ALL_PAGES)
def dark_page(request, browser, site_url):
    tab = Tab(browser, site_url, dark=True)
    tab.path = request.param
    tab.open(f"{site_url}/{request.param}")
    yield tab
    tab.close()


def test_page_loads_dark_without_javascript_errors(dark_page):
    assert dark_page.page.evaluate("() => document.documentElement.dataset.theme") == "dark"
    assert dark_page.errors == [], f"{dark_page.path}: JavaScript errors: {dark_page.errors}"


def test_axe_finds_no_serious_accessibility_problem_in_the_dark(dark_page, axe_source):
    problems = axe_problems(dark_page.page, axe_source)
    assert problems == [], f"{dark_page.path}: axe-core (WCAG 2 A/AA), dark: " + "\n".join(problems)
