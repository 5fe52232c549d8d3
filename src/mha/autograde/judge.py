"""The judge: one verdict per check, and one score per exercise, for ``check`` and the grader alike.

:func:`judge` compares what one call produced (an :class:`~.model.Outcome`) with the reference
on one case and says what is wrong, in words that never quote a hidden value; where a listed
mistake of the exercise gives the same answer it names it and shows its hint, else it looks
for a diagnosis (:mod:`mha.autograde.diagnose`). :func:`score` applies the one scoring rule to
an exercise's verdicts: nothing attempted gives zero; raising the right error counts only for a
function that also returns a right value somewhere (:func:`apply_raise_rule`); then points x
passed / checks. ``check`` in a notebook, the grader, the load-time checks of an instructor's
file and the tests all score through here.
"""

from __future__ import annotations

import builtins
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from .compare import compare
from .diagnose import common_diagnosis, value_diagnosis
from .model import Called, Case, Kind, Outcome, Status, Verdict
from .wire import Value

if TYPE_CHECKING:
    from .exercise import Exercise

# How a check's message on a call that reached a forbidden function's stand-in begins (what to
# do instead follows it: Exercise.write_it).
FORBIDDEN_CALL = ("called a function graded code may not use (the course package, or one this "
                  "exercise forbids)")

# What a call that launched no Triton kernel is told, where the exercise asks for one.
NO_KERNEL = ("right values, but no Triton kernel was launched: this exercise asks for the result to be "
             "computed by a @triton.jit kernel that the function launches (kernel[grid](...))")

# The end of the message of a check that raised the right error before any value was right.
PENDING = "counts once the function returns correct values"


class Problem(NamedTuple):
    """What is wrong with one outcome: ``problem`` in words that quote nothing; ``detail`` what
    may be added where details may be revealed (and ``shown``, a fuller ``problem`` for them);
    a hint, and the index of the listed mistake it comes from."""

    problem: str
    detail: str = ""
    hint: str | None = None
    shown: str = ""
    mistake: int | None = None
    kind: Kind = Kind.WRONG
    label: str = ""  # the names of the listed mistakes the answer is (several, where one hint says each)


def judge(ex: Exercise, case: Case, outcome: Outcome, *, reveal: bool | None = None,
          expected: Value | None = None, mistake_values: list | None = None) -> Verdict:
    """The verdict on ``outcome``, the answer's call on ``case``. ``reveal`` (default: the case
    is public) allows the message to quote inputs, expected values and the answer's exception
    text; the verdict's ``grader_message`` never does. ``expected`` and ``mistake_values`` (from
    ``Exercise.expected`` and ``Exercise.mistake_values``) save computing them again when judging
    many answers to one case."""
    reveal = (not case.hidden) if reveal is None else reveal
    found = find_problem(ex, case, outcome, expected, mistake_values)
    if found is None:
        return Verdict(True, f"raises {case.raises}" if case.raises else "correct", hidden=case.hidden,
                       raises=case.raises is not None)
    label = found.label or (ex.mistakes[found.mistake].name if found.mistake is not None else "")
    hint = found.hint or ""
    shown = found.shown if (reveal and found.shown) else found.problem
    if reveal and found.detail:
        shown = f"{shown}: {found.detail}"
    kind = found.kind
    if kind is Kind.WRONG and hint:
        kind = Kind.MISTAKE if found.mistake is not None else Kind.DIAGNOSIS
    return Verdict(False, with_hint(shown, hint, label), kind=kind, hidden=case.hidden,
                   raises=case.raises is not None, grader_message=with_hint(found.problem, hint, label),
                   hint=hint, mistake=found.mistake)


