"""The machinery shared by every exercise: cases, comparisons, hints and verdicts.

An :class:`Exercise` knows how to make its inputs (public ones with a fixed seed, hidden
ones from a generator the grader seeds afresh), the reference answer, how to compare an
answer with it, and which classic mistakes to recognise. It never sees a student object:
answers arrive as validated :class:`~mha._plain.Value` trees (the same plain values the
grader's sandbox sends back, so this layer never depends on the grader).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

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
    then called by its place in the list, "mistake 1", "mistake 2", ...); ``section``: where the point is taught, for the class
    report's link (a URL, or ``"<lesson>#<anchor>"`` for the course's lessons)."""

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

    status: str  # "value", "raised", "not-attempted", "missing"
    value: Value | None = None
    error_type: str = ""
    error_bases: tuple[str, ...] = ()
    error_message: str = ""
    reason: str = ""  # for "missing": why no result came back
    mutated: tuple[int, ...] = ()  # positions of the arguments the call changed
    trace: tuple[Op, ...] | None = None  # the call's operations, for exercises with an audit
    truncated: bool = False  # the trace holds only the first MAX_TRACE distinct operations
    launches: int | None = None  # Triton kernels the call launched, for exercises that ask for one


@dataclass
class Verdict:
    passed: bool
    message: str          # as shown to whoever judged (with details where they may be revealed)
    hidden: bool = False
    raises: bool = False
    neutral: str = ""     # the message without details: what the grader shows for this check
    mistake: int | None = None  # the index in Exercise.mistakes of the mistake the answer makes
    explained: bool = False     # the hint comes from the exercise's ``explain`` (no listed mistake)

    def __post_init__(self):
        if not self.neutral:
            self.neutral = self.message


# Names through which code could switch off the recording of its operations (the stacks of
# torch function and dispatch modes): an exercise with an audit forbids them. Names without a
# dot are looked for in the source only, never replaced at run time (the recorder needs them).
UNWATCHED = ("overrides", "DisableTorchFunction", "DisableTorchFunctionSubclass", "_disabled_torch_function_impl",
             "_pop_torch_function_stack", "_len_torch_function_stack", "_pop_mode", "_pop_mode_temporarily",
             "_push_mode", "_python_dispatch", "_disable_current_modes", "_pop_torch_dispatch_mode")


