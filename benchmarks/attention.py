"""Benchmark script: the same as `mha bench`. Run: python benchmarks/attention.py --help"""

import sys

from mha.benchmark import main

if __name__ == "__main__":
    sys.exit(main())
