"""Use more than a submission may: 128 MiB in the work folder, 96 MiB in /tmp and in
/dev/shm, twelve processes of 320 MiB each, sleepers left running. Still alive 1.5 s after
going over (the grader looks several times a second), it returns correct answers."""
import os
import select
import subprocess
import time

import torch


def _fill(folder: str, mib: int) -> bool:
    try:
        for n in range(mib // 16):
            with open(os.path.join(folder, f"mha-attack-fill-{os.getpid()}-{n}"), "wb") as f:
                f.write(b"x" * (16 << 20))
        return True
    except OSError:
        return False


_DONE = {}  # each attack once (an exercise calls the function on every check)


def _once(key, attack) -> bool:
    if key not in _DONE:
        _DONE[key] = attack()
        if _DONE[key]:
            time.sleep(1.5)  # over the limit, and still alive?
    return _DONE[key]


def split_heads(x, num_heads):
    if _once("work", lambda: _fill(".", 128)):
        return x.reshape(x.shape[0], x.shape[1], num_heads, -1).transpose(1, 2)
    return torch.zeros(x.shape[0], num_heads, x.shape[1], x.shape[2] // num_heads)


def heads_into_batch(x, num_heads):
    if _once("tmp", lambda: _fill("/tmp", 96) or _fill("/dev/shm", 96)):
        T, B, C = x.shape
        return x.reshape(T, B * num_heads, C // num_heads).transpose(0, 1)
    return torch.zeros(x.shape[1] * num_heads, x.shape[0], x.shape[2] // num_heads)


def causal_mask(q_len, k_len):
    if _once("processes", _hold):
        return torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)
    return torch.zeros(q_len, k_len, dtype=torch.bool)


def _hold() -> bool:
    for _ in range(8):
        subprocess.Popen(["sleep", "2345.6"], start_new_session=True)
    ready, done = os.pipe()
    for _ in range(12):  # 12 x 320 MiB, each process under its own limit, 3.75 GiB together
        if os.fork() == 0:
            try:
                block = bytearray(320 << 20)
                for i in range(0, len(block), 4096):
                    block[i] = 1
                os.write(done, b"x")
                time.sleep(30)
            finally:
                os._exit(0)
    held, deadline = 0, time.monotonic() + 2.5
    while held < 12 and select.select([ready], [], [], max(0.0, deadline - time.monotonic()))[0]:
        held += len(os.read(ready, 12))
    return held == 12
