"""The grader's workers are forked from a pre-started zygote: faster, and still one fresh,
sandboxed process per submission that inherits nothing from the one before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mha.exercises import select
from mha.grading import reports, sandbox
from mha.grading.answer_key import function_source
from mha.grading.grader import grade_many, grade_submission
from mha.grading.sandbox import Limits

FAST = Limits(exercise_s=10, startup_s=60, submission_s=120)
DIMS = select(["dims"])

# Correct only in a process that shows none of the traces that POLLUTER leaves.
CLEAN = '''
import json, os, subprocess, torch

def _clean():
    tmp = os.environ.get("TMPDIR", "/tmp")
    return not (hasattr(torch, "leaked_by_an_earlier_submission")
                or "LEAKED_BY_AN_EARLIER_SUBMISSION" in os.environ
                or hasattr(json, "leaked_by_an_earlier_submission")
                or os.path.exists("leaked_by_an_earlier_submission")
                or os.path.exists(os.path.join(tmp, "leaked_by_an_earlier_submission")))

def _split(x, num_heads):
    B, T, C = x.shape
    if C % num_heads:
        raise ValueError("num_heads must divide C")
    return x.reshape(B, T, num_heads, C // num_heads).transpose(1, 2)
'''

CHECKER = CLEAN + '''
def split_heads(x, num_heads):
    if not _clean():
        raise RuntimeError("state from an earlier submission")
    return _split(x, num_heads)
'''

# Leaves traces everywhere a later submission could look (module state, environment, the
# working folder, the temporary folder, a lingering process) and is correct only once
# they show, which proves that the probe sees them.
POLLUTER = CLEAN + '''
def split_heads(x, num_heads):
    torch.leaked_by_an_earlier_submission = True
    json.leaked_by_an_earlier_submission = True
    os.environ["LEAKED_BY_AN_EARLIER_SUBMISSION"] = "1"
    open("leaked_by_an_earlier_submission", "w").write("x")
    open(os.path.join(os.environ.get("TMPDIR", "/tmp"), "leaked_by_an_earlier_submission"), "w").write("x")
    subprocess.Popen(["sleep", "2345.6"])
    if _clean():
        raise RuntimeError("the probe does not see the traces")
    return _split(x, num_heads)
'''


def _solved(tmp_path: Path) -> Path:
    path = tmp_path / "dims.py"
    path.write_text("\n\n".join(function_source(e.reference, e.function) for e in DIMS))
    return path


def test_workers_are_forked_from_a_zygote_and_get_full_marks(tmp_path):
    before = dict(sandbox.STARTS)
    reps = grade_many([_solved(tmp_path)] * 4, DIMS, limits=FAST, jobs=2, seed=1)
    assert all(r.score == r.max_score for r in reps), reports.details(reps[0])
    assert sandbox.STARTS["zygote"] - before["zygote"] == 4
    assert sandbox.STARTS["fresh"] == before["fresh"]


@pytest.mark.parametrize("close", [True, False])
def test_a_batch_closes_its_idle_zygotes_unless_told_to_keep_them(tmp_path, monkeypatch, close):
    """``mha grade`` closes them when its batch ends; a process that grades batch after batch
    (the test suite) keeps them, and the next batch forks from the same zygotes."""
    monkeypatch.setattr(sandbox, "CLOSE_ZYGOTES_AFTER_BATCH", close)
    sandbox.stop_zygotes()
    grade_many([_solved(tmp_path)] * 2, DIMS, limits=FAST, jobs=2, seed=1)
    kept = {z.proc.pid for z in sandbox._idle}
    assert (kept == set()) if close else (len(kept) in (1, 2))
    reps = grade_many([_solved(tmp_path)] * 2, DIMS, limits=FAST, jobs=2, seed=2)
    assert all(r.score == r.max_score for r in reps), reports.details(reps[0])
    if not close:
        assert {z.proc.pid for z in sandbox._idle} & kept, "the second batch started new zygotes"


def test_the_zygote_is_single_threaded_when_it_forks():
    z = sandbox._take_zygote(60)
    assert z is not None
    try:
        assert z.threads == 1
    finally:
        sandbox._give_back(z)


def test_a_submission_inherits_nothing_from_the_one_graded_before_it(tmp_path):
    polluter = tmp_path / "polluter.py"
    polluter.write_text(POLLUTER)
    checker = tmp_path / "checker.py"
    checker.write_text(CHECKER)
    split = [e for e in DIMS if e.function == "split_heads"]
    reps = grade_many([polluter, checker, polluter, checker], split, limits=FAST, jobs=1, seed=2)
    for r in reps:
        assert r.score == r.max_score, reports.details(r)
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _cmd(p).startswith("sleep 2345.6")]


def test_a_dead_zygote_is_replaced(tmp_path):
    sub = _solved(tmp_path)
    assert grade_submission(sub, DIMS, limits=FAST, seed=4).score == sum(e.points for e in DIMS)
    idle = list(sandbox._idle)
    assert idle
    for z in idle:
        z.proc.kill()
        z.proc.wait()
    before = dict(sandbox.STARTS)
    r = grade_submission(sub, DIMS, limits=FAST, seed=5)
    assert r.score == r.max_score, reports.details(r)
    assert sandbox.STARTS["fresh"] == before["fresh"]  # a new zygote, not the slow path


def test_without_the_zygote_the_fresh_worker_still_grades(tmp_path, monkeypatch):
    monkeypatch.setenv("MHA_GRADER_ZYGOTE", "0")
    before = dict(sandbox.STARTS)
    r = grade_submission(_solved(tmp_path), DIMS, limits=FAST, seed=6)
    assert r.score == r.max_score, reports.details(r)
    assert sandbox.STARTS["fresh"] == before["fresh"] + 1


def _cmd(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


FDS = '''
import os, torch

def split_heads(x, num_heads):
    B, T, C = x.shape
    if C % num_heads:
        raise ValueError("num_heads must divide C")
    fds = os.listdir("/proc/self/fd")  # 0, 1, 2, the progress pipe, and this listing's own
    if len(fds) > 5:
        raise RuntimeError("a file descriptor leaked into the worker")
    return x.reshape(B, T, num_heads, C // num_heads).transpose(1, 2)
'''


@pytest.mark.parametrize("zygote", ["1", "0"])
def test_the_worker_holds_no_file_descriptor_but_its_own(tmp_path, monkeypatch, zygote):
    """Not the zygote's socket, nor anything else of the zygote or the grader."""
    monkeypatch.setenv("MHA_GRADER_ZYGOTE", zygote)
    path = tmp_path / "fds.py"
    path.write_text(FDS)
    split = [e for e in DIMS if e.function == "split_heads"]
    r = grade_submission(path, split, limits=FAST, seed=8)
    assert r.score == r.max_score, reports.details(r)
