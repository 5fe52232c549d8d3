"""Test the tests: every exercise's checks accept correct answers and catch wrong ones.

For EVERY exercise in ``mha.exercises.EXERCISES`` (a new module is picked up with no edit
here), over many hidden draws, with the rules the grader applies (forbidden functions
trapped, arguments watched, operations recorded where the exercise audits them):

- the model answer (the reference, or for an exercise that asks for a Triton kernel the
  kernel that ``Exercise.model`` names) and the correct solutions in
  ``tests/alternatives/<module>.py`` (at least two per exercise, written differently) get
  full marks on the public and hidden checks,
  in every dtype the exercise lists in ``dtypes`` (floating tensor arguments cast to it),
  with the non-contiguous arguments a case asks for, as the grader passes them: no false
  negative;
- every listed Mistake loses points on every hidden draw, with its hint;
- every held-out wrong answer (``WRONG``) and forbidden shortcut (``FORBIDDEN``) loses
  points on every draw: no false positive;
- ``check`` in a notebook and the grader agree, check by check, on the reference, every
  listed mistake and every held-out answer: in-process for all of them, and through the
  real sandboxed grader for every answer that has source code.

``MHA_TEST_SEEDS`` sets the number of hidden draws: 5 by default, a quick look (about 45 s
of CPU, mostly the agreement with the grader, which does not depend on the draws); ``make
test-the-tests`` runs 400, and CI runs it after ``make test``, which leaves this file out. The
answers to the kernel exercises run in Triton's interpreter, a few milliseconds a call: they
are judged on the first ``MHA_KERNEL_TEST_SEEDS`` of those draws (default 2, 25 in ``make
test-the-tests``); their listed mistakes, plain torch, on all of them.
"""

from __future__ import annotations

import ast
import inspect
import math
import os
import re
import textwrap
from dataclasses import replace

import pytest
import torch

from alternatives import load as load_alternatives
from slips import load as load_slips
from agreement import agreement_problems, disagreements, grader_static
from mha.autograde import NO_KERNEL, Case, call_outcome, score_verdicts, traps_of
from mha.autograde.check import forbidden_in
from mha.exercises import EXERCISES, get, select
from mha.grading.answer_key import source_chunks

SEEDS = range(int(os.environ.get("MHA_TEST_SEEDS", "5")))
KERNEL_SEEDS = SEEDS[:int(os.environ.get("MHA_KERNEL_TEST_SEEDS", "2"))]
IDS = list(EXERCISES)
CORRECT = load_alternatives("CORRECT")
WRONG = load_alternatives("WRONG")
FORBIDDEN = load_alternatives("FORBIDDEN")
SHOWN = 8  # failures quoted in a message


pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def cast(case: Case, dtype: str | None) -> Case:
    """``case`` with its floating tensor arguments in ``dtype`` (None: as drawn)."""
    if dtype is None:
        return case
    to = getattr(torch, dtype)
    args = tuple(a.to(to) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in case.args)
    return replace(case, args=args)


def dtypes_of(ex) -> list[str | None]:
    return list(ex.dtypes) or [None]


def where(ex, case: Case, seed, dtype) -> str:
    kind = f"hidden draw {seed}" if case.hidden else "public"
    args = ", ".join(f"{tuple(a.shape)} {str(a.dtype)[6:]}" if isinstance(a, torch.Tensor) else repr(a)
                     for a in case.args)
    strided = f", non-contiguous {case.noncontiguous}" if case.noncontiguous else ""
    return f"{kind}, {dtype or 'as drawn'}: {ex.function}({args}{strided})"


def graded_call(ex, fn, case):
    """``fn`` on ``case`` as the grader's worker calls it (traps, watched arguments, recorded
    operations where the exercise audits them, kernel launches counted where it asks for one)."""
    return call_outcome(fn, case, traps=tuple(traps_of(ex)), trace=ex.audit is not None, launches=ex.kernel)


