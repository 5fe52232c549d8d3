"""Every page of the built website in a real browser: it loads without JavaScript errors
or requests to the internet, its maths is typeset, its images load, it does not scroll
sideways on a phone, every attention explorer on it reads back its own weights, it turns
dark when the reader's system asks for dark colours, and axe-core (WCAG 2 A/AA) finds no
serious problem in either colour mode. Each page is opened once for all of these, in the
order of CHECKS below.

Every other page of PAGES is checked here; the rest by the same tests in
tests/test_site_pages_2.py, so that under ``make test`` (``--dist loadfile``) the two workers
share the pages.

PAGES: ``make test`` checks the pages of SAMPLE, one of each kind of page the site has;
``MHA_SITE_PAGES=all`` checks every page of the table of contents, as CI does (.ci/run). The
sweep of every page costs about 80 s of CPU, a seventh of ``make test``, to repeat on pages
of the same kinds the checks that SAMPLE already runs.
"""

from __future__ import annotations

import os

import pytest

from browsing import COLOUR_RULES, axe_problems, readout_of
from conftest import ARTIFACTS
from test_site import PAGES as TOC_PAGES

ALL_PAGES = [f"{page}.html" for page in TOC_PAGES]
# One page of each kind: attention explorers and figures (01), the longest code and maths
# (08), wide tables and timing plots (09), Triton kernels and the cells skipped without
# them (14), the home page, and a page of prose, commands and downloads (how-to-use).
SAMPLE = ["book/intro.html", "book/how-to-use.html", "lessons/01-one-head.html", "lessons/08-gradients.html",
          "lessons/09-cost-of-attention.html", "lessons/14-flash-attention-in-triton.html"]
SWEEP = os.environ.get("MHA_SITE_PAGES", "sample")
if SWEEP not in ("sample", "all"):
    raise ValueError(f"MHA_SITE_PAGES must be 'sample' (the default) or 'all', got {SWEEP!r}")
PAGES = ALL_PAGES if SWEEP == "all" else SAMPLE
PHONE = 390
HERE = PAGES[0::2]  # the other half: tests/test_site_pages_2.py


def opened(request, tab, site_url):
    """The page ``request.param``, opened afresh (Tab.open_afresh) in the test process's
    tab, once for every test of its module (pytest runs them together)."""
    tab.path = request.param
    tab.open_afresh(f"{site_url}/{request.param}")
    return tab


@pytest.fixture(scope="module", params=HERE)
def page(request, reused_tab, site_url):
    return opened(request, reused_tab, site_url)


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


SCREENSHOT_EXPLORER_ON = "lessons/01-one-head.html"  # its first explorer goes to _build/artifacts


def explorers_read_back(page, mode: str) -> None:
    """Each explorer on the page, in its last head: a corner cell's read-out against its data."""
    import json

    explorers = page.page.locator(".attention-explorer")
    assert explorers.count() or page.path != SCREENSHOT_EXPLORER_ON, f"{page.path} lost its explorer"
    if explorers.count() == 0:
        pytest.skip("no attention explorer on this page")
    for k in range(explorers.count()):
        explorer = explorers.nth(k)
        data = json.loads(explorer.locator('script[type="application/json"]').text_content())
        titles = json.loads(explorer.get_attribute("data-titles"))
        h, i, j = len(data["heads"]) - 1, len(data["heads"][0]) - 1, 0
        if h > 0:
            explorer.locator('input[type="range"]').fill(str(h))
        queries = data.get("query_tokens", data["tokens"])
        want = f"{titles[h]}: {queries[i]} -> {data['tokens'][j]} = {data['heads'][h][i][j]:.4f}"
        assert readout_of(explorer, i, j) == want, f"{page.path}, explorer {k}, {mode} colours"
        if page.path == SCREENSHOT_EXPLORER_ON and k == 0:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            explorer.screenshot(path=str(ARTIFACTS / f"site-explorer-{mode}.png"))
    assert page.errors == [], f"{page.path}: JavaScript errors: {page.errors}"


def test_explorers_read_back_their_weights_in_light_colours(page):
    explorers_read_back(page, "light")


def colours(page, scheme: str) -> None:
    """Switch the reader's system to light or dark colours; the page follows (the theme's
    own "auto" mode), without a reload."""
    page.page.emulate_media(color_scheme=scheme)
    page.page.wait_for_function("s => document.documentElement.dataset.theme === s", arg=scheme)
    page.end_fades()  # the theme fades some colours (the search button's, for one)


# The contrast styles this process has checked, per colour scheme: a page's contrast check
# covers only the styles that no page before it had (browsing.CONTRAST_SAMPLES).
CHECKED_STYLES = {"light": set(), "dark": set()}


def axe_finds_nothing_serious(page, axe_source, scheme: str) -> None:
    colours(page, scheme)
    problems = axe_problems(page.page, axe_source, rules=COLOUR_RULES if scheme == "dark" else None,
                            checked_styles=CHECKED_STYLES[scheme])
    assert problems == [], f"{page.path}: axe-core (WCAG 2 A/AA), {scheme} colours: " + "\n".join(problems)


def test_page_turns_dark_with_the_system(page):
    colours(page, "dark")  # and stays dark for the next check
    background = page.page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    assert background != "rgb(255, 255, 255)", f"{page.path}: the page did not turn dark"
    assert page.errors == [], f"{page.path}: JavaScript errors in dark colours: {page.errors}"


def test_explorers_read_back_their_weights_in_dark_colours(page):
    explorers_read_back(page, "dark")


def test_axe_finds_no_serious_accessibility_problem_in_dark_colours(page, axe_source):
    axe_finds_nothing_serious(page, axe_source, "dark")


def test_axe_finds_no_serious_accessibility_problem_in_light_colours(page, axe_source):
    axe_finds_nothing_serious(page, axe_source, "light")


# The per-page checks, in the order they run on a page: the light ones, then dark, and the
# axe checks last (axe merges code tokens, and its stylesheet loader asks for a file the
# site does not have, which the browser reports as an error).
CHECKS = [test_page_loads_without_javascript_errors, test_maths_is_typeset, test_every_image_loads,
          test_no_page_scrolls_sideways_on_a_phone, test_explorers_read_back_their_weights_in_light_colours,
          test_page_turns_dark_with_the_system, test_explorers_read_back_their_weights_in_dark_colours,
          test_axe_finds_no_serious_accessibility_problem_in_dark_colours,
          test_axe_finds_no_serious_accessibility_problem_in_light_colours]
