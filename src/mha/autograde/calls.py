"""Calling a graded function: the one procedure that the notebook's ``check`` and the
grader's sandboxed worker both follow, so that they judge the same thing.

For every case, :func:`run_case`
1. gives the function private copies of the arguments (non-contiguous where the case says);
2. replaces the functions the exercise forbids by stand-ins that raise :class:`ForbiddenCall`
   (``set_traps``), for the length of the call only;
3. when the exercise audits *how* an answer computes (an exercise with an ``audit``), records
   every torch function and tensor method the call runs, with its inputs' and outputs' shapes
   (:func:`recorder`);
4. when the exercise asks for a Triton kernel (an exercise with ``kernel``), counts the kernels
   the call launches (:func:`watch_launches`), and in Triton's interpreter stops a kernel whose
   unmasked lanes load or store outside the tensors it was given (:func:`bounds_checked`);
5. after the call, notes every argument the function changed, in value or in place (a
   tensor's version counter counts each in-place operation);
6. encodes the result as a plain value (:mod:`mha.autograde.wire`).

It returns a *record*, a JSON-able dict whose keys and words are named below, once: the worker
writes it to disk for the grader; ``check`` turns it into an :class:`~mha.autograde.Outcome`
through the grader's own reader (:mod:`mha.autograde.record`), so the two see the same outcome
and print the same verdict.

This module imports only the standard library, and torch lazily, so that the worker can
load it by path, on its own, before it hides the course package (see ``grading/worker.py``).
The torch functions it uses after a call are looked up when it is loaded, before any student
code has run in the worker.
"""

from __future__ import annotations

import importlib
import opcode

MAX_TRACE = 4096      # distinct operations kept in a trace
MAX_MESSAGE = 300

# The record of one call: its keys, and the words of its STATUS.
STATUS, VALUE_TREE, MUTATED, TRACE, TRUNCATED, LAUNCHES = "s", "v", "mutated", "trace", "truncated", "launches"
ERROR_TYPE, ERROR_BASES, ERROR_MESSAGE = "type", "bases", "msg"
VALUE, RAISED, NOT_ATTEMPTED, MISSING = "value", "raised", "not attempted", "missing"


class ForbiddenCall(RuntimeError):
    """Raised by the stand-ins for functions an exercise may not use."""


# ----------------------------------------------------------------------------- traps

_RESOLVED: dict = {}


def resolve(dotted: str):
    """(owner, attribute) for a dotted name such as ``torch.nn.functional.softmax`` or
    ``torch.Tensor.softmax`` (the owner may be a module or a class); None if it does not
    exist in this Python. Remembered: traps are set around every call."""
    if dotted not in _RESOLVED:
        _RESOLVED[dotted] = _find(dotted)
    return _RESOLVED[dotted]


def _find(dotted: str):
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except Exception:
            continue
        try:
            for name in parts[cut:-1]:
                owner = getattr(owner, name)
            getattr(owner, parts[-1])
        except Exception:
            return None
        return owner, parts[-1]
    return None


def set_traps(names) -> list:
    """Replace forbidden attributes (dotted names of functions or methods) by stand-ins that
    raise ForbiddenCall; returns what :func:`restore` needs."""
    saved = []
    for dotted in names:
        found = resolve(dotted)
        if found is None:
            continue
        owner, attr = found
        had_own = attr in getattr(owner, "__dict__", {})
        original = owner.__dict__[attr] if had_own else getattr(owner, attr)
        if isinstance(original, type(importlib)) or not callable(original):
            continue  # a forbidden module is refused by the static check; torch may need it itself
        def forbidden(*args, _name=dotted, **kwargs):
            raise ForbiddenCall(f"{_name} is not allowed in this exercise")
        try:
            setattr(owner, attr, forbidden)
        except (AttributeError, TypeError):
            continue
        saved.append((owner, attr, original, had_own))
    return saved


def restore(saved) -> None:
    for owner, attr, original, had_own in reversed(saved):
        try:
            if had_own:
                setattr(owner, attr, original)
            else:
                delattr(owner, attr)
        except Exception:
            pass