def seeds_of(ex):
    """The hidden draws on which an exercise's answers are judged (fewer for kernels)."""
    return KERNEL_SEEDS if ex.kernel else SEEDS


def model_answer(ex):
    """``ex.model_answer()``; a kernel exercise's needs Triton (Linux only)."""
    if ex.kernel:  # Triton, with its interpreter where there is no GPU (Linux only)
        pytest.importorskip("mha.kernels")
    return ex.model_answer()


def report(failures: list[str], total: int, what: str) -> str:
    shown = "\n  ".join(failures[:SHOWN])
    more = f"\n  ... and {len(failures) - SHOWN} more" if len(failures) > SHOWN else ""
    return f"{len(failures)} of {total} {what}:\n  {shown}{more}"


# ----------------------------------------------------------------------------- the alternatives

@pytest.mark.parametrize("exercise_id", IDS)
def test_each_exercise_has_two_correct_alternatives(exercise_id):
    found = CORRECT.get(exercise_id, [])
    module = exercise_id.split(".")[0]
    assert len(found) >= 2, (
        f"{exercise_id} has {len(found)} correct alternative(s): add at least two correct solutions, "
        f"written differently from the reference, as CORRECT[{exercise_id!r}] = [fn_a, fn_b] in "
        f"tests/alternatives/{module}.py")
    assert all(callable(fn) for fn in found), exercise_id


@pytest.mark.parametrize("exercise_id", IDS)
def test_each_exercise_has_two_held_out_wrong_answers(exercise_id):
    found = WRONG.get(exercise_id, [])
    module = exercise_id.split(".")[0]
    assert len(found) >= 2, (
        f"{exercise_id} has {len(found)} held-out wrong answer(s): add at least two classic wrong answers, "
        f"other than its listed mistakes, as WRONG[{exercise_id!r}] = [fn_a, fn_b] in tests/alternatives/{module}.py")


def test_every_alternative_belongs_to_an_exercise():
    for kind, found in (("CORRECT", CORRECT), ("WRONG", WRONG), ("FORBIDDEN", FORBIDDEN)):
        unknown = sorted(set(found) - set(EXERCISES))
        assert not unknown, f"{kind} names exercises that do not exist: {unknown}"


def _forbids_a_shortcut(exercise_id) -> bool:
    """Whether the exercise forbids a function that computes (part of) its answer: anything
    but the course package and the attention layers forbidden everywhere in the early lessons."""
    from mha.exercises.common import NO_MHA

    return any(f not in NO_MHA for f in get(exercise_id).forbidden)


@pytest.mark.parametrize("exercise_id", [i for i in IDS if _forbids_a_shortcut(i)])
def test_each_exercise_that_forbids_a_function_has_a_shortcut_through_it(exercise_id):
    assert FORBIDDEN.get(exercise_id), (
        f"{exercise_id} forbids {get(exercise_id).forbidden}: add a shortcut through one of them as "
        f"FORBIDDEN[{exercise_id!r}] in tests/alternatives/{exercise_id.split('.')[0]}.py")


def _shape_of_code(fn) -> str:
    """The function's body (docstring dropped) with every name replaced by its order of
    first appearance, so a copy with renamed variables counts as the same code."""
    node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    names: dict[str, str] = {}
    for n in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(n, ast.Name):
            n.id = names.setdefault(n.id, f"v{len(names)}")
        elif isinstance(n, ast.arg):
            n.arg = names.setdefault(n.arg, f"v{len(names)}")
    return "\n".join(ast.dump(s) for s in body)


@pytest.mark.parametrize("exercise_id", IDS)
def test_alternatives_are_not_copies_of_the_reference_or_of_each_other(exercise_id):
    ex = get(exercise_id)
    seen = {_shape_of_code(ex.reference): "the reference"}
    if ex.model:
        seen[_shape_of_code(model_answer(ex))] = "the model answer"
    for fn in CORRECT.get(exercise_id, []):
        shape = _shape_of_code(fn)
        assert shape not in seen, f"{exercise_id}: {fn.__name__} is a copy of {seen[shape]}"
        seen[shape] = fn.__name__


