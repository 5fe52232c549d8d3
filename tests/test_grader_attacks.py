"""Every adversarial submission in tests/attacks scores no more than the empty stub
notebook (zero), does not stop the batch, finishes within its time limit and leaves
nothing behind, at each isolation level this machine offers: the strongest, and Landlock
too where the strongest is a user namespace (``LEVELS``).

The attacks on the instructor (``BREACHES``: read their files, send data out, write
outside the job, use more than a submission may, forge the grades) earn points only when
they succeed, and aim at stand-ins made here (``Stage``): a home folder of decoys, TCP and
UDP listeners on 127.0.0.1 and a named UNIX socket. Graded with no isolation at all they
do score: ``test_the_breaches_score_without_isolation`` shows that each of them can fail
its test. Where the tests run as root (CI), this file runs again as an ordinary user it
makes (``test_the_attacks_hold_for_an_ordinary_user``), so that both kinds of grader are
held to it.
"""

from __future__ import annotations

import glob
import os
import secrets
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mha.exercises import EXERCISES
from mha.grading import reports, sandbox
from mha.grading.grader import grade_many
from mha.grading.sandbox import Isolation, Limits

ATTACKS = sorted((Path(__file__).parent / "attacks").glob("*.py"))
BREACHES = ["read_secrets", "send_out", "write_outside", "exhaust", "forge"]
LIMITS = Limits(exercise_s=3, startup_s=60, submission_s=45, cpu_s=45)
STUB_SCORE = 0.0  # what the empty-stub notebook scores (tests/test_grader.py checks it)
ORDINARY_USER = "mha-grader-test"  # the user the root run makes to run this file again


def levels_to_test() -> list[str]:
    best = sandbox.probe()
    below = ["landlock"] if best == "user-namespace" and sandbox.probe(Isolation("landlock")) == "landlock" else []
    return [best] + below


LEVELS = levels_to_test()


class Stage:
    """The instructor, as the attacks see them: a home folder with a key, a shell profile, a
    file to delete, another student's submission and a grades file; listeners that record
    what reaches them; and the attacks, with the stand-ins' addresses written in."""

    def __init__(self, folder: Path):
        self.home = folder / f"home-{secrets.token_hex(4)}"  # its name marks files in /tmp and the venv
        (self.home / ".ssh").mkdir(parents=True)
        self.files = {".ssh/id_ed25519": "FAKE KEY", ".bashrc": "# the instructor's\n", "decoy.txt": "decoy",
                      "victim.py": "def split_heads(x, h): ...\n", "grades.json": '{"score": 1}'}
        for name, text in self.files.items():
            (self.home / name).write_text(text)
        self.received: list[bytes] = []
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", self.port))
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(str(self.home / "listener.sock"))
        self.unix.listen()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._listen, daemon=True)
        self.thread.start()
        self.attacks = folder / "attacks"
        self.attacks.mkdir()
        for path in ATTACKS:
            text = path.read_text().replace("@DECOYS@", str(self.home)).replace("@PORT@", str(self.port))
            (self.attacks / path.name).write_text(text)

    def _listen(self) -> None:
        while not self.stop.is_set():
            ready, _, _ = select.select([self.tcp, self.udp, self.unix], [], [], 0.1)
            for s in ready:
                if s is self.udp:
                    self.received.append(s.recv(65536))
                    continue
                conn, _ = s.accept()
                conn.settimeout(1)
                try:
                    self.received.append(conn.recv(65536) or b"(connected)")
                except OSError:
                    self.received.append(b"(connected)")
                conn.close()

    def changed(self) -> dict[str, str]:
        """The stand-in files that differ from what was written, and what the attacks left
        in /tmp, /dev/shm and the venv's site-packages."""
        out = {}
        for name, text in self.files.items():
            path = self.home / name
            now = path.read_text() if path.exists() else "(deleted)"
            if now != text:
                out[name] = now
        tag = self.home.name
        site = [p for p in sys.path if p.endswith("site-packages")]
        for pattern in [f"/tmp/mha-attack-{tag}*", f"/dev/shm/mha-attack-{tag}*"] + [f"{s}/mha_attack_{tag}.pth"
                                                                                     for s in site]:
            for path in glob.glob(pattern):
                out[path] = "left behind"
        return out

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for s in (self.tcp, self.udp, self.unix):
            s.close()
        tag = self.home.name
        site = [p for p in sys.path if p.endswith("site-packages")]
        for pattern in [f"/tmp/mha-attack-{tag}*", f"/dev/shm/mha-attack-{tag}*",
                        "/tmp/mha-attack-fill-*", "/dev/shm/mha-attack-fill-*"] + [f"{s}/mha_attack_{tag}.pth"
                                                                                   for s in site]:
            for path in glob.glob(pattern):
                Path(path).unlink(missing_ok=True)


