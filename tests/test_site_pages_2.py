"""The checks of tests/test_site_pages.py on the other half of the pages (a second file,
so that ``--dist loadfile`` gives the two halves to different workers)."""

from __future__ import annotations

import pytest

import test_site_pages as first
from test_site_pages import ALL_PAGES, CHECKS, PAGES, SAMPLE, opened

HERE = PAGES[1::2]


@pytest.fixture(scope="module", params=HERE)
def page(request, reused_tab, site_url):
    return opened(request, reused_tab, site_url)


for _check in CHECKS:  # collected in this order, as in tests/test_site_pages.py
    globals()[_check.__name__] = _check


def test_the_two_files_check_every_page_once_with_every_check():
    assert sorted(first.HERE + HERE) == sorted(PAGES) and not set(first.HERE) & set(HERE)
    assert all(globals()[check.__name__] is check for check in CHECKS)
    assert {f.__name__ for f in CHECKS} == {n for n in vars(first) if n.startswith("test_")}


def test_the_sample_is_pages_of_the_site_and_all_is_every_page():
    assert set(SAMPLE) <= set(ALL_PAGES), set(SAMPLE) - set(ALL_PAGES)
    assert PAGES == (ALL_PAGES if first.SWEEP == "all" else SAMPLE)
