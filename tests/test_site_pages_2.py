"""The checks of tests/test_site_pages.py on the other half of the pages (a second file,
so that ``--dist loadfile`` gives the two halves to different workers)."""

from __future__ import annotations

import pytest

from test_site_pages import ALL_PAGES, CHECKS, opened

HERE = ALL_PAGES[1::2]


@pytest.fixture(scope="module", params=HERE)
def page(request, browser, site_url):
    yield from opened(request, browser, site_url)


for _check in CHECKS:  # collected in this order, as in tests/test_site_pages.py
    globals()[_check.__name__] = _check
