"""``check`` in a notebook and the grader give one answer the same verdicts, check by check: a
quick form of ``tests/test_the_tests.py``'s agreement test (which ``make test-the-tests``
runs on every tested answer), on one answer of each kind per exercise: the model answer, the
first listed mistake, and the first correct, wrong and forbidden held-out answers."""

from __future__ import annotations

import pytest

from agreement import agreement_problems
from alternatives import load as load_alternatives
from mha.exercises import EXERCISES, get

HELD_OUT = {kind: load_alternatives(kind) for kind in ("CORRECT", "WRONG", "FORBIDDEN")}

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def one_of_each_kind(ex) -> list[tuple[str, object]]:
    if ex.kernel:
        pytest.importorskip("mha.kernels")
    answers = [("the model answer", ex.model_answer())]
    answers += [(f"mistake {ex.mistakes[0].name}", ex.mistakes[0].wrong)] if ex.mistakes else []
    for kind, found in HELD_OUT.items():
        answers += [(f"{kind.lower()} {fn.__name__}", fn) for fn in found.get(ex.id, [])[:1]]
    return answers


@pytest.mark.parametrize("exercise_id", list(EXERCISES))
def test_check_and_the_grader_agree_on_one_answer_of_each_kind(exercise_id, tmp_path, capsys):
    ex = get(exercise_id)
    problems = agreement_problems(ex, one_of_each_kind(ex), tmp_path, capsys)
    assert not problems, "\n".join(problems[:8])