@pytest.mark.parametrize("exercise_id", IDS)
def test_the_forbidden_use_checks_accept_the_reference_and_every_correct_answer(exercise_id):
    """Neither the grader's static check (on the source it would keep of a submission) nor
    check's refuses the reference, the model answer or a correct alternative."""
    ex = get(exercise_id)
    for fn in [ex.reference] + ([model_answer(ex)] if ex.model else []) + CORRECT.get(exercise_id, []):
        assert grader_static(ex, fn) is None, f"{exercise_id}: the grader refuses {fn.__name__}"
        assert forbidden_in(fn, ex) == [], f"{exercise_id}: check refuses {fn.__name__}"


# ----------------------------------------------------------------------------- full marks

@pytest.mark.parametrize("exercise_id", IDS)
def test_correct_answers_get_full_marks_on_every_draw_in_every_dtype(exercise_id):
    ex = get(exercise_id)
    answers = [("the model answer", model_answer(ex))] + [(fn.__name__, fn) for fn in CORRECT.get(exercise_id, [])]
    failures, total = [], 0
    for seed in seeds_of(ex):
        drawn = (ex.public_cases() if seed == SEEDS[0] else []) + ex.hidden_cases(seed)
        for dtype in dtypes_of(ex):
            for case in (cast(c, dtype) for c in drawn):
                expected = None if case.raises else ex.expected(case)
                for name, fn in answers:
                    total += 1
                    verdict = ex.judge(case, graded_call(ex, fn, case), expected=expected, mistake_values=[])
                    if not verdict.passed:
                        failures.append(f"{name}, {where(ex, case, seed, dtype)}: {verdict.message}")
    assert not failures, report(failures, total, f"checks fail a correct answer of {exercise_id}")


# ----------------------------------------------------------------------------- mistakes

@pytest.mark.parametrize("exercise_id", IDS)
def test_every_mistake_loses_points_on_every_hidden_draw_with_its_hint(exercise_id):
    """A prediction has nothing hidden: its mistakes are judged on its public check."""
    ex = get(exercise_id)
    failures = []
    for seed in SEEDS[:1] if ex.prediction else SEEDS:
        cases = ex.public_cases() if ex.prediction else ex.hidden_cases(seed)
        keys = [(None, None) if c.raises else (ex.expected(c), ex.mistake_values(c)) for c in cases]
        for k, m in enumerate(ex.mistakes):
            verdicts = [ex.judge(c, graded_call(ex, m.wrong, c), expected=e, mistake_values=w)
                        for c, (e, w) in zip(cases, keys)]
            if all(v.passed for v in verdicts):
                failures.append(f"mistake {k} ({m.hint[:60]}...) passes every check of hidden draw {seed}")
            elif not any(m.hint in v.message for v in verdicts if not v.passed):
                got = "; ".join(v.message for v in verdicts if not v.passed)
                failures.append(f"mistake {k} ({m.hint[:60]}...) fails hidden draw {seed} without its "
                                f"hint: {got[:300]}")
    total = (1 if ex.prediction else len(SEEDS)) * len(ex.mistakes)
    assert not failures, report(failures, total, f"(mistake, hidden draw) pairs of {exercise_id} go wrong")


# ----------------------------------------------------------------------------- no false positive

