"""Lesson 08's exercises forbid autograd without rejecting honest code.

The grader refuses autograd at run time (it replaces two torch functions while a graded
function runs) and looks for forbidden names in the source. These tests pin both halves:
every autograd route fails under the run-time traps, the trapped names exist in the
installed torch (a rename must fail here, not silently let autograd through), and code that
merely talks about "the backward pass" or "autograd", or names a variable `func`, passes
the static check.
"""

from __future__ import annotations

import ast
import importlib
import textwrap

import pytest
import torch

from mha.exercises import get
from mha.autograde import forbidden_uses
from mha.exercises.lesson08_gradients import EXERCISES, NO_AUTOGRAD
from mha.grading.grader import _traps
from mha.autograde.calls import ForbiddenCall, restore, set_traps

IDS = [ex.id for ex in EXERCISES]


P = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)   # some probabilities
ONES = torch.ones(4, dtype=torch.float64)


def softmax(z):
    return torch.softmax(z, dim=-1)


def backward_route():
    z = P.log().requires_grad_()
    softmax(z)[0].backward()
    return z.grad


def grad_route():
    z = P.log().requires_grad_()
    return torch.autograd.grad(softmax(z)[0], z)


CHEATS = {  # ways to get the softmax Jacobian (or a row of it) from autograd
    ".backward()": backward_route,
    "torch.autograd.grad": grad_route,
    "torch.autograd.functional.jacobian": lambda: torch.autograd.functional.jacobian(softmax, P.log()),
    "torch.autograd.functional.jacobian, forward mode": lambda: torch.autograd.functional.jacobian(
        softmax, P.log(), strategy="forward-mode", vectorize=True),
    "torch.func.grad": lambda: torch.func.grad(lambda z: softmax(z)[0])(P.log()),
    "torch.func.vjp": lambda: torch.func.vjp(softmax, P.log())[1](ONES),
    "torch.func.jacrev": lambda: torch.func.jacrev(softmax)(P.log()),
    "torch.func.jacfwd": lambda: torch.func.jacfwd(softmax)(P.log()),
    "torch.func.jvp": lambda: torch.func.jvp(softmax, (P.log(),), (ONES,)),
}


@pytest.mark.parametrize("exercise_id", IDS)
def test_every_exercise_uses_the_autograd_traps(exercise_id):
    assert get(exercise_id).forbidden == NO_AUTOGRAD


def test_the_trapped_functions_exist_in_this_torch():
    trapped = _traps(EXERCISES[0])
    assert len(trapped) >= 2
    for dotted in trapped:
        module, _, attr = dotted.rpartition(".")
        if module == "torch.Tensor":          # static-only names: methods, not module attributes
            assert hasattr(torch.Tensor, attr), dotted
            continue
        assert callable(getattr(importlib.import_module(module), attr)), dotted


@pytest.mark.parametrize("route", list(CHEATS))
def test_every_autograd_route_fails_while_the_traps_are_set(route):
    CHEATS[route]()                                     # works normally...
    saved = set_traps(_traps(EXERCISES[0]))
    try:
        with pytest.raises(ForbiddenCall):              # ...and not inside a graded call
            CHEATS[route]()
    finally:
        restore(saved)
    CHEATS[route]()                                     # restored afterwards


def test_honest_torch_code_runs_while_the_traps_are_set():
    saved = set_traps(_traps(EXERCISES[0]))
    try:
        jac = torch.diag(P) - torch.outer(P, P)
        torch.testing.assert_close(jac.sum(dim=1), torch.zeros(4, dtype=torch.float64))
    finally:
        restore(saved)


HONEST = '''
def out_proj_grad(o, grad_y):
    """The backward pass of the output projection, by hand: no autograd, no .backward()."""
    func = torch.einsum                      # a variable called func
    backward = "o^T grad_y"                  # and one called backward
    return func("btc,bte->ce", o, grad_y)
'''

CHEATING = {
    "requires_grad_": '''
def out_proj_grad(o, grad_y):
    w = torch.zeros(o.shape[-1], grad_y.shape[-1]).requires_grad_()
    (torch.einsum("btc,ce->bte", o, w) * grad_y).sum().backward()
    return w.grad
''',
    "requires_grad": '''
def out_proj_grad(o, grad_y):
    w = torch.zeros(o.shape[-1], grad_y.shape[-1])
    w.requires_grad = True
    return w
''',
    "the mha package": '''
def out_proj_grad(o, grad_y):
    import mha
    return mha.attention_backward(o, o, o, grad_y)
''',
}


def test_honest_code_that_mentions_backward_and_autograd_is_not_rejected():
    tree = ast.parse(textwrap.dedent(HONEST))
    assert forbidden_uses(tree, NO_AUTOGRAD) == []


@pytest.mark.parametrize("name", list(CHEATING))
def test_the_static_check_names_the_first_step_of_the_usual_cheats(name):
    tree = ast.parse(textwrap.dedent(CHEATING[name]))
    assert name in forbidden_uses(tree, NO_AUTOGRAD)
