"""The machinery shared by every exercise: cases, comparisons, hints and verdicts.

An :class:`Exercise` knows how to make its inputs (public ones with a fixed seed, hidden
ones from a generator the grader seeds afresh), the reference answer, how to compare an
answer with it, and which classic mistakes to recognise. It never sees a student object:
answers arrive as validated :class:`~mha._plain.Value` trees (the same plain values the
grader's sandbox sends back, so this layer never depends on the grader).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from mha._plain import MalformedResult, Value, encode, noncontiguous, validate


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
    # same values in a strided layout, see mha._plain.noncontiguous), for statements that
    # promise it; the reference and the mistakes always get contiguous copies
    noncontiguous: tuple[int, ...] = ()

    def student_args(self) -> tuple:
        """The arguments as the student's function receives them: private copies, with
        the ``noncontiguous`` positions in a non-contiguous layout."""
        args = clone_args(self.args)
        return tuple(noncontiguous(a) if i in self.noncontiguous else a for i, a in enumerate(args))


@dataclass
class Mistake:
    """A classic wrong answer: ``wrong(*args)`` computes it; ``hint`` explains it."""

    hint: str
    wrong: Callable


@dataclass
class Outcome:
    """What one call produced, as the trusted side sees it."""

    status: str  # "value", "raised", "not-attempted", "missing"
    value: Value | None = None
    error_type: str = ""
    error_bases: tuple[str, ...] = ()
    error_message: str = ""
    reason: str = ""  # for "missing": why no result came back


@dataclass
class Verdict:
    passed: bool
    message: str
    hidden: bool = False
    raises: bool = False


@dataclass
class Exercise:
    """An auto-graded exercise. See ``book/grading.md`` for the format."""

    id: str
    title: str
    lesson: str
    function: str
    params: tuple[str, ...]
    points: float
    reference: Callable
    public: Callable[[torch.Generator], list[Case]]
    hidden: Callable[[torch.Generator], list[Case]]
    answer: str = "tensor"  # "tensor", "int" or "shapes": how answers are compared
    mistakes: tuple[Mistake, ...] = ()
    forbidden: tuple[str, ...] = ()
    explain: Callable[[Case, Outcome], str | None] | None = None
    public_seed: int = 0
    # floating dtypes the statement accepts: correct answers must get full marks in each
    # (checked by tests/test_the_tests.py); empty for answers that are not tensors
    dtypes: tuple[str, ...] = ("float32", "float64")

    @property
    def signature(self) -> str:
        return f"{self.function}({', '.join(self.params)})"

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

    def judge(self, case: Case, outcome: Outcome, *, reveal: bool | None = None,
              expected: Value | None = None, mistake_values: list | None = None) -> Verdict:
        """Compare one outcome with the reference. ``reveal`` (default: not hidden)
        allows messages to quote inputs, expected values and the student's exception text.
        ``expected`` and ``mistake_values`` (from :meth:`expected` and
        :meth:`mistake_values`) save computing them again when judging many answers to
        one case."""
        reveal = (not case.hidden) if reveal is None else reveal
        v = Verdict(False, "", hidden=case.hidden, raises=case.raises is not None)
        if outcome.status == "missing":
            v.message = outcome.reason or "no result came back"
            return v
        if outcome.status == "not-attempted":
            v.message = "not attempted (the function raises NotImplementedError)"
            return v
        if case.raises:
            if outcome.status == "raised" and case.raises in (outcome.error_type, *outcome.error_bases):
                return Verdict(True, f"raises {case.raises}", case.hidden, True)
            got = (f"raised {safe_error_name(outcome.error_type, reveal)}" if outcome.status == "raised"
                   else f"returned {outcome.value.describe(reveal)}")
            v.message = f"should raise {case.raises} here ({case.note or 'invalid input'}), but {got}"
            return v
        if outcome.status == "raised" and outcome.error_type == "ForbiddenCall":
            v.message = ("called a function graded code may not use (the course package, or one "
                         "this exercise forbids): write it with torch operations")
            return v
        if outcome.status == "raised":
            text = f": {outcome.error_message}" if reveal and outcome.error_message else ""
            v.message = f"raised {safe_error_name(outcome.error_type, reveal)}{text}"
        else:
            expected = self.expected(case) if expected is None else expected
            ok, problem = compare(self.answer, expected, outcome.value, reveal)
            if ok:
                return Verdict(True, "correct", case.hidden, False)
            v.message = problem
            hint = self._mistake_hint(case, outcome.value, mistake_values)
            if hint:
                v.message = _with_hint(v.message, hint)
                return v
        if self.explain is not None:
            try:
                hint = self.explain(case, outcome)
            except Exception:  # a hint must never break grading
                hint = None
            if hint:
                v.message = _with_hint(v.message, hint)
        return v

    def _mistake_hint(self, case: Case, got: Value, values: list | None = None) -> str | None:
        values = self.mistake_values(case) if values is None else values
        for m, wrong in zip(self.mistakes, values):
            if wrong is not None and compare(self.answer, wrong, got, False)[0]:
                return m.hint
        return None


# ----------------------------------------------------------------------------- helpers

def _with_hint(message: str, hint: str) -> str:
    return f"{message.rstrip().rstrip('.')}. Hint: {hint}"


def clone_args(args: tuple) -> tuple:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def plain(value) -> Value:
    """Encode then validate: the same path a sandboxed result takes."""
    arrays: dict = {}
    return validate(encode(value, arrays), arrays)


def describe_args(params: tuple[str, ...], args: tuple) -> str:
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


TOLERANCE = {  # (rtol, atol) per dtype
    "float16": (1e-2, 2e-3),
    "bfloat16": (3e-2, 1e-2),
    "float32": (1e-4, 1e-5),
    "float64": (1e-7, 1e-9),
}


def compare(answer: str, expected: Value, got: Value, reveal: bool) -> tuple[bool, str]:
    """Return (ok, problem) for one answer of kind ``answer``."""
    if answer == "tensor":
        return _compare_tensor(expected, got, reveal)
    if answer == "int":
        return _compare_int(expected, got, reveal)
    if answer == "shapes":
        return _compare_shapes(expected, got, reveal)
    raise ValueError(f"answer must be 'tensor', 'int' or 'shapes', got {answer!r}")


def _compare_tensor(expected: Value, got: Value, reveal: bool) -> tuple[bool, str]:
    if got.kind != "tensor":
        extra = " (convert with torch.from_numpy)" if got.kind == "ndarray" else ""
        return False, f"expected a torch.Tensor, got {got.describe(reveal)}{extra}"
    e, g = expected.data, got.data
    if e.shape != g.shape:
        if reveal:
            return False, f"expected shape {tuple(e.shape)}, got {tuple(g.shape)}"
        return False, "wrong shape"
    if expected.dtype != got.dtype:
        if reveal:
            return False, f"expected dtype {expected.dtype}, got {got.dtype}"
        return False, f"wrong dtype {got.dtype}: keep the dtype this exercise asks for"
    if e.dtype == np.bool_:
        wrong = int(np.count_nonzero(e != g))
        if wrong:
            return False, (f"{wrong} of {e.size} entries are wrong" if reveal else "wrong values")
        return True, ""
    g64, e64 = g.astype(np.float64), e.astype(np.float64)
    bad_nan = np.isnan(g64) & ~np.isnan(e64)
    if bad_nan.any():
        return False, f"the result contains NaN ({int(bad_nan.sum())} entries)"
    rtol, atol = TOLERANCE.get(expected.dtype, (1e-5, 1e-8))
    close = np.isclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return True, ""
    if reveal:
        with np.errstate(invalid="ignore"):  # inf - inf where both are infinite
            worst = float(np.nanmax(np.abs(g64 - e64)))
        return False, f"{int((~close).sum())} of {e.size} values differ (largest difference {worst:.3g})"
    return False, "wrong values"


def _compare_int(expected: Value, got: Value, reveal: bool) -> tuple[bool, str]:
    if got.kind != "int":
        if got.kind == "float":
            shown = f" {got.data!r}" if reveal else ""
            return False, (f"returned the float{shown}; return an int "
                           "(integer division // keeps integers integers)")
        if got.kind == "tensor":
            return False, "returned a tensor; return a python int (int(...) converts it)"
        return False, f"expected an int, got {got.describe(reveal)}"
    if got.data == expected.data:
        return True, ""
    return False, (f"expected {expected.data:,}, got {got.data:,}" if reveal else "wrong value")


def _compare_shapes(expected: Value, got: Value, reveal: bool) -> tuple[bool, str]:
    if got.kind != "dict":
        return False, f"expected a dict, got {got.describe(reveal)}"
    have = {}
    for k, v in got.data:
        if k.kind == "str":
            have[k.data] = v
    for key, want in expected.data:
        name = key.data
        if name not in have:
            return False, f"the dict has no key {name!r}"
        v = have[name]
        if v.kind not in ("tuple", "list") or not all(x.kind == "int" for x in v.data):
            return False, f"{name!r} should be a tuple of ints, got {v.describe(reveal)}"
        got_t = tuple(x.data for x in v.data)
        want_t = tuple(x.data for x in want.data)
        if got_t != want_t:
            return False, (f"{name!r}: expected {want_t}, got {got_t}" if reveal else f"{name!r} is wrong")
    return True, ""


def safe_error_name(name: str, reveal: bool) -> str:
    """An exception's type name, unless it is not a builtin one and may not be revealed
    (a class made at run time could carry data in its name)."""
    import builtins

    if reveal or name == "ForbiddenCall":
        return name
    obj = getattr(builtins, name, None)
    return name if isinstance(obj, type) and issubclass(obj, BaseException) else "an exception"


# ----------------------------------------------------------------------------- forbidden

DYNAMIC = {"eval", "exec", "compile", "__import__", "importlib", "globals", "vars",
           "__builtins__", "__dict__", "__globals__", "modules", "getattr", "setattr"}


def forbidden_uses(tree: ast.AST, forbidden: tuple[str, ...]) -> list[str]:
    """Names in ``tree`` that reach a forbidden function (static, on the source).

    ``forbidden`` holds dotted names; ``"mha"`` forbids the whole course package.
    Dynamic lookups (getattr, eval, importlib, ...) are reported too, since they
    could hide a forbidden call.
    """
    if not forbidden:
        return []
    leaves = {f.rsplit(".", 1)[-1] for f in forbidden if f != "mha"}
    modules = set(forbidden)
    found: list[str] = []

    def add(what: str):
        if what not in found:
            found.append(what)

    for kind, value in _facts(tree):
        if kind == "name":
            if value in leaves:
                add(value)
            elif value in DYNAMIC:
                add(f"{value} (dynamic lookups are not allowed here)")
            elif value == "mha" and "mha" in modules:
                add("the mha package")
        elif kind == "attr":
            if value in leaves:
                add(value)
            elif value in DYNAMIC:
                add(f"{value} (dynamic lookups are not allowed here)")
        elif kind == "module":
            if "mha" in modules and (value == "mha" or value.startswith("mha.")) and value != "mha.exercises":
                add("the mha package")
            if any(value == f or value.startswith(f + ".") for f in modules):
                add(value)
        elif kind == "imported":
            if value in leaves:
                add(value)
        else:  # a string constant
            for leaf in leaves:
                if leaf in value and len(leaf) > 6:
                    add(f"{leaf} (named in a string)")
    return found


def _facts(tree: ast.AST) -> list[tuple[str, str]]:
    """What ``forbidden_uses`` looks at, in source order: names, attributes, imported
    modules and names, and string constants that are not docstrings. A module's facts are
    those of its statements, each worked out once and kept on the statement (the grader
    asks about the same statements for every exercise of a submission)."""
    if not isinstance(tree, ast.Module):
        return _walk_facts(tree)
    body = tree.body
    if body and _is_docstring(body[0]):
        body = body[1:]
    out: list[tuple[str, str]] = []
    for stmt in body:
        cached = getattr(stmt, "_mha_facts", None)
        if cached is None:
            cached = stmt._mha_facts = _walk_facts(stmt)
        out += cached
    return out


def _is_docstring(stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _walk_facts(tree: ast.AST) -> list[tuple[str, str]]:
    # A docstring is documentation, not a lookup: "computes the backward pass" must not
    # cost an honest answer its points. Other strings still count (getattr(x, "name")).
    facts: dict[tuple[str, str], None] = {}
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            facts["name", node.id] = None
        elif isinstance(node, ast.Attribute):
            facts["attr", node.attr] = None
        elif isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.body and _is_docstring(node.body[0]):
                docstrings.add(id(node.body[0].value))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names]
            for full in ([node.module] if isinstance(node, ast.ImportFrom) and node.module else []) + names:
                if full:
                    facts["module", full] = None
            for n in names:
                facts["imported", n] = None
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            facts["str", node.value] = None
    return list(facts)


__all__ = ["Case", "Mistake", "Outcome", "Verdict", "Exercise", "compare", "plain",
           "describe_args", "forbidden_uses", "MalformedResult"]