# ----------------------------------------------------------------------------- recording

_RECORDER = None


def recorder():
    """A fresh :class:`Recorder`: a TorchFunctionMode (torch.overrides), which sees every torch
    function and tensor method a call runs, at the level the code is written, for the cost of
    a Python call each (a TorchDispatchMode would see the aten operations, at the price of
    importing torch._dynamo, a second of CPU time, in every worker)."""
    global _RECORDER
    if _RECORDER is None:
        from torch.overrides import TorchFunctionMode

        class Recorder(TorchFunctionMode):
            """Records each distinct (function name, input shapes, output shapes)."""

            def __init__(self):
                super().__init__()
                self.seen: dict = {}
                self.truncated = False
                self.paused = 0  # > 0 while a Triton kernel runs: its launcher is recorded, not its launch

            def __torch_function__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if self.paused:
                    return out
                try:
                    key = (func, _shapes(args) + (_shapes(kwargs.values()) if kwargs else ()),
                           _shapes(out) if isinstance(out, (tuple, list)) else _shapes((out,)))
                    if key not in self.seen:
                        if len(self.seen) < MAX_TRACE:
                            self.seen[key] = None
                        else:
                            self.truncated = True
                except Exception:  # recording must never change what the call does
                    pass
                return out

            def entries(self) -> list:
                return [[str(getattr(func, "__name__", func))[:100], [[int(n) for n in s] for s in ins],
                         [[int(n) for n in s] for s in outs], False] for func, ins, outs in self.seen]

        _RECORDER = Recorder
    return _RECORDER()


_TENSOR = None


def _shapes(items) -> tuple:
    """The shapes (torch.Size, hashable) of the tensors among ``items``, lists searched too."""
    global _TENSOR
    if _TENSOR is None:
        import torch

        _TENSOR = torch.Tensor
    out = []
    for a in items:
        if isinstance(a, _TENSOR):
            out.append(a.shape)
        elif isinstance(a, (tuple, list)):
            out.extend(_shapes(a))
    return tuple(out[:32])


# ----------------------------------------------------------------------------- kernel launches

# Where a Triton kernel launch arrives, whatever launched it (kernel[grid](...), an autotuner,
# heuristics): (module, class, method, whether the method has a ``warmup`` flag). Compiled for
# a GPU, a launch is JITFunction.run (with warmup=True it compiles and launches nothing); in
# Triton's interpreter, InterpretedFunction.run hands every launch to a GridExecutor, which
# runs the grid's programs.
LAUNCH_POINTS = (("triton.runtime.jit", "JITFunction", "run", True),
                 ("triton.runtime.interpreter", "GridExecutor", "__call__", False))


OUT_OF_BOUNDS = "the kernel {verb} memory outside the tensors it was given"


def _extents(args) -> list[tuple[int, int]] | None:
    """The byte ranges [start, end) of the storages of the tensors among ``args`` (tuples and
    Triton's dtype-reinterpreting wrappers searched too): the memory a launch may touch. None
    when a tensor is on a GPU: the interpreter then works on host copies at other addresses."""
    out = []
    for a in args:
        if isinstance(a, (tuple, list)):
            inner = _extents(a)
            if inner is None:
                return None
            out.extend(inner)
            continue
        a = getattr(a, "base", a) if not hasattr(a, "untyped_storage") else a   # TensorWrapper, descriptor
        storage = getattr(a, "untyped_storage", None)
        if callable(storage):
            if getattr(getattr(a, "device", None), "type", "cpu") != "cpu":
                return None
            st = storage()
            out.append((st.data_ptr(), st.data_ptr() + st.nbytes()))
    return out


