"""Read what only the instructor may: their files, another submission, the environment of
the grader (an ancestor that is not a worker), the other jobs of the batch. Each read that
works earns the points (a correct answer), so a leak scores."""
import os

import torch

DECOYS = "@DECOYS@"  # the test's stand-in for the instructor's home


def _ancestors_environ() -> list[bytes]:
    got, pid = [], os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                worker = b"worker.py" in f.read()
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if not worker:
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    got.append(f.read(64))
            except OSError:
                pass
        pid = parent
    return [e for e in got if e]


def _leaked() -> list:
    got = _ancestors_environ()
    for path in (DECOYS + "/.ssh/id_ed25519", DECOYS + "/victim.py"):
        try:
            with open(path) as f:
                got.append(f.read(64))
        except OSError:
            pass
    try:
        got += os.listdir(os.path.dirname(os.path.dirname(os.getcwd())))[1:]  # the other jobs of the batch
    except OSError:
        pass
    return got


_DONE = []


def split_heads(x, num_heads):
    if not _DONE:
        _DONE.append(bool(_leaked()))  # once: the exercise calls it on every check
    if _DONE[0]:
        return x.reshape(x.shape[0], x.shape[1], num_heads, -1).transpose(1, 2)
    return torch.zeros(x.shape[0], num_heads, x.shape[1], x.shape[2] // num_heads)
