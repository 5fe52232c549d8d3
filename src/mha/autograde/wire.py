"""Plain values: the only thing that crosses between a graded function and whoever judges it.

A value returned by student code is *encoded* into a JSON tree plus a dict of numpy
arrays (stored as raw bytes with a JSON index, see ``pack``: nothing is ever unpickled). The trusted side then
*validates* that tree into :class:`Value` objects it built itself, so no object made by
student code (a tensor subclass, something with a forged ``__eq__``) is ever compared,
called or even kept.

Both layers use this module and neither owns it: the exercises (``check`` in a notebook
validates answers the same way) and the batch grader (its wire format). It imports only
the standard library, and numpy/torch lazily, so that the sandboxed worker can load it
on its own, by path, before it hides the course package from the student's code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Limits on what a result may contain (the worker also has a file-size limit).
MAX_DEPTH = 8
MAX_ITEMS = 64
MAX_ARRAY_ELEMENTS = 2_000_000
MAX_STR = 300
ARRAY_DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"}


class MalformedResult(ValueError):
    """Raised when data coming back from a worker is not a valid encoded value."""


# ----------------------------------------------------------------------------- encode

def encode(value, arrays: dict, depth: int = 0):
    """Encode ``value`` as a JSON-able tree; arrays go into ``arrays`` (name -> ndarray).

    Runs where the student's code runs (worker or notebook): anything unknown becomes
    an opaque ``{"t": "object"}`` so it can be reported, never compared.
    """
    import numpy as np

    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None
    if depth > MAX_DEPTH:
        return {"t": "object", "type": "nested too deeply"}
    if value is None:
        return {"t": "none"}
    if type(value) is bool or isinstance(value, np.bool_):
        return {"t": "bool", "v": bool(value)}
    if type(value) is int or isinstance(value, np.integer):
        return {"t": "int", "v": int(value)}
    if type(value) is float or isinstance(value, np.floating):
        return {"t": "float", "v": _float_text(float(value))}
    if type(value) is str:
        return {"t": "str", "v": value[:MAX_STR]}
    if torch is not None and isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace("torch.", "")
        t = torch.Tensor.detach(value)
        if t.dtype == torch.bfloat16:
            t = t.float()
        tree = _array(np.array(torch.Tensor.numpy(t.cpu().contiguous()), copy=True), "tensor", dtype, arrays)
        device = str(value.device)
        if device != "cpu" and tree["t"] == "tensor":
            tree["dev"] = device[:20]  # judged: an answer stays on its inputs' device
        return tree
    if isinstance(value, np.ndarray):
        return _array(np.array(value, copy=True), "ndarray", str(value.dtype), arrays)
    if torch is not None and isinstance(value, torch.Size):
        value = tuple(int(v) for v in value)
    if type(value) in (tuple, list):
        kind = "tuple" if type(value) is tuple else "list"
        return {"t": kind, "v": [encode(v, arrays, depth + 1) for v in value[:MAX_ITEMS]],
                "n": len(value)}
    if type(value) is dict:
        items = list(value.items())[:MAX_ITEMS]
        return {"t": "dict", "v": [[encode(k, arrays, depth + 1), encode(v, arrays, depth + 1)]
                                   for k, v in items], "n": len(value)}
    return {"t": "object", "type": type(value).__qualname__[:MAX_STR]}


def _float_text(x: float):
    return x if math.isfinite(x) else repr(x)  # "nan", "inf", "-inf" survive strict JSON


def _array(a, kind: str, dtype: str, arrays: dict):
    if a.dtype.kind == "O" or a.size > MAX_ARRAY_ELEMENTS:
        return {"t": "object", "type": f"{kind} too large or not numeric"}
    name = f"a{len(arrays)}"
    arrays[name] = a
    return {"t": kind, "dtype": dtype, "a": name}


# ----------------------------------------------------------------------------- arrays on disk

MAX_NDIM = 16


def pack(arrays: dict) -> tuple[list, bytes]:
    """Arrays (name -> ndarray) as an index (JSON-able: name, dtype, shape, offset per
    array) and one buffer of their raw bytes, each at an offset aligned to 8 bytes."""
    index, chunks, offset = [], [], 0
    for name, a in arrays.items():
        data = a.tobytes()  # C order
        pad = -offset % 8
        chunks += [b"\0" * pad, data]
        offset += pad
        index.append([name, str(a.dtype), list(a.shape), offset])
        offset += len(data)
    return index, b"".join(chunks)


def unpack(index, data: bytes) -> dict:
    """The arrays of an untrusted ``pack`` result, as read-only views of ``data``; raises
    :class:`MalformedResult` for any entry that is not a known dtype, a sane shape, or
    inside the buffer."""
    import numpy as np

    if not isinstance(index, list) or len(index) > 4 * MAX_ITEMS ** 2:
        raise MalformedResult("bad array index")
    arrays = {}
    for entry in index:
        if not (isinstance(entry, list) and len(entry) == 4):
            raise MalformedResult("bad array index")
        name, dtype, shape, offset = entry
        if (not isinstance(name, str) or len(name) > 32 or dtype not in ARRAY_DTYPES
                or not isinstance(shape, list) or len(shape) > MAX_NDIM
                or not all(type(n) is int and 0 <= n <= MAX_ARRAY_ELEMENTS for n in shape)
                or type(offset) is not int or offset < 0):
            raise MalformedResult("bad array index")
        count = math.prod(shape)
        dt = np.dtype(dtype)
        if count > MAX_ARRAY_ELEMENTS or offset + count * dt.itemsize > len(data):
            raise MalformedResult("array outside its buffer")
        arrays[name] = np.frombuffer(data, dtype=dt, count=count, offset=offset).reshape(shape)
    return arrays


# ----------------------------------------------------------------------------- decode

@dataclass(frozen=True)
class Value:
    """A validated plain value: ``kind`` is one of none, bool, int, float, str, tensor,
    ndarray, tuple, list, dict, object. ``data`` holds the python value, the numpy
    array (tensor/ndarray), a tuple of Values (tuple/list), a tuple of (key, value)
    pairs (dict), or the type name (object). ``dtype`` is set for tensors/arrays."""

    kind: str
    data: object = None
    dtype: str | None = None
    length: int | None = None
    device: str | None = None  # for a tensor that was not on the CPU

    def describe(self, reveal: bool = True) -> str:
        """A short description that never includes array values; with ``reveal=False``
        it says only the kind (no shapes, lengths or type names that code could forge)."""
        if not reveal:
            return {"ndarray": "a numpy array", "object": "an object of an unsupported type",
                    "int": "an int", "none": "None"}.get(self.kind, f"a {self.kind}")
        if self.kind in ("tensor", "ndarray"):
            return f"{self.kind} of shape {tuple(self.data.shape)} and dtype {self.dtype}"
        if self.kind == "object":
            return f"an object of type {self.data}"
        if self.kind in ("tuple", "list", "dict"):
            return f"a {self.kind} of length {self.length}"
        return f"a {self.kind}"


_NUMPY_NAMES: dict = {}  # numpy dtype -> its name, for ARRAY_DTYPES (str(dtype) is slow in numpy 2)


def _numpy_name(dtype, np) -> str | None:
    """The name of ``dtype`` if it is one of ARRAY_DTYPES (native byte order), else None."""
    if not _NUMPY_NAMES:
        _NUMPY_NAMES.update({np.dtype(name): name for name in ARRAY_DTYPES})
    return _NUMPY_NAMES.get(dtype)


def validate(tree, arrays) -> Value:
    """Turn an untrusted encoded tree (from JSON) into a :class:`Value`.

    ``arrays`` maps names to numpy arrays loaded with ``allow_pickle=False``. Raises
    :class:`MalformedResult` for anything unexpected.
    """
    import numpy as np

    return _validate(tree, arrays, 0, np)


def _validate(tree, arrays, depth, np) -> Value:
    if depth > MAX_DEPTH or not isinstance(tree, dict) or not isinstance(tree.get("t"), str):
        raise MalformedResult("not an encoded value")
    t = tree["t"]
    v = tree.get("v")
    if t == "none":
        return Value("none")
    if t == "bool" and type(v) is bool:
        return Value("bool", v)
    if t == "int" and type(v) is int:
        return Value("int", v)
    if t == "float":
        if type(v) in (int, float):
            return Value("float", float(v))
        if v in ("nan", "inf", "-inf"):
            return Value("float", float(v))
    if t == "str" and type(v) is str:
        return Value("str", v[:MAX_STR])
    if t in ("tensor", "ndarray"):
        name, dtype = tree.get("a"), tree.get("dtype")
        if not isinstance(name, str) or name not in arrays or not isinstance(dtype, str):
            raise MalformedResult("array missing")
        a = arrays[name]
        held = _numpy_name(a.dtype, np) if isinstance(a, np.ndarray) else None
        if held is None or a.size > MAX_ARRAY_ELEMENTS:
            raise MalformedResult("array of an unexpected type")
        if dtype != "bfloat16" and dtype != held:
            raise MalformedResult("array dtype does not match")
        device = tree.get("dev")
        return Value(t, a, dtype=dtype, device=device[:20] if isinstance(device, str) else None)
    if t in ("tuple", "list") and isinstance(v, list) and len(v) <= MAX_ITEMS:
        n = tree.get("n")
        return Value(t, tuple(_validate(x, arrays, depth + 1, np) for x in v),
                     length=n if type(n) is int else len(v))
    if t == "dict" and isinstance(v, list) and len(v) <= MAX_ITEMS:
        pairs = []
        for pair in v:
            if not isinstance(pair, list) or len(pair) != 2:
                raise MalformedResult("bad dict item")
            pairs.append((_validate(pair[0], arrays, depth + 1, np), _validate(pair[1], arrays, depth + 1, np)))
        n = tree.get("n")
        return Value("dict", tuple(pairs), length=n if type(n) is int else len(pairs))
    if t == "object" and isinstance(tree.get("type"), str):
        return Value("object", tree["type"][:MAX_STR])
    raise MalformedResult(f"not an encoded value of kind {t!r}")


# ----------------------------------------------------------------------------- inputs

def noncontiguous(t):
    """The values of tensor ``t`` in a layout that is not contiguous: a strided slice of a
    larger tensor (every other element along the last dimension, one extra element along
    every dimension), with NaN (zero for integer and bool tensors) in the gaps. Any
    ``.view`` that merges two dimensions of size > 1 fails on it, as on the output of a
    transpose; ``.contiguous()``, ``.reshape`` and every elementwise op work. Tensors with
    fewer than two elements come back as a copy (no layout of them is non-contiguous)."""
    import torch

    if not isinstance(t, torch.Tensor) or t.numel() < 2:
        return t.clone() if isinstance(t, torch.Tensor) else t
    shape = list(t.shape)
    big = [n + 1 for n in shape[:-1]] + [2 * shape[-1] + 1]
    fill = float("nan") if (t.is_floating_point() or t.is_complex()) else 0
    out = torch.full(big, fill, dtype=t.dtype)
    view = out[tuple(slice(0, n) for n in shape[:-1]) + (slice(0, 2 * shape[-1], 2),)]  # (*shape)
    view.copy_(t)
    return view



def decode_input(tree, arrays):
    """Rebuild trusted inputs (made by the grader) as python/torch values for the call."""
    import torch

    t = tree["t"]
    if t in ("none", "bool", "int", "str"):
        return tree.get("v")
    if t == "float":
        return float(tree["v"])
    if t == "tensor":
        a = arrays[tree["a"]]
        x = torch.from_numpy(a.copy())
        return x.to(torch.bfloat16) if tree["dtype"] == "bfloat16" else x
    if t == "ndarray":
        return arrays[tree["a"]].copy()
    if t == "tuple":
        return tuple(decode_input(x, arrays) for x in tree["v"])
    if t == "list":
        return [decode_input(x, arrays) for x in tree["v"]]
    if t == "dict":
        return {decode_input(k, arrays): decode_input(v, arrays) for k, v in tree["v"]}
    raise ValueError(f"cannot decode an input of kind {t!r}")
