"""An auto-graded exercise: its inputs, its reference, and the mistakes it names.

The fields of :class:`Exercise`:

============== =====================================================================
id             ``"<file>.<function>"``, stable: it is in students' notebooks and grades
title, lesson  what the exercise is called, and the lesson (file stem) that sets it
function       the name of the function the student writes; ``params`` its parameters
points         what full marks are worth (partial credit: points x passed / checks)
reference      the model solution, run only by the trusted side
public         ``public(generator) -> [Case, ...]``: the checks a student sees
hidden         ``hidden(generator) -> [Case, ...]``: drawn afresh by each grading run
answer         how answers compare: one of ``compare.ANSWERS``
mistakes       the classic wrong answers it names (:class:`Mistake`)
section        the heading of the lesson section that teaches the exercise, where its
               mistakes point unless they name their own (see :mod:`~.sections`)
forbidden      dotted names the answer may not use (``"mha"``: the course package)
explain        ``explain(case, outcome) -> str | None``: the exercise's own diagnosis
dtypes         the floating dtypes the statement accepts (tests check every one)
audit          ``audit(case, ops) -> str | None``: what is wrong with *how* it computes
may_modify     parameters the answer may change in place; the others must come back intact
statement      what the student is asked (an instructor's file; the lessons say it on the page)
kernel, model  a Triton kernel is asked for; ``model`` names an answer that launches one
tolerance      for a prediction (``answer="number"``): the relative error still right
============== =====================================================================
"""

from __future__ import annotations

import importlib
import keyword
from dataclasses import dataclass
from typing import Callable

import torch

from .compare import ANSWERS
from .forbidden import UNWATCHED
from .judge import judge
from .model import Case, Mistake, Outcome, Verdict, clone_args, plain
from .wire import Value


class ExerciseFileError(ValueError):
    """An exercise file that cannot be used: the message names the exercise and what failed."""


@dataclass
class Exercise:
    """An auto-graded exercise: the fields are listed in this module's docstring, and
    ``book/grading.md`` ("Writing exercises") has a worked example."""

    id: str
    title: str
    lesson: str
    function: str
    params: tuple[str, ...]
    points: float
    reference: Callable
    public: Callable[[torch.Generator], list[Case]]
    hidden: Callable[[torch.Generator], list[Case]]
    answer: str = "tensor"
    mistakes: tuple[Mistake, ...] = ()
    forbidden: tuple[str, ...] = ()
    explain: Callable[[Case, Outcome], str | None] | None = None
    public_seed: int = 0
    dtypes: tuple[str, ...] = ("float32", "float64")
    audit: Callable[[Case, tuple], str | None] | None = None
    may_modify: tuple[str, ...] = ()
    statement: str = ""
    kernel: bool = False
    model: str = ""
    tolerance: float = 0.0
    section: str = ""

    def __post_init__(self):
        names = [m.name for m in self.mistakes if m.name]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"exercise {self.id}: two mistakes are named {twice[0]!r}; names must differ")
        if self.audit is not None:  # what could switch the recording off is refused before running
            self.forbidden = tuple(self.forbidden) + tuple(n for n in UNWATCHED if n not in self.forbidden)

    @property
    def prediction(self) -> bool:
        """A prediction exercise: the answer is a number the student works out before the page
        measures it; there is nothing hidden to draw (one public check, no hidden ones)."""
        return self.answer == "number"

    @property
    def signature(self) -> str:
        return f"{self.function}({', '.join(self.params)})"

    def mistake_name(self, index: int) -> str:
        """The stable name of mistake ``index`` in reports: its ``name``, else its place."""
        return self.mistakes[index].name or f"mistake {index + 1}"

    @property
    def write_it(self) -> str:
        """What a message says to do instead of calling a function the exercise forbids."""
        return "write it yourself, in the kernel" if self.kernel else "write it with torch operations"

    def model_answer(self) -> Callable:
        """An answer that gets full marks: the reference, or the function ``model`` names (the
        answer key and the tests grade it)."""
        if not self.model:
            return self.reference
        module, _, name = self.model.rpartition(".")
        return getattr(importlib.import_module(module), name)

    def public_cases(self) -> list[Case]:
        return self.public(torch.Generator().manual_seed(self.public_seed))

    def hidden_cases(self, seed: int) -> list[Case]:
        cases = self.hidden(torch.Generator().manual_seed(seed))
        for c in cases:
            c.hidden = True
        return cases

    def expected(self, case: Case) -> Value:
        """The reference answer for ``case``, computed on a private copy of the inputs."""
        return plain(self.reference(*clone_args(case.args)))

    def mistake_values(self, case: Case) -> list[Value | None]:
        """What each listed mistake answers on ``case`` (None where it raises)."""
        values = []
        for m in self.mistakes:
            try:
                values.append(plain(m.wrong(*clone_args(case.args))))
            except Exception:
                values.append(None)
        return values

    def judge(self, case: Case, outcome: Outcome, **options) -> Verdict:
        """The verdict on one outcome: :func:`mha.autograde.judge.judge` (its options too)."""
        return judge(self, case, outcome, **options)


