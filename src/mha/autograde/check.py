"""``check(exercise_id, fn)``: instant, formative feedback inside a notebook.

It runs the public checks in the student's own process, so it cannot be tamper-proof and
does not pretend to be: it says "public checks only, not your grade". It never raises,
so a notebook goes on running whatever the student's function does.
"""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
import time
from dataclasses import dataclass, field

from . import calls, wire
from .exercise import Exercise
from .forbidden import forbidden_uses
from .judge import score
from .model import Called, Case, Kind, Outcome, Status, Verdict, clone_args, describe_args
from .record import read_record
from .registry import EXERCISES
from .wire import MalformedResult


# A kernel answer whose public checks take longer than this (CPU seconds) gets a warning: the
# grader runs about twice as many checks within its limit for kernel exercises
# (mha.grading.sandbox.Limits.kernel_exercise_s, 60 s).
SLOW_KERNEL_S = 2.0
KERNEL_LIMIT_S = 60.0


def traps_of(ex: Exercise) -> list[str]:
    """The forbidden functions replaced by raising stand-ins while a graded call runs (the
    dotted names of ``ex.forbidden`` outside the course package; the course package itself
    is replaced as a whole in the grader's worker)."""
    return [f for f in ex.forbidden if "." in f and not f.startswith("mha")]


@dataclass
class CheckResult:
    """What ``check`` found: ``passed`` of ``total`` public checks, ``score`` of
    ``max_score`` points if the grader saw the same, and one verdict per check."""

    exercise_id: str
    passed: int = 0
    total: int = 0
    score: float = 0.0
    max_score: float = 0.0
    attempted: bool = True
    verdicts: list[Verdict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.attempted and self.total > 0 and self.passed == self.total and not self.problems

    def __repr__(self) -> str:
        return f"CheckResult({self.exercise_id!r}, passed={self.passed}/{self.total}, score={self.score})"

    def _ipython_display_(self):  # the verdict was printed already; show nothing twice
        pass


def call_outcome(fn, args, noncontiguous: tuple[int, ...] = (), *, traps: tuple[str, ...] = (),
                 trace: bool = False, launches: bool = False) -> Outcome:
    """Call ``fn`` on ``args`` (a tuple, or a :class:`Case`, whose ``noncontiguous``
    arguments then arrive non-contiguous as in the grader) the way the grader's worker does
    (:func:`mha.autograde.calls.run_case`: the ``traps`` set, arguments watched, the operations
    recorded when ``trace``, Triton's kernel launches counted when ``launches``) and read what
    happened as the grader reads it."""
    if isinstance(args, Case):
        args, noncontiguous = args.args, args.noncontiguous
    arrays: dict = {}
    record = calls.run_case(fn, list(clone_args(tuple(args))), plain=wire, arrays=arrays,
                             noncontiguous=tuple(noncontiguous), traps=traps, trace=trace, launches=launches)
    try:
        return read_record(json.loads(json.dumps(record)), arrays, len(args))
    except (MalformedResult, TypeError, ValueError) as e:  # a value that cannot even be encoded
        return Outcome(Called.RAISED, error_type="UnreadableResult", error_message=str(e)[:calls.MAX_MESSAGE])


def run_public(ex: Exercise, fn) -> list[Outcome]:
    """The outcomes of ``fn`` on ``ex``'s public cases, under the exercise's rules."""
    if ex.kernel:  # Triton imported the course's way before the calls, so that launches are counted
        try:
            import mha.kernels  # noqa: F401
        except ImportError:  # no Triton here, or one imported earlier another way: it runs as it is
            pass
    return [call_outcome(fn, c, traps=traps_of(ex), trace=ex.audit is not None, launches=ex.kernel)
            for c in ex.public_cases()]


def check(exercise_id: str, fn) -> CheckResult:
    """Run the public checks of ``exercise_id`` on ``fn`` and print a verdict per check.

    Public checks only, not your grade: the grader also runs hidden checks. Returns a
    :class:`CheckResult`; never raises.
    """
    try:
        return _check(exercise_id, fn)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # never take the notebook down
        print(f"check({exercise_id!r}) could not run: {type(e).__name__}: {e}")
        return CheckResult(str(exercise_id), attempted=False, problems=[f"{type(e).__name__}: {e}"])


def _check(exercise_id: str, fn) -> CheckResult:
    if exercise_id not in EXERCISES:
        known = ", ".join(EXERCISES)
        print(f"There is no exercise {exercise_id!r}. Exercise ids: {known}.")
        return CheckResult(str(exercise_id), attempted=False, problems=["unknown exercise id"])
    ex: Exercise = EXERCISES[exercise_id]
    result = CheckResult(ex.id, max_score=float(ex.points))
    print(f"{ex.id} - {ex.title}: public checks only, not your grade")
    if not callable(fn):
        print(f"  pass the function itself, e.g. check({ex.id!r}, {ex.function}); got {type(fn).__name__}")
        result.attempted = False
        return result
    # What makes the grader refuse a function before running it gives no points here either.
    sig = _signature_problem(fn, ex)
    if sig:
        result.problems.append(sig)
        print(f"  ! {sig} (the grader gives no points for a function with another signature)")
    used = forbidden_in(fn, ex)
    if used:
        msg = (f"uses {', '.join(used)}, which this exercise does not allow: {ex.write_it} "
               "(the grader gives no points otherwise)")
        result.problems.append(msg)
        print(f"  ! {msg}")

    cases = ex.public_cases()
    started = time.process_time()
    outcomes = run_public(ex, fn)
    spent = time.process_time() - started
    if ex.kernel and spent > SLOW_KERNEL_S:
        print(f"  ! the public checks took {spent:.1f} s of CPU time: Triton's interpreter runs a grid's programs "
              f"one after another, and the grader, with its hidden checks as well, allows a kernel exercise "
              f"{KERNEL_LIMIT_S:g} s; give each program a block of at least 16 rows")
    scored = score(ex, cases, outcomes)
    result.total = scored.total
    if scored.status == Status.NOT_ATTEMPTED:
        result.attempted = False
        print(f"  not attempted yet: {ex.function} still raises NotImplementedError. "
              f"Write it, then run this cell again.")
        return result
    result.verdicts = scored.verdicts
    for case, verdict in zip(cases, result.verdicts):
        label = describe_args(ex.params, case.args)
        if case.noncontiguous:
            label += " (" + ", ".join(ex.params[i] for i in case.noncontiguous) + " not contiguous)"
        if case.note:
            label += f" ({case.note})"
        mark = "ok " if verdict.passed else " -- " if verdict.kind is Kind.PENDING else "FAIL"
        text = "correct" if verdict.passed else verdict.message
        print(f"  [{mark}] {ex.function}({label}): {text}")
    result.passed = scored.passed
    result.score = 0.0 if result.problems else scored.score
    if result.passed == result.total and not result.problems:
        print(f"  all {result.total} public checks pass. The grader also runs hidden checks.")
    else:
        print(f"  {result.passed} of {result.total} public checks pass.")
    return result


def _signature_problem(fn, ex: Exercise) -> str | None:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return None
    required = [p for p in positional if p.default is p.empty]
    if len(required) > len(ex.params) or len(positional) < len(ex.params):
        names = ", ".join(p.name for p in positional)
        return f"expected the signature {ex.signature}, found {ex.function}({names})"
    return None


def forbidden_in(fn, ex: Exercise) -> list[str]:
    """Forbidden names in the source of ``fn`` and of the functions and classes of its
    notebook that it uses (what the grader keeps of a submission for it), or forbidden
    objects among the globals they use."""
    found: list[str] = []
    body = []
    for f in _reached(fn):
        try:
            body += ast.parse(textwrap.dedent(inspect.getsource(f))).body
        except (OSError, TypeError, SyntaxError, IndentationError):
            pass
    found += forbidden_uses(ast.Module(body=body, type_ignores=[]), ex.forbidden)
    banned = _forbidden_objects(ex.forbidden)
    module = getattr(fn, "__module__", None)
    for f in _reached(fn):
        for name in _code_names(getattr(f, "__code__", None)):
            obj = getattr(f, "__globals__", {}).get(name)
            hit = obj is not None and (any(obj is b for b in banned) or _imported_forbidden(obj, ex.forbidden, module))
            if hit and name not in found and "the mha package" not in found:
                found.append("the mha package" if name == "mha" else name)
    return found


def _imported_forbidden(obj, forbidden: tuple[str, ...], notebook: str | None) -> bool:
    """Whether ``obj``, a global that the answer uses and that its notebook did not define,
    came in through an import the grader refuses: ``from M import name`` with M a forbidden
    module (or inside one), or with ``name`` the last part of a forbidden name. The grader
    sees that import statement in the code it keeps; here only the object is left, and its
    module and name tell where it came from. A module counts by its own name: ``from
    mha.kernels import attention as kernels`` in a notebook leaves the module
    ``mha.kernels.attention`` (what the grader refuses in the import it keeps)."""
    if inspect.ismodule(obj):
        name = obj.__name__
        return name != "mha.exercises" and any(name == f or name.startswith(f + ".") for f in forbidden)
    if not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj)):
        return False
    home = getattr(obj, "__module__", None) or ""
    if not home or home == notebook:
        return False
    leaves = {f.rsplit(".", 1)[-1] for f in forbidden if f != "mha"}
    return (getattr(obj, "__name__", None) in leaves
            or any(home == f or home.startswith(f + ".") for f in forbidden if f != "mha"))


