"""The exercise definitions and the in-notebook ``check``: a specification."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from mha.exercises import EXERCISES, check, get, select
from mha.exercises.feedback import call_outcome
from mha.grading import extract
from mha.notebooks import solution_blocks

ROOT = Path(__file__).resolve().parents[1]
IDS = list(EXERCISES)


def test_the_twelve_exercises_exist_with_their_signatures():
    expected = {
        "heads.attention_weights": ("q", "k"),
        "heads.single_head": ("x", "w_q", "w_k", "w_v"),
        "heads.multi_head": ("x", "w_q", "w_k", "w_v", "w_o", "num_heads"),
        "dims.split_heads": ("x", "num_heads"),
        "dims.merge_heads": ("x",),
        "dims.shapes": ("batch", "seq_len", "embed_dim", "num_heads"),
        "params.mha_params": ("embed_dim", "num_heads", "bias"),
        "params.gqa_params": ("embed_dim", "num_heads", "num_kv_heads", "bias"),
        "params.kv_cache_bytes": ("layers", "kv_heads", "head_dim", "seq_len", "batch", "bytes_per_element"),
        "masking.causal_mask": ("q_len", "k_len"),
        "masking.masked_softmax": ("scores", "mask"),
        "masking.decoder_mask": ("lengths", "max_len"),
    }
    assert {i: e.params for i, e in EXERCISES.items()} == expected


@pytest.mark.parametrize("exercise_id", IDS)
@pytest.mark.parametrize("seed", [0, 1, 2, 12345])
def test_reference_passes_public_and_hidden_checks(exercise_id, seed):
    ex = get(exercise_id)
    for case in ex.public_cases() + ex.hidden_cases(seed):
        verdict = ex.judge(case, call_outcome(ex.reference, case.args))
        assert verdict.passed, verdict.message


@pytest.mark.parametrize("exercise_id", IDS)
def test_hidden_cases_change_with_the_seed_and_differ_from_public(exercise_id):
    ex = get(exercise_id)

    def key(cases):
        return [repr([a.tolist() if isinstance(a, torch.Tensor) else a for a in c.args]) for c in cases]

    a, b = key(ex.hidden_cases(1)), key(ex.hidden_cases(2))
    assert a != b
    assert not set(a) & set(key(ex.public_cases()))


@pytest.mark.parametrize("exercise_id", IDS)
def test_check_passes_the_reference_with_full_score(exercise_id, capsys):
    result = check(exercise_id, get(exercise_id).reference)
    assert result.ok and result.score == get(exercise_id).points
    out = capsys.readouterr().out
    assert "public checks only, not your grade" in out


@pytest.mark.parametrize("exercise_id", IDS)
def test_check_reports_a_stub_as_not_attempted_without_raising(exercise_id, capsys):
    def stub(*args):
        raise NotImplementedError("Write your solution here")

    result = check(exercise_id, stub)
    assert not result.attempted and result.score == 0
    assert "not attempted" in capsys.readouterr().out


MISTAKES = [(ex.id, i) for ex in EXERCISES.values() for i in range(len(ex.mistakes))]


@pytest.mark.parametrize("exercise_id,index", MISTAKES)
def test_each_classic_mistake_fails_with_its_hint(exercise_id, index, capsys):
    ex = get(exercise_id)
    mistake = ex.mistakes[index]
    result = check(exercise_id, mistake.wrong)
    assert result.passed < result.total
    assert mistake.hint in capsys.readouterr().out


def test_masked_softmax_hints_name_the_fp16_overflow_and_the_nan_rows(capsys):
    check("masking.masked_softmax", lambda s, m: torch.softmax(s.masked_fill(~m, -1e9), -1))
    assert "does not fit in float16" in capsys.readouterr().out
    check("masking.masked_softmax", lambda s, m: torch.softmax(s.masked_fill(~m, float("-inf")), -1))
    out = capsys.readouterr().out
    assert "contains NaN" in out and "0/0 = NaN" in out


def test_wrong_dtype_and_shape_are_named(capsys):
    check("masking.causal_mask", lambda q, k: torch.ones(q, k).tril(k - q))
    assert "expected dtype bool, got float32" in capsys.readouterr().out
    check("dims.merge_heads", lambda x: x)
    assert "expected shape (2, 5, 8), got (2, 2, 5, 4)" in capsys.readouterr().out


def test_int_answers_must_be_ints(capsys):
    check("params.gqa_params", lambda C, h, g, b: 2 * C * C + 2 * C * g * C / h)
    assert "return an int" in capsys.readouterr().out


def test_shapes_must_raise_value_error_for_indivisible_widths(capsys):
    ok = get("dims.shapes").reference
    result = check("dims.shapes", lambda *a: ok(*a) if a[2] % a[3] == 0 else {})
    assert result.passed == result.total - 1
    assert "should raise ValueError" in capsys.readouterr().out


def test_check_never_raises_and_survives_sys_exit(capsys):
    def leaves(x):
        raise SystemExit(0)

    result = check("dims.merge_heads", leaves)
    assert result.passed == 0 and "SystemExit" in capsys.readouterr().out
    assert not check("no.such_exercise", leaves).attempted
    assert not check("dims.merge_heads", 42).attempted


def test_check_flags_the_mha_reference_where_forbidden(capsys):
    import mha

    def split_heads(x, num_heads):
        return mha.split_heads(x, num_heads)

    result = check("dims.split_heads", split_heads)
    assert result.passed == result.total and result.score == 0
    assert "does not allow" in capsys.readouterr().out


def test_check_flags_a_wrong_signature(capsys):
    check("dims.split_heads", lambda x: x)
    assert "expected the signature split_heads(x, num_heads)" in capsys.readouterr().out


def test_select_by_prefix_lesson_and_id():
    assert [e.id for e in select(["dims"])] == ["dims.split_heads", "dims.merge_heads", "dims.shapes"]
    assert len(select(["05-causal-masking"])) == 3
    assert [e.id for e in select(["params.mha_params"])] == ["params.mha_params"]
    with pytest.raises(ValueError, match="no exercise matches"):
        select(["nothing"])
    with pytest.raises(KeyError, match="exercise_id must be one of"):
        get("nothing")


# ----------------------------------------------------------------------------- drift guard

LESSONS = sorted((ROOT / "lessons").glob("*.md")) + [ROOT / "tests/fixtures/grading/all_exercises.md"]


def _lesson_exercises(path: Path):
    text = path.read_text()
    return re.findall(r'check\("([\w.]+)",\s*(\w+)\)', text)


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_lesson_solutions_pass_the_hidden_checks(lesson):
    """The solution a lesson shows (and executes) is right on fresh hidden inputs too."""
    found = _lesson_exercises(lesson)
    if not found:
        pytest.skip(f"{lesson.name} has no exercises yet")
    stmts, notes = extract.parse_cells(extract.markdown_cells(lesson.read_text()))
    assert not notes
    names = {fn for _, fn in found}
    ns: dict = {}
    exec(compile(extract.program(stmts, names), str(lesson), "exec"), ns)
    for exercise_id, fn in found:
        ex = get(exercise_id)
        assert fn == ex.function, f"{lesson.name}: check({exercise_id!r}, {fn}) should pass {ex.function}"
        for seed in (3, 4):
            for case in ex.public_cases() + ex.hidden_cases(seed):
                verdict = ex.judge(case, call_outcome(ns[fn], case.args))
                assert verdict.passed, f"{lesson.name} {exercise_id}: {verdict.message}"


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_every_lesson_solution_is_marked_for_the_student_notebook(lesson):
    """Each exercise function in a lesson has its solution between the markers, so the
    student notebook gets a stub and not the answer."""
    text = lesson.read_text()
    found = _lesson_exercises(lesson)
    blocks = solution_blocks("\n".join(extract.markdown_cells(text)))
    assert len(blocks) >= len(found)
    for cell in extract.markdown_cells(text):
        for _, fn in found:
            if re.search(rf"^def {fn}\(", cell, re.M):
                assert "# BEGIN SOLUTION" in cell and "# END SOLUTION" in cell, fn