# What a call that launched no Triton kernel is told, where the exercise asks for one.
NO_KERNEL = ("right values, but no Triton kernel was launched: this exercise asks for the result to be "
             "computed by a @triton.jit kernel that the function launches (kernel[grid](...))")


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
    answer: str = "tensor"  # "tensor", "tensors", "int", "shapes" or "number": how answers are compared
    mistakes: tuple[Mistake, ...] = ()
    forbidden: tuple[str, ...] = ()
    explain: Callable[[Case, Outcome], str | None] | None = None
    public_seed: int = 0
    # floating dtypes the statement accepts: correct answers must get full marks in each
    # (checked by tests/test_the_tests.py); empty for answers that are not tensors
    dtypes: tuple[str, ...] = ("float32", "float64")
    # how an answer computes, where the statement asks for a method: audit(case, ops) gets
    # every tensor operation of the call (see Op) and returns what is wrong, or None; its
    # text is shown for hidden checks too, so it must not quote sizes or values
    audit: Callable[[Case, tuple], str | None] | None = None
    # parameters the statement allows the function to change; every other argument must
    # come back as it was (values, and no in-place operation on it)
    may_modify: tuple[str, ...] = ()
    # what the student is asked, for exercises written outside the lessons (an instructor's
    # own file, see mha.exercises.load_exercises): shown in their student version
    statement: str = ""
    # the statement asks for a Triton kernel: a call that launches none loses its check, right
    # values or not (the launches are counted by mha._calls)
    kernel: bool = False
    # where the reference is not an answer the statement accepts (a kernel exercise's reference
    # is plain torch, so that expected values need no Triton): the dotted name of a function
    # that is, imported when asked for (see model_answer)
    model: str = ""
    # for answer="number" (a prediction): the largest relative error that still counts as right
    # (0: exactly); the statement states it
    tolerance: float = 0.0

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
        import importlib

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

    def judge(self, case: Case, outcome: Outcome, *, reveal: bool | None = None,
              expected: Value | None = None, mistake_values: list | None = None) -> Verdict:
        """Compare one outcome with the reference. ``reveal`` (default: not hidden)
        allows messages to quote inputs, expected values and the student's exception text.
        ``expected`` and ``mistake_values`` (from :meth:`expected` and
        :meth:`mistake_values`) save computing them again when judging many answers to
        one case. The verdict's ``neutral`` message is the one without details, which the
        grader shows; ``message`` adds the details when ``reveal``."""
        reveal = (not case.hidden) if reveal is None else reveal

        def fail(problem: str, detail: str = "", hint: str | None = None, shown: str | None = None,
                 mistake: int | None = None) -> Verdict:
            label = self.mistakes[mistake].name if mistake is not None else ""
            neutral = _with_hint(problem, hint, label) if hint else problem
            shown = shown if (reveal and shown) else problem
            if reveal and detail:
                shown = f"{shown}: {detail}"
            return Verdict(False, _with_hint(shown, hint, label) if hint else shown, case.hidden,
                           case.raises is not None, neutral, mistake, bool(hint) and mistake is None)

        if outcome.status == "missing":
            return fail(outcome.reason or "no result came back")
        if outcome.status == "not-attempted":
            return fail("not attempted (the function raises NotImplementedError)")
        changed = [self.params[i] if i < len(self.params) else f"argument {i + 1}"
                   for i in outcome.mutated if not (i < len(self.params) and self.params[i] in self.may_modify)]
        if changed:
            names = " and ".join(f"`{n}`" for n in changed)
            return fail(f"changed its argument {names} (in place or in value): a graded function leaves "
                        "its inputs as they were; work on a copy (.clone()) or out of place")
        if case.raises:
            if outcome.status == "raised" and case.raises in (outcome.error_type, *outcome.error_bases):
                if not self._names_arguments(case, outcome.error_message):
                    wanted = " and ".join(f"`{n}`" for n in case.names)
                    return fail(f"raises {case.raises}, but its message does not name {wanted} (or give their "
                                "values): say which argument is wrong and what would be valid")
                return Verdict(True, f"raises {case.raises}", case.hidden, True)
            got = (f"raised {safe_error_name(outcome.error_type, False)}" if outcome.status == "raised"
                   else f"returned {outcome.value.describe(False)}")
            return fail(f"should raise {case.raises} here ({case.note or 'invalid input'}), but {got}")
        if outcome.status == "raised" and outcome.error_type == "ForbiddenCall":
            return fail(f"{FORBIDDEN_CALL}: {self.write_it}")
        if outcome.status == "raised":
            return fail(f"raised {safe_error_name(outcome.error_type, False)}", outcome.error_message,
                        self._explain(case, outcome), shown=f"raised {outcome.error_type}")
        if outcome.value.kind == "tensor" and outcome.value.device not in (None, "cpu"):
            return fail("returned a tensor on another device than its inputs': keep the result on "
                        "the inputs' device (here the CPU)")
        expected = self.expected(case) if expected is None else expected
        ok, problem, detail = compare(self.answer, expected, outcome.value, self.tolerance)
        if not ok:
            k = self._named_mistake(case, outcome.value, mistake_values)
            if k is not None:
                return fail(problem, detail, self.mistakes[k].hint, mistake=k)
            return fail(problem, detail, self._explain(case, outcome) or value_diagnosis(self.answer, expected,
                                                                                          outcome.value))
        if self.kernel and not outcome.launches:
            return fail(NO_KERNEL)
        if self.audit is not None:
            try:
                found = self.audit(case, outcome.trace or ())
            except Exception as e:  # an audit must never crash grading; it fails closed
                found = f"the checks could not follow how the result was computed ({type(e).__name__})"
            if found:
                return fail(f"right values, computed the wrong way: {found}")
        return Verdict(True, "correct", case.hidden, False)

    def _names_arguments(self, case: Case, message: str) -> bool:
        """Whether an error message names the arguments at fault: by name (``embed_dim``), or by
        the values they have in this call ("C=10 is not divisible by h=3")."""
        if all(n in message for n in case.names):
            return True
        values = [case.args[self.params.index(n)] for n in case.names if n in self.params]
        return len(values) == len(case.names) and all(
            re.search(rf"(?<![\w.]){re.escape(str(v))}(?![\w]|\.\d)", message) for v in values)

    def _explain(self, case: Case, outcome: Outcome) -> str | None:
        """The exercise's own diagnosis of a failed outcome, else the course-wide one."""
        try:
            found = self.explain(case, outcome) if self.explain is not None else None
            return found or common_diagnosis(outcome)
        except Exception:  # a hint must never break grading
            return None

    def _named_mistake(self, case: Case, got: Value, values: list | None = None) -> int | None:
        """The index of the listed mistake whose answer ``got`` is (the first, where several
        with one hint give it). None when no listed mistake gives that answer, or when
        mistakes with different hints give it on this case (the answer then cannot tell
        them apart, and naming one could name the wrong one)."""
        values = self.mistake_values(case) if values is None else values
        found = [k for k, (m, wrong) in enumerate(zip(self.mistakes, values))
                 if wrong is not None and compare(self.answer, wrong, got, self.tolerance)[0]]
        return found[0] if len({self.mistakes[k].hint for k in found}) == 1 else None

    def _mistake_hint(self, case: Case, got: Value, values: list | None = None) -> str | None:
        """The hint of :meth:`_named_mistake`, or None."""
        k = self._named_mistake(case, got, values)
        return None if k is None else self.mistakes[k].hint


