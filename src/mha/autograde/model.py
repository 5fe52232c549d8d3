"""The records of the exercise format: a check's inputs (:class:`Case`), a named wrong answer
(:class:`Mistake`), what one call of an answer produced (:class:`Outcome`), and the judgement
of one check (:class:`Verdict`), with the words they are described by (:class:`Called`,
:class:`Status`, :class:`Kind`).

An exercise (:mod:`mha.autograde.exercise`) never sees a student object: answers arrive as
validated :class:`~mha.autograde.wire.Value` trees (the same plain values the grader's sandbox
sends back), read into an :class:`Outcome` per call (:mod:`mha.autograde.record`);
:mod:`mha.autograde.judge` turns an outcome into a :class:`Verdict`, and an exercise's verdicts
into its score.
"""

from __future__ import annotations

import re
from dataclasses import KW_ONLY, dataclass
from enum import Enum
from typing import Callable, NamedTuple

import torch

from . import calls
from .wire import Value, encode, noncontiguous, validate


class _Text(str, Enum):
    """An enum whose members are their text: equal to it, printed as it, and written into
    JSON as it (the grades files hold these words)."""

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__
    __hash__ = str.__hash__  # a member finds what its text is the key of, in every Python


class Called(_Text):
    """What one call of a graded function did (``Outcome.status``): the words of the call's
    record (:mod:`mha.autograde.calls`)."""

    VALUE = calls.VALUE
    RAISED = calls.RAISED
    NOT_ATTEMPTED = calls.NOT_ATTEMPTED  # the notebook's stub raised NotImplementedError
    MISSING = calls.MISSING              # the function was not there to call


class Status(_Text):
    """What became of one exercise of a submission (``ExerciseReport.status`` in the grades)."""

    GRADED = "graded"
    NOT_ATTEMPTED = "not attempted"
    MISSING = "missing"
    WRONG_SIGNATURE = "wrong signature"
    FORBIDDEN = "forbidden"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    UNREADABLE = "unreadable"


class Kind(_Text):
    """What kind of verdict one check got: the class report counts and links by it."""

    CORRECT = "correct"
    MISTAKE = "mistake"                # a listed mistake of the exercise, named, with its hint
    DIAGNOSIS = "diagnosis"            # a hint from a diagnosis (the exercise's own, or the course's)
    FORBIDDEN_CALL = "forbidden-call"  # the call reached a function the exercise forbids
    PENDING = "pending"                # raised as asked, but counts only once values are right too
    NOT_ATTEMPTED = "not attempted"
    MISSING = "missing"
    WRONG = "wrong"                    # anything else, with no hint


@dataclass
class Case:
    """One call of the student's function: ``fn(*args)``.

    ``raises`` names the exception type the call must raise (e.g. ``"ValueError"``)
    instead of returning a value. Hidden cases never show their inputs or answers.
    """

    args: tuple
    hidden: bool = False
    raises: str | None = None
    note: str = ""  # what the case is about, shown for public cases
    # positions of tensor arguments the student's function receives non-contiguous (the
    # same values in a strided layout, see wire.noncontiguous), for statements that
    # promise it; the reference and the mistakes always get contiguous copies
    noncontiguous: tuple[int, ...] = ()
    # for a case that must raise: words its error message must contain (the arguments at
    # fault), where the statement asks for a message that names them
    names: tuple[str, ...] = ()

    def student_args(self) -> tuple:
        """The arguments as the student's function receives them: private copies, with
        the ``noncontiguous`` positions in a non-contiguous layout."""
        args = clone_args(self.args)
        return tuple(noncontiguous(a) if i in self.noncontiguous else a for i, a in enumerate(args))


# The form of the course's own mistake names (tests/test_exercises.py holds every one to it);
# an instructor's may be any short text.
MAX_NAME = 24
NAME = re.compile(rf"(?=.{{1,{MAX_NAME}}}$)[a-z0-9]+(-[a-z0-9]+)*")


@dataclass
class Mistake:
    """A classic wrong answer: ``wrong(*args)`` computes it; ``hint`` explains it.

    ``name``: a short, stable label, unique within its exercise, which ``check`` shows with the
    hint and the class report counts the mistake by (every mistake of the course has one, of
    lowercase words joined by '-', e.g. ``"no-scale"``; an instructor's may go without, and is
    then called by its place in the list, "mistake 1", "mistake 2", ...).
    ``section``: where the point is taught, for the class report's link, when it is not the
    exercise's own ``section``: the heading of a section of the exercise's lesson, the heading
    of another lesson's written ``"<lesson>: <heading>"``, ``"<lesson>#<anchor>"``, or a URL
    (see :mod:`mha.autograde.sections`)."""

    hint: str
    wrong: Callable
    name: str = ""
    section: str = ""


class Op(NamedTuple):
    """One operation of a recorded call: the name of the torch function or tensor method
    (e.g. ``"amax"``, ``"matmul"``, ``"__getitem__"``), the shapes of its tensor inputs and
    outputs, and whether its result is known to be a view of an input."""

    name: str
    inputs: tuple[tuple[int, ...], ...]
    outputs: tuple[tuple[int, ...], ...]
    view: bool


@dataclass
class Outcome:
    """What one call produced, as the trusted side sees it."""

    status: Called
    value: Value | None = None
    error_type: str = ""
    error_bases: tuple[str, ...] = ()
    error_message: str = ""
    reason: str = ""  # for MISSING: why no result came back
    mutated: tuple[int, ...] = ()  # positions of the arguments the call changed
    trace: tuple[Op, ...] | None = None  # the call's operations, for exercises with an audit
    truncated: bool = False  # the trace holds only the first MAX_TRACE distinct operations
    launches: int | None = None  # Triton kernels the call launched, for exercises that ask for one


@dataclass
class Verdict:
    """The judgement of one check. ``message`` is what whoever judged sees (with the details a
    public check may reveal: inputs, expected values, the exception's text); ``grader_message``
    is the same without details, which the grader shows for every check. ``hint`` is the hint
    the message ends with (empty for none); ``mistake`` the index in ``Exercise.mistakes`` of the
    listed mistake the answer makes (for ``Kind.MISTAKE``)."""

    passed: bool
    message: str
    _: KW_ONLY
    kind: Kind = Kind.CORRECT
    hidden: bool = False
    raises: bool = False       # the check's case asks for an exception
    grader_message: str = ""
    hint: str = ""
    mistake: int | None = None

    def __post_init__(self):
        if not self.grader_message:
            self.grader_message = self.message

    @property
    def explained(self) -> bool:
        """The hint comes from a diagnosis, not from a listed mistake."""
        return self.kind is Kind.DIAGNOSIS


def clone_args(args: tuple) -> tuple:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def plain(value) -> Value:
    """Encode then validate: the same path a sandboxed result takes."""
    arrays: dict = {}
    return validate(encode(value, arrays), arrays)


def describe_args(params: tuple[str, ...], args: tuple) -> str:
    """The arguments of a public check as ``check`` prints them: small tensors by value, the
    others by shape and dtype."""
    parts = []
    for name, a in zip(params, args):
        if isinstance(a, torch.Tensor):
            if a.numel() <= 6 and a.dim() <= 1:
                parts.append(f"{name}={a.tolist()}")
            else:
                parts.append(f"{name}: {tuple(a.shape)} {str(a.dtype).replace('torch.', '')}")
        else:
            parts.append(f"{name}={a!r}")
    return ", ".join(parts)
