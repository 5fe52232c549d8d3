"""The grader's wire format: the plain values of :mod:`mha._plain` (kept under this name
for code that imports it from here)."""

from mha._plain import (ARRAY_DTYPES, MAX_ARRAY_ELEMENTS, MAX_DEPTH, MAX_ITEMS, MAX_STR,  # noqa: F401
                        MalformedResult, Value, decode_input, encode, noncontiguous, pack, unpack,
                        validate)
