"""Test the tests: every exercise's checks accept correct answers and catch its mistakes.

For EVERY exercise in ``mha.exercises.EXERCISES`` (a new module is picked up with no edit
here), over many hidden draws:

- the reference and the correct solutions in ``tests/alternatives/<module>.py`` (at least
  two per exercise, written differently) get full marks on the public and hidden checks,
  in every dtype the exercise lists in ``dtypes`` (floating tensor arguments cast to it),
  with the non-contiguous arguments a case asks for, as the grader passes them;
- every listed Mistake loses points on every hidden draw, with its hint;
- and once, through the real sandboxed grader, the alternatives get full marks.

``MHA_TEST_SEEDS`` sets the number of hidden draws (default 200).
"""

from __future__ import annotations

import ast
import inspect
import os
import textwrap
from dataclasses import replace

import pytest
import torch

from alternatives import load as load_alternatives
from mha.exercises import EXERCISES, get, select
from mha.exercises._core import Case
from mha.exercises.feedback import call_outcome
from mha.grading.answer_key import source_chunks

SEEDS = range(int(os.environ.get("MHA_TEST_SEEDS", "200")))
IDS = list(EXERCISES)
CORRECT = load_alternatives()
SHOWN = 8  # failures quoted in a message


pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def cast(case: Case, dtype: str | None) -> Case:
    """``case`` with its floating tensor arguments in ``dtype`` (None: as drawn)."""
    if dtype is None:
        return case
    to = getattr(torch, dtype)
    args = tuple(a.to(to) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in case.args)
    return replace(case, args=args)


def dtypes_of(ex) -> list[str | None]:
    return list(ex.dtypes) or [None]


def where(ex, case: Case, seed, dtype) -> str:
    kind = f"hidden draw {seed}" if case.hidden else "public"
    args = ", ".join(f"{tuple(a.shape)} {str(a.dtype)[6:]}" if isinstance(a, torch.Tensor) else repr(a)
                     for a in case.args)
    strided = f", non-contiguous {case.noncontiguous}" if case.noncontiguous else ""
    return f"{kind}, {dtype or 'as drawn'}: {ex.function}({args}{strided})"


def report(failures: list[str], total: int, what: str) -> str:
    shown = "\n  ".join(failures[:SHOWN])
    more = f"\n  ... and {len(failures) - SHOWN} more" if len(failures) > SHOWN else ""
    return f"{len(failures)} of {total} {what}:\n  {shown}{more}"


# ----------------------------------------------------------------------------- the alternatives

@pytest.mark.parametrize("exercise_id", IDS)
def test_each_exercise_has_two_correct_alternatives(exercise_id):
    found = CORRECT.get(exercise_id, [])
    module = exercise_id.split(".")[0]
    assert len(found) >= 2, (
        f"{exercise_id} has {len(found)} correct alternative(s): add at least two correct solutions, "
        f"written differently from the reference, as CORRECT[{exercise_id!r}] = [fn_a, fn_b] in "
        f"tests/alternatives/{module}.py")
    assert all(callable(fn) for fn in found), exercise_id


def test_every_alternative_belongs_to_an_exercise():
    unknown = sorted(set(CORRECT) - set(EXERCISES))
    assert not unknown, f"CORRECT names exercises that do not exist: {unknown}"


def _shape_of_code(fn) -> str:
    """The function's body (docstring dropped) with every name replaced by its order of
    first appearance, so a copy with renamed variables counts as the same code."""
    node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    names: dict[str, str] = {}
    for n in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(n, ast.Name):
            n.id = names.setdefault(n.id, f"v{len(names)}")
        elif isinstance(n, ast.arg):
            n.arg = names.setdefault(n.arg, f"v{len(names)}")
    return "\n".join(ast.dump(s) for s in body)


@pytest.mark.parametrize("exercise_id", IDS)
def test_alternatives_are_not_copies_of_the_reference_or_of_each_other(exercise_id):
    ex = get(exercise_id)
    seen = {_shape_of_code(ex.reference): "the reference"}
    for fn in CORRECT.get(exercise_id, []):
        shape = _shape_of_code(fn)
        assert shape not in seen, f"{exercise_id}: {fn.__name__} is a copy of {seen[shape]}"
        seen[shape] = fn.__name__


