"""The grades of a grading run as one JSON document (``mha grade --json FILE``), read back
and merged by ``mha report``.

The document holds everything the class report shows, so that the report can be made
again, with other options, without grading again: per exercise its title, lesson, points,
the notes of its public checks and its listed mistakes (key, name, hint, and where the
point is taught); per submission every check's verdict, the named mistake it makes, and a
wrong answer's anonymised code. ``pseudonym_seed`` orders the report's pseudonyms, so that
every report made from the document gives each student the same one.

Version 4 adds, each under a key of its own: per exercise, a hash of its definition (what
the report shows of it) and the file that defines it, with that file's hash (``course``), so
that files graded with different exercises are not merged and a file graded with another
version of the course says so; per answer, the fingerprint of its code (``code_fingerprint``)
and, for a wrong one, the stable id of its answer group in the class report
(``answer_group``), and per public check a fingerprint of the answer's value
(``value_fingerprint``); per
submission, when its files were last changed (``submitted``); and the roster of the run
(``roster``), when one was given. Version 3 files are still read (without those).
"""

from __future__ import annotations

import ast
import datetime
import hashlib
import json
import secrets
import sys
from collections import Counter
from pathlib import Path

FORMAT = "mha-grades"
VERSION = 4  # 3: every check records its kind and its hint; 4: fingerprints, definitions, times, roster
READS = (3, 4)
PACKAGE = Path(__file__).resolve().parents[1]  # src/mha: course files are recorded relative to its parent


class GradesError(ValueError):
    """A grades file that cannot be used: the message names the file and what is wrong."""


# ----------------------------------------------------------------------------- writing

def document(reports, exercises, roster=None) -> dict:
    """The JSON document of a grading run: plain data only (it survives a round trip through
    JSON unchanged, so a report made from the file equals the one made while grading).
    ``roster``: the class list given with the run (``mha.grading.roster.Student``s)."""
    from .sandbox import weakest

    doc = {"format": FORMAT, "version": VERSION,
           "graded": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
           "sandbox": weakest(r.sandbox for r in reports),  # the weakest isolation any submission ran with
           "pseudonym_seed": secrets.token_hex(8),
           "exercises": [exercise_record(e) for e in exercises],
           "submissions": [{**r.as_dict(), "source": str(Path(r.path).resolve())} for r in reports]}
    if roster:
        from .roster import as_records

        doc["roster"] = as_records(roster)
    return json.loads(json.dumps(doc))