def common_diagnosis(outcome: Outcome) -> str | None:
    """Hints that fit every exercise, from the error an answer raised."""
    if outcome.status != "raised":
        return None
    msg = outcome.error_message
    if ("bitwise_" in msg or "logical_" in msg) and "not implemented for" in msg and "'Bool'" not in msg:
        return ("&, | and ~ combine masks of dtype torch.bool, and one of yours holds numbers (torch.ones, "
                "torch.zeros and tril give float32 by default): make every mask torch.bool, with "
                "torch.ones(..., dtype=torch.bool) or from a comparison such as j <= i")
    if "masked_fill_ only supports boolean masks" in msg:
        return ("masked_fill takes a mask of dtype torch.bool: build it with torch.ones(..., dtype=torch.bool) "
                "or from a comparison such as j <= i")
    if "memory outside the tensors it was given" in msg:
        return ("a lane whose mask is True points past the end of a tensor: every tl.load and tl.store needs a "
                "mask that is False for the lanes past the data, such as offs < n (not offs <= n), in the "
                "last block too")
    if "arange's range must be a power of 2" in msg:
        return ("tl.arange(0, BLOCK) needs a power of two: take BLOCK = triton.next_power_of_2(n) and mask "
                "the lanes past n")
    return None


def value_diagnosis(answer: str, expected: Value, got: Value) -> str | None:
    """What a wrong value has in common with the right one, where no listed mistake and no
    diagnosis of the exercise's own explains it: the same values up to one factor, transposed,
    in another order, a mask that is wrong only on a diagonal... Words only: it is shown for
    hidden checks too, so it never quotes a value."""
    try:
        with np.errstate(all="ignore"):
            return _value_diagnosis(answer, expected, got)
    except Exception:  # a diagnosis must never break grading
        return None


def _value_diagnosis(answer: str, expected: Value, got: Value) -> str | None:
    if answer == "tensors" and got.kind in ("tuple", "list") and got.length == len(expected.data):
        for k, (want, have) in enumerate(zip(expected.data, got.data)):
            if not _compare_tensor(want, have)[0]:
                found = _tensor_diagnosis(want, have)
                return f"in item {k} of the tuple, {found}" if found else None
    if answer == "tensor":
        return _tensor_diagnosis(expected, got)
    if answer == "int" and got.kind == "int":
        return _int_diagnosis(int(expected.data), int(got.data))
    return None


def _int_diagnosis(want: int, have: int) -> str | None:
    if want and have and want != have:
        big, small = max(abs(want), abs(have)), min(abs(want), abs(have))
        if big % small == 0 and big // small <= 16:
            return ("the count is off by a whole factor: a factor of it (2 for a multiply-add or for keys and "
                    "values, the layers, the heads, the batch, the bytes per element...) is missing or counted twice")
    if abs(want - have) == 1:
        return "off by one: check where a range starts or stops (< or <=, a + 1 or - 1)"
    if want > 0 and have > 0:
        r = have / want
        if 0.9 < r < 1.1:
            return (f"the count is a little too {'high' if r > 1 else 'low'} (by less than 10%): a small term "
                    "(the biases, a last partial block, a rounding) is counted wrongly")
        if any(abs(r * k - round(r * k)) < 1e-9 for k in (2, 3, 4)):
            return ("the count is off by a simple fraction (such as 3/4 or 3/2): one part of it (a projection, a "
                    "product, a term of the sum) is missing or counted twice")
    return _direction(have - want, have / want if want else None)


def _direction(error: float, ratio: float | None) -> str | None:
    """Which way a single number is off, and roughly by how much."""
    if error == 0 or error != error:
        return None
    way = "too large" if error > 0 else "too small"
    if ratio is None or ratio <= 0:
        return f"the number is {way}, and its sign is not the right one"
    size = max(ratio, 1 / ratio)
    band = "by less than a factor of 2" if size < 2 else "by a factor of 2 to 10" if size <= 10 else "by more than a factor of 10"
    return f"the number is {way}, {band}: a term or a factor of it is missing, extra or the wrong one"


