"""Start the worker in a limited child process and watch it: the trusted side's half.

The grader writes a job folder (config, inputs, the pruned submission), starts
``worker.py`` in its own session with a scrubbed environment, and follows the progress
lines it writes on a pipe. To save starting Python and importing torch for every
submission, the worker is normally forked from a zygote (``worker.py --zygote``, one per
job slot, started once with numpy and torch imported and nothing of the course): the
forked child applies every per-submission step itself (session, file descriptors,
environment, folder, namespaces, limits, user) and exits after one submission, so it is
the same process the plain start gives. ``MHA_GRADER_ZYGOTE=0`` turns the zygote off. An exercise that runs past its time limit, or a worker that
dies, costs only the exercise that was running: the process group is killed and a fresh
worker carries on with the exercises left. Nothing the worker prints is read.

The worker confines itself at the strongest level the machine allows (``LEVELS``, see
``confine.py``) and says which it reached (``L n``); ``probe`` finds that level before a
batch, so that ``mha grade`` can say it, and refuse to grade with no isolation at all
unless told to (``Isolation.allow_none``). While a worker runs, ``watch.JobWatch`` bounds
what its folders and processes use in all.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .watch import DISK_INTERVAL_S, JobWatch

WORKER = Path(__file__).with_name("worker.py")

# The isolation levels, strongest first (the worker's confine.py has the same tuple).
LEVELS = ("namespaces", "user-namespace", "landlock", "none")
PROTECTS = {
    "namespaces": "run as root: new mount, network, PID and IPC namespaces, the course, other submissions and "
                  "home folders hidden, everything else read-only, an unprivileged user per grading slot",
    "user-namespace": "an unprivileged user namespace: new mount, network, PID and IPC namespaces, the course, other "
                      "submissions and home folders hidden, everything else read-only, no capabilities",
    "landlock": "Landlock and seccomp: only the system, Python and the job's own folders can be read, only the job's "
                "folders written; no sockets, no ptrace; processes left behind are killed",
    "none": "NO ISOLATION: the submissions run as you and can read, change or delete anything you can, including "
            "your other files, other submissions and the grades (a seccomp filter, where the kernel has one, still "
            "keeps them off the network)",
}


@dataclass(frozen=True)
class Isolation:
    """Which levels a worker may use: ``strongest`` and those below it; at ``none`` (no
    isolation) a submission runs only with ``allow_none``."""

    strongest: str = LEVELS[0]
    allow_none: bool = False

    def __post_init__(self):
        if self.strongest not in LEVELS:
            raise ValueError(f"isolation: {self.strongest!r} is not one of {', '.join(LEVELS)}")

    def levels(self) -> list[str]:
        return list(LEVELS[LEVELS.index(self.strongest):])

    def required(self) -> str:
        return "none" if self.allow_none else "landlock"


class NoIsolation(RuntimeError):
    """Grading would run the submissions with no isolation, and that was not allowed."""


def weakest(levels) -> str:
    """The weakest of ``levels`` (names of LEVELS; others are ignored), or "" for none."""
    known = [LEVELS.index(v) for v in levels if v in LEVELS]
    return LEVELS[max(known)] if known else ""


@dataclass
class Limits:
    """Limits for one submission. Times in seconds, sizes in bytes."""

    exercise_s: float = 10.0       # wall clock per exercise
    # wall clock per exercise that asks for a Triton kernel: on a CPU the interpreter runs a
    # grid's programs one after another, so a correct kernel with many small programs (one per
    # row, say) needs seconds where a plain-torch answer needs milliseconds
    kernel_exercise_s: float = 60.0
    startup_s: float = 60.0        # wall clock to start Python, import torch and load the code
    submission_s: float = 120.0    # wall clock for the whole submission, restarts included
    cpu_s: int = 120               # RLIMIT_CPU of each worker
    memory_bytes: int = 3 << 30    # RLIMIT_AS (torch alone reserves about 1 GB of address space)
    processes: int = 256           # RLIMIT_NPROC (counts the threads of the unprivileged user)
    file_bytes: int = 16 << 20     # RLIMIT_FSIZE
    # the job's work and out folders together, and each of /tmp, /dev/shm and the work folder's
    # tmpfs in the namespace levels; the memory of all its processes together is memory_bytes
    disk_bytes: int = 64 << 20

    def as_dict(self):
        return {"cpu_s": int(self.cpu_s), "memory_bytes": int(self.memory_bytes),
                "processes": int(self.processes), "file_bytes": int(self.file_bytes),
                "disk_bytes": int(self.disk_bytes)}


@dataclass
class RunReport:
    """What happened to each exercise index: "done", or a reason why it has no result."""

    status: dict[int, str] = field(default_factory=dict)
    restarts: int = 0
    # wall-clock seconds each exercise ran, from its start line to its done line (or to its
    # time limit), as the watcher saw them: for reports only, never for scoring
    seconds: dict[int, float] = field(default_factory=dict)
    level: str = ""  # the weakest isolation level its workers reached ("" if none said)


FIRST_UID = 62000  # workers grading at the same time run as 62000, 62001, ...


def unprivileged_user(slot: int = 0) -> tuple[int, int] | None:
    """(uid, gid) for the worker in grading slot ``slot`` when we run as root, else None
    (no change of user). Each slot has its own uid, so that one submission's fork bomb
    (RLIMIT_NPROC counts per user) or signals cannot reach another's worker; the group is
    ``nogroup``/``nobody``'s."""
    if os.getuid() != 0:
        return None
    import pwd  # Unix only: here, not at the top, so that mha report imports this anywhere

    try:
        gid = pwd.getpwnam("nobody").pw_gid
    except KeyError:
        gid = 65534
    return FIRST_UID + slot, gid


