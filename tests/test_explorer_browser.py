"""The attention explorer in a real browser, on a page the test writes (no site build):
the slider, hovering, the keyboard, two explorers on one page, a phone's width, and
axe-core in both colour modes, each read back against Python's numbers. Screenshots go
to _build/artifacts. The explorers on the built site are checked in
tests/test_site_browser.py.
"""

from __future__ import annotations

import pytest

from browsing import COLOUR_RULES, Tab, axe_problems, readout_of
from conftest import ARTIFACTS

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


@pytest.fixture(scope="module")
def one_tab(browser, explorer_page):
    tab = Tab(browser, explorer_page)
    yield tab
    tab.close()


@pytest.fixture
def explorer_tab(one_tab, explorer_page):
    """The explorers' page, loaded again for each test in one tab (Tab.open_afresh)."""
    one_tab.open_afresh(explorer_page)
    yield one_tab
    assert one_tab.errors == [], f"JavaScript errors: {one_tab.errors}"


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
def test_explorer_passes_axe_and_is_saved_as_a_screenshot(one_tab, explorer_page, axe_source, dark):
    tab = one_tab
    tab.open_afresh(explorer_page, dark=dark)
    explorer = tab.page.locator("#self .attention-explorer")
    explorer.locator('input[type="range"]').fill("2")
    readout_of(explorer, 4, 1)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    target = ARTIFACTS / f"explorer-{'dark' if dark else 'light'}.png"
    explorer.screenshot(path=str(target))
    assert target.stat().st_size > 5_000
    # In dark colours only the colour rules: the others see the same page as in light.
    assert axe_problems(tab.page, axe_source, rules=COLOUR_RULES if dark else None) == []
    assert tab.errors == []


def test_explorer_fits_a_phone(one_tab, explorer_page):
    tab = one_tab
    tab.open_afresh(explorer_page, width=390)
    widths = tab.page.evaluate(
        "() => [document.documentElement.scrollWidth, window.innerWidth,"
        " document.querySelector('.attention-explorer svg').getBoundingClientRect().width]"
    )
    assert widths[0] <= widths[1] and widths[2] <= widths[1], widths
    explorer = tab.page.locator("#self .attention-explorer")
    assert readout_of(explorer, 5, 0).startswith("head 0: mat -> the = ")