def _tensor_diagnosis(expected: Value, got: Value) -> str | None:
    if got.kind != "tensor" or expected.kind != "tensor":
        return None
    e, g = expected.data, got.data
    if e.shape != g.shape or expected.dtype != got.dtype or e.size == 0:
        return None
    if e.dtype == np.bool_:
        return _mask_diagnosis(e, g)
    e64, g64 = e.astype(np.float64), g.astype(np.float64)
    rtol, atol = TOLERANCE.get(expected.dtype, (1e-5, 1e-8))
    close = lambda a, b: a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))
    if np.isnan(g64).any() and not np.isnan(e64).any():
        return ("NaN comes from 0 / 0, inf - inf or 0 * inf: look for a row with nothing to attend to, or an exp "
                "that overflowed, on the way")
    finite = np.isfinite(e64) & np.isfinite(g64)
    if not finite.any():
        return None
    if e.ndim >= 2 and e.shape[-1] == e.shape[-2] and close(np.swapaxes(g64, -1, -2), e64):
        return "these are the right values transposed: the last two axes are swapped"
    big = finite & (np.abs(e64) > 10 * atol)
    if big.any() and close(-g64, e64):
        return "every value has the right size and the wrong sign: a sign, or the order of a subtraction, is flipped"
    if big.sum() >= 2:
        ratio = g64[big] / e64[big]
        r = float(np.median(ratio))
        if abs(r - 1) > 10 * rtol and np.allclose(ratio, r, rtol=10 * rtol) and close(g64, r * e64):
            return ("every value is the right one times the same factor: a scale, a normalisation, a sum "
                    "against a mean, or a count is off")
        shift = float(np.median((g64 - e64)[finite]))
        if abs(shift) > 10 * atol and close(g64 - shift, e64):
            return "every value is off by the same amount: a constant is added or left out"
    if e.ndim >= 2 and e.shape[-1] >= 2 and _per_row_factor(e64, g64, close):
        return ("each row is the right one times a factor of its own: a per-row normalisation (a sum, a max, a "
                "count of what the row sees) is taken wrongly")
    sums = np.nansum(e64, axis=-1)
    if e.ndim >= 1 and e.shape[-1] >= 2 and np.all((np.abs(sums - 1) < 1e-3) | (np.abs(sums) < 1e-6)) \
            and sums.max() > 0.5 and not np.allclose(np.nansum(g64, axis=-1), sums, rtol=1e-3, atol=1e-3):
        return ("these rows should each sum to 1, like weights (0 for a row with nothing to attend to), and "
                "they do not: a normalisation over the wrong axis, or a term missing from it")
    for axis in range(e.ndim):
        if e.shape[axis] > 1 and _reordered(e64, g64, axis, close):
            return (f"whole slices along dimension {axis} hold the right values in the wrong places: an index, "
                    "the order of heads or of a split, or a layout is off")
    if e.size > 1 and close(np.sort(g64, axis=None), np.sort(e64, axis=None)):
        return "the right values in the wrong places: a reshape, view or transpose moved entries across axes"
    if e.size == 1:
        want, have = float(e64.reshape(-1)[0]), float(g64.reshape(-1)[0])
        return _direction(have - want, have / want if want else None)
    found = _partly_right(e64, g64, close)
    if found:
        return found
    wrong = ~np.isclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True) & finite
    if wrong.any():
        if (g64[wrong] > e64[wrong]).all():
            return "every wrong value is too large: something is added, or counted, that should not be"
        if (g64[wrong] < e64[wrong]).all():
            return "every wrong value is too small: something is left out, or divided by too much"
    return None


def _per_row_factor(e, g, close) -> bool:
    """Whether each row (last axis) of ``g`` is the same row of ``e`` times its own factor, the
    factors not all equal."""
    e2, g2 = e.reshape(-1, e.shape[-1]), g.reshape(-1, g.shape[-1])
    factors = []
    for er, gr in zip(e2, g2):
        big = np.isfinite(er) & np.isfinite(gr) & (np.abs(er) > 1e-6)
        if not big.any():
            if not close(gr, er):
                return False
            continue
        f = float(np.median(gr[big] / er[big]))
        if not close(gr, f * er):
            return False
        factors.append(f)
    return len(factors) >= 2 and not np.allclose(factors, factors[0], rtol=1e-3)


def _partly_right(e, g, close) -> str | None:
    """Which slices are right: along the first axis where some whole slices are right and others
    are not."""
    for axis in range(e.ndim):
        n = e.shape[axis]
        if n < 2:
            continue
        right = [close(np.take(g, i, axis=axis), np.take(e, i, axis=axis)) for i in range(n)]
        if any(right) and not all(right):
            k = right.index(False)
            if all(right[:k]) and not any(right[k:]):
                return (f"along dimension {axis} the first slices are right and the later ones wrong: something "
                        "goes wrong as the computation moves along it (a running value not updated, an offset, a "
                        "later block)")
            return (f"along dimension {axis} some slices are right and others wrong: look at what tells them "
                    "apart (a mask, a length, padding, a head or a block)")
    return None


def _reordered(e, g, axis, close) -> bool:
    """Whether ``g`` is ``e`` with its slices along ``axis`` in another order."""
    es, gs = np.moveaxis(e, axis, 0), np.moveaxis(g, axis, 0)
    if close(es, gs):
        return False
    used = set()
    for slice_ in gs:
        match = next((i for i in range(len(es)) if i not in used and close(slice_, es[i])), None)
        if match is None:
            return False
        used.add(match)
    return True


