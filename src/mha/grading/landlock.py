"""Landlock for the grader's worker: what an unprivileged process can do to itself so that
it reaches only some folders (Linux 5.13 and later, no root, no namespace, also inside a
default container).

``restrict(read, write, files)`` lets the process read (and run) the folders ``read``,
read and write ``write`` (create, remove, truncate, rename inside them), read or write the
single ``files`` (``/dev/null``), and nothing else: no other file can be opened, listed,
made or removed, whatever its mode. From ABI 4 on (Linux 6.7) TCP bind and connect are
refused too, and from ABI 6 (6.12) the process can no longer signal processes outside its
domain, nor reach abstract UNIX sockets outside it. A process in a domain cannot ptrace
one outside it, nor read its ``/proc/PID/environ`` or memory. The domain is inherited by
every child and cannot be left.

Three system calls and two structures, called with ctypes: no dependency. (The Python
packages that wrap Landlock are young and cover the file system only.)
"""

from __future__ import annotations

import ctypes
import os
import stat

_CREATE, _ADD_RULE, _RESTRICT = 444, 445, 446  # the same numbers on every architecture
_VERSION = 1  # LANDLOCK_CREATE_RULESET_VERSION
_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = (
    16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
REFER, TRUNCATE, IOCTL_DEV = 8192, 16384, 32768  # ABI 2, 3, 5
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2              # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2   # ABI 6

READ = EXECUTE | READ_FILE | READ_DIR
WRITE = READ_FILE | READ_DIR | WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | REFER | TRUNCATE
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # all a rule on a file may grant


class _Ruleset(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def abi() -> int:
    """The Landlock ABI version the kernel offers; 0 where it has none (or it is disabled)."""
    if not hasattr(os, "fork"):
        return 0
    try:
        version = _libc().syscall(_CREATE, None, 0, _VERSION)
    except (AttributeError, OSError):
        return 0
    return max(0, version)


def handled(version: int) -> tuple[int, int, int]:
    """The (file system, network, scope) rights a ruleset of ABI ``version`` governs: all
    that version knows."""
    fs = (1 << 13) - 1
    fs |= REFER if version >= 2 else 0
    fs |= TRUNCATE if version >= 3 else 0
    fs |= IOCTL_DEV if version >= 5 else 0
    net = NET_BIND_TCP | NET_CONNECT_TCP if version >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0
    return fs, net, scoped


def restrict(read: list[str], write: list[str], files: dict[str, int]) -> int:
    """Confine this process (and its future children) as the module says; return the ABI
    version used, 0 when Landlock is not there or a step failed (then nothing is confined).
    A folder that does not exist is left out. Sets no-new-privileges."""
    version = abi()
    if version < 1:
        return 0
    libc = _libc()
    fs, net, scoped = handled(version)
    attr = _Ruleset(fs, net, scoped)
    size = 8 if version < 4 else 16 if version < 6 else 24
    ruleset = libc.syscall(_CREATE, ctypes.byref(attr), size, 0)
    if ruleset < 0:
        return 0
    try:
        rules = [(p, READ & fs) for p in read] + [(p, WRITE & fs) for p in write]
        rules += [(p, rights & FILE_RIGHTS & fs) for p, rights in files.items()]
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    rights &= FILE_RIGHTS
                rule = _PathBeneath(rights, fd)
                if libc.syscall(_ADD_RULE, ruleset, _PATH_BENEATH, ctypes.byref(rule), 0) != 0:
                    return 0
            finally:
                os.close(fd)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return 0
        if libc.syscall(_RESTRICT, ruleset, 0) != 0:
            return 0
    finally:
        os.close(ruleset)
    return version