def find_problem(ex: Exercise, case: Case, outcome: Outcome, expected: Value | None = None,
                 mistake_values: list | None = None) -> Problem | None:
    """What is wrong with ``outcome`` on ``case``, in the order a student should hear it; None
    when it is right."""
    if outcome.status == Called.MISSING:
        return Problem(outcome.reason or "no result came back", kind=Kind.MISSING)
    if outcome.status == Called.NOT_ATTEMPTED:
        return Problem("not attempted (the function raises NotImplementedError)", kind=Kind.NOT_ATTEMPTED)
    changed = [ex.params[i] if i < len(ex.params) else f"argument {i + 1}"
               for i in outcome.mutated if not (i < len(ex.params) and ex.params[i] in ex.may_modify)]
    if changed:
        names = " and ".join(f"`{n}`" for n in changed)
        return Problem(f"changed its argument {names} (in place or in value): a graded function leaves "
                       "its inputs as they were; work on a copy (.clone()) or out of place")
    if case.raises:
        return _raise_problem(ex, case, outcome)
    if outcome.status == Called.RAISED and outcome.error_type == "ForbiddenCall":
        return Problem(f"{FORBIDDEN_CALL}: {ex.write_it}", kind=Kind.FORBIDDEN_CALL)
    if outcome.status == Called.RAISED:
        return Problem(f"raised {safe_error_name(outcome.error_type, False)}", outcome.error_message,
                       explain(ex, case, outcome), shown=f"raised {outcome.error_type}")
    if outcome.value.kind == "tensor" and outcome.value.device not in (None, "cpu"):
        return Problem("returned a tensor on another device than its inputs': keep the result on "
                       "the inputs' device (here the CPU)")
    expected = ex.expected(case) if expected is None else expected
    ok, problem, detail = compare(ex.answer, expected, outcome.value, ex.tolerance)
    if not ok:
        ks = named_mistakes(ex, case, outcome.value, mistake_values)
        if ks:
            names = [ex.mistakes[k].name for k in ks]
            return Problem(problem, detail, ex.mistakes[ks[0]].hint, mistake=ks[0],
                           label=" or ".join(n for n in names if n) if all(names) else "")
        return Problem(problem, detail, explain(ex, case, outcome) or value_diagnosis(ex.answer, expected,
                                                                                        outcome.value))
    if ex.kernel and not outcome.launches:
        return Problem(NO_KERNEL)
    if ex.audit is not None:
        try:
            found = ex.audit(case, outcome.trace or ())
        except Exception as e:  # an audit must never crash grading; it fails closed
            found = f"the checks could not follow how the result was computed ({type(e).__name__})"
        if found:
            return Problem(f"right values, computed the wrong way: {found}")
    return None


def _raise_problem(ex: Exercise, case: Case, outcome: Outcome) -> Problem | None:
    """What is wrong with an outcome on a case that must raise ``case.raises``."""
    if outcome.status == Called.RAISED and case.raises in (outcome.error_type, *outcome.error_bases):
        if names_arguments(ex, case, outcome.error_message):
            return None
        wanted = " and ".join(f"`{n}`" for n in case.names)
        return Problem(f"raises {case.raises}, but its message does not name {wanted} (or give their "
                       "values): say which argument is wrong and what would be valid")
    got = (f"raised {safe_error_name(outcome.error_type, False)}" if outcome.status == Called.RAISED
           else f"returned {outcome.value.describe(False)}")
    return Problem(f"should raise {case.raises} here ({case.note or 'invalid input'}), but {got}")


def names_arguments(ex: Exercise, case: Case, message: str) -> bool:
    """Whether an error message names the arguments at fault (``case.names``): by name
    (``embed_dim``), or by the values they have in this call ("C=10 is not divisible by h=3")."""
    if all(n in message for n in case.names):
        return True
    values = [case.args[ex.params.index(n)] for n in case.names if n in ex.params]
    return len(values) == len(case.names) and all(
        re.search(rf"(?<![\w.]){re.escape(str(v))}(?![\w]|\.\d)", message) for v in values)


def explain(ex: Exercise, case: Case, outcome: Outcome) -> str | None:
    """The exercise's own diagnosis of a failed outcome, else the course-wide one."""
    try:
        found = ex.explain(case, outcome) if ex.explain is not None else None
        return found or common_diagnosis(outcome)
    except Exception:  # a hint must never break grading
        return None


def named_mistake(ex: Exercise, case: Case, got: Value, values: list | None = None) -> int | None:
    """The index of the listed mistake whose answer ``got`` is (the first of :func:`named_mistakes`),
    or None."""
    found = named_mistakes(ex, case, got, values)
    return found[0] if found else None