@pytest.mark.parametrize("exercise_id", IDS)
def test_every_held_out_wrong_answer_and_shortcut_loses_points_on_every_draw(exercise_id):
    """What the grader runs in one grading (the public checks and one hidden draw), for every
    draw: each wrong answer must lose a point in every one of them."""
    ex = get(exercise_id)
    answers = [(fn.__name__, fn) for fn in WRONG.get(exercise_id, []) + FORBIDDEN.get(exercise_id, [])
               if not forbidden_in(fn, ex)]      # a shortcut the static check refuses scores 0 anyway
    public = ex.public_cases()
    expected = [None if c.raises else ex.expected(c) for c in public]
    on_public = {name: [ex.judge(c, graded_call(ex, fn, c), expected=e, mistake_values=[])  # the same every draw
                        for c, e in zip(public, expected)] for name, fn in answers}
    failures, total = [], 0
    for seed in seeds_of(ex):
        hidden = ex.hidden_cases(seed)
        keys = [None if c.raises else ex.expected(c) for c in hidden]
        for name, fn in answers:
            total += 1
            scored = score_verdicts(ex, public + hidden, on_public[name] + [
                ex.judge(c, graded_call(ex, fn, c), expected=e, mistake_values=[]) for c, e in zip(hidden, keys)])
            if scored.passed == scored.total:
                failures.append(f"{name} gets full marks on hidden draw {seed}")
    assert not failures, report(failures, total, f"(wrong answer, draw) pairs of {exercise_id} get full marks")


BARE = re.compile(r"(wrong values?|the result contains NaN|the prediction is off \(it must be right [^)]*\))")


def test_nearly_every_held_out_wrong_answer_gets_a_hint():
    """A wrong answer is told more than "wrong values": a listed mistake's hint, the exercise's own
    diagnosis, or what its value has in common with the right one. At most 10% of the held-out
    wrong answers, graded on the public checks and one hidden draw, fail with nothing more."""
    bare, total = [], 0
    for exercise_id, fns in WRONG.items():
        ex = get(exercise_id)
        if ex.kernel:
            pytest.importorskip("mha.kernels")
        cases = ex.public_cases() + ex.hidden_cases(SEEDS[0])
        for fn in fns:
            if forbidden_in(fn, ex):
                continue
            verdicts = score_verdicts(ex, cases, [ex.judge(c, graded_call(ex, fn, c), reveal=False) for c in cases]).verdicts
            failed = [v.grader_message.split(": ")[-1] if v.grader_message.startswith("item ") else v.grader_message
                      for v in verdicts if not v.passed]
            total += 1
            if failed and all(BARE.fullmatch(m) for m in failed):
                bare.append(f"{exercise_id} {fn.__name__}: {failed[0]}")
    assert total and len(bare) <= 0.1 * total, report(bare, total, "held-out wrong answers get no hint")


# ----------------------------------------------------------------------------- named hints

SLIPS = load_slips()


def _named(ex, verdict) -> set[str]:
    """The names a failing check's hint gives: the listed mistakes it is (several where one hint
    says each), or the exercise's error hint it comes from; empty for any other hint."""
    from mha.autograde import Explain, Kind

    if verdict.kind is Kind.MISTAKE:
        return set(verdict.message.split("Hint (", 1)[1].split("): ", 1)[0].split(" or "))
    if verdict.kind is Kind.DIAGNOSIS and isinstance(ex.explain, Explain) and ex.explain.named(verdict.hint):
        return {ex.explain.named(verdict.hint)}
    return set()


def _bare(verdicts) -> bool:
    failed = [v.grader_message.split(": ")[-1] if v.grader_message.startswith("item ") else v.grader_message
              for v in verdicts if not v.passed]
    return bool(failed) and all(BARE.fullmatch(m) for m in failed)


