"""Triton kernels as graded answers (lesson 14), through the sandboxed grader: the worker
runs them in Triton's interpreter (TRITON_INTERPRET=1 in its environment) and gives Triton
the submission's source (a kernel with a chained comparison is only right when Triton's
interpreter can read and rewrite it); a kernel with a masking bug loses the points, with
the hint that names the bug."""

from __future__ import annotations

import importlib.util
import textwrap

import pytest

if importlib.util.find_spec("triton") is None:
    pytest.skip("Triton publishes wheels for Linux only", allow_module_level=True)

from mha.exercises import select  # noqa: E402
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


def test_a_kernel_gets_full_marks_and_its_masking_bug_loses_them_with_the_hint(tmp_path):
    right = tmp_path / "right.py"
    right.write_text(textwrap.dedent(SOFTMAX).replace("OTHER", 'float("-inf")'))
    wrong = tmp_path / "wrong.py"
    wrong.write_text(textwrap.dedent(SOFTMAX).replace("OTHER", "0.0"))   # padding counts as a score of 0
    exercise = select(["kernels.row_softmax"])
    graded = grade_many([right, wrong], exercise, limits=Limits(exercise_s=30, submission_s=120), jobs=2)
    (good,), (bad,) = (r.exercises for r in graded)
    assert good.score == good.max_score, [c.message for c in good.checks]
    assert bad.score < bad.max_score
    assert any("other=float('-inf')" in c.message for c in bad.checks if not c.passed), \
        [c.message for c in bad.checks]