def named_mistakes(ex: Exercise, case: Case, got: Value, values: list | None = None) -> list[int]:
    """The indices of the listed mistakes whose answer ``got`` is, where they share one hint
    (two slips that give one count on some cases can say both in one hint, and are named
    together there: "Hint (q-reads-kdim or o-writes-kdim): ..."). Empty when no listed mistake
    gives that answer, or when mistakes with different hints give it on this case (the answer
    then cannot tell them apart, and naming one could name the wrong one)."""
    values = ex.mistake_values(case) if values is None else values
    found = [k for k, wrong in enumerate(values)
             if wrong is not None and compare(ex.answer, wrong, got, ex.tolerance / NAMING_SHARE)[0]]
    return found if len({ex.mistakes[k].hint for k in found}) == 1 else []


# A prediction is right within ``tolerance`` of the number; a listed slip's number is named only
# within a quarter of it (a slip gives its number, up to rounding; a number merely near it, within
# the tolerance, may come from another slip: 51 MiB is 1.3% from 50.3 MB, and is no unit slip).
NAMING_SHARE = 4


# ----------------------------------------------------------------------------- the score

@dataclass
class ExerciseScore:
    """An exercise's verdicts and what they are worth: ``status`` is GRADED, NOT_ATTEMPTED (every
    call met the notebook's stub) or MISSING (no call found the function)."""

    status: Status
    verdicts: list[Verdict]
    passed: int = 0
    total: int = 0
    score: float = 0.0


def score(ex: Exercise, cases: list[Case], outcomes: list[Outcome], *, reveal: bool | None = None) -> ExerciseScore:
    """Judge every outcome of an exercise and score them (:func:`score_verdicts`)."""
    return score_verdicts(ex, cases, [judge(ex, c, o, reveal=reveal) for c, o in zip(cases, outcomes)])


def score_verdicts(ex: Exercise, cases: list[Case], verdicts: list[Verdict]) -> ExerciseScore:
    """The scoring rule: nothing attempted (or nothing found) gives zero; then the raise rule
    (:func:`apply_raise_rule`); then ``ex.points`` x passed / checks, rounded to hundredths."""
    for kind, status in ((Kind.NOT_ATTEMPTED, Status.NOT_ATTEMPTED), (Kind.MISSING, Status.MISSING)):
        if verdicts and all(v.kind is kind for v in verdicts):
            return ExerciseScore(status, verdicts, 0, len(verdicts), 0.0)
    verdicts = apply_raise_rule(cases, verdicts)
    passed = sum(v.passed for v in verdicts)
    return ExerciseScore(Status.GRADED, verdicts, passed, len(verdicts),
                         round(ex.points * passed / max(len(verdicts), 1), 2))


def apply_raise_rule(cases: list[Case], verdicts: list[Verdict]) -> list[Verdict]:
    """Raising the right error on bad input counts only for a function that also returns a
    correct value somewhere (a function that raises on everything earns nothing). A public
    raise case looks at the public value cases only: ``check`` sees no others, and a hidden
    draw that happens to suit a wrong answer must not change a public verdict in the grader."""
    value_ok = any(v.passed and not v.raises for v in verdicts)
    public_value_ok = any(v.passed and not v.raises and not v.hidden for v in verdicts)
    out = []
    for case, v in zip(cases, verdicts):
        if case.raises and v.passed and not (value_ok if v.hidden else public_value_ok):
            v = Verdict(False, f"raises {case.raises} as asked; {PENDING}", kind=Kind.PENDING, hidden=v.hidden,
                        raises=True)
        out.append(v)
    return out


# ----------------------------------------------------------------------------- words

def with_hint(message: str, hint: str, name: str = "") -> str:
    """``message``, then the hint, if any; a listed mistake's hint carries the mistake's name:
    "wrong values. Hint (no-scale): divide the scores by sqrt(d) ..."."""
    if not hint:
        return message
    return f"{message.rstrip().rstrip('.')}. Hint{f' ({name})' if name else ''}: {hint}"


def safe_error_name(name: str, reveal: bool) -> str:
    """An exception's type name, unless it is not a builtin one and may not be revealed
    (a class made at run time could carry data in its name)."""
    if reveal or name == "ForbiddenCall":
        return name
    obj = getattr(builtins, name, None)
    return name if isinstance(obj, type) and issubclass(obj, BaseException) else "an exception"