def _mask_diagnosis(e, g) -> str | None:
    if (g == ~e).all():
        return "every entry is the opposite of the right one: here True means may attend"
    wrong = g != e
    if e.ndim < 2:
        return None
    rows, cols = e.shape[-2], e.shape[-1]
    i, j = np.nonzero(wrong.reshape(-1, rows, cols).any(axis=0))
    if i.size and np.unique(j - i).size == 1:
        return ("only the entries of one diagonal are wrong: may a query attend to its own position, and which "
                "key sits at a query's position when there are more keys than queries?")
    extra, missing = (g & ~e).any(), (~g & e).any()
    which = "allows keys that must stay hidden" if extra and not missing else (
        "hides keys that may be seen" if missing and not extra else "is wrong both ways")
    if (wrong == wrong.any(axis=-2, keepdims=True)).all():       # every wrong key is wrong for every query
        return f"the mask {which} in whole key columns: which keys are padding (j against the length)?"
    if (wrong == wrong.any(axis=-1, keepdims=True)).all():       # every wrong query is wrong for every key
        return f"the mask {which} in whole query rows: padding hides keys, the columns, not queries"
    above = (np.arange(cols)[None, :] - np.arange(rows)[:, None]) > (cols - rows)
    if (wrong & ~above).sum() == 0:
        return f"the mask {which} above the bottom-right diagonal, in the future of a query: check the causal part"
    if (wrong & above).sum() == 0:
        return f"the mask {which} on or below the bottom-right diagonal: check the causal part and the padding"
    return None


# How a check's message on a call that reached a forbidden function's stand-in begins (what to
# do instead follows it: Exercise.write_it).
FORBIDDEN_CALL = ("called a function graded code may not use (the course package, or one this "
                  "exercise forbids)")


# ----------------------------------------------------------------------------- both judges

def read_record(record, arrays: dict, n_args: int) -> Outcome:
    """The :class:`Outcome` of one call from its record (see :mod:`mha._calls`), which may
    come from a sandboxed worker and is trusted in nothing: anything unexpected raises
    :class:`MalformedResult`. ``check`` reads its own records the same way."""
    s = record.get("s") if isinstance(record, dict) else None
    if s == "value":
        out = Outcome("value", value=validate(record.get("v"), arrays))
    elif s == "raised":
        typ, bases = record.get("type"), record.get("bases")
        if not isinstance(typ, str) or not isinstance(bases, list):
            raise MalformedResult("bad exception record")
        out = Outcome("raised", error_type=typ[:100], error_bases=tuple(b for b in bases if isinstance(b, str))[:12],
                      error_message=str(record.get("msg", ""))[:300])
    elif s == "not-attempted":
        out = Outcome("not-attempted")
    elif s == "missing":
        return Outcome("missing", reason="the function is not defined after loading the code")
    else:
        raise MalformedResult("unknown result kind")
    mutated = record.get("mutated", [])
    if not isinstance(mutated, list) or not all(type(i) is int and 0 <= i < n_args for i in mutated):
        raise MalformedResult("bad list of changed arguments")
    out.mutated = tuple(sorted(set(mutated)))
    if "trace" in record:
        out.trace = _read_trace(record["trace"])
        out.truncated = record.get("truncated") is True
    if "launches" in record:
        n = record["launches"]
        if type(n) is not int or not 0 <= n < 1 << 31:
            raise MalformedResult("bad count of kernel launches")
        out.launches = n
    return out


def _read_trace(entries) -> tuple[Op, ...]:
    if not isinstance(entries, list) or len(entries) > 4096:
        raise MalformedResult("bad trace")

    def shapes(items):
        if not isinstance(items, list) or len(items) > 32:
            raise MalformedResult("bad trace")
        out = []
        for shape in items:
            if not isinstance(shape, list) or len(shape) > 16 or not all(type(n) is int and n >= 0 for n in shape):
                raise MalformedResult("bad trace")
            out.append(tuple(shape))
        return tuple(out)

    ops = []
    for e in entries:
        if not (isinstance(e, list) and len(e) == 4 and isinstance(e[0], str) and isinstance(e[3], bool)):
            raise MalformedResult("bad trace")
        ops.append(Op(e[0][:100], shapes(e[1]), shapes(e[2]), e[3]))
    return tuple(ops)


PENDING = "counts once the function returns correct values"


