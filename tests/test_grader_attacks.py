"""Every adversarial submission in tests/attacks scores no more than the empty stub
notebook (zero), does not stop the batch, and finishes within its time limit."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from mha.exercises import EXERCISES
from mha.grading import reports
from mha.grading.grader import grade_many
from mha.grading.sandbox import Limits

ATTACKS = sorted((Path(__file__).parent / "attacks").glob("*.py"))
LIMITS = Limits(exercise_s=3, startup_s=60, submission_s=45, cpu_s=45)
STUB_SCORE = 0.0  # what the empty-stub notebook scores (tests/test_grader.py checks it)


def _leftovers(marker: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmd:
            found.append(f"{pid}: {cmd[:120]}")
    return found


@pytest.fixture(scope="module")
def graded():
    start = time.monotonic()
    reps = grade_many(ATTACKS, limits=LIMITS, jobs=2, seed=7)
    return {Path(r.path).stem: r for r in reps}, time.monotonic() - start


def test_the_suite_has_every_attack():
    names = {p.stem for p in ATTACKS}
    assert {"patch_comparisons", "patch_grader", "forged_objects", "exits", "kill_parent", "fake_output",
            "write_results", "read_reference", "infinite_loop", "memory_bomb", "fork_bomb", "huge_output",
            "background_process", "forbidden_calls", "read_reference_runpy", "network", "hide_changes"} <= names


@pytest.mark.parametrize("attack", [p.stem for p in ATTACKS])
def test_attack_scores_no_more_than_the_stub(graded, attack):
    r = graded[0][attack]
    assert r.score <= STUB_SCORE, reports.details(r)
    assert len(r.exercises) == len(EXERCISES)  # graded to the end: every exercise has a verdict


@pytest.mark.parametrize("attack", [p.stem for p in ATTACKS])
def test_attack_finishes_within_its_time_limit(graded, attack):
    assert graded[0][attack].seconds <= LIMITS.submission_s + 15


def test_the_whole_batch_is_graded_in_reasonable_time(graded):
    assert len(graded[0]) == len(ATTACKS)
    assert graded[1] < 240


def test_runaway_code_is_stopped_with_the_reason(graded):
    reps = graded[0]

    def status(attack, ex):
        return next(e for e in reps[attack].exercises if e.id == ex)

    assert status("infinite_loop", "heads.batched_head").status == "timeout"
    assert status("infinite_loop", "heads.single_head").status == "timeout"
    assert status("exits", "dims.heads_into_batch").status == "crashed"   # os._exit
    assert "SystemExit" in status("exits", "dims.split_heads").checks[0].message
    assert status("fork_bomb", "masking.causal_mask").status in ("timeout", "crashed")
    bomb = status("memory_bomb", "heads.multi_query_head")  # MemoryError, or slow enough to time out
    assert bomb.status == "timeout" or bomb.checks[0].message.startswith("raised")
    assert status("memory_bomb", "dims.split_heads").checks[0].message == "raised RuntimeError"


def test_forbidden_calls_are_refused_before_running(graded):
    r = graded[0]["forbidden_calls"]
    statuses = {e.id: e.status for e in r.exercises}
    for ex in ("dims.split_heads", "dims.heads_into_batch", "masking.causal_mask", "masking.decoder_mask",
               "heads.multi_query_head", "onehead.stable_softmax", "flash.tiled_window_forward"):
        assert statuses[ex] == "forbidden", reports.details(r)
    # autograd through torch.func is refused when it runs, with the same message as in check
    jac = next(e for e in r.exercises if e.id == "grads.softmax_jacobian")
    assert jac.score == 0 and all("may not use" in c.message for c in jac.checks), reports.details(r)


def test_changed_arguments_are_seen_even_when_the_submission_patches_the_worker(graded):
    r = graded[0]["hide_changes"]
    for ex in ("why.ablate_head", "induction.mean_ablate_head"):
        e = next(e for e in r.exercises if e.id == ex)
        assert e.score == 0 and all("changed its argument" in c.message for c in e.checks), reports.details(r)


def test_no_process_outlives_the_grading(graded):
    time.sleep(0.5)
    assert _leftovers("sleep 1234.5") == []
    assert _leftovers("mha-grade-") == []


def test_forged_results_files_do_not_leak_out(graded):
    assert not Path("results.json").exists()
    assert not Path("/autograder/results/results.json").exists()
