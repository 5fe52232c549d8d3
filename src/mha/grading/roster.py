"""A class roster (``--roster FILE``): who should have submitted, under which id and section.

The file is a CSV whose first line names its columns: ``id`` and ``name``, and ``section``
if the class has sections (other columns are ignored; commas, semicolons or tabs). A
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


def read(path) -> list[Student]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as e:
        raise RosterError(f"--roster {path}: cannot read it ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise RosterError(f"--roster {path}: not a text file in UTF-8 (save the spreadsheet as CSV UTF-8)") from None
    lines = text.splitlines()
    if not lines:
        raise RosterError(f"--roster {path} is empty: its first line names the columns id, name and section")
    delimiter = max(",;\t", key=lines[0].count)
    rows = list(csv.reader(lines, delimiter=delimiter))
    header = [h.strip().lower() for h in rows[0]]
    if "id" not in header or "name" not in header:
        raise RosterError(f"--roster {path}: the first line must name the columns id and name (and section, if the "
                          f"class has sections), found: {', '.join(rows[0]) or 'nothing'}")
    col = {h: header.index(h) for h in ("id", "name", "section") if h in header}
    students: list[Student] = []
    seen: dict[str, int] = {}
    for n, row in enumerate(rows[1:], 2):
        if not any(cell.strip() for cell in row):
            continue
        cell = lambda h: row[col[h]].strip() if h in col and col[h] < len(row) else ""  # noqa: E731
        sid, name = cell("id"), cell("name")
        if not sid:
            raise RosterError(f"--roster {path}, line {n}: no id (every student needs one)")
        if sid in seen:
            raise RosterError(f"--roster {path}, line {n}: the id {sid} is on line {seen[sid]} too")
        seen[sid] = n
        students.append(Student(sid, name or sid, cell("section"), n))
    if not students:
        raise RosterError(f"--roster {path} names no student (only its first line, the columns)")
    return students


def _norm(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", text.lower()).strip("_")


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
    found = by_id or [s for s in roster if _norm(s.name) and _norm(s.name) in names[-1:]]
    if len(found) > 1:
        narrowed = [s for s in found if s.section and _norm(s.section) in names]
        if len(narrowed) == 1:
            return narrowed[0]
        lines = " and ".join(f"line {s.line} ({s.name}, {s.id})" for s in found)
        raise RosterError(f"{submission.get('path')} fits {lines} of the roster: put the student's id in its "
                          "file or folder name, or put the students in folders named after their sections")
    return found[0] if found else None
