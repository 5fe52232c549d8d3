"""Draft mistakes from a class's answers (``mha report ... --draft-mistakes FILE``): the course
learns from its classes.

Every error of the class that no hint explains and that ``min_students`` or more made (an
answer group, or a slip: groups whose code differs but whose values on every public check are
the same) becomes a draft :class:`~mha.exercises.Mistake` of its exercise, in a Python file
the instructor edits: the group's code, as the grader read it, is the wrong function (inside a
function of its own, so that two drafts never share a name); the hint is left to write; a
comment says how many students made it, in which sections, and what they were told. The file
is an exercise file with a ``MISTAKES`` dict (``mha.autograde.instructor``): once the hints are
written, ``mha grade ... --exercises FILE`` grades with the new mistakes, and loading the file
refuses a draft whose hint is not written, one that loses no points, or one that gives the
answers of a mistake the exercise lists already.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from .classstats import ClassReport

MIN_STUDENTS = 2


def drafts(report: ClassReport, min_students: int = MIN_STUDENTS) -> list[dict]:
    """Per exercise, the errors no hint explains made by ``min_students`` or more: one per
    slip (the code of its largest group) and per group not in a slip, largest first."""
    out = []
    for e in report.exercises:
        in_slip = {n for ns in e.slips.values() for n in ns}
        by_number = {g.number: g for g in e.all_groups}
        units = [[by_number[n] for n in ns] for ns in e.slips.values()]
        units += [[g] for g in e.all_groups if g.number not in in_slip]
        for groups in units:
            if any(g.hints for g in groups) or not groups[0].source:
                continue
            students = sum(g.answers for g in groups)
            if students < min_students:
                continue
            sections: dict[str, int] = {}
            for g in groups:
                for s, n in g.sections.items():
                    sections[s] = sections.get(s, 0) + n
            out.append({"exercise": e.id, "function": _function(e.id, report), "groups": groups,
                        "students": students, "sections": sections, "failed": groups[0].failed})
    return sorted(out, key=lambda d: (d["exercise"], -d["students"]))


def _function(exercise_id: str, report: ClassReport) -> str:
    return report.functions.get(exercise_id, exercise_id.rsplit(".", 1)[-1])


def render(items: list[dict], graded: str = "", placeholder: str = "WRITE THE HINT") -> str:
    """The text of the drafts file."""
    lines = [f'"""Draft mistakes from the answers of a class{f" graded {graded}" if graded else ""} '
             "(mha report --draft-mistakes).",
             "",
             "Each draft below is an error of the class that no hint explains: the code of its answers as the grader",
             "read them (comments and docstrings gone, messages '...', an identifier that held a student's name",
             "renamed name_1, name_2...) is the wrong function. To make one a named mistake of its exercise:",
             f"replace {placeholder!r} by the hint (what these students got wrong, and what to do instead), give",
             "it a short name, and delete the drafts you do not want. Then grade again with this file:",
             "",
             "    mha grade ... --exercises THIS_FILE",
             "",
             "Loading it runs the checks every mistake passes, and refuses a draft whose hint is not written, one",
             "that loses no points, and one that gives the answers of a mistake the exercise lists already. The code",
             "runs in your Python when the file is loaded (to compute the mistake's answers): read it first.",
             '"""', "", "from mha.exercises import Mistake", ""]
    entries: dict[str, list[str]] = {}
    count: dict[str, int] = {}
    for d in items:
        eid = d["exercise"]
        count[eid] = count.get(eid, 0) + 1
        maker = f"_{d['function']}_draft_{count[eid]}"
        groups = d["groups"]
        numbers = ", ".join(f"{g.number} ({g.id})" for g in groups)
        where = ", ".join(f"{s}: {n}" for s, n in d["sections"].items() if s)
        lines += ["", f"# {eid}: {d['students']} students{f' ({where})' if where else ''}, no hint; answer "
                      f"group{'s' if len(groups) > 1 else ''} {numbers} of the class report"
                      + (" (the same values on every public check)" if len(groups) > 1 else "") + ".",
                  "# What they were told:"]
        lines += [f"#   {line}" for f in d["failed"] for line in textwrap.wrap(f, 96) or [""]]
        lines.append(f"def {maker}():")
        lines.append(textwrap.indent(_runnable(groups[0].source), "    "))
        lines.append(f"    return {d['function']}")
        lines.append("")
        entries.setdefault(eid, []).append(
            f'        Mistake("{placeholder}", {maker}(), name="draft-{count[eid]}"),  # {d["students"]} students')
    lines += ["", "MISTAKES = {"]
    for eid, rows in entries.items():
        lines += [f"    {eid!r}: ["] + rows + ["    ],"]
    lines += ["}", ""]
    return "\n".join(lines)


def _runnable(code: str) -> str:
    """The group's code as the body of a function: without ``from __future__`` imports, which
    only a module may hold."""
    tree = ast.parse(code)
    tree.body = [s for s in tree.body if not (isinstance(s, ast.ImportFrom) and s.module == "__future__")]
    return ast.unparse(tree)


def write(report: ClassReport, path, *, min_students: int = MIN_STUDENTS) -> int:
    """Write the drafts file; return how many drafts it holds."""
    items = drafts(report, min_students)
    Path(path).write_text(render(items, report.graded), encoding="utf-8")
    return len(items)