def _leftovers() -> list[str]:
    """Processes an attack left: its sleepers, its forks (named mha-attack-left), a worker."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if "1234.5" in cmd or "2345.6" in cmd or "mha-grade-" in cmd or name == "mha-attack-left":
            found.append(f"{pid}: {name}: {cmd[:120]}")
    return found


@pytest.fixture(scope="module", params=LEVELS)
def graded(request, tmp_path_factory):
    """{attack: report}, the batch's seconds, the Stage and the level, graded at one level."""
    stage = Stage(tmp_path_factory.mktemp("attacks"))
    start = time.monotonic()
    try:
        reps = grade_many(sorted(stage.attacks.glob("*.py")), limits=LIMITS, jobs=2, seed=7,
                          isolation=Isolation(request.param))
        seconds = time.monotonic() - start
        time.sleep(1.0)  # a forger left behind would have written by now
        yield {Path(r.path).stem: r for r in reps}, seconds, stage, request.param
    finally:
        stage.close()


def test_the_suite_has_every_attack():
    names = {p.stem for p in ATTACKS}
    assert {"patch_comparisons", "patch_grader", "forged_objects", "exits", "kill_parent", "fake_output",
            "write_results", "read_reference", "infinite_loop", "memory_bomb", "fork_bomb", "huge_output",
            "background_process", "forbidden_calls", "read_reference_runpy", "network", "hide_changes",
            *BREACHES} <= names


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


def test_every_submission_that_ran_reports_the_level_it_ran_at(graded):
    reps, _, _, level = graded
    ran = {name: r.sandbox for name, r in reps.items() if any(e.seconds is not None for e in r.exercises)}
    assert ran and set(ran.values()) == {level}, ran


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
    work = status("exhaust", "dims.split_heads")  # 128 MiB into the work folder: a full tmpfs, or stopped
    assert work.score == 0 and (graded[3] in ("namespaces", "user-namespace") or "more than 64 MiB" in work.message)
    held = status("exhaust", "masking.causal_mask")  # 12 processes of 320 MiB: stopped, or too slow to hold them
    assert "memory" in held.message or "timed out" in held.message


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
    assert _leftovers() == []


def test_the_instructors_files_and_the_venv_are_untouched(graded):
    assert graded[2].changed() == {}


def test_nothing_reaches_the_listeners(graded):
    assert graded[2].received == []


def test_forged_results_files_do_not_leak_out(graded):
    assert not Path("results.json").exists()
    assert not Path("/autograder/results/results.json").exists()


@pytest.mark.skipif(os.getuid() == 0, reason="as root the unisolated worker still changes user: run as a user")
def test_the_breaches_score_without_isolation(tmp_path, monkeypatch):
    """The attacks on the instructor can fail their tests: with no isolation (and no
    seccomp filter, which the level "none" keeps where it can) they succeed."""
    monkeypatch.setattr(sandbox, "SECCOMP_FILTER", False)
    stage = Stage(tmp_path)
    try:
        roomy = Limits(exercise_s=20, startup_s=60, submission_s=90, cpu_s=90)  # no time-out on a busy machine
        reps = grade_many([stage.attacks / f"{name}.py" for name in BREACHES], limits=roomy, jobs=2, seed=7,
                          isolation=Isolation("none", allow_none=True))
        scores = {Path(r.path).stem: r.score for r in reps}
        assert all(scores[name] > STUB_SCORE for name in BREACHES if name != "forge"), scores
        assert stage.received and set(stage.changed()) >= {".bashrc", "decoy.txt", "victim.py", "grades.json"}
        assert all(r.sandbox == "none" for r in reps)
    finally:
        stage.close()


@pytest.mark.skipif(os.getuid() != 0, reason="runs as root only: it makes an ordinary user to run this file again")
def test_the_attacks_hold_for_an_ordinary_user():
    if shutil.which("useradd") is None and not os.environ.get("CI"):
        pytest.skip("no useradd here to make the ordinary user")
    root = Path(__file__).resolve().parent.parent
    cmd = [sys.executable, str(root / "tests" / "as_user.py"), ORDINARY_USER, sys.executable, "-m", "pytest",
           str(Path(__file__).relative_to(root)), "-v", "-p", "no:cacheprovider", "-p", "no:xdist"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=root)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    ran = {level for level in sandbox.LEVELS[1:3] if f"[{level}-" in proc.stdout}
    assert ran and "test_the_breaches_score_without_isolation PASSED" in proc.stdout, tail