def separating(make: Callable[[], Case], ex: "Exercise", names: tuple[str, ...] | None = None,
               tries: int = 20) -> Case:
    """A case from ``make()`` on which each listed mistake of ``ex`` (those called ``names``, or
    all) answers differently from the reference and from every other one with another hint, so
    that it loses the check and shows its own hint there; redrawn up to ``tries`` times (the last
    draw is kept if none separates them all)."""
    chosen = [k for k, m in enumerate(ex.mistakes) if names is None or m.name in names]

    def separates(case) -> bool:
        try:
            right, wrong = ex.expected(case), ex.mistake_values(case)
        except Exception:
            return False
        for k in chosen:
            if wrong[k] is None or compare(ex.answer, right, wrong[k], ex.tolerance)[0]:
                return False
            if any(j != k and ex.mistakes[j].hint != ex.mistakes[k].hint and wrong[j] is not None
                   and compare(ex.answer, wrong[j], wrong[k], ex.tolerance)[0] for j in range(len(wrong))):
                return False
        return True

    case = make()
    for _ in range(tries - 1):
        if separates(case):
            return case
        case = make()
    return case


def settle(cases: list[Case], verdicts: list[Verdict]) -> list[Verdict]:
    """The rule both judges apply to an exercise's verdicts once they are all in: raising
    the right error on bad input counts only for a function that also returns a correct
    value somewhere (a function that raises on everything earns nothing). A public raise case
    looks at the public value cases only: ``check`` sees no others, and a hidden draw that
    happens to suit a wrong answer must not change a public verdict in the grader."""
    value_ok = any(v.passed and not v.raises for v in verdicts)
    public_value_ok = any(v.passed and not v.raises and not v.hidden for v in verdicts)
    out = []
    for case, v in zip(cases, verdicts):
        if case.raises and v.passed and not (value_ok if v.hidden else public_value_ok):
            v = Verdict(False, f"raises {case.raises} as asked; {PENDING}", v.hidden, True)
        out.append(v)
    return out


# ----------------------------------------------------------------------------- helpers

def _with_hint(message: str, hint: str, name: str = "") -> str:
    """``message``, then the hint; a listed mistake's hint carries the mistake's name:
    "wrong values. Hint (no-scale): divide the scores by sqrt(d) ..."."""
    return f"{message.rstrip().rstrip('.')}. Hint{f' ({name})' if name else ''}: {hint}"


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


def compare(answer: str, expected: Value, got: Value, tolerance: float = 0.0) -> tuple[bool, str, str]:
    """Return (ok, problem, detail) for one answer of kind ``answer``: ``problem`` never
    quotes values (the grader shows it for hidden checks too), ``detail`` does (shown for
    public checks in the notebook). ``tolerance``: the relative error a "number" may have."""
    if answer == "number":
        return _compare_number(expected, got, tolerance)
    if answer == "tensor":
        return _compare_tensor(expected, got)
    if answer == "tensors":
        return _compare_tensors(expected, got)
    if answer == "int":
        return _compare_int(expected, got)
    if answer == "shapes":
        return _compare_shapes(expected, got)
    raise ValueError(f"answer must be 'tensor', 'tensors', 'int', 'shapes' or 'number', got {answer!r}")


def _compare_number(expected: Value, got: Value, tolerance: float) -> tuple[bool, str, str]:
    """A prediction: a Python number within ``tolerance`` (relative) of the expected one. A wrong
    one is told which way it is off and by how much, roughly (the page measures the number right
    after; the check does not quote it)."""
    if got.kind not in ("int", "float"):
        if got.kind == "tensor":
            return False, "returned a tensor; return a Python number (float(...) converts it)", ""
        return False, f"expected a number, got {got.describe(False)}", got.describe(True)
    want, have = float(expected.data), float(got.data)
    if have != have:  # NaN
        return False, "the prediction is NaN: return a number", ""
    if abs(have - want) <= tolerance * abs(want):
        return True, "", ""
    within = f"within {tolerance:.0%}" if tolerance else "exactly"
    direction = "too high" if have > want else "too low"
    if want == 0 or have == 0 or (have > 0) != (want > 0):
        size = ""
    else:
        ratio = max(have / want, want / have)
        size = (", by less than a factor of 2" if ratio < 2 else ", by a factor of 2 to 10" if ratio <= 10
                else ", by more than a factor of 10")
    return False, f"the prediction is {direction}{size} (it must be right {within})", ""


def _compare_tensor(expected: Value, got: Value) -> tuple[bool, str, str]:
    if got.kind != "tensor":
        extra = " (convert with torch.from_numpy)" if got.kind == "ndarray" else ""
        return False, f"expected a torch.Tensor, got {got.describe(False)}{extra}", got.describe(True)
    e, g = expected.data, got.data
    if e.shape != g.shape:
        return False, "wrong shape", f"expected {tuple(e.shape)}, got {tuple(g.shape)}"
    if expected.dtype != got.dtype:
        return False, f"wrong dtype {got.dtype}: keep the dtype this exercise asks for", f"expected {expected.dtype}"
    if e.dtype == np.bool_:
        wrong = int(np.count_nonzero(e != g))
        if wrong:
            return False, "wrong values", f"{wrong} of {e.size} entries are wrong"
        return True, "", ""
    g64, e64 = g.astype(np.float64), e.astype(np.float64)
    bad_nan = np.isnan(g64) & ~np.isnan(e64)
    if bad_nan.any():
        return False, "the result contains NaN", f"{int(bad_nan.sum())} entries"
    rtol, atol = TOLERANCE.get(expected.dtype, (1e-5, 1e-8))
    close = np.isclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return True, "", ""
    with np.errstate(invalid="ignore"):  # inf - inf where both are infinite
        diff = np.abs(g64 - e64)[~close]
        diff = diff[~np.isnan(diff)]
        worst = float(diff.max()) if diff.size else float("nan")
    return False, "wrong values", f"{int((~close).sum())} of {e.size} values differ (largest difference {worst:.3g})"


