"""A seccomp filter for the grader's worker: the system calls a graded function never needs
and an attack does, refused with EPERM.

Refused: creating a socket of any family (``socketpair`` stays: it connects nothing), so
there is no network, and no connection to a named UNIX socket either, which Landlock does
not mediate: a desktop session's D-Bus (from which ``systemd-run --user`` starts anything
outside the sandbox), an SSH agent, Docker's socket; ``ptrace`` and reading or writing
another process's memory; ``mount``, ``unshare``, ``setns`` and namespace flags of
``clone`` (``clone3``, whose flags a filter cannot read, answers ENOSYS, so the C library
falls back on ``clone``); ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring`` (whose
requests no filter sees), the kernel keyrings, module loading, ``kexec``, ``reboot``,
``swapon``, ``acct``, file handles; ``kill(-1, ...)`` (every process of the user);
``ioctl(TIOCSTI)`` (typing into a terminal). A call made under another architecture's
numbers (x32) kills the process.

The filter is a fixed BPF program built here with ctypes, about 60 instructions: no
libseccomp needed. ``install()`` sets no-new-privileges first (a filter requires it) and
returns False where the kernel or the architecture offers no filter.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

# Numbers of the refused calls, per architecture (x86_64's table, then the generic one
# arm64 uses).
_X86_64 = dict(socket=41, ptrace=101, process_vm_readv=310, process_vm_writev=311, mount=165, umount2=166,
               pivot_root=155, chroot=161, unshare=272, setns=308, bpf=321, perf_event_open=298, keyctl=250,
               add_key=248, request_key=249, userfaultfd=323, kexec_load=246, kexec_file_load=320,
               init_module=175, finit_module=313, delete_module=176, reboot=169, swapon=167, swapoff=168,
               acct=163, quotactl=179, name_to_handle_at=303, open_by_handle_at=304, fanotify_init=300,
               lookup_dcookie=212, kcmp=312, iopl=172, ioperm=173, syslog=103,
               clone=56, kill=62, ioctl=16)
_GENERIC = dict(socket=198, ptrace=117, process_vm_readv=270, process_vm_writev=271, mount=40, umount2=39,
                pivot_root=41, chroot=51, unshare=97, setns=268, bpf=280, perf_event_open=241, keyctl=219,
                add_key=217, request_key=218, userfaultfd=282, kexec_load=104, kexec_file_load=294,
                init_module=105, finit_module=273, delete_module=106, reboot=142, swapon=224, swapoff=225,
                acct=89, quotactl=60, name_to_handle_at=264, open_by_handle_at=265, fanotify_init=262,
                lookup_dcookie=18, kcmp=272, syslog=116,
                clone=220, kill=129, ioctl=29)
# The same on every architecture (added after the tables were unified).
_COMMON = dict(pidfd_send_signal=424, io_uring_setup=425, io_uring_enter=426, io_uring_register=427,
               open_tree=428, move_mount=429, fsopen=430, fsconfig=431, fsmount=432, fspick=433,
               pidfd_getfd=438, mount_setattr=442, clone3=435)
# (table, AUDIT_ARCH_*, number of seccomp(2))
ARCHES = {"x86_64": (_X86_64, 0xC000003E, 317), "aarch64": (_GENERIC, 0xC00000B7, 277)}

ALWAYS = [name for name in list(_X86_64) + list(_COMMON) if name not in ("clone", "kill", "ioctl", "clone3")]
CLONE_NAMESPACES = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
TIOCSTI = 0x5412

# BPF, as <linux/filter.h> and <linux/seccomp.h> define it.
_LD_W_ABS, _JEQ_K, _JSET_K, _JGE_K, _RET_K = 0x20, 0x15, 0x45, 0x35, 0x06
_RET_ALLOW, _RET_KILL_PROCESS, _RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24  # offsets in struct seccomp_data (low 32 bits of an argument)
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1


def program(machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The filter for ``machine`` (default: this one) as (code, jt, jf, k) instructions;
    [] for an architecture without a table here."""
    machine = machine or platform.machine()
    if machine not in ARCHES:
        return []
    table, arch, _ = ARCHES[machine]
    nr = {**table, **_COMMON}
    deny = _RET_ERRNO | errno.EPERM
    prog = [(_LD_W_ABS, 0, 0, _ARCH), (_JEQ_K, 1, 0, arch), (_RET_K, 0, 0, _RET_KILL_PROCESS),
            (_LD_W_ABS, 0, 0, _NR)]
    if machine == "x86_64":  # the x32 numbers (bit 30) reach the same calls: refuse them all
        prog += [(_JGE_K, 0, 1, 0x40000000), (_RET_K, 0, 0, _RET_KILL_PROCESS)]
    for name in ALWAYS:
        if name in nr:
            prog += [(_JEQ_K, 0, 1, nr[name]), (_RET_K, 0, 0, deny)]
    prog += [(_JEQ_K, 0, 1, nr["clone3"]), (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS)]
    # an argument test: when the number matches, load the argument's low word, test it,
    # and reload the number for the tests after it
    for name, offset, test, value in [("clone", _ARG0, _JSET_K, CLONE_NAMESPACES),
                                      ("kill", _ARG0, _JEQ_K, 0xFFFFFFFF),
                                      ("ioctl", _ARG1, _JEQ_K, TIOCSTI)]:
        prog += [(_JEQ_K, 0, 4, nr[name]), (_LD_W_ABS, 0, 0, offset), (test, 0, 1, value),
                 (_RET_K, 0, 0, deny), (_LD_W_ABS, 0, 0, _NR)]
    return prog + [(_RET_K, 0, 0, _RET_ALLOW)]


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_Filter))]


def install() -> bool:
    """Set no-new-privileges and install the filter on every thread of this process; False
    (nothing installed) where that cannot be done."""
    prog = program()
    if not prog or not hasattr(os, "fork"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    filters = (_Filter * len(prog))(*[_Filter(*ins) for ins in prog])
    fprog = _Prog(len(prog), filters)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    number = ARCHES[platform.machine()][2]
    return libc.syscall(number, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(fprog)) == 0


def encoded(machine: str | None = None) -> bytes:
    """The program as the kernel reads it (for tests and for inspection with a BPF tool)."""
    return b"".join(struct.pack("<HBBI", *ins) for ins in program(machine))
