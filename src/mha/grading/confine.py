"""Confine the worker before it loads a submission: the strongest isolation this machine
allows, chosen here, at run time, and reported.

The levels, strongest first (``LEVELS``):
- ``namespaces``: the grader runs as root. New mount, network, PID and IPC namespaces, the
  view of ``namespaces.py``, and an unprivileged user of the grading slot's own.
- ``user-namespace``: an ordinary user in a user namespace of its own: the same view, every
  capability then dropped. Not for root: there the worker would keep uid 0, which owns the
  system's files and may write its sysctls even without a capability.
- ``landlock``: no namespace can be made (Ubuntu 24.04 forbids mounting in one, Docker's
  default profile forbids making one; root without CAP_SYS_ADMIN comes here, and still
  becomes the slot's unprivileged user). Landlock lets the worker read only the system,
  Python and its packages and its job's inputs, and write only its ``work`` and ``out``
  folders; it can ptrace, signal (Linux 6.12 and later) or read the memory of no process
  outside.
- ``none``: only the resource limits. The grader refuses to run a submission at this level
  unless the instructor says so (``mha grade --allow-unsandboxed``).
At every level the seccomp filter of ``seccomp.py`` is installed where the kernel has
seccomp (``landlock`` needs it: it is what keeps the network out there).

Each level finds out itself whether it worked and otherwise gives way to the next, and the
child that runs the submission writes ``L <index of the level>`` on the progress pipe before
it loads anything, so that the grader records what was reached, not what was hoped for.

Nothing outlives a job: ``keep`` forks. The parent, the *keeper*, is a child subreaper:
every process the submission leaves behind, double-forked or in a session of its own, is
handed to it when its parent dies, and it kills them all once the child that ran the
submission has ended (in the namespace levels the PID namespace does the same). The
keeper never runs student code, and the child cannot signal it: it runs as root, or in
another PID namespace, or outside the child's Landlock domain.

This file is loaded by the worker from its path, like the files it uses (``namespaces.py``,
``landlock.py``, ``seccomp.py``), before anything is hidden; it imports nothing of the
course.
"""

from __future__ import annotations

import os
import resource
import signal
import time

LEVELS = ("namespaces", "user-namespace", "landlock", "none")
NAMESPACE_LEVELS = ("namespaces", "user-namespace")
REFUSED_EXIT = 75  # the child exits so when the level reached is below the one required

# What the worker may read at the Landlock level besides Python, its packages and its job.
SYSTEM_READ = ("/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/sys")
DEVICES = {"/dev/null": ("r", "w"), "/dev/zero": ("r",), "/dev/full": ("r",), "/dev/random": ("r",),
           "/dev/urandom": ("r",)}

PR_SET_CHILD_SUBREAPER = 36


def confine(cfg, progress_fd: int, libc, modules) -> str:
    """Reach the strongest level ``cfg["levels"]`` allows, fork the keeper, and return, in
    the child only, the level reached; the child has then its limits, its user and its
    filter. ``modules``: the loaded ``namespaces``, ``landlock`` and ``seccomp`` modules."""
    namespaces, landlock, seccomp = modules
    allowed = cfg.get("levels", LEVELS)
    level, state, in_user_ns = "none", "unavailable", False
    if "namespaces" in allowed and os.getuid() == 0:
        state = namespaces.enter(libc, cfg, user=False)
        level = "namespaces" if state == "ok" else level
    if state == "unavailable" and "user-namespace" in allowed and os.getuid() != 0:
        state = namespaces.enter(libc, cfg, user=True)
        in_user_ns = state != "unavailable"
        level = "user-namespace" if state == "ok" else level
    keep(progress_fd, libc)
    os.setsid()  # its own session: the grader kills it and its group, not the keeper
    if level in NAMESPACE_LEVELS and not namespaces.inside(libc):
        level = "none"
    if level == "none" and "landlock" in allowed and restrict_files(cfg, landlock):
        level = "landlock"
    limit(cfg, shared_count=os.getuid() != 0 and not in_user_ns)
    if in_user_ns:
        if not namespaces.drop_capabilities(libc):
            os._exit(REFUSED_EXIT)
    else:
        drop_privileges(cfg)
    if not (cfg.get("seccomp", True) and seccomp.install()) and level == "landlock":
        level = "none"
    return level


