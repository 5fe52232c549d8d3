"""Every lesson has the anatomy a reader relies on: goals, a summary, and at least three
exercises that each show a difficulty and a time, a hint that opens before the solution,
the solution last, and a ``check`` of an exercise the grader knows for this lesson."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from mha.exercises import EXERCISES

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "lessons").glob("[0-9][0-9]-*.md"))

DIFFICULTY = re.compile(r"^\*\*Difficulty:\*\* (★☆☆ easy|★★☆ medium|★★★ hard) · "
                        r"\*\*Time:\*\* about \d+(-\d+)? minutes?$", re.M)
EXERCISE = re.compile(r"^```\{exercise-start\} (?P<title>[^\n]+)\n:label: (?P<label>[\w-]+)\n```\n"
                      r"(?P<body>.*?)^```\{exercise-end\}\n```\n(?P<after>.*?)(?=^```\{exercise-start\}|\Z)",
                      re.M | re.S)


def exercises_of(lesson: Path) -> list[re.Match]:
    return list(EXERCISE.finditer(lesson.read_text()))


def test_there_are_lessons():
    assert len(LESSONS) >= 4


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_lesson_has_goals_a_summary_and_three_exercises(lesson):
    text = lesson.read_text()
    assert "**Learning goals.**" in text or "**Learning goals**" in text, "no learning goals"
    assert re.search(r"^## Summary", text, re.M), "no '## Summary' section"
    assert re.search(r"^## Exercises", text, re.M), "no '## Exercises' section"
    assert text.count("```{exercise-start}") >= 3
    assert len(exercises_of(lesson)) == text.count("```{exercise-start}"), "an exercise is malformed"


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_each_exercise_shows_difficulty_and_time_then_hint_then_solution(lesson):
    for m in exercises_of(lesson):
        title, label, body, after = m["title"], m["label"], m["body"], m["after"]
        assert DIFFICULTY.match(body.lstrip("\n")), (
            f"{title}: the statement must open with '**Difficulty:** ★☆☆ easy · **Time:** about N minutes'")
        hint = after.find("```{dropdown} Hint")
        solution = after.find(f"```{{solution-start}} {label}\n:class: dropdown\n```")
        assert hint >= 0, f"{title}: no '{{dropdown}} Hint' after the statement"
        assert solution > hint, f"{title}: the hint must come before a dropdown solution for {label}"
        assert re.search(r"^```\{solution-end\}", after[solution:], re.M), f"{title}: solution not closed"
        checks = re.findall(r'check\("([\w.]+)",', after[solution:])
        assert checks, f"{title}: no check(...) cell after the solution"


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_checked_exercises_belong_to_the_lesson_and_all_are_taught(lesson):
    checked = re.findall(r'check\("([\w.]+)",', lesson.read_text())
    assert len(checked) == len(set(checked)), "an exercise is checked twice"
    for exercise_id in checked:
        assert exercise_id in EXERCISES, f"check({exercise_id!r}): no such exercise"
        assert EXERCISES[exercise_id].lesson == lesson.stem, (
            f"{exercise_id} says it belongs to {EXERCISES[exercise_id].lesson}")
    owned = {e.id for e in EXERCISES.values() if e.lesson == lesson.stem}
    assert owned <= set(checked), f"exercises never shown in the lesson: {sorted(owned - set(checked))}"


def test_every_exercise_names_an_existing_lesson():
    stems = {p.stem for p in LESSONS}
    for e in EXERCISES.values():
        assert e.lesson in stems, f"{e.id}: lesson {e.lesson!r} is not a file in lessons/"


# ----------------------------------------------------------------------------- the SEED contract
# A lesson takes every random draw from one code cell tagged `parameters` (papermill's
# convention) that defines SEED = 0, right after its imports (the lesson's first code cell, which
# student notebooks keep for the exercises); `make seeds` (tools/seeds.py) re-runs the page with
# another SEED put right after that cell, so nothing may be seeded before it, and every seed the
# page's own text sets must derive from SEED. (A lesson without the cell fails `make seeds`.)

CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(?P<body>.*?)^```\s*$", re.M | re.S)


def teaching_part(lesson: Path) -> str:
    """The lesson above its exercises (the exercises' solutions are checked elsewhere)."""
    return lesson.read_text().split("\n## Exercises", 1)[0]


def parameters_cells(text: str) -> list[str]:
    return [m["body"] for m in CODE_CELL.finditer(text)
            if re.match(r":tags: \[[^\]]*\bparameters\b[^\]]*\]\n", m["body"])]


WITH_SEED = [p for p in LESSONS if parameters_cells(p.read_text())]


def test_every_lesson_has_a_parameters_cell():
    assert [p.name for p in WITH_SEED] == [p.name for p in LESSONS]


@pytest.mark.parametrize("lesson", WITH_SEED, ids=lambda p: p.stem)
def test_the_parameters_cell_defines_seed_zero_and_nothing_else(lesson):
    cells = parameters_cells(lesson.read_text())
    assert len(cells) == 1, f"{len(cells)} cells tagged parameters; one is needed"
    code = cells[0].split("\n", 1)[1]
    tree = ast.parse(code)
    assert len(tree.body) == 1 and isinstance(tree.body[0], ast.Assign), "only `SEED = 0` belongs there"
    (target,), value = tree.body[0].targets, tree.body[0].value
    assert isinstance(target, ast.Name) and target.id == "SEED"
    assert isinstance(value, ast.Constant) and value.value == 0 and type(value.value) is int


@pytest.mark.parametrize("lesson", WITH_SEED, ids=lambda p: p.stem)
def test_every_seed_the_lesson_sets_derives_from_seed(lesson):
    text = teaching_part(lesson)
    cells = list(CODE_CELL.finditer(text))
    assert parameters_cells(cells[1].group(0)), "the parameters cell must follow the imports cell"
    first = cells[0]
    params = text.index(parameters_cells(text)[0])
    before = text[first.start():params]
    assert "manual_seed" not in before and "Generator(" not in before, "a seed set before the parameters cell"
    for arg in re.findall(r"manual_seed\(([^()]*(?:\([^()]*\))?[^()]*)\)", text):
        assert re.search(r"\bSEED\b|\bseed\b|_SEED\b", arg), f"manual_seed({arg}) does not derive from SEED"
    for m in re.finditer(r"torch\.Generator\(\)(\.manual_seed\()?", text):
        assert m.group(1), f"an unseeded torch.Generator() at {text[m.start():m.start() + 60]!r}"
