"""Do ``check`` in a notebook and the grader agree? The grader's verdicts on an answer, in this
process (the worker's own call procedure writes the result files, the grader reads and judges
them with its own functions), and what its static check says of the answer's source, set
against ``check``'s. ``tests/test_check_agrees_with_grader.py`` (in ``make test``) asks it of one
answer of each kind per exercise; ``tests/test_the_tests.py`` of every tested answer."""

from __future__ import annotations

import ast
import json
import re

import torch

from mha.autograde import forbidden_uses
from mha.grading import extract, grader, worker
from mha.grading.answer_key import source_chunks


def grader_in_process(ex, fn, cases, tmp_path):
    """The grader's verdicts on ``cases`` without the sandbox: the worker's own call procedure
    (mha/autograde/calls.py as the worker loads it) writes the result files, and the grader reads and
    judges them with its own functions."""
    plain, calls = worker.load_plain(), worker.load_calls()
    out_arrays: dict = {}
    records = [calls.run_case(fn, [a.clone() if isinstance(a, torch.Tensor) else a for a in c.args], plain=plain,
                              arrays=out_arrays, noncontiguous=c.noncontiguous, traps=grader._traps(ex),
                              trace=ex.audit is not None, launches=ex.kernel) for c in cases]
    index, data = plain.pack(out_arrays)
    (tmp_path / "0.bin").write_bytes(data)
    (tmp_path / "0.json").write_text(json.dumps({"results": records, "arrays": index}))
    return grader._judge(ex, cases, tmp_path, 0)


def grader_static(ex, fn) -> str | None:
    """What the grader's static check says of ``fn``'s source (as the grader extracts it from
    a notebook), or None; None too for a function without source of its own (a lambda)."""
    try:
        source = "\n\n".join(text for _, text in source_chunks(fn, ex.function))
    except (ValueError, OSError, TypeError):
        return None
    stmts, _ = extract.parse_cells([source])
    info = extract.find_function(stmts, ex.function, ex.params)
    if info.problem:
        return info.problem
    used = forbidden_uses(ast.Module(body=info.statements, type_ignores=[]), ex.forbidden)
    return ", ".join(used) or None


def disagreements(name, result, report_) -> list[str]:
    """Where ``check``'s result and the grader's report of the same answer differ."""
    if report_.status != "graded":   # refused before running: forbidden, wrong signature...
        if result.score != 0 or not result.problems:
            return [f"{name}: the grader refuses it ({report_.status}: {report_.message}) but check scores "
                    f"{result.score} with no warning"]
        return []
    problems = []
    public = [c for c in report_.checks if not c.hidden]
    if len(public) != len(result.verdicts):
        return [f"{name}: {len(public)} public checks in the grader, {len(result.verdicts)} in check"]
    for k, (mine, theirs) in enumerate(zip(result.verdicts, public)):
        if mine.passed != theirs.passed:
            problems.append(f"{name}, public check {k + 1}: check says {'pass' if mine.passed else 'fail'} "
                            f"({mine.grader_message}), the grader {'pass' if theirs.passed else 'fail'} ({theirs.message})")
        elif not mine.passed and mine.grader_message != theirs.message:
            problems.append(f"{name}, public check {k + 1}: check says {mine.grader_message!r}, the grader {theirs.message!r}")
    return problems


def agreement_problems(ex, answers, tmp_path, capsys) -> list[str]:
    """Where ``check`` and the grader disagree on ``answers`` ((name, function) pairs) to ``ex``,
    on its public checks; ``capsys`` is pytest's, to read what ``check`` printed."""
    from mha.exercises import check

    cases = ex.public_cases()
    problems = []
    for name, fn in answers:
        result = check(ex.id, fn)
        graded = grader_in_process(ex, fn, cases, tmp_path)
        refused = grader_static(ex, fn)
        if refused:           # the grader refuses it before running it
            graded.status, graded.message = "forbidden", refused
        problems += disagreements(name, result, graded)
        out = capsys.readouterr().out
        if re.search(r"all \d+ public checks pass", out) and not (
                graded.status == "graded" and all(c.passed for c in graded.checks)):
            problems.append(f"{name}: check prints that every public check passes, the grader disagrees")
    return problems
