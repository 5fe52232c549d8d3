"""The class report links every named mistake of the course to the section of a lesson that
teaches the point (``Mistake.section``, else its exercise's ``section``; see
mha/autograde/sections.py): each of those sections is on the built website, under the id the
report links to."""

from __future__ import annotations

import re

from mha.autograde import sections
from mha.exercises import EXERCISES


def test_every_section_the_class_report_links_to_is_on_the_website(built_site):
    ids: dict[str, set[str]] = {}
    missing = []
    for key in sorted({sections.taught(ex, k) for ex in EXERCISES.values() for k in range(len(ex.mistakes))}):
        lesson, _, anchor = key.partition("#")
        if lesson not in ids:
            page = built_site / "lessons" / f"{lesson}.html"
            ids[lesson] = set(re.findall(r'\bid="([^"]+)"', page.read_text())) if page.is_file() else set()
        if anchor not in ids[lesson]:
            missing.append(key)
    assert not missing, f"sections the report links to that the website lacks: {missing}"