def site_dirs() -> list[str]:
    """Folders the worker needs on sys.path: where numpy and torch are installed."""
    import numpy
    import torch

    dirs = []
    for mod in (torch, numpy):
        d = str(Path(mod.__file__).resolve().parent.parent)
        if d not in dirs:
            dirs.append(d)
    return dirs


def package_dir() -> str:
    import mha

    return str(Path(mha.__file__).resolve().parent)


def course_dirs() -> list[str]:
    """What the worker must not see: the installed package (reference solutions live in
    mha.exercises) and, in a source checkout, the folders that hold lessons with their
    solutions, tests and fixtures."""
    pkg = Path(package_dir())
    dirs = [str(pkg)]
    root = pkg.parent.parent
    if pkg.parent.name == "src" and (root / "pyproject.toml").is_file():
        dirs += [str(root / d) for d in ("src", "lessons", "tests", "book", "_build", "benchmarks")
                 if (root / d).is_dir()]
    return dirs


SYSTEM = {"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin", "sys", "usr", "var"}


def hidden_candidates(extra: list[str]) -> list[str]:
    """Folders the worker covers: every top-level folder that is not part of the system
    (/tmp, /home, /root, /opt, /srv, project folders...), /var/tmp, /dev/shm, the terminals
    (/dev/pts) and the users' session folders (/run/user), and ``extra``
    (the course's own folders, the submission's folder). The worker keeps reachable what
    it needs inside them (Python, site-packages, its job folder)."""
    try:
        top = [f"/{n}" for n in os.listdir("/") if n not in SYSTEM]
    except OSError:
        top = ["/tmp", "/home", "/root", "/opt", "/srv"]
    return sorted(set(top + ["/var/tmp", "/dev/shm", "/dev/pts", "/run/user"] + list(extra)))


_probed: dict[str, str] = {}