def test_every_named_hint_names_the_slip_the_answer_makes():
    """The held-out slips of ``tests/slips``, each classified by hand with the slip it makes, graded
    as the grader grades (the public checks and a hidden draw), on every draw: every one loses
    points; at most 2% of the gradings that name a slip name one the answer did not make, and at
    most 5% of all gradings, predictions included, say nothing more than "wrong values" or "the
    prediction is off". The counts are printed (pytest -s)."""
    gradings = named = misnamed = bare = 0
    wrong, full = [], []
    first = {"named": 0, "misnamed": 0, "bare": 0}      # each answer's first grading, as a review counts

    def judged(ex, fn, cases, keys):
        return [ex.judge(c, graded_call(ex, fn, c), reveal=False, expected=e, mistake_values=m)
                for c, (e, m) in zip(cases, keys)]

    for exercise_id, slips in SLIPS.items():
        ex = get(exercise_id)
        public = ex.public_cases()
        keys = [(None, None) if c.raises else (ex.expected(c), ex.mistake_values(c)) for c in public]
        on_public = {slip: judged(ex, slip.fn, public, keys) for slip in slips}
        for seed in SEEDS[:1] if ex.prediction else seeds_of(ex):
            hidden = [] if ex.prediction else ex.hidden_cases(seed)
            hidden_keys = [(None, None) if c.raises else (ex.expected(c), ex.mistake_values(c)) for c in hidden]
            for slip in slips:
                verdicts = score_verdicts(ex, public + hidden, on_public[slip] + judged(ex, slip.fn, hidden, hidden_keys)).verdicts
                gradings += 1
                if all(v.passed for v in verdicts):
                    full.append(f"{exercise_id} {slip.fn.__name__} ({slip.makes}) gets full marks on draw {seed}")
                    continue
                names = set().union(*(_named(ex, v) for v in verdicts if not v.passed))
                wrongly = bool(names) and not names & set(slip.names)
                named += bool(names)
                misnamed += wrongly
                bare += _bare(verdicts)
                if wrongly:
                    wrong.append(f"{exercise_id} {slip.fn.__name__} ({slip.makes}), draw {seed}: named {sorted(names)}")
                if seed == SEEDS[0]:
                    first["named"] += bool(names)
                    first["misnamed"] += wrongly
                    first["bare"] += _bare(verdicts)
    print(f"\nheld-out slips: {sum(map(len, SLIPS.values()))} answers, {gradings} gradings; {named} name a slip, "
          f"{misnamed} of them one the answer did not make ({misnamed / max(named, 1):.1%}); {bare} bare "
          f"({bare / gradings:.1%}); on each answer's first draw, {first['named']} name a slip, "
          f"{first['misnamed']} one the answer did not make, {first['bare']} bare"
          + "".join(f"\n  {w}" for w in wrong))
    assert not full, report(full, gradings, "gradings of a held-out slip give full marks")
    assert misnamed <= 0.02 * named, report(wrong, named, "gradings name a slip the answer did not make")
    assert bare <= 0.05 * gradings, f"{bare} of {gradings} gradings of held-out slips get a bare message"


def test_the_held_out_slips_are_many_and_named_by_the_course_s_own_names():
    """At least 60 slips, predictions among them; each name a slip is classified under is one
    the exercise can give (a listed mistake's, or one of its error hints')."""
    from mha.autograde import Explain

    assert sum(map(len, SLIPS.values())) >= 60
    assert sum(len(s) for i, s in SLIPS.items() if get(i).prediction) >= 10
    for exercise_id, slips in SLIPS.items():
        ex = get(exercise_id)
        known = {m.name for m in ex.mistakes} | (
            {h.name for h in ex.explain.hints} if isinstance(ex.explain, Explain) else set())
        for slip in slips:
            assert set(slip.names) <= known, (exercise_id, slip.fn.__name__, set(slip.names) - known)


