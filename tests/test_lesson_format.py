"""Every lesson has the anatomy a reader relies on: goals, a summary, and at least three
exercises that each show a difficulty and a time, a hint that opens before the solution,
the solution last, and a ``check`` of an exercise the grader knows for this lesson."""

from __future__ import annotations

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
