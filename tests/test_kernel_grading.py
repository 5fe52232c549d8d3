"""Triton kernels as graded answers (lesson 14), through the sandboxed grader: the worker
runs them in Triton's interpreter (TRITON_INTERPRET=1 in its environment) and gives Triton
the submission's source (a kernel with a chained comparison is only right when Triton's
interpreter can read and rewrite it); a kernel with a masking bug loses the points, with
the hint that names the bug; and an answer that launches no kernel at all, plain torch with
the right values, loses every check, in ``check`` and in the grader, with the same message."""

from __future__ import annotations

import importlib.util
import textwrap

import pytest

if importlib.util.find_spec("triton") is None:
    pytest.skip("Triton publishes wheels for Linux only", allow_module_level=True)

import mha.kernels  # noqa: E402  (Triton's interpreter, chosen before Triton is imported)
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from mha.autograde import calls, wire  # noqa: E402
from mha.exercises import check, get, select  # noqa: E402
from mha.autograde import NO_KERNEL  # noqa: E402
from mha.grading.grader import grade_many  # noqa: E402
from mha.grading.sandbox import Limits  # noqa: E402

SOFTMAX = '''
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = n_cols > cols >= 0                     # chained: right only when Triton rewrites it
    x = tl.load(x_ptr + row * n_cols + cols, mask=inside, other=OTHER).to(tl.float32)
    top = tl.max(x, 0)
    top = tl.where(top == float("-inf"), 0.0, top)
    e = tl.exp(x - top)
    total = tl.sum(e, 0)
    total = tl.where(total == 0.0, 1.0, total)
    tl.store(out_ptr + row * n_cols + cols, (e / total).to(out_ptr.dtype.element_ty), mask=inside)


def row_softmax(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return out
'''


PLAIN_TORCH = '''
import torch


def row_softmax(x):
    """Right values, and no kernel: what the statement asks for is not there."""
    x32 = x.float()
    top = x32.amax(dim=-1, keepdim=True)
    e = torch.exp(x32 - torch.where(torch.isneginf(top), torch.zeros_like(top), top))
    return (e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)).to(x.dtype)
'''


def test_a_kernel_gets_full_marks_and_its_masking_bug_loses_them_with_the_hint(tmp_path):
    """...and plain torch loses every check, with the message check prints for it too."""
    right = tmp_path / "right.py"
    right.write_text(textwrap.dedent(SOFTMAX).replace("OTHER", 'float("-inf")'))
    wrong = tmp_path / "wrong.py"
    wrong.write_text(textwrap.dedent(SOFTMAX).replace("OTHER", "0.0"))   # padding counts as a score of 0
    plain = tmp_path / "plain.py"
    plain.write_text(PLAIN_TORCH)
    exercise = select(["kernels.row_softmax"])
    graded = grade_many([right, wrong, plain], exercise, limits=Limits(exercise_s=30, submission_s=120), jobs=2)
    (good,), (bad,), (torch_only,) = (r.exercises for r in graded)
    assert good.score == good.max_score, [c.message for c in good.checks]
    assert bad.score < bad.max_score
    assert any("other=float('-inf')" in c.message for c in bad.checks if not c.passed), \
        [c.message for c in bad.checks]
    assert torch_only.status == "graded" and torch_only.score == 0
    assert [c.message for c in torch_only.checks] == [NO_KERNEL] * len(torch_only.checks)

    namespace: dict = {}
    exec(compile(PLAIN_TORCH, str(plain), "exec"), namespace)
    result = check("kernels.row_softmax", namespace["row_softmax"])
    assert result.score == 0 and result.passed == 0
    assert [v.grader_message for v in result.verdicts] == [c.message for c in torch_only.checks if not c.hidden]


def test_a_lane_past_the_tensors_is_stopped_and_named_the_same_way_by_check_and_the_grader(tmp_path):
    """The classic off-by-one (cols <= n_cols): the last row's extra lane reads past x and
    writes past out. The interpreter checks no bounds, so without the check the verdict would
    depend on what lies after the tensors (and the store can corrupt the heap); with it, both
    judges stop the kernel at the stray lane and give the masking hint."""
    source = textwrap.dedent(SOFTMAX).replace("OTHER", 'float("-inf")').replace(
        "n_cols > cols >= 0", "(cols <= n_cols) & (cols >= 0)")
    path = tmp_path / "off_by_one.py"
    path.write_text(source)
    exercise = select(["kernels.row_softmax"])
    (graded,) = grade_many([path], exercise, limits=Limits(exercise_s=60, submission_s=120), jobs=1)
    (e,) = graded.exercises
    assert e.status == "graded" and e.checks, (e.status, e.message)
    assert e.score == 0 and all("points past the end of a tensor" in c.message for c in e.checks), [c.message for c in e.checks]
    assert all("offs < n (not offs <= n)" in c.message for c in e.checks)

    namespace: dict = {}
    exec(compile(source, str(path), "exec"), namespace)
    result = check("kernels.row_softmax", namespace["row_softmax"])
    assert result.score == 0
    assert [v.grader_message for v in result.verdicts] == [c.message for c in e.checks if not c.hidden]