def restrict_files(cfg, landlock) -> bool:
    """Landlock: read the system, Python and its packages (not the folders to hide inside
    them) and the job folder; write its ``work`` and ``out`` folders."""
    jobdir = os.path.realpath(cfg["jobdir"])
    keep = [k for k in cfg.get("keep", []) if os.path.realpath(k) != jobdir]
    read = [p for p in SYSTEM_READ if os.path.isdir(p)] + allowed_folders(keep, cfg.get("hide", [])) + [jobdir]
    write = [os.path.join(jobdir, "work"), os.path.join(jobdir, "out")]
    rights = {"r": landlock.READ_FILE, "w": landlock.WRITE_FILE}
    files = {path: sum(rights[r] for r in how) for path, how in DEVICES.items()}
    return landlock.restrict(read, write, files) > 0


def allowed_folders(keep, hidden) -> list[str]:
    """The ``keep`` folders, each replaced by its entries, recursively, where a ``hidden``
    folder lies inside it (the course's package in the venv's site-packages): a Landlock
    rule grants a whole folder, with no exception inside."""
    hidden = {os.path.realpath(h) for h in hidden}
    out: list[str] = []

    def add(path: str, depth: int) -> None:
        if path in hidden:
            return
        if depth < 8 and os.path.isdir(path) and any(h.startswith(path.rstrip("/") + "/") for h in hidden):
            for name in sorted(os.listdir(path)):
                add(os.path.join(path, name), depth + 1)
        elif os.path.exists(path):
            out.append(path)

    for k in sorted({os.path.realpath(k) for k in keep}):
        add(k, 0)
    return out


# ----------------------------------------------------------------------------- the keeper

def keep(progress_fd: int, libc) -> None:
    """Fork. The parent becomes the keeper: it says ``P <child's pid>`` on the progress
    pipe, waits for the child, kills every process left (``reap_all``) and exits as the
    child did. Only the child returns."""
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    pid = os.fork()
    if pid == 0:
        return
    try:
        os.write(progress_fd, f"P {pid}\n".encode())
        for fd in (progress_fd, 0, 1, 2):
            os.close(fd)
    except OSError:
        pass
    _, status = os.waitpid(pid, 0)
    reap_all()
    exit_as(status)


def exit_as(status: int) -> None:
    """End this process as the wait ``status`` says its child ended: the same exit code, or
    killed by the same signal, so the grader reads the same reason either way."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        except (OSError, ValueError):
            pass
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def reap_all(timeout_s: float = 5.0) -> bool:
    """Kill every child of this process, and reap it, until none is left (True) or
    ``timeout_s`` has passed. As a child subreaper, this process is given every orphaned
    descendant: killing a process hands its children to us, and the next round kills
    them. With no child left (the usual case) this costs one system call."""
    end = time.monotonic() + timeout_s
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            return True
        if time.monotonic() > end:
            return False
        for pid in children(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.002)


def children(parent: int) -> list[int]:
    """The processes whose parent is ``parent``, from /proc."""
    return [pid for pid, ppid in parent_pids().items() if ppid == parent]


def parent_pids() -> dict[int, int]:
    """Every process's parent, pid -> ppid, from /proc (the watcher reads it too)."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()      # after the command's name, which may hold spaces
        if len(fields) > 1:
            found[int(name)] = int(fields[1])
    return found


# ----------------------------------------------------------------------------- limits and user

def limit(cfg, *, shared_count: bool) -> None:
    """The resource limits of ``cfg["limits"]``. ``shared_count``: this process counts its
    processes with every other of its user's (no root, no user namespace of its own), so
    that the limit on processes is that many more than the user has now, not that many in
    all (an instructor's desktop may have more threads than the limit)."""
    lim = cfg["limits"]
    processes = lim["processes"] + (tasks_of(os.getuid()) if shared_count else 0)
    settings = [
        (resource.RLIMIT_CPU, lim["cpu_s"]),
        (resource.RLIMIT_AS, lim["memory_bytes"]),
        (resource.RLIMIT_NPROC, processes),
        (resource.RLIMIT_FSIZE, lim["file_bytes"]),
        (resource.RLIMIT_CORE, 0),
    ]
    for what, value in settings:
        try:
            hard = resource.getrlimit(what)[1]
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(what, (value, value))
        except (ValueError, OSError):
            pass
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write fails instead of killing us


def tasks_of(uid: int) -> int:
    """How many processes and threads ``uid`` runs now (what RLIMIT_NPROC counts)."""
    n = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    n += len(os.listdir(f"/proc/{name}/task"))
            except OSError:
                pass
    return n


def drop_privileges(cfg) -> None:
    """As root: become the grading slot's unprivileged user."""
    if os.getuid() != 0 or cfg.get("uid") is None:
        return
    os.setgroups([])
    os.setgid(cfg["gid"])
    os.setuid(cfg["uid"])
    if os.getuid() == 0:  # pragma: no cover - paranoia
        os._exit(70)