def bounds_checked(builder, extents: list[tuple[int, int]]) -> list:
    """Make the interpreter's ``builder`` check, before every load, store and atomic, that each
    lane its mask lets through addresses bytes inside one of ``extents``; else it raises
    IndexError (the interpreter itself checks nothing: such a lane reads or writes whatever lies
    there in the process, and can corrupt the heap). Returns what :func:`restore` needs."""
    import numpy as np

    starts = np.array([e[0] for e in extents], dtype=np.uint64)
    ends = np.array([e[1] for e in extents], dtype=np.uint64)

    def check(ptrs, mask, verb):
        addr = ptrs.data
        if mask is not None:
            addr = addr[np.broadcast_to(mask.data, addr.shape)]
        addr = addr.reshape(-1, 1).astype(np.uint64)
        if addr.size == 0:
            return
        size = np.uint64(ptrs.get_element_ty().primitive_bitwidth // 8 or 1)
        inside = ((addr >= starts) & (addr + size <= ends)).any(axis=1)
        if not inside.all():
            raise IndexError(f"{OUT_OF_BOUNDS.format(verb=verb)}: {int((~inside).sum())} lane(s) with a True "
                             "mask point past them (a mask that is missing or one lane too wide?)")

    def load(ptrs, mask, *rest, _original=builder.create_masked_load):
        check(ptrs, mask, "read")
        return _original(ptrs, mask, *rest)

    def store(ptrs, value, mask, *rest, _original=builder.create_masked_store):
        check(ptrs, mask, "wrote")
        return _original(ptrs, value, mask, *rest)

    def rmw(op, ptrs, value, mask, *rest, _original=builder.create_atomic_rmw):
        check(ptrs, mask, "wrote")
        return _original(op, ptrs, value, mask, *rest)

    def cas(ptrs, cmp, value, *rest, _original=builder.create_atomic_cas):
        check(ptrs, None, "wrote")
        return _original(ptrs, cmp, value, *rest)

    saved = []
    for attr, fn in (("create_masked_load", load), ("create_masked_store", store),
                     ("create_atomic_rmw", rmw), ("create_atomic_cas", cas)):
        saved.append((builder, attr, builder.__dict__.get(attr), attr in builder.__dict__))
        setattr(builder, attr, fn)
    return saved


def watch_launches(counter: list, recording=None) -> list:
    """Wrap Triton's launch points so that each launch that returns adds one to
    ``counter[0]``; returns what :func:`restore` needs. While a launch runs, ``recording`` (a
    :func:`recorder`, or None) records nothing: what the launcher does around its kernels is
    recorded, not the interpreter's own handling of their arguments. Only a Triton already imported is
    watched: importing it here could choose the wrong way to run its kernels (see
    ``mha.kernels``), so the callers import it first, each the right way (``check`` through
    ``mha.kernels``, the grader's worker before it loads a submission)."""
    import sys

    saved = []
    for module, cls, attr, has_warmup in LAUNCH_POINTS:
        owner = getattr(sys.modules.get(module), cls, None)
        original = getattr(owner, "__dict__", {}).get(attr)
        if not callable(original):
            continue

        builder = None if has_warmup else getattr(sys.modules[module], "interpreter_builder", None)

        def launch(*args, _original=original, _has_warmup=has_warmup, _builder=builder, **kwargs):
            if recording is not None:
                recording.paused += 1
            extents = None if _builder is None else _extents([*args[1:], *kwargs.values()])
            checked = [] if extents is None else bounds_checked(_builder, extents)
            try:
                out = _original(*args, **kwargs)
            finally:
                restore(checked)
                if recording is not None:
                    recording.paused -= 1
            if not (_has_warmup and kwargs.get("warmup")):
                counter[0] += 1
            return out

        try:
            setattr(owner, attr, launch)
        except (AttributeError, TypeError):
            continue
        saved.append((owner, attr, original, True))
    return saved


# ----------------------------------------------------------------------------- one call

def make_runner():
    """A fresh :func:`run_case`. Everything it uses after a student's call (torch's functions,
    the traps, the recorder) is bound here, in its closure, when it is made: the worker makes
    its own before it loads a submission and keeps it in a local variable, so that code which
    replaces this module's names (or torch's) cannot change how its calls are watched."""
    import torch

    Tensor, clone, equal, isnan = torch.Tensor, torch.Tensor.clone, torch.equal, torch.isnan
    is_floating, nan_to_num, version_of = torch.is_floating_point, torch.nan_to_num, torch.Tensor._version.__get__
    make_recorder, trap, untrap, watch, stub, raised = recorder, set_traps, restore, watch_launches, is_stub, _raised

    def snapshot(args) -> list:
        return [(a, tuple(a.shape), clone(a), version_of(a)) if isinstance(a, Tensor) else None for a in args]

    def changed(snap) -> list[int]:
        out = []
        for i, s in enumerate(snap):
            if s is None:
                continue
            a, shape, copy, version = s
            try:
                same = version_of(a) == version and tuple(a.shape) == shape and (
                    equal(a, copy) or (is_floating(a) and equal(isnan(a), isnan(copy))
                                       and equal(nan_to_num(a, 0.0, 0.0, 0.0), nan_to_num(copy, 0.0, 0.0, 0.0))))
            except Exception:
                same = False
            if not same:
                out.append(i)
        return out

    def run_case(fn, args, *, plain, arrays: dict, noncontiguous=(), traps=(), trace: bool = False,
                 launches: bool = False) -> dict:
        """Call ``fn(*args)`` as a graded call and describe what happened as a record.

        ``args`` are the function's own copies (they may be changed by the call); the
        positions in ``noncontiguous`` are passed in a strided layout. ``arrays`` collects the
        result's arrays (see :func:`mha.autograde.wire.encode`). With ``launches``, the record says
        how many Triton kernels the call launched. Never raises for anything ``fn`` does,
        except KeyboardInterrupt."""
        args = [plain.noncontiguous(a) if i in noncontiguous else a for i, a in enumerate(args)]
        snap = snapshot(args)
        saved = trap(traps)
        counter = [0]
        mode = make_recorder() if trace else None
        watched = watch(counter, mode) if launches else []
        try:
            try:
                if mode is not None:
                    with mode:
                        value = fn(*args)
                else:
                    value = fn(*args)
            finally:
                untrap(watched)
                untrap(saved)
            record = {STATUS: VALUE, VALUE_TREE: plain.encode(value, arrays)}
        except NotImplementedError as e:
            # the stub's is not an answer; torch's own (a dtype an operation lacks, say) is one
            record = {STATUS: NOT_ATTEMPTED} if stub(e, fn) else raised(e)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - SystemExit and friends score zero
            record = raised(e)
        record[MUTATED] = changed(snap)
        if mode is not None:
            record[TRACE] = mode.entries()
            record[TRUNCATED] = mode.truncated
        if launches:
            record[LAUNCHES] = counter[0]
        return record

    return run_case


_RUNNER = None


def run_case(fn, args, *, plain, arrays: dict, noncontiguous=(), traps=(), trace: bool = False,
             launches: bool = False) -> dict:
    """Call ``fn(*args)`` as a graded call (see :func:`make_runner`) and return its record."""
    global _RUNNER
    if _RUNNER is None:
        _RUNNER = make_runner()
    return _RUNNER(fn, args, plain=plain, arrays=arrays, noncontiguous=noncontiguous, traps=traps, trace=trace,
                   launches=launches)


_RAISE = opcode.opmap["RAISE_VARARGS"]


def is_stub(e: BaseException, fn) -> bool:
    """Whether ``e``, a NotImplementedError, is the stub's: raised by a ``raise`` statement of
    the graded function itself (the student notebook's ``raise NotImplementedError(...)``).
    One that torch raises from inside an operation (``bool_mask & float_mask``: "not
    implemented for 'Float'"), or that a helper raises, comes from an answer that was written."""
    tb = e.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    try:
        return code is getattr(fn, "__code__", None) and code.co_code[tb.tb_lasti] == _RAISE
    except (IndexError, TypeError):
        return False


def _raised(e: BaseException) -> dict:
    """The record of a call that raised ``e``: its type, the names of its bases, its message."""
    try:
        message = str(e)[:MAX_MESSAGE]
    except Exception:
        message = ""
    return {STATUS: RAISED, ERROR_TYPE: type(e).__name__[:100],
            ERROR_BASES: [c.__name__[:100] for c in type(e).__mro__][:12], ERROR_MESSAGE: message}