def check_fields(ex: Exercise, where: str = "") -> None:
    """Refuse an exercise whose fields the grader could not use, naming the field."""
    at = f"{where}: " if where else ""
    name = f"exercise {ex.id!r}" if isinstance(ex.id, str) else "an exercise"

    def fail(what: str):
        raise ExerciseFileError(f"{at}{name}: {what}")

    if not isinstance(ex.id, str) or not ex.id or not all(part.isidentifier() for part in ex.id.split(".")):
        fail(f"id must be a name such as 'softmax.temperature' (letters, digits, _ and dots), got {ex.id!r}")
    for attr in ("title", "lesson", "statement"):
        if not isinstance(getattr(ex, attr), str):
            fail(f"{attr} must be a string, got {type(getattr(ex, attr)).__name__}")
    if not isinstance(ex.function, str) or not ex.function.isidentifier() or keyword.iskeyword(ex.function):
        fail(f"function must be the name of the function students write, got {ex.function!r}")
    if (not isinstance(ex.params, (tuple, list))
            or not all(isinstance(p, str) and p.isidentifier() for p in ex.params)):
        fail(f"params must be a tuple of parameter names, got {ex.params!r}")
    if isinstance(ex.points, bool) or not isinstance(ex.points, (int, float)) or not ex.points > 0:
        fail(f"points must be a positive number, got {ex.points!r}")
    if ex.answer not in ANSWERS:
        fail(f"answer must be one of {', '.join(map(repr, ANSWERS))}, got {ex.answer!r}")
    for attr in ("reference", "public", "hidden"):
        if not callable(getattr(ex, attr)):
            fail(f"{attr} must be a function, got {type(getattr(ex, attr)).__name__}")
    if not isinstance(ex.mistakes, (tuple, list)):
        fail(f"mistakes must be a tuple of Mistake(hint, wrong), got {type(ex.mistakes).__name__}")
    for k, m in enumerate(ex.mistakes):
        if not isinstance(m, Mistake) or not isinstance(m.hint, str) or not m.hint or not callable(m.wrong):
            fail(f"mistake {k + 1} must be Mistake(hint, wrong) with a hint and a function, got {m!r}")
    names = [ex.mistake_name(k) for k in range(len(ex.mistakes))]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        fail(f"two mistakes are named {twice[0]!r}: names must differ")
    if (not isinstance(ex.forbidden, (tuple, list)) or not all(isinstance(f, str) for f in ex.forbidden)):
        fail(f"forbidden must be a tuple of dotted names such as 'torch.softmax', got {ex.forbidden!r}")
    unknown = [p for p in ex.may_modify if p not in ex.params]
    if unknown:
        fail(f"may_modify names {unknown[0]!r}, which is not one of params {tuple(ex.params)}")
