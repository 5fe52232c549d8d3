"""The class report (``mha grade ... --report DIR``, ``mha report GRADES.json --out DIR``):
what the class as a whole got wrong, as one offline HTML page and a CSV of every number the
page shows, each under the same key (``scope|id|measure``), so that a test, or an
instructor's spreadsheet, can check the page against the grades.

The numbers are worked out in ``classstats``, as plain data, from a grades document
(``grades``); the page is the Jinja2 template ``templates/class-report.html`` (a change of
layout is an edit there); the figures are inline SVG (``figures``). The page has no script
and fetches nothing; its only links are to the lesson sections that teach each point.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from . import figures
from .classstats import DISCRIMINATION_MIN, EASY_SHARE, GROUPS, TEACH_GROUP, ClassReport, build, numbers

HTML_NAME = "class-report.html"
CSV_NAME = "class-report.csv"
KEY_NAME = "pseudonym-key.csv"
TEMPLATES = Path(__file__).parent / "templates"

# The rows of an exercise's "What the class did" table: (label, measure).
ROWS = [("Students", "students"), ("Full marks", "full marks"), ("Mean score", "mean score"),
        ("Answers that ran", "graded"), ("Wrong answers", "wrong"), ("Wrong answers with no hint", "unexplained"),
        ("Not attempted", "not attempted"), ("Missing", "missing"), ("Wrong signature", "wrong signature"),
        ("Refused: forbidden name", "forbidden"), ("Forbidden call while running", "forbidden calls"),
        ("Crashed", "crashed"), ("Timed out", "timeout"), ("Unreadable", "unreadable")]

__all__ = ["build", "render", "write", "key_path", "local_site", "numbers", "HTML_NAME", "CSV_NAME", "KEY_NAME"]


def local_site() -> str | None:
    """The course website built in this source checkout (``make book``), as a file URL, or None."""
    root = Path(__file__).resolve().parents[3]
    index = root / "_build" / "html" / "index.html"
    return index.parent.as_uri() if (root / "pyproject.toml").is_file() and index.is_file() else None


def anchor(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")


def _fmt(x: float) -> str:
    return f"{round(x, 2):g}"


def render(report: ClassReport) -> str:
    """The report as one HTML page."""
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    keyed = {f"{s}|{i}|{m}": v for s, i, m, v, _ in numbers(report)}

    def num(scope: str, id_: str, measure: str, text: str | None = None, suffix: str = "") -> Markup:
        key = f"{scope}|{id_}|{measure}"
        if key not in keyed:
            raise KeyError(f"the page shows {key!r}, which classstats.numbers does not list")
        value = keyed[key]
        shown = text if text is not None else f"{value}{suffix if value != '' else ''}"
        return Markup('<span data-key="{}">{}</span>').format(key, shown)

    def histogram(values, top, label, divisions=None) -> Markup:
        return Markup(figures.histogram(values, top, label=label, divisions=divisions)[0])

    def scatter() -> Markup:
        items = [(e.number, e.id, e.difficulty, e.discrimination, bool(e.flags)) for e in report.exercises]
        return Markup(figures.scatter(items, DISCRIMINATION_MIN)[0])

    return env.get_template("class-report.html").render(
        r=report, teach_columns=report.teach_sections, groups_shown=GROUPS, num=num, histogram=histogram, scatter=scatter, anchor=anchor, fmt=_fmt, rows=ROWS,
        known={m for _, m in ROWS}, key_name=KEY_NAME, teach_group=TEACH_GROUP, easy=round(100 * EASY_SHARE),
        threshold=round(100 * DISCRIMINATION_MIN))


def key_path(directory, given=None) -> Path:
    """Where the key to a pseudonymised report's pseudonyms goes: ``given``, else beside the
    report's folder (``report-pseudonym-key.csv`` for ``report/``), never inside it: the
    folder is what one shares. Raises ValueError for a path inside the folder."""
    directory = Path(directory).resolve()
    path = Path(given).resolve() if given else directory.parent / f"{directory.name}-{KEY_NAME}"
    if directory in path.parents:
        raise ValueError(f"--pseudonym-key {given}: the key must not be inside the report's folder {directory}, "
                         "which is the folder one shares: write it elsewhere")
    return path


def write(report: ClassReport, directory, key=None) -> list[Path]:
    """Write the page and the CSV into ``directory`` (and, for a pseudonymised report, the
    key to its pseudonyms at ``key_path(directory, key)``, outside it); return their paths."""
    directory = Path(directory)
    target = key_path(directory, key) if report.pseudonymised else None
    directory.mkdir(parents=True, exist_ok=True)
    page, table = directory / HTML_NAME, directory / CSV_NAME
    text = render(report)
    with open(table, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["scope", "id", "measure", "value", "text"])
        w.writerows(numbers(report))
    page.write_text(text, encoding="utf-8")
    written = [page, table]
    stale = directory / KEY_NAME
    if stale.exists():  # an earlier version wrote the key into the folder one shares
        stale.unlink()
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, ["pseudonym", "student", "id", "name", "section", "path"])
            w.writeheader()
            w.writerows(report.key)
        written.append(target)
    return written