# Hints added by issue 36: each must stay silent for at least two held-out slips of its exercise
# that it does not describe (test_every_named_hint_names_the_slip_the_answer_makes checks that
# they do).
ADDED_HINTS = {
    "heads.batched_head": ("t-on-3d-tensor", "bmm-needs-3d"),
    "heads.multi_query_head": ("kv-split-into-heads", "view-after-transpose", "merge-interleaved",
                               "scale-after-softmax", "softmax-over-heads"),
    "heads.single_head": ("averages-the-queries",),
    "onehead.stable_softmax": ("max-returns-pair",),
    "dims.split_heads": ("no-transpose",),
    "dims.weights_mib": ("megabytes", "kibibytes", "eight-bytes", "all-layers", "bits-or-batch-of-8"),
    "params.cross_gqa_params": ("o-writes-kdim", "biases-twice", "group-size-for-groups"),
    "params.max_kv_heads": ("no-batch", "no-head-dim"),
    "masking.masked_softmax": ("fill-overflows-float16",),
    "masking.decoder_mask": ("upper-triangle",),
    "layer.split_qkv_gqa": ("three-equal-parts",),
    "layer.dropout_row_spread": ("p-swap-or-w-unsquared", "rescaled-once", "mean-not-sum"),
    "cross.alignment_accuracy": ("integer-division", "length-minus-one"),
    "grads.scale_grad": ("p-without-scale",),
    "grads.linear_backward": ("dx-w-transposed",),
    "cost.flop_growth": ("geometric-mean", "no-output-proj", "one-head-t2", "upside-down"),
    "flash.wasted_scores": ("full-width-key-tiles", "key-blocks-per-row"),
    "decode.rope_rotate": ("positions-plus-one", "sin-cos-swapped", "pair-members-swapped"),
    "induction.prefix_matching_score": ("roll-wraps",),
    "induction.mean_ablate_head": ("mean-subtracted", "direct-merge"),
    "induction.composing_head": ("q-composition", "heads-not-pairs", "blocks-not-pairs"),
    "kernels.tiles_visited": ("one-key-block-short", "last-key-block-left-out"),
    "kernels.fixed_attention": ("exp2-without-log2e", "mixed-bases", "offset-plus-one", "diagonal-block-skipped",
                                "last-block-dropped"),
}


@pytest.mark.parametrize("exercise_id", sorted(ADDED_HINTS))
def test_an_added_hint_has_two_held_out_slips_it_must_not_name(exercise_id):
    for name in ADDED_HINTS[exercise_id]:
        others = [s for s in SLIPS.get(exercise_id, []) if name not in s.names]
        assert len(others) >= 2, f"{exercise_id}: write two held-out slips that {name!r} does not describe"
        assert any(name in s.names for s in SLIPS[exercise_id]), f"{exercise_id}: no held-out slip makes {name!r}"


# ----------------------------------------------------------------------------- predictions

PREDICTIONS = [i for i in IDS if get(i).prediction]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def statement_of(ex) -> str:
    """What the student is asked: the exercise's statement on its lesson page (between its
    exercise-start, found by its label, and exercise-end), without the difficulty line."""
    if ex.statement:
        return ex.statement
    label = ex.id.replace(".", "-").replace("_", "-")
    with open(os.path.join(ROOT, "lessons", f"{ex.lesson}.md"), encoding="utf-8") as f:
        page = f.read()
    found = re.search(r"```\{exercise-start\}[^\n]*\n:label: " + re.escape(label) + r"\n```\n(.*?)```\{exercise-end\}",
                      page, re.S)
    assert found, f"no statement labelled {label} on {ex.lesson}"
    return "\n".join(line for line in found.group(1).splitlines() if not line.startswith("**Difficulty"))


def statement_numbers(text: str) -> set[float]:
    """Every number a statement gives: powers written a^b or a^{b}, fractions a/b, plain numbers
    (with thousands separators), whatever they stand for; not the tolerance ("within 2%")."""
    text = re.sub(r"(?<=\d),(?=\d{3})", "", re.sub(r"within \d+%", "", text))
    found = {float(int(a) ** int(b)) for a, b in re.findall(r"(\d+)\s*(?:\^|\*\*)\s*\{?(\d+)\}?", text)}
    found |= {int(a) / int(b) for a, b in re.findall(r"(?<![\d.])(\d+)\s*/\s*(\d+)(?![\d.])", text) if int(b)}
    return found | {float(n) for n in re.findall(r"\d+(?:\.\d+)?", text)}


