"""The exercise definitions and the in-notebook ``check``: a specification."""

from __future__ import annotations

import importlib
import inspect
import linecache
import math
import re
from pathlib import Path

import pytest
import torch

from mha.autograde import NO_KERNEL, Case, call_outcome, traps_of
from mha.exercises import EXERCISES, check, get, select
from mha.grading import extract
from mha.notebooks import solution_blocks

ROOT = Path(__file__).resolve().parents[1]
IDS = list(EXERCISES)


def graded(ex, fn, case):
    """``fn`` on ``case`` under the exercise's rules, as the grader calls it."""
    return call_outcome(fn, case, traps=tuple(traps_of(ex)), trace=ex.audit is not None, launches=ex.kernel)


def model_answer(ex):
    """An answer in the form the statement asks for: the reference, or a kernel exercise's
    model kernel (which needs Triton, Linux only)."""
    if ex.kernel:  # Triton, with its interpreter where there is no GPU (Linux only)
        pytest.importorskip("mha.kernels")
    return ex.model_answer()


@pytest.mark.parametrize("exercise_id", IDS)
def test_every_exercise_asks_for_its_references_signature(exercise_id):
    ex = get(exercise_id)
    lesson_module = "lesson" + ex.lesson.replace("-", "_")
    assert ex in importlib.import_module(f"mha.exercises.{lesson_module}").EXERCISES, (
        f"{ex.id} is not in mha/exercises/{lesson_module}.py, the file of its lesson")
    assert ex.id.split(".")[1] == ex.function, "ids are <topic>.<function>"
    assert ex.function.isidentifier()
    ref = [p.name for p in inspect.signature(ex.reference).parameters.values()
           if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert ex.params == tuple(ref), f"{ex.signature} but the reference takes ({', '.join(ref)})"
    assert set(ex.dtypes) <= {"float16", "bfloat16", "float32", "float64"}
    assert ex.model or not ex.kernel, f"{ex.id} asks for a kernel: name a model answer that launches one"


@pytest.mark.parametrize("exercise_id", [i for i in IDS if get(i).model])
def test_a_model_answer_has_the_exercise_s_signature(exercise_id):
    ex = get(exercise_id)
    model = model_answer(ex)
    params = [p.name for p in inspect.signature(model).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert (model.__name__, tuple(params)) == (ex.function, ex.params), f"{ex.model} is not {ex.signature}"


@pytest.mark.parametrize("exercise_id", IDS)
def test_every_exercise_belongs_to_a_lesson_that_checks_it(exercise_id):
    ex = get(exercise_id)
    lesson = ROOT / "lessons" / f"{ex.lesson}.md"
    assert lesson.is_file(), f"{ex.id}: no lesson {ex.lesson}.md"
    assert f'check("{ex.id}", {ex.function})' in lesson.read_text(), f"{lesson.name} does not check {ex.id}"


def test_exercise_ids_functions_and_public_seeds_are_unique():
    exercises = list(EXERCISES.values())
    for attr in ("id", "function", "public_seed"):
        values = [getattr(e, attr) for e in exercises]
        assert len(values) == len(set(values)), attr


@pytest.mark.parametrize("exercise_id", IDS)
@pytest.mark.parametrize("seed", [0, 1, 2, 12345])
def test_reference_passes_public_and_hidden_checks(exercise_id, seed):
    """The model answer passes; so does the reference, but for a kernel exercise, where the
    plain-torch reference has the right values and loses every check for launching no kernel."""
    ex = get(exercise_id)
    answer = model_answer(ex)
    for case in ex.public_cases() + ex.hidden_cases(seed):
        verdict = ex.judge(case, graded(ex, answer, case))
        assert verdict.passed, verdict.message
        if answer is not ex.reference:
            verdict = ex.judge(case, graded(ex, ex.reference, case))
            assert not verdict.passed and verdict.message == NO_KERNEL, verdict.message


@pytest.mark.parametrize("exercise_id", [i for i in IDS if not get(i).prediction])
def test_hidden_cases_change_with_the_seed_and_differ_from_public(exercise_id):
    ex = get(exercise_id)

    def key(cases):
        return [repr([a.tolist() if isinstance(a, torch.Tensor) else a for a in c.args]) for c in cases]

    a, b = key(ex.hidden_cases(1)), key(ex.hidden_cases(2))
    assert a != b
    assert not set(a) & set(key(ex.public_cases()))


@pytest.mark.parametrize("exercise_id", IDS)
def test_check_passes_the_reference_with_full_score(exercise_id, capsys):
    result = check(exercise_id, model_answer(get(exercise_id)))
    assert result.ok and result.score == get(exercise_id).points
    out = capsys.readouterr().out
    assert "public checks only, not your grade" in out


@pytest.mark.parametrize("exercise_id", IDS)
def test_check_reports_a_stub_as_not_attempted_without_raising(exercise_id, capsys):
    def stub(*args):
        raise NotImplementedError("Write your solution here")

    result = check(exercise_id, stub)
    assert not result.attempted and result.score == 0
    assert "not attempted" in capsys.readouterr().out


MISTAKES = [(ex.id, i) for ex in EXERCISES.values() for i in range(len(ex.mistakes))]


@pytest.mark.parametrize("exercise_id,index", MISTAKES)
def test_each_classic_mistake_fails_with_its_hint(exercise_id, index, capsys):
    ex = get(exercise_id)
    mistake = ex.mistakes[index]
    result = check(exercise_id, mistake.wrong)
    assert result.passed < result.total
    assert mistake.hint in capsys.readouterr().out


def test_masked_softmax_hints_name_the_fp16_overflow_and_the_nan_rows(capsys):
    check("masking.masked_softmax", lambda s, m: torch.softmax(s.masked_fill(~m, -1e9), -1))
    assert "does not fit in float16" in capsys.readouterr().out
    check("masking.masked_softmax", lambda s, m: torch.softmax(s.masked_fill(~m, float("-inf")), -1))
    out = capsys.readouterr().out
    assert "contains NaN" in out and "0/0 = NaN" in out


def test_wrong_dtype_and_shape_are_named(capsys):
    check("masking.causal_mask", lambda q, k: torch.ones(q, k).tril(k - q))
    assert "wrong dtype float32: keep the dtype this exercise asks for: expected bool" in capsys.readouterr().out
    check("dims.heads_into_batch", lambda x, h: x)
    assert "wrong shape: expected (4, 3, 4), got (3, 2, 8)" in capsys.readouterr().out


def test_int_answers_must_be_ints(capsys):
    check("params.cross_gqa_params", lambda C, h, g, k, b: 2 * C * C + 2 * k * g * C / h)
    assert "return an int" in capsys.readouterr().out


def test_shapes_must_raise_value_error_for_indivisible_widths(capsys):
    ok = get("dims.shapes").reference
    result = check("dims.shapes", lambda *a: ok(*a) if a[2] % a[3] == 0 else {})
    assert result.passed == result.total - 1
    assert "should raise ValueError" in capsys.readouterr().out


def test_check_never_raises_and_survives_sys_exit(capsys):
    def leaves(x):
        raise SystemExit(0)

    result = check("onehead.stable_softmax", leaves)
    assert result.passed == 0 and "SystemExit" in capsys.readouterr().out
    assert not check("no.such_exercise", leaves).attempted
    assert not check("onehead.stable_softmax", 42).attempted


def test_check_flags_the_mha_reference_where_forbidden(capsys):
    import mha

    def split_heads(x, num_heads):
        return mha.split_heads(x, num_heads)

    result = check("dims.split_heads", split_heads)
    assert result.passed == result.total and result.score == 0
    assert "does not allow" in capsys.readouterr().out


def test_check_flags_a_wrong_signature(capsys):
    check("dims.split_heads", lambda x: x)
    assert "expected the signature split_heads(x, num_heads)" in capsys.readouterr().out


def test_select_by_prefix_lesson_and_id():
    assert [e.id for e in select(["dims"])] == [i for i in IDS if i.startswith("dims.")]
    assert select(["05-causal-masking"]) == [e for e in EXERCISES.values() if e.lesson == "05-causal-masking"]
    assert len(select(["05-causal-masking"])) >= 3
    assert [e.id for e in select(["params.mha_params"])] == ["params.mha_params"]
    with pytest.raises(ValueError, match="no exercise matches"):
        select(["nothing"])
    with pytest.raises(KeyError, match="exercise_id must be one of"):
        get("nothing")


# ----------------------------------------------------------------------------- regressions

def test_masked_softmax_compares_float64_answers_at_float64_precision(capsys):
    ex = get("masking.masked_softmax")
    scores = torch.randn(3, 6, 6, dtype=torch.float64) * 8
    mask = torch.rand(3, 6, 6) > 0.3
    exact = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1).nan_to_num(0.0)
    assert torch.allclose(ex.reference(scores, mask), exact, rtol=1e-12, atol=1e-15)

    def in_float64(s, m):
        return torch.softmax(s.masked_fill(~m, float("-inf")), -1).nan_to_num(0.0)

    case = Case((scores, mask), hidden=True)
    assert ex.judge(case, call_outcome(in_float64, case)).passed
    in_float32 = next(m.wrong for m in ex.mistakes if m.name == "float32-for-float64")
    verdict = ex.judge(case, call_outcome(in_float32, case))
    assert not verdict.passed and "promote_types" in verdict.message


def test_heads_into_batch_gets_a_non_contiguous_input_and_a_view_on_it_loses_points(capsys):
    layouts = []

    def records(x, h):
        layouts.append(x.is_contiguous())
        T, B, C = x.shape
        return x.reshape(T, B * h, C // h).transpose(0, 1)

    assert check("dims.heads_into_batch", records).ok
    assert False in layouts and True in layouts
    ex = get("dims.heads_into_batch")
    assert all(any(c.noncontiguous for c in ex.hidden_cases(seed)) for seed in range(50))

    def views_its_input(x, h):  # right on a contiguous x only
        T, B, C = x.shape
        return x.view(T, B * h, C // h).transpose(0, 1)

    capsys.readouterr()
    result = check("dims.heads_into_batch", views_its_input)
    assert result.passed == result.total - 1
    assert "use .reshape, or .contiguous() before .view" in capsys.readouterr().out


def test_gqa_biases_of_width_c_lose_points_on_every_hidden_draw():
    ex = get("params.cross_gqa_params")

    def biases_4c(C, h, g, k, b):  # K and V biases of width C instead of g * d_h
        kv = g * (C // h)
        return 2 * C * C + 2 * k * kv + (4 * C if b else 0)

    for seed in range(300):
        cases = ex.hidden_cases(seed)
        assert not all(ex.judge(c, call_outcome(biases_4c, c)).passed for c in cases), seed


# ----------------------------------------------------------------------------- transcriptions

def _tokens(code: str) -> list[str]:
    """The tokens of ``code`` that carry meaning: no comments, layout or string contents."""
    import io
    import tokenize

    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    out = []
    try:
        for t in tokenize.generate_tokens(io.StringIO(code).readline):
            if t.type not in skip:
                out.append("STR" if t.type == tokenize.STRING else t.string)
    except (tokenize.TokenError, IndentationError):
        pass
    return out


RUN = 8  # tokens in a row that count as copied


def _runs(tokens: list[str]) -> set[tuple[str, ...]]:
    return {tuple(tokens[i:i + RUN]) for i in range(len(tokens) - RUN + 1)}


def copied_share(lesson: Path) -> dict[str, float]:
    """For each exercise of ``lesson``: the share of its solution's tokens that lie in runs of
    RUN tokens found, as they are, in the code cells above the exercises, and not in the
    statement's own code (a diagnosis exercise gives the code it asks to fix)."""
    import textwrap

    text = lesson.read_text()
    head, _, tail = text.partition("\n## Exercises")
    page = _runs(_tokens("\n".join(extract.markdown_cells(head))))
    shares = {}
    for block in re.split(r"^```\{exercise-start\}", tail, flags=re.M)[1:]:
        statement = block.split("```{exercise-end}")[0]
        given = _runs(_tokens("\n".join(re.findall(r"^```python\n(.*?)^```", statement, re.M | re.S))))
        name = re.search(r'check\("[\w.]+",\s*(\w+)\)', block)
        solution = _tokens(textwrap.dedent("\n".join(solution_blocks("\n".join(extract.markdown_cells(block))))))
        covered = [False] * len(solution)
        for i in range(len(solution) - RUN + 1):
            run = tuple(solution[i:i + RUN])
            if run in page and run not in given:
                covered[i:i + RUN] = [True] * RUN
        if name and solution:
            shares[name.group(1)] = sum(covered) / len(solution)
    return shares


# A solution with this share of its tokens copied from the page is a copy. (At 0.55, dims.split_heads,
# 0.548, a line of its page, went uncounted.)
COPY = 0.5
COURSE_COPIES = 5    # warm-ups that mirror the page, in the whole course


def copies_of(lesson: Path) -> dict[str, float]:
    """The exercises of ``lesson`` whose solutions are copies of the page, with their shares."""
    return {fn: round(share, 2) for fn, share in copied_share(lesson).items() if share >= COPY}


@pytest.mark.parametrize("lesson", sorted((ROOT / "lessons").glob("*.md")), ids=lambda p: p.stem)
def test_at_most_one_exercise_per_lesson_copies_the_page(lesson):
    """An exercise asks for the next step; one warm-up per lesson may mirror the page's code.
    A solution most of whose tokens come in long runs from the code above the exercises is
    counted as a copy of the page."""
    copies = copies_of(lesson)
    assert len(copies) <= 1, f"{lesson.name}: these solutions are mostly the page's own code: {copies}"


def test_at_most_five_warm_ups_in_the_course_copy_the_page():
    """The course as a whole: at most five lessons spend an exercise on a warm-up copy."""
    copies = {f"{lesson.stem[:2]} {fn}": share for lesson in sorted((ROOT / "lessons").glob("*.md"))
              for fn, share in copies_of(lesson).items()}
    assert len(copies) <= COURSE_COPIES, f"{len(copies)} solutions copy their page: {copies}"


# ----------------------------------------------------------------------------- drift guard

LESSONS = sorted((ROOT / "lessons").glob("*.md"))


def _lesson_exercises(path: Path):
    text = path.read_text()
    return re.findall(r'check\("([\w.]+)",\s*(\w+)\)', text)


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_lesson_solutions_pass_the_hidden_checks(lesson):
    """The solution a lesson shows (and executes) is right on fresh hidden inputs too."""
    found = _lesson_exercises(lesson)
    if not found:
        pytest.skip(f"{lesson.name} has no exercises yet")
    stmts, notes = extract.parse_cells(extract.markdown_cells(lesson.read_text()))
    assert not notes
    names = {fn for _, fn in found}
    ns: dict = {}
    program = extract.program(stmts, names)
    if "import triton" in program:  # lesson 14's kernels: Triton's interpreter, chosen before Triton loads
        import mha.kernels  # noqa: F401
    # Under a name of its own, with its source where inspect finds it (Triton's @jit reads a
    # kernel's source; the lesson's file would give it the wrong lines).
    filename = f"<{lesson.name}>"
    linecache.cache[filename] = (len(program), None, program.splitlines(True), filename)
    exec(compile(program, filename, "exec"), ns)
    for exercise_id, fn in found:
        ex = get(exercise_id)
        assert fn == ex.function, f"{lesson.name}: check({exercise_id!r}, {fn}) should pass {ex.function}"
        for seed in (3, 4):
            for case in ex.public_cases() + ex.hidden_cases(seed):
                verdict = ex.judge(case, graded(ex, ns[fn], case))
                assert verdict.passed, f"{lesson.name} {exercise_id}: {verdict.message}"


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_every_lesson_solution_is_marked_for_the_student_notebook(lesson):
    """Each exercise function in a lesson has its solution between the markers, so the
    student notebook gets a stub and not the answer."""
    text = lesson.read_text()
    found = _lesson_exercises(lesson)
    blocks = solution_blocks("\n".join(extract.markdown_cells(text)))
    assert len(blocks) >= len(found)
    for cell in extract.markdown_cells(text):
        for _, fn in found:
            if re.search(rf"^def {fn}\(", cell, re.M):
                assert "# BEGIN SOLUTION" in cell and "# END SOLUTION" in cell, fn


def test_ordinary_attributes_named_modules_or_compile_are_not_dynamic_lookups():
    import ast

    from mha.autograde import forbidden_uses

    banned = ("mha", "torch.nn.functional.scaled_dot_product_attention")
    honest = ("def f(layer, x):\n    n = len(list(layer.modules()))\n    g = torch.compile(torch.exp)\n"
              "    pattern = re.compile('x')\n    return g(x) * n\n")
    assert forbidden_uses(ast.parse(honest), banned) == []
    for sneaky in ("import sys\ndef f(x):\n    return sys.modules['mha']\n",
                   "import sys as s\ndef f(x):\n    return s.modules['mha']\n",
                   "from sys import modules\ndef f(x):\n    return modules['mha']\n",
                   "def f(x):\n    return eval(compile('1', 'f', 'eval'))\n"):
        assert any("dynamic" in u for u in forbidden_uses(ast.parse(sneaky), banned)), sneaky


def test_a_message_naming_a_forbidden_function_is_not_a_use():
    """Docstrings, what raise and assert say, prints and warnings mention functions without
    using them; a string that names a forbidden function exactly, as a lookup by name would
    need it, still counts."""
    import ast

    from mha.autograde import forbidden_uses

    banned = ("torch.nn.functional.scaled_dot_product_attention", "torch.softmax", "torch.nn.attention")
    honest = [
        'def f(q, k):\n    """Like scaled_dot_product_attention, written out."""\n    return q @ k.T\n',
        'def f(s):\n    assert s.is_floating_point(), "the softmax needs floats"\n    return s\n',
        'def f(s):\n    if s.dim() < 2:\n        raise ValueError(f"an attention mask is 2-D, got {s.dim()}")\n    return s\n',
        'def f(s):\n    print("softmax of", s.shape)\n    return s\n',
        'import warnings\ndef f(s):\n    warnings.warn("not scaled_dot_product_attention")\n    return s\n',
        'def f(s):\n    note = "this is a softmax written out with torch.exp"\n    return s\n',
    ]
    for source in honest:
        assert forbidden_uses(ast.parse(source), banned) == [], source
    lookups = {
        'def f(q, k):\n    """Doc."""\n    name = "scaled_dot_product_attention"\n    return q\n':
            "scaled_dot_product_attention",
        'def f(s):\n    path = "torch.nn.functional.scaled_dot_product_attention"\n    return s\n':
            "scaled_dot_product_attention",
        'def f(s):\n    where = "torch.nn.attention"\n    return s\n': "attention",
    }
    for source, leaf in lookups.items():
        found = forbidden_uses(ast.parse(source), banned)
        assert found and found[0].startswith(f"{leaf} (a string that names it"), (source, found)
    for sneaky in ('import operator\ndef f(m):\n    return operator.attrgetter("soft" + "max")(m)\n',
                   'def f(m):\n    return m.__getattribute__("soft" + "max")\n',
                   'from importlib import import_module\ndef f(s):\n    return import_module("tor" + "ch")\n'):
        assert any("dynamic" in u for u in forbidden_uses(ast.parse(sneaky), banned)), sneaky


# ----------------------------------------------------------------------------- the graded-function contract

def _ablate_in_place(head_outputs, w_o, head):
    """The right numbers, with the caller's w_o zeroed on the way."""
    d = head_outputs.shape[-1]
    w_o[head * d:(head + 1) * d] = 0
    return head_outputs.transpose(0, 1).reshape(head_outputs.shape[1], -1) @ w_o


def test_check_names_an_argument_the_function_changed(capsys):
    result = check("why.ablate_head", _ablate_in_place)
    assert result.passed == 0
    assert "changed its argument `w_o` (in place or in value)" in capsys.readouterr().out


def test_an_in_place_operation_counts_even_when_the_values_come_back():
    def rescales_and_restores(weights, keep, p):
        weights.mul_(2.0).div_(2.0)           # the same values, two in-place operations
        return weights * keep / (1 - p)

    ex = get("layer.attention_dropout")
    case = ex.public_cases()[0]
    outcome = call_outcome(rescales_and_restores, case)
    assert outcome.mutated == (0,) and not ex.judge(case, outcome).passed


def test_a_statement_may_let_an_argument_change():
    from dataclasses import replace

    ex = replace(get("why.ablate_head"), may_modify=("w_o",))
    for case in ex.public_cases():
        assert ex.judge(case, call_outcome(_ablate_in_place, case)).passed


def test_a_tensor_left_on_another_device_fails():
    from dataclasses import replace

    from mha.autograde.model import plain
    from mha.exercises import Outcome

    ex = get("onehead.stable_softmax")
    case = ex.public_cases()[0]
    moved = replace(plain(ex.reference(*case.args)), device="cuda:0")
    verdict = ex.judge(case, Outcome("value", value=moved))
    assert not verdict.passed and "device" in verdict.message


def test_hidden_verdicts_say_nothing_of_the_inputs_values(capsys):
    """The grader's message carries no number of the case; the message
    check prints for a public case adds them."""
    ex = get("cost.cross_layer_flops")
    case = ex.hidden_cases(5)[0]
    verdict = ex.judge(case, call_outcome(lambda B, T, S, C, h: 7, case))
    assert verdict.grader_message == verdict.message and verdict.message.startswith("wrong value")
    numbers = {str(a) for a in case.args} | {f"{ex.reference(*case.args):,}", str(ex.reference(*case.args))}
    assert not any(re.search(rf"\b{re.escape(n)}\b", verdict.message) for n in numbers), verdict.message
    public = ex.public_cases()[0]
    shown = ex.judge(public, call_outcome(lambda B, T, S, C, h: 7, public))
    assert shown.grader_message.startswith("wrong value") and shown.message.startswith("wrong value: expected")


# ----------------------------------------------------------------------------- names, raised errors, predictions

def test_every_course_mistake_has_a_short_name_of_its_own():
    """Every listed mistake of the course has a name (check shows it with the hint, and the class
    report counts the mistake by it), unique within its exercise."""
    from mha.autograde.model import NAME

    for ex in EXERCISES.values():
        names = [m.name for m in ex.mistakes]
        assert all(names), f"{ex.id}: a mistake without a name: give every Mistake name='...'"
        assert len(set(names)) == len(names), f"{ex.id}: two mistakes share a name: {names}"
        assert all(NAME.fullmatch(n) for n in names), f"{ex.id}: {names}"


def test_every_course_mistake_names_a_heading_of_the_course_that_teaches_it():
    """The class report links each listed mistake to the section that teaches its point: the
    mistake's own ``section``, else its exercise's. Each must be a heading of a lesson, as the
    lesson's source writes it (tests/test_report_links.py checks the built pages' ids too)."""
    from mha.autograde import sections

    headings: dict[str, set[str]] = {}
    for ex in EXERCISES.values():
        for k, m in enumerate(ex.mistakes):
            key = sections.taught(ex, k)
            assert key, f"{ex.id}: mistake {m.name!r} names no section, nor does its exercise: give section="
            lesson, _, anchor = key.partition("#")
            if lesson not in headings:
                text = (ROOT / "lessons" / f"{lesson}.md").read_text()
                headings[lesson] = {sections.anchor(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}
            assert anchor in headings[lesson], f"{ex.id}: mistake {m.name!r} links to {key}, not a heading of {lesson}"


def test_check_shows_the_name_of_the_mistake_it_recognises(capsys):
    ex = get("heads.single_head")
    check(ex.id, ex.mistakes[0].wrong)
    assert f"Hint ({ex.mistakes[0].name}): {ex.mistakes[0].hint}" in capsys.readouterr().out


def test_a_not_implemented_error_from_torch_is_an_answer_not_a_stub(capsys):
    """torch raises NotImplementedError for dtypes an operation lacks (a float mask & a bool
    mask): the answer was written, and check says what was raised, with a hint; only the stub's
    own raise counts as not attempted."""
    def decoder_mask(lengths, max_len):
        pos = torch.arange(max_len)
        causal = torch.ones(max_len, max_len).tril()                  # float: torch.ones' default
        real = pos[None, :] < lengths[:, None]
        return (real[:, None, :] & causal[None])[:, None]

    result = check("masking.decoder_mask", decoder_mask)
    out = capsys.readouterr().out
    assert result.attempted and "not attempted" not in out
    assert "raised NotImplementedError" in out and "not implemented for 'Float'" in out
    assert "must be torch.bool" in out or "make every mask torch.bool" in out

    def causal_mask(q_len, k_len):
        raise NotImplementedError("Write your solution here, then run the check cell below.")

    assert not check("masking.causal_mask", causal_mask).attempted


def test_a_forbidden_function_imported_by_name_is_flagged_by_check_as_by_the_grader(capsys):
    namespace = {}
    exec("from torch.nn.attention.bias import causal_lower_right\n"
         "def causal_mask(q_len, k_len):\n"
         "    return causal_lower_right(q_len, k_len)._materialize()\n", namespace)
    result = check("masking.causal_mask", namespace["causal_mask"])
    assert result.score == 0 and "causal_lower_right" in capsys.readouterr().out


def test_a_module_of_the_course_package_imported_under_another_name_is_flagged_by_check_as_by_the_grader(capsys):
    """A notebook helper that reaches the course package through a module alias (lesson 14's
    `tile_kinds` calls `kernels.key_range`, with `from mha.kernels import attention as kernels`)
    gets no points from the grader, which sees the import; check must say so too."""
    namespace = {"__name__": "notebook"}
    exec("from mha import masks as helpers\n"
         "def causal_mask(q_len, k_len):\n"
         "    return helpers.causal_mask(q_len, k_len)\n", namespace)
    result = check("masking.causal_mask", namespace["causal_mask"])
    assert result.score == 0 and "helpers" in capsys.readouterr().out


def test_a_raise_case_that_waits_for_the_values_is_marked_pending_not_failed(capsys):
    check("dims.shapes", lambda B, T, C, h: (_ for _ in ()).throw(ValueError(f"embed_dim={C}, num_heads={h}")))
    out = capsys.readouterr().out
    assert "[ -- ]" in out and "raises ValueError as asked" in out


def test_an_error_message_may_give_the_values_instead_of_the_names(capsys):
    ref = get("dims.shapes").reference

    def shapes(batch, seq_len, embed_dim, num_heads):
        if embed_dim % num_heads:
            raise ValueError(f"C={embed_dim} is not divisible by h={num_heads}")
        return ref(batch, seq_len, embed_dim, num_heads)

    assert check("dims.shapes", shapes).ok


@pytest.mark.parametrize("exercise_id", [i for i in IDS if get(i).prediction])
def test_a_prediction_is_judged_within_its_stated_tolerance(exercise_id, capsys):
    ex = get(exercise_id)
    right = float(ex.reference())
    inside = right * (1 + 0.9 * ex.tolerance) if ex.tolerance else right
    outside = right * (1 + 1.5 * ex.tolerance) if ex.tolerance else right + 1
    assert check(exercise_id, lambda: inside).ok
    assert not check(exercise_id, lambda: outside).ok
    said = capsys.readouterr().out
    assert "the prediction is off" in said
    # which way it is off, or by how much, would let a student home in on the number by running
    # check again and again
    for direction in ("too high", "too low", "too large", "too small", "factor"):
        assert direction not in said, (exercise_id, direction)


def test_every_part_of_the_course_has_a_prediction():
    parts = {"I": range(1, 6), "II": range(6, 9), "III": range(9, 13), "IV": range(13, 14), "V": range(14, 15)}
    lessons = {int(ex.lesson[:2]) for ex in EXERCISES.values() if ex.prediction}
    for part, numbers in parts.items():
        assert lessons & set(numbers), f"part {part} (lessons {list(numbers)}) has no prediction exercise"


def test_a_public_raise_case_is_settled_by_the_public_value_cases_alone():
    """check sees the public cases only; the grader must give a public raise case the same
    verdict whatever the hidden draw, even one where a wrong answer happens to be right."""
    from mha.autograde import Kind, Verdict
    from mha.autograde.judge import apply_raise_rule

    cases = [Case((1,)), Case((2,), raises="ValueError"), Case((3,), hidden=True), Case((4,), hidden=True, raises="ValueError")]
    verdicts = [Verdict(False, "wrong values", kind=Kind.WRONG), Verdict(True, "raises ValueError", raises=True),
                Verdict(True, "correct", hidden=True), Verdict(True, "raises ValueError", hidden=True, raises=True)]
    public_raise, hidden_raise = apply_raise_rule(cases, verdicts)[1], apply_raise_rule(cases, verdicts)[3]
    assert not public_raise.passed and "counts once" in public_raise.message and public_raise.kind is Kind.PENDING
    assert hidden_raise.passed
    verdicts[0] = Verdict(True, "correct")
    assert apply_raise_rule(cases, verdicts)[1].passed


# Exceptions a wrong answer may raise for reasons no exercise's hint is about: the sizes quoted
# are not the case's, the texts are not the slips' (a broadcast at another axis, an einsum typo,
# an index out of range, a name error...).
UNRELATED_ERRORS = [
    ("RuntimeError", "The size of tensor a (97) must match the size of tensor b (89) at non-singleton dimension 0"),
    ("RuntimeError", "einsum(): output subscript i does not appear in the equation for any input operand"),
    ("RuntimeError", "shape '[97, 89]' is invalid for input of size 83"),
    ("RuntimeError", "mat1 and mat2 shapes cannot be multiplied (97x89 and 83x79)"),
    ("RuntimeError", "Expected size for first two dimensions of batch2 tensor to be: [97, 89] but got: [83, 79]."),
    ("IndexError", "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ("TypeError", "unsupported operand type(s) for +: 'Tensor' and 'NoneType'"),
    ("NameError", "name 'mask' is not defined"),
    ("ValueError", "too many values to unpack (expected 3)"),
]


# ... except where the exercise's statement makes one of them a slip: the capstone's optional
# arguments may be None, and adding one to a tensor raises this TypeError.
RAISED_BY_A_SLIP = {"layer.multi_head_attention": {("TypeError", "unsupported operand type(s) for +: 'Tensor' and 'NoneType'")}}


@pytest.mark.parametrize("exercise_id", [i for i in IDS if get(i).explain is not None])
def test_an_exercise_s_hint_for_an_error_is_chosen_by_the_error_s_text_and_sizes(exercise_id):
    """A hint for an exception names the slip that raises THAT exception, recognised by its text
    (and the case's sizes in it), never one hint for every exception of a type: on errors no
    slip of the exercise raises, its explain says nothing (the course-wide diagnosis may)."""
    from mha.autograde import Outcome
    from mha.autograde.model import Called

    ex = get(exercise_id)
    bases = {"RuntimeError": ("Exception",), "IndexError": ("LookupError", "Exception"),
             "TypeError": ("Exception",), "NameError": ("Exception",), "ValueError": ("Exception",)}
    for case in ex.public_cases() + ex.hidden_cases(0):
        for error_type, message in UNRELATED_ERRORS:
            if (error_type, message) in RAISED_BY_A_SLIP.get(exercise_id, ()):
                continue
            outcome = Outcome(Called.RAISED, error_type=error_type, error_bases=bases[error_type], error_message=message)
            assert ex.explain(case, outcome) is None, (exercise_id, error_type, message)