def _compare_tensors(expected: Value, got: Value) -> tuple[bool, str, str]:
    """A tuple of tensors (e.g. several gradients), compared one by one."""
    n = len(expected.data)
    if got.kind not in ("tuple", "list") or got.length != n:
        return False, f"expected a tuple of {n} tensors, got {got.describe(False)}", got.describe(True)
    for k, (want, have) in enumerate(zip(expected.data, got.data)):
        ok, problem, detail = _compare_tensor(want, have)
        if not ok:
            return False, f"item {k} of the tuple: {problem}", detail
    return True, "", ""


def _compare_int(expected: Value, got: Value) -> tuple[bool, str, str]:
    if got.kind != "int":
        if got.kind == "float":
            return (False, "returned a float; return an int (integer division // keeps integers integers)",
                    f"{got.data!r}")
        if got.kind == "tensor":
            return False, "returned a tensor; return a python int (int(...) converts it)", ""
        return False, f"expected an int, got {got.describe(False)}", got.describe(True)
    if got.data == expected.data:
        return True, "", ""
    return False, "wrong value", f"expected {expected.data:,}, got {got.data:,}"


def _compare_shapes(expected: Value, got: Value) -> tuple[bool, str, str]:
    if got.kind != "dict":
        return False, f"expected a dict, got {got.describe(False)}", got.describe(True)
    have = {}
    for k, v in got.data:
        if k.kind == "str":
            have[k.data] = v
    for key, want in expected.data:
        name = key.data
        if name not in have:
            return False, f"the dict has no key {name!r}", ""
        v = have[name]
        if v.kind not in ("tuple", "list"):
            return False, f"{name!r} should be a tuple of ints, got {v.describe(False)}", v.describe(True)
        for i, x in enumerate(v.data):
            if x.kind != "int":
                why = ": use // (integer division), so that sizes stay ints" if x.kind == "float" else ""
                return False, f"{name!r} should be a tuple of ints, but its entry {i} is {x.describe(False)}{why}", \
                    repr(x.data) if x.kind in ("float", "int", "str", "bool") else ""
        got_t = tuple(x.data for x in v.data)
        want_t = tuple(x.data for x in want.data)
        if got_t != want_t:
            return False, f"{name!r} is wrong", f"expected {want_t}, got {got_t}"
    return True, "", ""


def safe_error_name(name: str, reveal: bool) -> str:
    """An exception's type name, unless it is not a builtin one and may not be revealed
    (a class made at run time could carry data in its name)."""
    import builtins

    if reveal or name == "ForbiddenCall":
        return name
    obj = getattr(builtins, name, None)
    return name if isinstance(obj, type) and issubclass(obj, BaseException) else "an exception"


# ----------------------------------------------------------------------------- forbidden

# Lookups that could reach any function by name, so a forbidden one too. Bare names: the
# builtins that look things up or run code. Attributes: only those that are lookups whatever
# object they belong to; `sys.modules` and `builtins.compile` are recognised by their module,
# since `model.modules()`, `re.compile` and `torch.compile` are ordinary calls.
DYNAMIC_NAMES = {"eval", "exec", "compile", "__import__", "importlib", "globals", "vars", "__builtins__",
                 "getattr", "setattr", "__dict__", "__globals__", "import_module", "attrgetter", "methodcaller",
                 "__getattribute__", "getattr_static"}
DYNAMIC_ATTRS = {"__import__", "importlib", "globals", "vars", "__builtins__", "__dict__", "__globals__",
                 "getattr", "setattr", "eval", "exec", "import_module", "attrgetter", "methodcaller",
                 "__getattribute__", "getattr_static"}
DYNAMIC_QUALIFIED = {"sys.modules", "builtins.compile", "builtins.__dict__"}
DYNAMIC = DYNAMIC_NAMES | DYNAMIC_ATTRS | DYNAMIC_QUALIFIED  # kept for code that imports the old name