def guesses(numbers: set[float]) -> set[float]:
    """What a guess from a statement's own numbers gives: each number; the product, ratio, mean
    and geometric mean of two; and for a growth between two of them, with ratio r, its linear
    and quadratic bounds r and r^2, their mean and their geometric mean (the "between 4 and 16,
    so 8" of a guess)."""
    found = set(numbers)
    for a in numbers:
        for b in numbers:
            found |= {a * b, (a + b) / 2, math.sqrt(a * b)}
            if b:
                found.add(a / b)
            if b and a > b:
                r = a / b
                found |= {r, r * r, (r + r * r) / 2, r ** 1.5}
    return found


@pytest.mark.parametrize("exercise_id", PREDICTIONS)
def test_no_prediction_is_passed_by_a_guess_from_its_statement_s_numbers(exercise_id):
    ex = get(exercise_id)
    [case] = ex.public_cases()
    numbers = statement_numbers(statement_of(ex))
    assert len(numbers) >= 2, f"{exercise_id}: no numbers found in its statement"
    passed = sorted(x for x in guesses(numbers) if ex.judge(case, graded_call(ex, lambda x=x: x, case)).passed)
    assert not passed, (f"{exercise_id}: guesses from the statement's numbers {sorted(numbers)} pass: {passed[:8]}; "
                        "choose numbers whose answer no such guess reaches, or a tighter tolerance")


# binary units and the decimal ones a slip puts in their place
UNITS = {"KiB": (2**10, 10**3), "MiB": (2**20, 10**6), "GiB": (2**30, 10**9), "TiB": (2**40, 10**12)}


def test_a_unit_slip_fails_a_prediction_asked_in_a_binary_unit():
    """A MiB for a megabyte (4.9% apart) or a KiB for a kilobyte (2.4%): a prediction whose statement
    asks for a size in such a unit must lose its point on either slip, either way round."""
    asked = [(i, unit) for i in PREDICTIONS for unit in UNITS if unit in statement_of(get(i))]
    assert asked, "no prediction asks for a size in a binary unit any more: this test checks nothing"
    for exercise_id, unit in asked:
        ex = get(exercise_id)
        [case] = ex.public_cases()
        right = float(ex.reference())
        binary, decimal = UNITS[unit]
        for slip in (right * binary / decimal, right * decimal / binary):
            assert not ex.judge(case, graded_call(ex, lambda: slip, case)).passed, (exercise_id, unit, slip)


@pytest.mark.parametrize("exercise_id", PREDICTIONS)
def test_re_running_check_cannot_home_in_on_a_prediction(exercise_id):
    """A wrong prediction that no listed mistake explains is told that it is off, and nothing
    more: the same words whichever way and however far it is off."""
    ex = get(exercise_id)
    [case] = ex.public_cases()
    right = float(ex.reference())
    listed = [float(m.wrong()) for m in ex.mistakes]
    said = set()
    for factor in (1 / 50, 1 / 3, 0.93, 1.07, 3, 50, -1):
        answer = right * factor if right else factor
        if any(abs(answer - x) <= max(ex.tolerance * abs(x), 1e-12) for x in listed):
            continue
        verdict = ex.judge(case, graded_call(ex, lambda: answer, case))
        assert not verdict.passed and not verdict.hint, (exercise_id, answer, verdict.message)
        said.add(verdict.message)
    assert len(said) == 1, (exercise_id, said)


# ----------------------------------------------------------------------------- check = grader

def _answers(exercise_id):
    ex = get(exercise_id)
    return ([("the reference", ex.reference)] + ([("the model answer", model_answer(ex))] if ex.model else [])
            + [(f"mistake {k}", m.wrong) for k, m in enumerate(ex.mistakes)]
            + [(fn.__name__, fn) for kind in (CORRECT, WRONG, FORBIDDEN) for fn in kind.get(exercise_id, [])])


@pytest.mark.parametrize("exercise_id", IDS)
def test_check_and_the_grader_agree_on_every_tested_answer(exercise_id, tmp_path, capsys):
    """The reference, every listed mistake and every held-out answer: check's verdict on each
    public check equals the grader's (pass or fail, and the same message). ``make test`` asks
    the same of one answer of each kind (tests/test_check_agrees_with_grader.py)."""
    problems = agreement_problems(get(exercise_id), _answers(exercise_id), tmp_path, capsys)
    assert not problems, "\n".join(problems[:SHOWN])


