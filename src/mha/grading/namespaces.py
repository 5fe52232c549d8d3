"""The worker's view of the machine in new namespaces: as root, or as an ordinary user in a
user namespace of its own.

``enter`` moves the worker into new mount, network, PID and IPC namespaces (and, without
root, a new user namespace in which it keeps its own uid), then builds what it may see:
- the course's files, other submissions, home folders and every other folder outside the
  system are covered by empty tmpfs mounts, except the folders it needs (Python, its
  packages, its job folder), which are bound back inside the cover (``hide``);
- /tmp, /var/tmp and /dev/shm become tmpfs mounts of ``disk_bytes`` each, and so does the
  job's ``work`` folder: nothing written there reaches the disk, and all of it is bounded;
- everything else is made read-only (``read_only``), but for the job's ``out`` folder:
  a worker that runs as the instructor (a user namespace) can then change no file of
  theirs, not the venv (a ``.pth`` would run in their next Python), not a submission.
After the fork, the child, PID 1 of the new PID namespace, mounts a /proc of its own
(``inside``): it sees no other process, and every process it starts dies with it.

Each step says whether it worked: ``enter`` answers "unavailable" when the namespaces
could not be made (nothing changed: a weaker level can be tried), "failed" when a later
step did not work (Ubuntu 24.04 lets an unprivileged user make a user namespace but not
mount in it; the process is then in new namespaces with the host's view, and only a
level that needs none, Landlock, can follow), and "ok".
"""

from __future__ import annotations

import os
import re

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = (
    0x00020000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_NOSYMFOLLOW = 1, 2, 4, 8, 32, 256
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 18, 1 << 21
# A mount's own flags, as /proc/self/mountinfo names them: a remount must repeat those the
# kernel has locked (a user namespace may add read-only, not drop nosuid).
OPTION_FLAGS = {"ro": MS_RDONLY, "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC,
                "noatime": MS_NOATIME, "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME,
                "nosymfollow": MS_NOSYMFOLLOW}
WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")  # covered by a bounded tmpfs the worker may write in


def mount(libc, source, target, fstype, flags, data) -> bool:
    enc = (lambda s: s.encode() if s is not None else None)
    return libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) == 0


def enter(libc, cfg, *, user: bool) -> str:
    """New namespaces and the view the module describes; "ok", "unavailable" or "failed"."""
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | (CLONE_NEWUSER if user else 0)
    if libc.unshare(flags) != 0:
        return "unavailable"
    if user and not _map_self(uid, gid):
        return "failed"
    if not mount(libc, None, "/", None, MS_REC | MS_PRIVATE, None):
        return "failed"
    owner = (uid, gid) if user or cfg.get("uid") is None else (cfg["uid"], cfg["gid"])
    try:
        return "ok" if view(libc, cfg, owner) else "failed"
    except OSError:  # a folder to keep that cannot be opened, a mount table that cannot be read
        return "failed"


def _map_self(uid: int, gid: int) -> bool:
    """In a new user namespace: the same uid and gid inside as outside, nothing else."""
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    except OSError:
        return False
    return True