def file_hash(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def _source(ex) -> str:
    """The file that defines ``ex``: an instructor's file (absolute), or the course's lesson
    module (relative to the package's folder, ``mha/exercises/lesson05_....py``); "" if unknown."""
    from mha.autograde import LOADED

    if ex.id in LOADED:
        return LOADED[ex.id]
    for name, module in list(sys.modules.items()):
        if name.startswith("mha.exercises.lesson") and any(e is ex for e in getattr(module, "EXERCISES", ())):
            try:
                return str(Path(module.__file__).resolve().relative_to(PACKAGE.parent))
            except ValueError:
                return str(module.__file__)
    return ""


def definition(record: dict) -> str:
    """A hash of what the report shows of an exercise (its record, less its origin)."""
    shown = {k: v for k, v in record.items() if k not in ("definition", "source")}
    return hashlib.sha256(json.dumps(shown, sort_keys=True).encode()).hexdigest()[:16]


def exercise_record(ex) -> dict:
    """What the report needs to know of an exercise, without loading it."""
    from mha.autograde import sections  # here, not above: `mha report` reads grades without torch

    mistakes = []
    for k, m in enumerate(ex.mistakes):
        section = sections.taught(ex, k)
        mistakes.append({"key": ex.mistake_name(k), "name": m.name, "hint": m.hint, "section": section,
                         "taught": sections.text(section)})
    common = Counter(m["section"] for m in mistakes if m["section"]).most_common(1)
    # the point of the exercise's own diagnoses: the section that teaches the exercise, else the
    # section most of its mistakes name
    diagnosis = sections.taught(ex) if ex.section else common[0][0] if common else ""
    try:
        notes = {f"public check {k + 1}": c.note for k, c in enumerate(ex.public_cases()) if c.note}
    except Exception:  # an exercise whose cases cannot be made here: no notes
        notes = {}
    record = {"id": ex.id, "title": ex.title, "lesson": ex.lesson, "function": ex.function, "points": ex.points,
              "notes": notes, "mistakes": mistakes,
              "diagnosis": {"section": diagnosis, "taught": sections.text(diagnosis)}}
    source = _source(ex)
    path = source if Path(source).is_absolute() else PACKAGE.parent / source
    try:
        record["source"] = {"file": source, "hash": file_hash(path)} if source else {}
    except OSError:
        record["source"] = {"file": source, "hash": ""}
    record["definition"] = definition(record)
    return record


def write(doc: dict, path) -> None:
    """Write ``doc`` to ``path`` whole or not at all (a new file, then renamed over it)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    tmp.replace(path)


# ----------------------------------------------------------------------------- reading

def read(path) -> dict:
    """A grades document written by ``mha grade --json``; GradesError says what is wrong."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise GradesError(f"{path}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:
        raise GradesError(f"{path} is not a grades file of mha grade --json (not JSON: {e})") from None
    if not isinstance(doc, dict) or "submissions" not in doc:
        raise GradesError(f"{path} is not a grades file of mha grade --json (no submissions)")
    if doc.get("format") != FORMAT:
        raise GradesError(f"{path} was written by an older version of mha grade, from which the report cannot "
                          "be made: grade the submissions again with --json")
    if doc.get("version") not in READS:
        raise GradesError(f"{path} was written by another version of mha grade (format version "
                          f"{doc.get('version')!r}; this one reads {' and '.join(map(str, READS))}): use that "
                          "version's mha report, or grade again")
    try:
        _validate(doc)
    except (KeyError, TypeError, ValueError) as e:
        raise GradesError(f"{path} is damaged: {e}") from None
    return doc


def _validate(doc: dict) -> None:
    """Raise KeyError, TypeError or ValueError where the document lacks what the report reads."""
    def has(record: dict, what: str, keys: tuple[str, ...]) -> None:
        missing = [k for k in keys if k not in record]
        if missing:
            raise ValueError(f"{what} has no {', '.join(missing)}")

    for e in doc["exercises"]:
        has(e, f"exercise {e.get('id')!r}", ("id", "title", "lesson", "points", "mistakes"))
        float(e["points"])
    ids = {e["id"] for e in doc["exercises"]}
    for s in doc["submissions"]:
        has(s, f"submission {s.get('student')!r}", ("student", "path", "score", "exercises"))
        for e in s["exercises"]:
            has(e, f"{s['student']!r}'s answer {e.get('id')!r}", ("id", "score", "max_score", "status", "checks"))
            for c in e["checks"]:
                has(c, f"a check of {s['student']!r}'s answer {e['id']!r}", ("name", "passed", "message", "kind", "hint",
                                                                               "mistake"))
            if e["id"] not in ids:
                raise ValueError(f"submission {s['student']!r} has an answer to {e['id']!r}, an exercise the file "
                                 "does not describe")
            float(e["score"])


def merge(named: list[tuple[str, dict]], *, replace: bool = False, same=None) -> tuple[dict, list[str]]:
    """One document from several runs' (file name, document), in order: a late submission
    added, a section graded again. An exercise must be the same in every file that has it.
    A submission in two files (the same file or folder graded twice; ``same(a, b)`` may say
    more, e.g. the same student of a roster) is an error naming both files, unless
    ``replace``: then the later file's grades count, and a note says so."""
    if len(named) == 1:
        return named[0][1], []
    exercises: dict[str, tuple[str, dict]] = {}
    for name, doc in named:
        for e in doc["exercises"]:
            if e["id"] in exercises:
                first, had = exercises[e["id"]]
                both = bool(had.get("definition") and e.get("definition"))
                if _definition(had, both) != _definition(e, both):
                    raise GradesError(f"exercise {e['id']} differs between {first} and {name} (points, title, "
                                      "lesson, listed mistakes or hints): they were graded with different versions "
                                      "of the exercise; grade both with the same exercises")
            else:
                exercises[e["id"]] = (name, e)
    notes = []
    for name, doc in named:
        lacking = [i for i in exercises if i not in {e["id"] for e in doc["exercises"]}]
        if lacking:
            notes.append(f"{name} grades none of {', '.join(lacking)} (graded in "
                         f"{', '.join(dict.fromkeys(exercises[i][0] for i in lacking))}): its students have no "
                         "points for them, in the report and every output")
    kept: list[tuple[str, dict]] = []
    for name, doc in named:
        for s in doc["submissions"]:
            earlier = next((k for k, (_, t) in enumerate(kept) if _same_submission(t, s, same)), None)
            if earlier is None:
                kept.append((name, s))
                continue
            first, old = kept[earlier]
            if first == name:
                raise GradesError(f"{name} holds {old['path']} and {s['path']}, which are the same student")
            if not replace:
                raise GradesError(f"{old['path']} is graded in {first} and in {name}: give --replace to take the later "
                                  "file's grades (a regrade), or leave one of the files out")
            notes.append(f"{s['student']}: the grades of {first} are replaced by those of {name}")
            kept[earlier] = (name, s)
    merged = {**named[0][1], "exercises": [e for _, e in exercises.values()],
              "submissions": [s for _, s in kept], "graded": ", ".join(dict.fromkeys(d["graded"] for _, d in named))}
    students = [s["student"] for s in merged["submissions"]]
    if len(set(students)) < len(students):  # names unique in each run may meet: tell them apart again
        from .grader import unique_names

        for s, new in zip(merged["submissions"], unique_names([s.get("source") or s["path"] for s in
                                                                merged["submissions"]])):
            s["student"] = new
    return merged, notes


def _definition(e: dict, hashed: bool = True) -> tuple:
    """What must agree between two files' records of one exercise: the hash of its definition
    where both files have one (version 4), and what version 3 recorded."""
    shown = (e["title"], e["lesson"], float(e["points"]), tuple((m["key"], m.get("hint", "")) for m in e["mistakes"]))
    return shown + ((e["definition"],) if hashed else ())


# ----------------------------------------------------------------------------- the course installed

def course_ids() -> dict[str, str]:
    """The ids of the installed course's exercises -> the file of each, read from the lesson
    files' source (``Exercise(id="...", ...)``) without importing them (``mha report`` needs no
    torch)."""
    found = {}
    for path in sorted((PACKAGE / "exercises").glob("lesson[0-9][0-9]_*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Exercise":
                for k in node.keywords:
                    if k.arg == "id" and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str):
                        found[k.value.value] = str(path.relative_to(PACKAGE.parent))
    return found


def against_course(doc: dict, name: str) -> list[str]:
    """What differs between the exercises a grades file was graded with and those installed
    now: an id the course no longer has, a file of exercises changed since. The report shows
    the exercises as they were graded; these notes say so."""
    notes = []
    installed = course_ids()
    changed: dict[str, list[str]] = {}
    for e in doc["exercises"]:
        if e.get("definition") and definition(e) != e["definition"]:
            notes.append(f"{name}: what it records of {e['id']} (title, points, mistakes or hints) is not what it was "
                         "graded with: the file was edited after grading")
        source = (e.get("source") or {}).get("file", "")
        if "source" in e and not source:
            continue  # an exercise whose file was not known when it was graded
        if not Path(source).is_absolute() and e["id"] not in installed:
            notes.append(f"{name}: {e['id']} is not an exercise of the course installed here (an older or newer "
                         "version's, or a renamed one): the report shows it as it was graded")
            continue
        path = Path(source) if Path(source).is_absolute() else PACKAGE.parent / source
        recorded = (e.get("source") or {}).get("hash")
        try:
            now = file_hash(path) if source else ""
        except OSError:
            now = None
        if recorded and now != recorded:
            changed.setdefault(source if now is not None else f"{source} (no longer there)", []).append(e["id"])
    for source, ids in changed.items():
        notes.append(f"{name}: the exercises of {Path(source).name} changed since it was graded ({', '.join(ids)}): "
                     "the report shows them as they were graded; grade again for the new version")
    return notes


def _same_submission(a: dict, b: dict, same) -> bool:
    if (a.get("source") or a["path"]) == (b.get("source") or b["path"]):
        return True
    return bool(same and same(a, b))
