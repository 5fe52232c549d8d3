"""A synthetic class to test the class report on: submissions made of the course's reference
solutions and of the held-out answers of ``tests/alternatives`` (correct, wrong, forbidden),
mixed at random with a seed, plus a few answers that are missing, not attempted, crash or
run for ever.

Each student has an ability, drawn at random: the chance that any of their answers is
correct (otherwise it is one of the wrong or forbidden answers, or missing, or a stub), so
that exercises discriminate as a real class's do. One wrong answer, ``PLANTED``, is given to a
large share of the class (the weaker students more likely), so that the report must rank the
listed mistake it makes first.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from alternatives import load as load_alternatives
from mha.exercises import get
from mha.grading.answer_key import source_chunks

# Two lessons: the three exercises of lesson 01, and one of lesson 05.
EXERCISE_IDS = ("heads.single_head", "heads.batched_head", "onehead.stable_softmax", "masking.causal_mask")
PLANTED = ("onehead.stable_softmax", "softmax_wrong_naive")  # exp without the shift: a listed mistake
PLANTED_SHARE = 0.4

NAMES = ("ada", "ben", "chioma", "dev", "elif", "farah", "goran", "hana", "ines", "jonas", "kofi", "lena",
         "mateo", "nadia", "omar", "priya", "quentin", "rosa", "sven", "tariq", "uma", "viktor", "wen", "ximena",
         "yusuf", "zoe")

# Answers that are not in tests/alternatives: the grader must count them, not judge them.
CRASH = "import os\n\ndef {function}({params}):\n    os._exit(3)\n"
FOREVER = "def {function}({params}):\n    while True:\n        pass\n"
STUB = "def {function}({params}):\n    raise NotImplementedError('Write your solution here')\n"


@dataclass
class Student:
    name: str
    answers: dict[str, str] = field(default_factory=dict)  # exercise id -> what the answer is ("correct", ...)
    source: str = ""
    section: str = ""
    id: str = ""
    path: Path | None = None


def answer_pool(exercise_id: str) -> list[tuple[str, object]]:
    """(kind, function) for every answer with source code: the reference and the correct,
    wrong and forbidden alternatives."""
    ex = get(exercise_id)
    pool = [("correct", ex.reference)]
    for kind in ("CORRECT", "WRONG", "FORBIDDEN"):
        pool += [(kind.lower(), fn) for fn in load_alternatives(kind).get(exercise_id, [])]
    return pool


def make_class(folder: Path, n: int = 40, seed: int = 0, *, crashes: int = 2, timeouts: int = 1,
               sections: tuple[str, ...] = (), twins: int = 0) -> list[Student]:
    """Write ``n`` submissions (``<name>.py``) into ``folder``, or into ``folder/<section>``
    in turn when ``sections`` are given; return who answered what. ``crashes`` students'
    answers to one exercise kill the worker, and ``timeouts`` run for ever. The last
    ``twins`` students take the names of the first ones (in another section): two
    students of one name."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    pools = {i: answer_pool(i) for i in EXERCISE_IDS}
    planted_fn = next(fn for _, fn in pools[PLANTED[0]] if fn.__name__ == PLANTED[1])
    ability = [rng.uniform(0.15, 0.95) for _ in range(n)]
    weakest_first = sorted(range(n), key=lambda s: (1 - ability[s]) * rng.random(), reverse=True)
    planted = set(weakest_first[:round(PLANTED_SHARE * n)])
    odd = rng.sample(range(n), crashes + timeouts)
    students = []
    for s in range(n):
        twin = s - (n - twins)
        name = f"{NAMES[s % len(NAMES)]}_{s + 1:02d}" if twin < 0 else students[twin].name
        section = sections[s % len(sections)] if sections else ""
        if twin >= 0 and sections:
            section = next(x for x in sections if x != students[twin].section)
        student = Student(name, section=section, id=f"2023{s + 1:04d}")
        chunks: dict[str, str] = {}
        for exercise_id in EXERCISE_IDS:
            ex = get(exercise_id)
            params = ", ".join(ex.params)
            special = None
            if s in odd[:crashes] and exercise_id == EXERCISE_IDS[0]:
                special = ("crashes", CRASH)
            elif s in odd[crashes:] and exercise_id == EXERCISE_IDS[1]:
                special = ("runs for ever", FOREVER)
            elif exercise_id == PLANTED[0] and s in planted:
                special = ("planted", planted_fn)
            elif rng.random() > ability[s]:
                roll = rng.random()
                if roll < 0.12:
                    special = ("missing", None)
                elif roll < 0.25:
                    special = ("not attempted", STUB)
                else:
                    special = _draw(rng, pools[exercise_id], exercise_id == PLANTED[0], correct=False)
            if special is None:
                kind, fn = _draw(rng, pools[exercise_id], exercise_id == PLANTED[0], correct=True)
            else:
                kind, fn = special
            student.answers[exercise_id] = kind
            if fn is None:
                continue
            if isinstance(fn, str):
                chunks[ex.function] = fn.format(function=ex.function, params=params)
                continue
            for name, text in source_chunks(fn, ex.function):
                key = text if text.startswith(("import ", "from ")) else name
                if chunks.setdefault(key, text) != text:
                    raise ValueError(f"two answers of {student.name} define {name!r} differently")
        student.source = "\n\n".join(dict.fromkeys(chunks.values())) + "\n"
        student.path = folder / section / f"{student.name}.py"
        student.path.parent.mkdir(parents=True, exist_ok=True)
        student.path.write_text(student.source)
        students.append(student)
    return students


def write_roster(path: Path, students: list[Student], absent: int = 0) -> list[tuple[str, str, str]]:
    """A roster of ``students`` (id, name as "Ada 01", section), plus ``absent`` students who
    submitted nothing; returns the absent ones' rows."""
    rows = [(s.id, s.name.replace("_", " ").title(), s.section) for s in students]
    missing = [(f"2099{k:04d}", f"Absent Student{k}", students[k % len(students)].section) for k in range(absent)]
    path.write_text("id,name,section\n" + "".join(f"{i},{n},{sec}\n" for i, n, sec in rows + missing))
    return missing


def _draw(rng: random.Random, pool, planted_exercise: bool, *, correct: bool) -> tuple[str, object]:
    """A correct answer, or a wrong or forbidden one, uniformly among those of the pool (the
    planted answer is left out of the draw for its exercise)."""
    if correct:
        return rng.choice([p for p in pool if p[0] == "correct"])
    return rng.choice([p for p in pool if p[0] != "correct" and not (planted_exercise and p[1].__name__ == PLANTED[1])])
