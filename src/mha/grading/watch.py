"""What a worker uses in all, watched from the grader: disk in its job folder, memory over
all its processes.

The kernel's limits bound each process (address space, file size, number of processes),
not a submission: eight files of 16 MiB, or four processes of 1 GiB each, pass them all.
Where the worker runs in namespaces its ``work`` folder, /tmp and /dev/shm are tmpfs mounts
of a bounded size; its ``out`` folder, and at the Landlock level its ``work`` folder too,
are on the grader's disk. So the grader looks, a few times a second, at the size of the
job's ``work`` and ``out`` folders and at the anonymous memory of every process below the
worker's keeper, and stops the worker when either passes its limit. A submission can go
over by what it writes in one interval (``DISK_INTERVAL_S``: a folder of a few files is
read in microseconds) or allocates in another (``MEMORY_INTERVAL_S``: that look reads
/proc) before it is stopped.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from .confine import parent_pids

DISK_INTERVAL_S = 0.05
MEMORY_INTERVAL_S = 0.25
MAX_ENTRIES = 20_000  # a folder with more files than this is over its limit too
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class JobWatch:
    """``over()``: why the job must be stopped (a sentence), or None; cheap between looks."""

    def __init__(self, jobdir: Path, keeper_pid: int, *, disk_bytes: int, memory_bytes: int):
        self.folders = [Path(jobdir) / "work", Path(jobdir) / "out"]
        self.keeper = keeper_pid
        self.disk_bytes, self.memory_bytes = disk_bytes, memory_bytes
        self.next_disk = self.next_memory = time.monotonic()

    def over(self) -> str | None:
        now = time.monotonic()
        if now < self.next_disk:
            return None
        self.next_disk = now + DISK_INTERVAL_S
        used, entries = 0, 0
        for folder in self.folders:
            u, e = disk_use(folder, MAX_ENTRIES - entries)
            used, entries = used + u, entries + e
        if used > self.disk_bytes or entries >= MAX_ENTRIES:
            return (f"the submission wrote more than {self.disk_bytes >> 20} MiB (or {MAX_ENTRIES} files) "
                    "to its folders")
        if now < self.next_memory:
            return None
        self.next_memory = now + MEMORY_INTERVAL_S
        memory = anonymous_memory(descendants(self.keeper))
        if memory > self.memory_bytes:
            return f"the submission's processes used more than {self.memory_bytes >> 20} MiB of memory together"
        return None


def disk_use(folder: Path, max_entries: int) -> tuple[int, int]:
    """(bytes of disk, entries) under ``folder``, not following links, counting at most
    ``max_entries`` entries."""
    used, entries, stack = 0, 0, [str(folder)]
    while stack and entries < max_entries:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    entries += 1
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    used += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    if entries >= max_entries:
                        break
        except OSError:
            continue
    return used, entries


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (not ``root`` itself), from /proc."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parent_pids().items():
        children.setdefault(ppid, []).append(pid)
    found, stack = [], list(children.get(root, []))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack += children.get(pid, [])
    return found


def anonymous_memory(pids) -> int:
    """Resident anonymous memory of ``pids``, in bytes (resident less file-backed and shared,
    from /proc/PID/statm, which anyone may read). Pages a fork still shares with its parent
    count once per process: an overestimate, only for code that forks."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                fields = f.read().split()
            total += (int(fields[1]) - int(fields[2])) * PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total