def forbidden_uses(tree: ast.AST, forbidden: tuple[str, ...]) -> list[str]:
    """Names in ``tree`` that reach a forbidden function (static, on the source).

    ``forbidden`` holds dotted names; ``"mha"`` forbids the whole course package.
    Dynamic lookups (getattr, eval, importlib, sys.modules, ...) are reported too, since
    they could hide a forbidden call.
    """
    if not forbidden:
        return []
    leaves = {f.rsplit(".", 1)[-1] for f in forbidden if f != "mha"}
    modules = set(forbidden)
    facts = _facts(tree)
    aliases = {}  # local name -> module, from `import sys as s`
    for kind, value in facts:
        if kind == "alias":
            local, _, module = value.partition("=")
            aliases[local] = module
    found: list[str] = []

    def add(what: str):
        if what not in found:
            found.append(what)

    for kind, value in facts:
        if kind == "name":  # a forbidden function reaches a bare name only through an import, seen below
            if value in DYNAMIC_NAMES:
                add(f"{value} (dynamic lookups are not allowed here)")
            elif value == "mha" and "mha" in modules:
                add("the mha package")
        elif kind == "attr":
            if value in leaves:
                add(value)
            elif value in DYNAMIC_ATTRS:
                add(f"{value} (dynamic lookups are not allowed here)")
        elif kind == "chain":
            owner, _, attr = value.partition(".")
            qualified = f"{aliases.get(owner, owner)}.{attr}"
            if qualified in DYNAMIC_QUALIFIED:
                add(f"{qualified} (dynamic lookups are not allowed here)")
        elif kind == "from":
            if value in DYNAMIC_QUALIFIED:
                add(f"{value} (dynamic lookups are not allowed here)")
            module, _, name = value.rpartition(".")
            if name == "*" and any(f.startswith(module + ".") for f in modules):
                add(f"from {module} import * (name what you import)")
        elif kind == "module":
            if "mha" in modules and (value == "mha" or value.startswith("mha.")) and value != "mha.exercises":
                add("the mha package")
            if any(value == f or value.startswith(f + ".") for f in modules):
                add(value)
        elif kind == "imported":
            if value in leaves:
                add(value)
        elif kind == "str":  # a string that could serve a lookup: the name itself, or a dotted path to it
            name = value.strip()
            for leaf in leaves:
                if len(leaf) > 6 and (name == leaf or name.endswith("." + leaf)):
                    add(f"{leaf} (a string that names it, as a lookup by name would)")
            if name in modules and name != "mha":
                add(f"{name} (a string that names it, as a lookup by name would)")
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


# Calls whose arguments are messages for a person, never looked up: print(...), warnings.warn(...),
# logging's and a logger's methods.
MESSAGE_CALLS = {"print", "warn", "debug", "info", "warning", "error", "exception", "critical", "log"}


def _messages(tree: ast.AST) -> set[int]:
    """The ids of the string constants of ``tree`` that are messages: docstrings, what a
    ``raise`` or an ``assert`` says, the arguments of print and of warnings and logging
    calls. A message that mentions a function does not use it."""
    out = set()

    def strings(node):
        for n in ast.walk(node):
            if isinstance(n, ast.Constant) and isinstance(n.value, str):
                out.add(id(n))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.body and _is_docstring(node.body[0]):
                out.add(id(node.body[0].value))
        elif isinstance(node, ast.Raise):
            strings(node)
        elif isinstance(node, ast.Assert) and node.msg is not None:
            strings(node.msg)
        elif isinstance(node, ast.Call):
            f = node.func
            called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if called in MESSAGE_CALLS:
                for a in [*node.args, *(k.value for k in node.keywords)]:
                    strings(a)
    return out


def _walk_facts(tree: ast.AST) -> list[tuple[str, str]]:
    # A message is not a lookup: a docstring that says "computes the backward pass", or a
    # ValueError whose text speaks of "an attention mask", must not cost an honest answer its
    # points. Other strings are kept, and count where they name a forbidden function exactly
    # (what getattr(x, "name") or importlib would need).
    facts: dict[tuple[str, str], None] = {}
    docstrings = _messages(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            facts["name", node.id] = None
        elif isinstance(node, ast.Attribute):
            facts["attr", node.attr] = None
            if isinstance(node.value, ast.Name):
                facts["chain", f"{node.value.id}.{node.attr}"] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names]
            for full in ([node.module] if isinstance(node, ast.ImportFrom) and node.module else []) + names:
                if full:
                    facts["module", full] = None
            for n in names:
                facts["imported", n] = None
            for a in node.names:
                if isinstance(node, ast.Import) and a.asname:
                    facts["alias", f"{a.asname}={a.name}"] = None
                elif isinstance(node, ast.ImportFrom) and node.module:
                    facts["from", f"{node.module}.{a.name}"] = None
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            facts["str", node.value] = None
    return list(facts)


__all__ = ["Case", "Mistake", "Outcome", "Verdict", "Exercise", "Op", "compare", "plain", "read_record",
           "settle", "separating", "describe_args", "forbidden_uses", "MalformedResult"]