def probe(isolation: Isolation | None = None) -> str:
    """The level a worker reaches here, at most ``isolation.strongest``: a worker started for
    an empty job confines itself as for a submission (the same folders hidden) and says how
    far it got; it imports nothing else, so this takes a fraction of a second. Remembered
    for the life of this process: the machine does not change under it."""
    import tempfile

    isolation = isolation or Isolation()
    if isolation.strongest in _probed:
        return _probed[isolation.strongest]
    base = Path(tempfile.mkdtemp(prefix="mha-probe-"))
    read_fd = None
    try:
        os.chmod(base, 0o711)
        jobdir = base / "job"
        for folder in (jobdir, jobdir / "work", jobdir / "out"):
            folder.mkdir(mode=0o755)
        user = unprivileged_user(0)
        if user:
            for folder in (jobdir / "work", jobdir / "out"):
                os.chown(folder, *user)
        read_fd, write_fd = os.pipe()
        keep = [str(jobdir), sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent)]
        cfg = {"progress_fd": write_fd, "hide": hidden_candidates([]), "keep": keep, "limits": Limits().as_dict(),
               "uid": user[0] if user else None, "gid": user[1] if user else None,
               "levels": isolation.levels(), "require": "none"}
        (jobdir / "config.json").write_text(json.dumps(cfg))
        try:
            proc = subprocess.Popen([sys.executable, "-I", "-S", str(WORKER), "--probe", str(jobdir)],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    cwd=str(jobdir / "work"), env=clean_env(jobdir / "work"),
                                    start_new_session=True, pass_fds=(write_fd,))
        finally:
            os.close(write_fd)
        said = b""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(said) < 1024:
            ready, _, _ = select.select([read_fd], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(read_fd, 1024) if ready else b""
            if not chunk:
                break
            said += chunk
        _kill(proc, None)
        level = "none"
        for line in said.decode("ascii", "replace").splitlines():
            kind, _, n = line.partition(" ")
            if kind == "L" and n.isdigit() and int(n) < len(LEVELS):
                level = LEVELS[int(n)]
        _probed[isolation.strongest] = level
        return level
    finally:
        if read_fd is not None:
            os.close(read_fd)
        shutil.rmtree(base, ignore_errors=True)


def clean_env(home: Path) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(home),
            "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
            # Triton kernels (lesson 14) run in Triton's interpreter, on the CPU, whatever
            # GPU the grading machine has: set before the submission imports triton.
            "TRITON_INTERPRET": "1"}


def run_job(jobdir: Path, jobs: list[dict], limits: Limits, *, hide: list[str], user,
            isolation: Isolation | None = None) -> RunReport:
    """Run ``jobs`` (dicts with index, function, traps) in workers until each is done or
    has a reason for having no result."""
    isolation = isolation or Isolation()
    report = RunReport()
    levels: list[str] = []
    start = time.monotonic()
    pending = list(jobs)
    while pending:
        left = limits.submission_s - (time.monotonic() - start)
        if left <= 0:
            for j in pending:
                report.status[j["index"]] = "the submission ran past its total time limit"
            break
        outcome = _one_worker(jobdir, pending, limits, hide, user, left, report.seconds, isolation, levels)
        started_any = False
        for j in pending:
            st = outcome.get(j["index"])
            if st is not None:
                report.status[j["index"]] = st
                started_any = True
        if not started_any:
            reason = outcome.get(-1, "the worker stopped before running any exercise")
            for j in pending:
                report.status[j["index"]] = reason
            break
        pending = [j for j in pending if j["index"] not in report.status]
        if pending:
            report.restarts += 1
    report.level = weakest(levels)
    return report


