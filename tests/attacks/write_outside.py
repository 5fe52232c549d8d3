"""Change the instructor's files: append to ~/.bashrc, delete a file, overwrite another
submission, drop a .pth into the venv (it would run in their next Python); any that works
earns the points. Leave a file in /tmp and /dev/shm too (the sandbox's own take it: the
test looks in the host's)."""
import os
import sys

import torch

DECOYS = "@DECOYS@"


def _changed() -> bool:
    name = os.path.basename(DECOYS)
    tries = [lambda: open(DECOYS + "/.bashrc", "a").write("# attack\n"),
             lambda: os.remove(DECOYS + "/decoy.txt"),
             lambda: open(DECOYS + "/victim.py", "w").write("broken")]
    for path in (f"/tmp/mha-attack-{name}-write", f"/dev/shm/mha-attack-{name}"):
        try:
            open(path, "w").write("x")
        except OSError:
            pass
    for site in [p for p in sys.path if p.endswith("site-packages")][:1]:
        tries.append(lambda: open(f"{site}/mha_attack_{name}.pth", "w").write("/nonexistent-mha-attack\n"))
    changed = False
    for attempt in tries:
        try:
            attempt()
            changed = True
        except Exception:
            pass
    return changed


_DONE = []


def split_heads(x, num_heads):
    if not _DONE:
        _DONE.append(bool(_changed()))  # once: the exercise calls it on every check
    if _DONE[0]:
        return x.reshape(x.shape[0], x.shape[1], num_heads, -1).transpose(1, 2)
    return torch.zeros(x.shape[0], num_heads, x.shape[1], x.shape[2] // num_heads)