def _reached(fn, limit: int = 50) -> list:
    """``fn`` and the plain functions and classes it reaches through its globals, defined
    in the same place (a notebook's own helpers), breadth first."""
    out, todo = [], [fn]
    module = getattr(fn, "__module__", None)
    while todo and len(out) < limit:
        f = todo.pop(0)
        if any(f is g for g in out):
            continue
        out.append(f)
        for name in _code_names(getattr(f, "__code__", None)):
            obj = _kernel_function(getattr(f, "__globals__", {}).get(name))
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and getattr(obj, "__module__", None) == module:
                todo.append(obj)
    return out


def _kernel_function(obj):
    """The Python function of a Triton kernel (``@triton.jit``, with ``@triton.autotune`` or
    ``@triton.heuristics`` around it, or its interpreter's form), which the grader keeps and
    checks as it does any helper; anything else as it is."""
    for _ in range(4):
        inner = getattr(obj, "fn", None) if type(obj).__module__.startswith("triton.") else None
        if inner is None:
            break
        obj = inner
    return obj


def _code_names(code, depth: int = 0) -> list[str]:
    """Global and attribute names a code object (and the functions nested in it) uses."""
    if code is None or depth > 5:
        return []
    names = list(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names += _code_names(const, depth + 1)
    return names


def _forbidden_objects(forbidden: tuple[str, ...]) -> list:
    import importlib

    objs = []
    for dotted in forbidden:
        if dotted == "mha":
            import mha
            objs += [mha] + [getattr(mha, n) for n in getattr(mha, "__all__", ())]
            continue
        found = calls.resolve(dotted) if "." in dotted else None
        if found is not None:
            objs.append(getattr(*found))
        else:
            try:
                objs.append(importlib.import_module(dotted))
            except (ImportError, ValueError):
                pass
    return objs