def test_bounds_checked_stops_a_stray_lane_and_lets_a_view_read_its_own_storage():
    x, out = torch.randn(5), torch.empty(5)
    with mha.kernels.bounds_checked():
        _double_kernel[(1,)](x, out, 5, BLOCK=8)                       # masked: fine
        assert torch.equal(out, 2 * x)
        wide = torch.randn(4, 3)[:, :2]                                 # a view: its storage is 12 values
        _double_kernel[(1,)](wide, torch.empty(8), 8, BLOCK=8)          # lanes 0-7 lie in it
        with pytest.raises(Exception, match="read memory outside the tensors"):
            _double_kernel[(1,)](x, torch.empty(8), 8, BLOCK=8)         # 3 lanes past x
        with pytest.raises(Exception, match="wrote memory outside the tensors"):
            _double_kernel[(1,)](torch.randn(8), out, 8, BLOCK=8)       # 3 lanes past out
    assert "create_masked_load" not in vars(triton.runtime.interpreter.interpreter_builder)   # restored
    meta = torch.empty(5, device="meta")
    assert calls._extents([x, (out, 3), meta]) is None          # a tensor not in this process's memory: no check
    assert calls._extents([x, (out, 3)]) == [(x.data_ptr(), x.data_ptr() + 20), (out.data_ptr(), out.data_ptr() + 20)]


# ----------------------------------------------------------------------------- the launch counter

@triton.jit
def _double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(out_ptr + i, 2 * tl.load(x_ptr + i, mask=i < n), mask=i < n)


def _launches(fn, *args) -> dict:
    return calls.run_case(fn, list(args), plain=wire, arrays={}, launches=True)


def test_the_call_counts_the_kernels_it_launches_and_nothing_else():
    def twice(x):
        out = torch.empty_like(x)
        _double_kernel[(1,)](x, out, x.numel(), BLOCK=16)
        _double_kernel[(1,)](out, out, x.numel(), BLOCK=16)
        return out

    def warms_up_only(x):
        _double_kernel.warmup(x, x, x.numel(), BLOCK=16, grid=(1,))
        return 4 * x

    def launches_then_fails(x):
        _double_kernel[(1,)](x, torch.empty_like(x), x.numel(), BLOCK=16)
        raise ValueError("after the launch")

    from triton.runtime.interpreter import GridExecutor

    launcher = GridExecutor.__dict__["__call__"]
    x = torch.arange(5.0)
    assert _launches(twice, x)["launches"] == 2
    assert _launches(lambda x: 4 * x, x)["launches"] == 0
    assert _launches(warms_up_only, x)["launches"] == 0
    record = _launches(launches_then_fails, x)
    assert record["s"] == "raised" and record["launches"] == 1
    assert "launches" not in calls.run_case(twice, [x], plain=wire, arrays={})   # not asked: not counted
    assert GridExecutor.__dict__["__call__"] is launcher   # the launch point is given back after each call


def test_a_launch_compiled_for_a_gpu_is_counted_and_a_warmup_is_not(monkeypatch):
    """On a GPU a launch is JITFunction.run; with no GPU here, a stand-in takes its place."""
    from triton.runtime.jit import JITFunction

    runs = []
    monkeypatch.setattr(JITFunction, "run", lambda self, *args, grid, warmup, **kw: runs.append(warmup))

    def scale(x, y):
        return 2 * x

    kernel = JITFunction(scale)

    def launches(x):
        kernel[(1,)](x, x)
        kernel.warmup(x, x, grid=(1,))
        kernel[(2,)](x, x)
        return x

    assert _launches(launches, torch.ones(3))["launches"] == 2
    assert runs == [False, True, False]


def test_a_kernel_exercise_judges_the_count():
    ex = get("kernels.row_lse")
    case = ex.public_cases()[0]
    outcome = calls.run_case(ex.model_answer(), list(case.args), plain=wire, arrays={}, launches=True)
    assert outcome["launches"] >= 1
    from mha.autograde import call_outcome

    assert ex.judge(case, call_outcome(ex.model_answer(), case, launches=True)).passed
    no_count = call_outcome(ex.model_answer(), case)          # a record without a count fails closed
    assert no_count.launches is None and ex.judge(case, no_count).message == NO_KERNEL
