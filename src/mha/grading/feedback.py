"""Feedback to hand back (``mha feedback GRADES.json --out DIR``): one HTML page per student
who submitted, which any browser opens without the course installed (no script, nothing
fetched, light and dark colours), with their own grades only.

Each page gives the total (as graded, with any override and late penalty, and the final
points), the notes on what was read (which notebook was graded, a cell that did not parse),
and per exercise its points, every check with what the grader said (hidden checks never
quote their inputs or values: the messages are the grader's) and the hint, and the section
of the lesson to reread. The file is named after the student's roster id (else the name the
grader gave the submission); ``index.csv`` beside the pages says whose each one is, for the
instructor. Nothing on a page comes from another student's submission: the names on it are
the student's own, and the code of answers is left out.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from .classstats import DIAGNOSIS, MISTAKE, link
from .gradebook import GRADED, Entry

TEMPLATES = Path(__file__).parent / "templates"
INDEX = "index.csv"


def file_name(e: Entry, taken: set[str]) -> str:
    """``<id>.html`` (the roster's id), else ``<the grader's name>.html``, made safe for a file
    system and unique (ignoring case)."""
    base = re.sub(r"[^A-Za-z0-9_.@-]+", "_", e.id or e.key).strip("._") or "student"
    name, n = f"{base}.html", 1
    while name.casefold() in taken:
        n += 1
        name = f"{base}-{n}.html"
    taken.add(name.casefold())
    return name


def page_data(e: Entry, exercises: list[dict], site_url: str | None) -> dict:
    """What one student's page shows, as plain data."""
    by_id = {x["id"]: x for x in exercises}
    items = []
    for eid, a in e.exercises.items():
        x = by_id[eid]
        mistakes = {m["key"]: m for m in x.get("mistakes", [])}
        diagnosis = x.get("diagnosis") or {}
        reread, checks = {}, []
        for c in a["checks"]:
            checks.append({"name": c["name"], "passed": c["passed"], "message": c["message"]})
            if c["passed"]:
                continue
            if c.get("kind") == MISTAKE and c.get("mistake") in mistakes:
                m = mistakes[c["mistake"]]
                where = link(m.get("section", ""), m.get("taught", ""), site_url)
            elif c.get("kind") == DIAGNOSIS or diagnosis.get("section"):
                where = link(diagnosis.get("section", ""), diagnosis.get("taught", ""), site_url)
            else:
                where = None
            if where is not None:
                reread[(where.text, where.href)] = where
        if a["status"] != GRADED and a["score"] < a["max_score"] and diagnosis.get("section"):
            where = link(diagnosis["section"], diagnosis.get("taught", ""), site_url)
            reread[(where.text, where.href)] = where
        items.append({"id": eid, "title": x["title"], "lesson": x["lesson"], "score": a["score"],
                      "max": a["max_score"], "status": a["status"], "message": a.get("message", ""),
                      "checks": checks, "reread": list(reread.values()), "override": a.get("override"),
                      "graded": a.get("graded_score")})
    return {"items": items, "notes": list((e.submission or {}).get("notes", []))}


def write(book: list[Entry], exercises: list[dict], directory, *, graded: str = "",
          site_url: str | None = None) -> list[Path]:
    """One page per student who submitted something, and ``index.csv``; returns the pages."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    template = env.get_template("feedback.html")
    taken: set[str] = set()
    written, index = [], []
    for e in book:
        if not e.key:
            continue
        name = file_name(e, taken)
        data = page_data(e, exercises, site_url)
        text = template.render(e=e, who=e.name or e.key, graded=graded, fmt=_fmt, site=bool(site_url), **data)
        (directory / name).write_text(text, encoding="utf-8")
        written.append(directory / name)
        index.append((name, e.id, e.name, e.section, e.key, e.path))
    with open(directory / INDEX, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["file", "id", "name", "section", "student", "path"])
        w.writerows(index)
    return written


def _fmt(x) -> str:
    return f"{round(float(x), 2):g}"