def _one_worker(jobdir: Path, jobs: list[dict], limits: Limits, hide, user, budget_s: float,
                seconds: dict | None = None, isolation: Isolation | None = None, levels: list | None = None) -> dict:
    """Start one worker for ``jobs``; return {index: "done" or reason} for the exercises it
    reached, and {-1: reason} when it reached none. ``seconds`` gets how long each ran, and
    ``levels`` the isolation level it reached."""
    isolation = isolation or Isolation()
    work = jobdir / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    out = jobdir / "out"
    out.mkdir(exist_ok=True)
    _tidy(out, {j["index"] for j in jobs})
    for p in (work, out):
        if user:
            os.chown(p, *user)
    read_fd, write_fd = os.pipe()
    keep = [str(jobdir), sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent),
            *site_dirs()]
    cfg = {"progress_fd": write_fd, "site": site_dirs(), "hide": hide, "keep": keep, "limits": limits.as_dict(),
           "uid": user[0] if user else None, "gid": user[1] if user else None,
           "levels": isolation.levels(), "require": isolation.required(), "seccomp": SECCOMP_FILTER, "run": jobs}
    (jobdir / "config.json").write_text(json.dumps(cfg))
    stderr = open(jobdir / "stderr.txt", "ab")
    zygote = _take_zygote(limits.startup_s)
    try:
        proc = zygote.spawn(jobdir, work, write_fd, stderr.fileno(), clean_env(work)) if zygote else None
        with _lock:
            STARTS["zygote" if proc else "fresh"] += 1
        if proc is None:
            proc = subprocess.Popen([sys.executable, "-I", "-S", str(WORKER), str(jobdir)],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                                    cwd=str(work), env=clean_env(work), start_new_session=True,
                                    pass_fds=(write_fd,))
    finally:
        os.close(write_fd)
        stderr.close()
    result: dict[int, str] = {}
    t0 = time.monotonic()
    hard_deadline = t0 + budget_s
    watch = _Progress(jobs, limits, deadline=t0 + min(limits.startup_s, budget_s),
                      seconds=seconds if seconds is not None else {})
    usage = JobWatch(jobdir, proc.pid, disk_bytes=limits.disk_bytes, memory_bytes=limits.memory_bytes)
    try:
        while True:
            now = time.monotonic()
            too_much = usage.over()
            if too_much:
                watch.drain(read_fd, result)
                if watch.current is not None:
                    result[watch.current] = too_much
                    watch.stop(watch.current)
                elif not result:
                    result[-1] = too_much
                break
            if now >= watch.deadline or now >= hard_deadline:
                # Read what is already in the pipe first: a "D i" written just before the
                # deadline, while this process was not scheduled, still counts.
                watch.drain(read_fd, result)
                now = time.monotonic()
                if now < watch.deadline and now < hard_deadline:
                    continue
                if watch.current is not None:
                    result[watch.current] = f"timed out (limit {watch.limit_of(watch.current):g} s)"
                    watch.stop(watch.current)
                elif not result:
                    result[-1] = ("the submission's code did not finish loading in time (limit "
                                  f"{limits.startup_s:g} s): remove long-running code outside functions")
                break
            if watch.eof:
                if proc.poll() is not None:
                    break
                time.sleep(0.01)
                continue
            ready, _, _ = select.select([read_fd], [], [], min(DISK_INTERVAL_S, max(0.0, watch.deadline - now)))
            if not ready:
                if PAUSE_AFTER_SELECT_TIMEOUT_S:  # tests only: widen the race below
                    try:
                        proc.wait(timeout=PAUSE_AFTER_SELECT_TIMEOUT_S)
                    except subprocess.TimeoutExpired:
                        pass
                if proc.poll() is not None:
                    # The worker has exited, but the lines it wrote since the select may
                    # still be in the pipe: read them before deciding anything. Then stop
                    # listening (a leftover process may hold the pipe open).
                    watch.drain(read_fd, result)
                    watch.eof = True
                continue
            chunk = os.read(read_fd, 4096)
            if not chunk:
                watch.eof = True
                continue
            watch.feed(chunk, result)
        code = proc.poll()
        current = watch.current
        reached = LEVELS[watch.level] if watch.level is not None and 0 <= watch.level < len(LEVELS) else None
        if reached and levels is not None:
            levels.append(reached)
        if reached and LEVELS.index(reached) > LEVELS.index(isolation.required()):
            result.clear()
            result[-1] = (f"not run: the sandbox reached only the level {reached!r} here ({PROTECTS[reached]}); "
                          "mha grade --allow-unsandboxed runs it anyway")
        elif current is not None and current not in result:
            why = _exit_reason(code)
            result[current] = f"the process ended while this exercise ran ({why})"
            watch.stop(current)
        elif not result and -1 not in result:
            result[-1] = f"the submission could not be loaded ({_exit_reason(code)})"
    finally:
        _kill(proc, watch.inner_pid)
        os.close(read_fd)
        if zygote:
            _give_back(zygote)
    return result


# Tests only (0 in production): after a select that timed out, the watcher pauses this
# many seconds, or until the worker has exited, before it looks at the worker; so the
# worker writes its last progress lines and exits inside that window every time.
PAUSE_AFTER_SELECT_TIMEOUT_S = 0.0
# Tests only (True in production): False leaves the worker's seccomp filter out, to show
# that the attacks it stops would succeed without it.
SECCOMP_FILTER = True
MAX_DRAIN_BYTES = 1 << 20