def view(libc, cfg, owner) -> bool:
    jobdir = os.path.realpath(cfg["jobdir"])
    work, out = os.path.join(jobdir, "work"), os.path.join(jobdir, "out")
    size = int(cfg["limits"]["disk_bytes"])
    keep = cfg.get("keep", [])
    if not hide(libc, cfg.get("hide", []), keep, size):
        return False
    expose(libc, keep)
    if not (mount(libc, out, out, None, MS_BIND, None)  # a mount of its own: it stays writable
            and mount(libc, "tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                      f"size={size},mode=700,uid={owner[0]},gid={owner[1]}")):
        return False
    writable = {work, out, *WRITABLE}
    read_only(libc, writable)
    return all(os.statvfs(p).f_flag & os.ST_RDONLY for p in ["/", jobdir, *keep] if os.path.exists(p))


def outermost(paths) -> list[str]:
    """The real paths of the folders among ``paths``, less those inside another."""
    real = sorted({os.path.realpath(p) for p in paths if os.path.isdir(p)})
    return [p for p in real if not any(p.startswith(q.rstrip("/") + "/") for q in real if q != p)]


def hide(libc, candidates, keep, size: int) -> bool:
    """Cover each candidate with an empty tmpfs (a file with /dev/null), then bind back the
    kept folders inside it. A candidate inside a kept folder is covered too (the course's
    package installed in the venv's site-packages). /tmp, /var/tmp and /dev/shm get a
    tmpfs of ``size`` bytes that anyone may write in, the others one that nobody can."""
    keep = outermost(keep)
    for c in sorted({os.path.realpath(c) for c in candidates}):
        if os.path.islink(c) or not os.path.exists(c) or c in keep:
            continue
        inside = [k for k in keep if k.startswith(c.rstrip("/") + "/")]
        if os.path.isfile(c):
            mount(libc, "/dev/null", c, None, MS_BIND, None)
            continue
        fds = {k: os.open(k, os.O_PATH | os.O_DIRECTORY) for k in inside}
        try:
            options = f"size={size},mode=1777" if c in WRITABLE else f"size={64 << 10 if inside else 4096},mode=755"
            if not mount(libc, "tmpfs", c, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC * (not inside), options):
                return False
            for k, fd in fds.items():
                os.makedirs(k, mode=0o755, exist_ok=True)
                if not mount(libc, f"/proc/self/fd/{fd}", k, None, MS_BIND | MS_REC, None):
                    return False
        finally:
            for fd in fds.values():
                os.close(fd)
    return True


def expose(libc, keep) -> None:
    """Make each ``keep`` folder reachable by the unprivileged user: a folder on its way
    that others may not enter (a Python installed under /root, mode 700) is covered by an
    empty tmpfs that others may enter, in which the kept folders are bound back. Without
    this, any module of the standard library not imported before the privileges go (say
    ``colorsys``, which sympy needs for torch's meta tensors) would fail to import."""
    keep = sorted({os.path.realpath(k) for k in keep if os.path.isdir(k)})
    closed: dict[str, list[str]] = {}  # the topmost closed folder -> kept folders below it
    for k in keep:
        parts = k.strip("/").split("/")
        for n in range(1, len(parts)):
            folder = "/" + "/".join(parts[:n])
            try:
                if not os.stat(folder).st_mode & 0o001:
                    closed.setdefault(folder, []).append(k)
                    break
            except OSError:
                break
    for folder, inside in closed.items():
        fds = {k: os.open(k, os.O_PATH | os.O_DIRECTORY) for k in inside}
        try:
            if not mount(libc, "tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=755"):
                continue
            for k, fd in fds.items():
                os.makedirs(k, mode=0o755, exist_ok=True)
                mount(libc, f"/proc/self/fd/{fd}", k, None, MS_BIND | MS_REC, None)
        finally:
            for fd in fds.values():
                os.close(fd)


def mounts() -> list[tuple[str, set[str]]]:
    """(mount point, its own options) of every mount this process's namespace has, in order."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            out.append((point, set(fields[5].split(","))))
    return out


def read_only(libc, writable) -> None:
    """Remount every mount read-only but those at the ``writable`` mount points (their
    locked flags repeated; a mount out of sight, under a cover, may refuse: it is out of
    sight)."""
    for point, options in mounts():
        if point in writable or "ro" in options:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for name in options:
            flags |= OPTION_FLAGS.get(name, 0)
        mount(libc, None, point, None, flags, None)


def inside(libc) -> bool:
    """In PID 1 of the new PID namespace: a /proc that shows only this namespace."""
    return mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)


PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 28, 47, 4
SECBITS_LOCKED_NOROOT = 0x2F  # NOROOT, NO_SETUID_FIXUP and KEEP_CAPS_LOCKED, each locked


def drop_capabilities(libc) -> bool:
    """In a user namespace, after the mounts: give up every capability, for good (no
    program started later gets one back, even where the uid inside is 0). True once
    /proc/self/status shows none left."""
    import ctypes

    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_SET_SECUREBITS, SECBITS_LOCKED_NOROOT, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()                   # effective, permitted, inheritable: none
    if libc.capset(header, data) != 0:
        return False
    with open("/proc/self/status") as f:
        caps = dict(line.split(":", 1) for line in f if line.startswith("Cap"))
    return all(int(caps.get(k, "1"), 16) == 0 for k in ("CapEff", "CapPrm", "CapInh", "CapAmb"))
