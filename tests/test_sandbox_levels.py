"""The grader's isolation levels, each on its own: the seccomp filter, Landlock, the level
a worker reaches and says, and mha grade's rule for grading with no isolation at all. The
attacks themselves are in tests/test_grader_attacks.py."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mha.exercises import get
from mha.grading import confine, landlock, sandbox, seccomp
from mha.grading.sandbox import LEVELS, Isolation

SRC = str(Path(__file__).resolve().parents[1] / "src")


def run_python(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh Python (a filter or a Landlock domain is for good: not in this one)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": SRC})


@pytest.mark.skipif(not seccomp.program(), reason="no seccomp filter for this architecture")
def test_the_seccomp_filter_refuses_sockets_ptrace_namespaces_and_kill_all_and_lets_the_rest_run():
    r = run_python("""
import ctypes, errno, os, socket
from mha.grading import seccomp
assert seccomp.install()
libc = ctypes.CDLL(None, use_errno=True)
def refused(call):
    try:
        call()
    except PermissionError:
        return True
    return False
assert refused(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
assert refused(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
assert refused(lambda: os.kill(-1, 0))
for name, args in [("ptrace", (16, os.getppid(), 0, 0)), ("unshare", (0x10000000,)), ("mount", (b"x", b"/", b"tmpfs", 0, None))]:
    assert getattr(libc, name)(*args) == -1 and ctypes.get_errno() == errno.EPERM, name
a, b = socket.socketpair()          # connects nothing: allowed
a.send(b"ok"); assert b.recv(2) == b"ok"
pid = os.fork()                      # plain forks and threads still work
if pid == 0:
    os._exit(7)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
print(sum(range(10)))
""")
    assert r.returncode == 0 and r.stdout.strip() == "45", r.stderr


@pytest.mark.skipif(landlock.abi() < 1, reason="no Landlock in this kernel")
def test_landlock_lets_a_process_read_and_write_only_the_folders_it_names(tmp_path):
    for name in ("read", "write", "other"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_text(name)
    r = run_python(f"""
import os
from mha.grading import landlock
t = {str(tmp_path)!r}
assert landlock.restrict(["/usr", "/lib", "/lib64", "/proc"] + [t + "/read"], [t + "/write"], {{}}) >= 1
def refused(call):
    try:
        call()
    except PermissionError:
        return True
    return False
assert open(t + "/read/f").read() == "read"
assert refused(lambda: open(t + "/read/f", "a"))
open(t + "/write/g", "w").write("new"); os.remove(t + "/write/f")
assert refused(lambda: open(t + "/other/f").read())
assert refused(lambda: os.listdir(t))
print("confined")
""")
    assert r.returncode == 0 and r.stdout.strip() == "confined", r.stderr
    assert (tmp_path / "write" / "g").exists() and not (tmp_path / "write" / "f").exists()
    assert (tmp_path / "other" / "f").read_text() == "other"


def test_landlock_grants_a_kept_folder_entry_by_entry_around_a_folder_to_hide(tmp_path):
    for sub in ("bin", "site/torch", "site/mha/exercises", "site/numpy"):
        (tmp_path / "venv" / sub).mkdir(parents=True)
    allowed = confine.allowed_folders([str(tmp_path / "venv")], [str(tmp_path / "venv/site/mha")])
    assert sorted(Path(p).relative_to(tmp_path).as_posix() for p in allowed) == [
        "venv/bin", "venv/site/numpy", "venv/site/torch"]


def test_each_level_asked_for_is_reached_or_a_weaker_one_and_none_is_none():
    reached = {level: sandbox.probe(Isolation(level)) for level in LEVELS}
    assert all(LEVELS.index(got) >= LEVELS.index(asked) for asked, got in reached.items()), reached
    assert reached["none"] == "none"
    if os.getuid() == 0:  # a user namespace is for ordinary users: root keeps to its own uid there
        assert reached["user-namespace"] in ("landlock", "none")


def test_the_command_line_offers_the_levels_of_the_sandbox():
    from mha import cli

    assert cli.ISOLATION_LEVELS == LEVELS


def test_an_unknown_level_is_refused_with_its_name():
    with pytest.raises(ValueError, match="'chroot' is not one of namespaces"):
        Isolation("chroot")


def mha_grade(tmp_path, *args) -> subprocess.CompletedProcess:
    sub = tmp_path / "alice.py"
    sub.write_text(inspect.getsource(get("dims.split_heads").reference).replace("torch.Tensor", "object"))
    return subprocess.run([sys.executable, "-m", "mha.cli", "grade", str(sub), "--only", "dims.split_heads",
                           "--json", str(tmp_path / "grades.json"), "--quiet", *args],
                          capture_output=True, text=True, timeout=300)


def test_mha_grade_says_the_level_it_reached_and_writes_it_in_the_grades(tmp_path):
    r = mha_grade(tmp_path)
    level = sandbox.probe()
    assert r.returncode == 0 and f"mha grade: isolation: {level} (" in r.stderr, r.stderr
    doc = json.loads((tmp_path / "grades.json").read_text())
    assert doc["sandbox"] == level and [s["sandbox"] for s in doc["submissions"]] == [level]


def test_mha_grade_refuses_to_grade_with_no_isolation_unless_told(tmp_path):
    refused = mha_grade(tmp_path, "--isolation", "none")
    assert refused.returncode == 2 and "refused: no isolation" in refused.stderr
    assert "--allow-unsandboxed" in refused.stderr and not (tmp_path / "grades.json").exists()
    allowed = mha_grade(tmp_path, "--isolation", "none", "--allow-unsandboxed")
    assert allowed.returncode == 0 and "WARNING: grading WITHOUT ISOLATION" in allowed.stderr
    assert json.loads((tmp_path / "grades.json").read_text())["sandbox"] == "none"
    assert "alice" in allowed.stdout and "3/3" in allowed.stdout


def test_grade_many_refuses_before_grading_where_there_is_no_isolation(tmp_path):
    from mha.grading.grader import grade_many

    with pytest.raises(sandbox.NoIsolation, match="NO ISOLATION"):
        grade_many([tmp_path / "never-read.py"], isolation=Isolation("none"))