class _Progress:
    """The watcher's reading of the worker's progress lines: ``P pid`` (the keeper's child,
    PID 1 of its namespace where it has one), ``L n`` (the isolation level it reached, an
    index in LEVELS), ``S i`` (exercise i started) and ``D i`` (its results are written)."""

    def __init__(self, jobs, limits: Limits, *, deadline: float, seconds: dict | None = None):
        self.indexes = {j["index"] for j in jobs}
        self.limits_s = {j["index"]: float(j["exercise_s"]) for j in jobs if j.get("exercise_s")}
        self.seconds = {} if seconds is None else seconds  # index -> seconds it ran
        self.started = 0.0
        self.limits = limits
        self.deadline = deadline
        self.current = None
        self.inner_pid = None
        self.level = None  # the index in LEVELS of the isolation the worker reached
        self.buf = b""
        self.eof = False

    def feed(self, chunk: bytes, result: dict) -> None:
        self.buf += chunk
        if len(self.buf) > 1 << 16:  # a flood of fake progress lines: stop reading them
            self.buf = b""
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            parts = line.decode("ascii", "replace").split()
            if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
                continue
            kind, n = parts[0], int(parts[1])
            if kind == "P" and self.inner_pid is None:
                self.inner_pid = n
            elif kind == "L" and self.level is None:
                self.level = n
            elif kind == "S" and n in self.indexes and n not in result:
                self.current = n
                self.started = time.monotonic()
                self.deadline = self.started + self.limit_of(n)
            elif kind == "D" and n == self.current:
                result[n] = "done"
                self.stop(n)
                self.current = None
                self.deadline = time.monotonic() + self.limits.exercise_s

    def limit_of(self, n) -> float:
        """The wall-clock limit of exercise ``n``: its job's own, else the submission's."""
        return self.limits_s.get(n, self.limits.exercise_s)

    def stop(self, n: int) -> None:
        """Exercise ``n`` has ended (done, timed out, or its process died): note its time."""
        self.seconds[n] = round(time.monotonic() - self.started, 4)

    def drain(self, fd: int, result: dict) -> None:
        """Read whatever the pipe holds now, without waiting (at most MAX_DRAIN_BYTES)."""
        got = 0
        while got < MAX_DRAIN_BYTES:
            ready, _, _ = select.select([fd], [], [], 0)
            if not ready:
                return
            chunk = os.read(fd, 4096)
            if not chunk:
                self.eof = True
                return
            got += len(chunk)
            self.feed(chunk, result)