# ----------------------------------------------------------------------------- the real grader

def _groups(choice: int, answers: dict) -> list[dict[str, list[tuple[str, str]]]]:
    """Submissions made of the ``choice``-th answer of every exercise in ``answers``, split where
    two answers' helpers would bind one name to different code."""
    groups: list[tuple[dict, dict]] = []  # (exercise id -> chunks, name -> source)
    for exercise_id, fns in answers.items():
        if exercise_id not in EXERCISES or choice >= len(fns):
            continue
        ex = EXERCISES[exercise_id]
        chunks = source_chunks(fns[choice], ex.function)
        for members, names in groups:
            if all(names.get(n, text) == text or text.startswith(("import ", "from ")) for n, text in chunks):
                break
        else:
            members, names = {}, {}
            groups.append((members, names))
        members[exercise_id] = (fns[choice], chunks)
        names.update(chunks)
    return [members for members, _ in groups]


def test_check_and_the_sandboxed_grader_agree_on_every_held_out_answer(tmp_path, capsys):
    """Every correct, wrong and forbidden answer with source code, and every reference and
    model answer, as submissions graded in one batch by the real grader (fresh hidden draws,
    sandboxed worker): correct answers get full marks, wrong ones and shortcuts lose points, a
    plain-torch answer to a kernel exercise (its reference) gets nothing, and on every public
    check the grader and ``check`` agree."""
    from mha.exercises import check
    from mha.grading import reports
    from mha.grading.grader import grade_many
    from mha.grading.sandbox import Limits

    def own(i):  # the model answer, and the reference where it is another answer (plain torch)
        ex = get(i)
        return ([model_answer(ex), ex.reference], ["correct", "no kernel"]) if ex.model else ([ex.reference], ["correct"])

    answers = {i: own(i)[0] + CORRECT.get(i, []) + WRONG.get(i, []) + FORBIDDEN.get(i, []) for i in IDS}
    verdict = {i: own(i)[1] + ["correct"] * len(CORRECT.get(i, [])) + ["wrong"] * len(WRONG.get(i, []))
               + ["forbidden"] * len(FORBIDDEN.get(i, [])) for i in IDS}
    groups = [g for choice in range(max(map(len, answers.values()))) for g in _groups(choice, answers)]
    paths = []
    for n, members in enumerate(groups):
        path = tmp_path / f"answers{n}.py"
        path.write_text("\n\n".join("\n\n".join(t for _, t in chunks) for _, chunks in members.values()))
        paths.append(path)
    graded = grade_many(paths, select(), limits=Limits(exercise_s=30, submission_s=600), jobs=2)
    problems = []
    for r, members in zip(graded, groups):
        for e in r.exercises:
            if e.id not in members:
                continue
            fn, _ = members[e.id]
            kind = verdict[e.id][answers[e.id].index(fn)]
            name = f"{e.id} {fn.__name__}"
            if kind == "correct" and e.score != e.max_score:
                problems.append(f"{name} is correct but gets {e.score}/{e.max_score}:\n{reports.details(r)}")
            if kind != "correct" and e.score >= e.max_score:
                problems.append(f"{name} is {kind} but gets full marks")
            if kind == "forbidden" and e.score != 0:
                problems.append(f"{name} goes through a forbidden function but gets {e.score}")
            if kind == "no kernel" and (e.score != 0 or any(c.message != NO_KERNEL for c in e.checks)):
                problems.append(f"{name} launches no kernel but gets {e.score}, or another message:\n"
                                f"{reports.details(r)}")
            problems += disagreements(name, check(e.id, fn), e)
            capsys.readouterr()
    assert not problems, "\n".join(problems[:SHOWN])
