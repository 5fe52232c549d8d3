"""A class roster (``--roster FILE``): who should have submitted, under which id and section.

The file is a CSV whose first line names its columns: ``id`` and ``name``, and ``section``
if the class has sections, and ``due`` for a student's own due date (an extension); other
columns are kept, and written back into the LMS exports (commas, semicolons or tabs).
Canvas's gradebook export is a roster as it is: its ``Student`` column is the name ("Wei,
Li"), its ``SIS User ID`` the id (else its ``ID``), and its "Points Possible" line is skipped. A
submission belongs to the student whose id is its file's or folder's name, or one word of
it (``20231147``, ``20231147_li_wei``), else to the student whose name it is (``li_wei``
for "Li Wei"); where two students have that name, the section named by one of its folders
(``section-b/li_wei``) tells them apart.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path


class RosterError(ValueError):
    """A roster that cannot be used, or a submission it cannot place: the message says why."""


@dataclass(frozen=True)
class Student:
    id: str
    name: str
    section: str = ""
    line: int = 0
    extra: tuple[tuple[str, str], ...] = ()   # the other columns, (header, value), as the file has them
    due: str = ""                             # the student's own due date (an extension), as written

    def column(self, header: str) -> str:
        return dict(self.extra).get(header, "")


# Canvas's gradebook export, read as a roster: its columns for the name and the id.
CANVAS_NAME, CANVAS_ID, CANVAS_SIS = "student", "id", "sis user id"


def read_table(path, option: str, columns: str, error=ValueError) -> tuple[list[str], list[list[str]]]:
    """The header (lower case) and rows of the spreadsheet ``path`` saved as CSV (commas,
    semicolons or tabs, UTF-8 with or without a byte-order mark); ``error`` names ``option``
    and what is wrong: unreadable, not UTF-8, or empty (``columns``: what its first line names)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as e:
        raise error(f"{option} {path}: cannot read it ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise error(f"{option} {path}: not a text file in UTF-8 (save the spreadsheet as CSV UTF-8)") from None
    lines = text.splitlines()
    if not lines:
        raise error(f"{option} {path} is empty: its first line names the columns {columns}")
    delimiter = max(",;\t", key=lines[0].count)
    rows = list(csv.reader(lines, delimiter=delimiter))
    return [h.strip().lower() for h in rows[0]], rows


def read(path) -> list[Student]:
    path = Path(path)
    header, rows = read_table(path, "--roster", "id, name and section", RosterError)
    canvas = "name" not in header and CANVAS_NAME in header and CANVAS_ID in header
    if canvas:  # Canvas's export: the SIS id is the institution's, Canvas's own ID is kept as a column
        names = {"name": CANVAS_NAME, "id": CANVAS_SIS if CANVAS_SIS in header else CANVAS_ID}
    else:
        names = {"name": "name", "id": "id"}
    if names["id"] not in header or names["name"] not in header:
        raise RosterError(f"--roster {path}: the first line must name the columns id and name (and section, if the "
                          f"class has sections), found: {', '.join(rows[0]) or 'nothing'}")
    col = {h: header.index(names.get(h, h)) for h in ("id", "name", "section", "due") if names.get(h, h) in header}
    used = set(col.values())
    students: list[Student] = []
    seen: dict[str, int] = {}
    for n, row in enumerate(rows[1:], 2):
        if not any(cell.strip() for cell in row):
            continue
        cell = lambda h: row[col[h]].strip() if h in col and col[h] < len(row) else ""  # noqa: E731
        if canvas and cell("name").lower() in ("points possible", "student, test"):
            continue  # the export's line of points, and Canvas's test student
        sid, name = cell("id"), cell("name")
        if canvas and not sid and CANVAS_ID in header and header.index(CANVAS_ID) < len(row):
            sid = row[header.index(CANVAS_ID)].strip()  # no SIS id: Canvas's own
        if not sid:
            raise RosterError(f"--roster {path}, line {n}: no id (every student needs one)")
        if sid in seen:
            raise RosterError(f"--roster {path}, line {n}: the id {sid} is on line {seen[sid]} too")
        seen[sid] = n
        extra = tuple((rows[0][k].strip(), row[k].strip()) for k in range(len(rows[0]))
                      if k not in used and k < len(row) and rows[0][k].strip())
        students.append(Student(sid, name or sid, cell("section"), n, extra, cell("due")))
    if not students:
        raise RosterError(f"--roster {path} names no student (only its first line, the columns)")
    return students


def as_records(roster: list[Student]) -> list[dict]:
    """The roster as plain data, for the grades file (``from_records`` reads it back)."""
    return [{"id": s.id, "name": s.name, "section": s.section, "due": s.due, "columns": dict(s.extra)}
            for s in roster]


def from_records(records: list[dict]) -> list[Student]:
    return [Student(str(r["id"]), str(r.get("name") or r["id"]), str(r.get("section", "")), n + 2,
                    tuple((str(k), str(v)) for k, v in (r.get("columns") or {}).items()), str(r.get("due", "")))
            for n, r in enumerate(records)]


def _norm(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", text.lower()).strip("_")


def _spellings(name: str) -> set[str]:
    """A name as a file name would write it: "Li Wei" -> li_wei; "Wei, Li" (last name first,
    as Canvas writes it) -> li_wei and wei_li."""
    out = {_norm(name)}
    if "," in name:
        last, _, first = name.partition(",")
        out.add(_norm(f"{first} {last}"))
    return out


def _words(submission: dict) -> tuple[list[str], set[str], set[str]]:
    """The normalised names of the submission's path (its folders, and the file without its
    suffix), every word of them, and the names as they are."""
    path = Path(submission.get("path") or submission.get("source") or "")
    parts = [*path.parts[:-1], path.stem if path.suffix else path.name]
    names = [_norm(p) for p in parts if _norm(p)]
    words = {w for p in parts for w in re.split(r"[^0-9A-Za-z@.]+", p) if w}
    return names, words, {p.strip() for p in parts}


def match(roster: list[Student], submission: dict) -> Student | None:
    """The student of ``roster`` a submission (a grades document's record) belongs to, or
    None. Raises RosterError when two students fit it equally."""
    names, words, parts = _words(submission)
    by_id = [s for s in roster if s.id in parts or len(s.id) >= 5 and s.id in words]
    if len(by_id) == 1:
        return by_id[0]
    found = by_id or [s for s in roster if any(n and n in names[-1:] for n in _spellings(s.name))]
    if len(found) > 1:
        narrowed = [s for s in found if s.section and _norm(s.section) in names]
        if len(narrowed) == 1:
            return narrowed[0]
        lines = " and ".join(f"line {s.line} ({s.name}, {s.id})" for s in found)
        raise RosterError(f"{submission.get('path')} fits {lines} of the roster: put the student's id in its "
                          "file or folder name, or put the students in folders named after their sections")
    return found[0] if found else None