def _exit_reason(code) -> str:
    if code is None:
        return "still running, killed"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _kill(proc: subprocess.Popen, inner_pid: int | None) -> None:
    """Kill the worker's child and its group (in a namespace level: every process of its
    PID namespace with it), give its keeper a moment to kill whatever else is left and
    exit (confine.keep), then kill the keeper's group and reap."""
    if inner_pid is not None and proc.poll() is None:  # the keeper alive: the pid is still its child's
        for kill, target in ((os.kill, inner_pid), (os.killpg, inner_pid)):
            try:
                kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            proc.wait(timeout=KEEPER_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass


KEEPER_GRACE_S = 5.0  # how long the keeper may take to kill what the submission left


def _tidy(out: Path, pending: set[int]) -> None:
    """Before a worker starts: leave in ``out`` only the results of the exercises already
    done (a worker stopped for what it wrote leaves junk behind)."""
    for entry in out.iterdir():
        stem, _, suffix = entry.name.partition(".")
        if stem.isdigit() and int(stem) not in pending and suffix in ("json", "bin") and entry.is_file() \
                and not entry.is_symlink():
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


# ----------------------------------------------------------------------------- zygotes

class _Zygote:
    """A ``worker.py --zygote`` process and the socket to it (JSON requests and answers,
    file descriptors passed alongside; never pickle)."""

    def __init__(self):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        boot = json.dumps({"site": site_dirs(), "fd": theirs.fileno()})
        try:
            self.proc = subprocess.Popen([sys.executable, "-I", "-S", str(WORKER), "--zygote", boot],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, cwd="/", env=clean_env(Path("/")),
                                         start_new_session=True, pass_fds=(theirs.fileno(),))
        finally:
            theirs.close()
        self.sock = mine
        self.ready = False
        self.broken = False
        self.threads = None  # the zygote's thread count when ready (1: forking it is safe)

    def receive(self, timeout: float):
        """The zygote's next answer (a dict), or None after ``timeout`` seconds or when it
        has gone (then it is marked broken)."""
        ready, _, _ = select.select([self.sock], [], [], max(0.0, timeout))
        if not ready:
            return None
        try:
            data = self.sock.recv(1 << 16)
            obj = json.loads(data) if data else None
        except (OSError, ValueError):
            obj = None
        if not isinstance(obj, dict):
            self.broken = True
            return None
        return obj

    def wait_ready(self, timeout: float) -> bool:
        if not self.ready and not self.broken:
            answer = self.receive(timeout)
            self.ready = bool(answer and answer.get("ready"))
            self.threads = answer.get("threads") if answer else None
            self.broken = not self.ready
        return self.ready

    def spawn(self, jobdir: Path, work: Path, write_fd: int, stderr_fd: int, env: dict):
        """Fork a worker for ``jobdir``; a ``_ZygoteChild``, or None (then the zygote is
        broken and the caller starts the worker itself)."""
        req = {"jobdir": str(jobdir), "cwd": str(work), "env": env}
        try:
            socket.send_fds(self.sock, [json.dumps(req).encode()], [write_fd, stderr_fd])
        except OSError:
            self.broken = True
            return None
        answer = self.receive(30.0)
        if not answer or not isinstance(answer.get("pid"), int) or answer["pid"] <= 0:
            self.broken = True
            self.proc.kill()  # a child it may have forked dies with it
            return None
        return _ZygoteChild(self, answer["pid"])

    def close(self) -> None:
        try:
            self.sock.close()  # the zygote exits when its socket closes
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class _ZygoteChild:
    """The parts of ``subprocess.Popen`` the watcher uses, for a worker forked by a zygote
    (its parent, which reaps it and tells us its exit status)."""

    def __init__(self, zygote: _Zygote, pid: int):
        self.zygote, self.pid, self.returncode = zygote, pid, None

    def _collect(self, timeout: float) -> None:
        if self.returncode is not None:
            return
        answer = self.zygote.receive(timeout)
        if answer is not None and isinstance(answer.get("exit"), int):
            self.returncode = answer["exit"]
        elif self.zygote.broken:  # the zygote is gone: we cannot learn the status
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.returncode = -signal.SIGKILL

    def poll(self):
        self._collect(0.0)
        return self.returncode

    def wait(self, timeout=None):
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        while self.returncode is None:
            left = deadline - time.monotonic()
            if left <= 0:
                self.zygote.broken = True  # it still waits for this child: do not reuse it
                raise subprocess.TimeoutExpired("zygote child", timeout)
            self._collect(min(left, 1.0))
        return self.returncode


STARTS = {"zygote": 0, "fresh": 0}  # workers forked by a zygote, workers started afresh
# Whether the end of a batch (grader.grade_many) closes the idle zygotes. A process that
# grades batch after batch, as the test suite does, keeps them for the next: starting one
# imports torch, about a second of CPU. They are closed when the process exits either way.
CLOSE_ZYGOTES_AFTER_BATCH = True
_idle: list[_Zygote] = []
_busy: set = set()
_lock = threading.Lock()


def zygotes_enabled() -> bool:
    return os.environ.get("MHA_GRADER_ZYGOTE", "1") != "0" and hasattr(socket, "send_fds")


def _take_zygote(startup_s: float):
    """An idle zygote (started if none is idle and alive), ready to fork; None when
    zygotes are off or one cannot be started."""
    if not zygotes_enabled():
        return None
    while True:
        with _lock:
            z = _idle.pop() if _idle else None
        if z is None:
            break
        if z.proc.poll() is None and not z.broken:
            with _lock:
                _busy.add(z)
            return z
        z.close()  # it died while idle
    try:
        z = _Zygote()
    except OSError:
        return None
    if z.wait_ready(startup_s) and z.proc.poll() is None:
        with _lock:
            _busy.add(z)
        return z
    z.close()
    return None


def _give_back(z: _Zygote) -> None:
    """Back to the idle list once its child is reaped; a zygote that is broken, has died
    or still waits for a child is closed (a fresh one is started when needed)."""
    with _lock:
        _busy.discard(z)
    child_reaped = not z.broken and z.proc.poll() is None
    if child_reaped:
        with _lock:
            _idle.append(z)
    else:
        z.close()


def stop_zygotes() -> None:
    """Close every idle zygote (the batch is over)."""
    with _lock:
        idle = list(_idle)
        _idle.clear()
    for z in idle:
        z.close()


atexit.register(stop_zygotes)