# ----------------------------------------------------------------------------- full marks

@pytest.mark.parametrize("exercise_id", IDS)
def test_correct_answers_get_full_marks_on_every_draw_in_every_dtype(exercise_id):
    ex = get(exercise_id)
    answers = [("the reference", ex.reference)] + [(fn.__name__, fn) for fn in CORRECT.get(exercise_id, [])]
    failures, total = [], 0
    for seed in SEEDS:
        drawn = (ex.public_cases() if seed == SEEDS[0] else []) + ex.hidden_cases(seed)
        for dtype in dtypes_of(ex):
            for case in (cast(c, dtype) for c in drawn):
                expected = None if case.raises else ex.expected(case)
                for name, fn in answers:
                    total += 1
                    verdict = ex.judge(case, call_outcome(fn, case), expected=expected, mistake_values=[])
                    if not verdict.passed:
                        failures.append(f"{name}, {where(ex, case, seed, dtype)}: {verdict.message}")
    assert not failures, report(failures, total, f"checks fail a correct answer of {exercise_id}")


# ----------------------------------------------------------------------------- mistakes

@pytest.mark.parametrize("exercise_id", IDS)
def test_every_mistake_loses_points_on_every_hidden_draw_with_its_hint(exercise_id):
    ex = get(exercise_id)
    failures = []
    for seed in SEEDS:
        cases = ex.hidden_cases(seed)
        keys = [(None, None) if c.raises else (ex.expected(c), ex.mistake_values(c)) for c in cases]
        for k, m in enumerate(ex.mistakes):
            verdicts = [ex.judge(c, call_outcome(m.wrong, c), expected=e, mistake_values=w)
                        for c, (e, w) in zip(cases, keys)]
            if all(v.passed for v in verdicts):
                failures.append(f"mistake {k} ({m.hint[:60]}...) passes every check of hidden draw {seed}")
            elif not any(m.hint in v.message for v in verdicts if not v.passed):
                got = "; ".join(v.message for v in verdicts if not v.passed)
                failures.append(f"mistake {k} ({m.hint[:60]}...) fails hidden draw {seed} without its "
                                f"hint: {got[:300]}")
    total = len(SEEDS) * len(ex.mistakes)
    assert not failures, report(failures, total, f"(mistake, hidden draw) pairs of {exercise_id} go wrong")


# ----------------------------------------------------------------------------- the real grader

def _groups(choice: int) -> list[dict[str, list[tuple[str, str]]]]:
    """Submissions made of the ``choice``-th alternative of every exercise, split where two
    alternatives' helpers would bind one name to different code."""
    groups: list[tuple[dict, dict]] = []  # (exercise id -> chunks, name -> source)
    for exercise_id, fns in CORRECT.items():
        if exercise_id not in EXERCISES:
            continue
        ex = EXERCISES[exercise_id]
        chunks = source_chunks(fns[choice % len(fns)], ex.function)
        for members, names in groups:
            if all(names.get(n, text) == text or text.startswith(("import ", "from ")) for n, text in chunks):
                break
        else:
            members, names = {}, {}
            groups.append((members, names))
        members[exercise_id] = chunks
        names.update(chunks)
    return [members for members, _ in groups]


def test_alternatives_get_full_marks_from_the_sandboxed_grader(tmp_path):
    """The first and the second alternative of every exercise, as submissions graded in
    one batch by the real grader (fresh hidden draws, sandboxed worker)."""
    from mha.grading import reports
    from mha.grading.grader import grade_many
    from mha.grading.sandbox import Limits

    groups = _groups(0) + _groups(1)
    paths = []
    for n, members in enumerate(groups):
        path = tmp_path / f"alternatives{n}.py"
        path.write_text("\n\n".join("\n\n".join(t for _, t in chunks) for chunks in members.values()))
        paths.append(path)
    graded = grade_many(paths, select(), limits=Limits(exercise_s=20, submission_s=300), jobs=2)
    for r, members in zip(graded, groups):
        mine = [e for e in r.exercises if e.id in members]
        assert len(mine) == len(members)
        assert all(e.score == e.max_score for e in mine), reports.details(r)
