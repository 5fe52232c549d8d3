"""Reading the record of one graded call (see :mod:`mha.autograde.calls`) into an
:class:`~mha.autograde.model.Outcome`.

The record may come from a sandboxed worker, so it is trusted in nothing: anything unexpected
raises :class:`~mha.autograde.wire.MalformedResult`. ``check`` reads its own records the same
way, so that it and the grader see the same outcome.
"""

from __future__ import annotations

from . import calls
from .model import Called, Op, Outcome
from .wire import MalformedResult, validate


def read_record(record, arrays: dict, n_args: int) -> Outcome:
    """The :class:`Outcome` of one call from its record, which may come from a sandboxed worker
    and is trusted in nothing: anything unexpected raises :class:`MalformedResult`."""
    status = record.get(calls.STATUS) if isinstance(record, dict) else None
    if status == calls.VALUE:
        out = Outcome(Called.VALUE, value=validate(record.get(calls.VALUE_TREE), arrays))
    elif status == calls.RAISED:
        typ, bases = record.get(calls.ERROR_TYPE), record.get(calls.ERROR_BASES)
        if not isinstance(typ, str) or not isinstance(bases, list):
            raise MalformedResult("bad exception record")
        out = Outcome(Called.RAISED, error_type=typ[:100],
                      error_bases=tuple(b for b in bases if isinstance(b, str))[:12],
                      error_message=str(record.get(calls.ERROR_MESSAGE, ""))[:calls.MAX_MESSAGE])
    elif status == calls.NOT_ATTEMPTED:
        out = Outcome(Called.NOT_ATTEMPTED)
    elif status == calls.MISSING:
        return Outcome(Called.MISSING, reason="the function is not defined after loading the code")
    else:
        raise MalformedResult("unknown result kind")
    mutated = record.get(calls.MUTATED, [])
    if not isinstance(mutated, list) or not all(type(i) is int and 0 <= i < n_args for i in mutated):
        raise MalformedResult("bad list of changed arguments")
    out.mutated = tuple(sorted(set(mutated)))
    if calls.TRACE in record:
        out.trace = _read_trace(record[calls.TRACE])
        out.truncated = record.get(calls.TRUNCATED) is True
    if calls.LAUNCHES in record:
        n = record[calls.LAUNCHES]
        if type(n) is not int or not 0 <= n < 1 << 31:
            raise MalformedResult("bad count of kernel launches")
        out.launches = n
    return out


def _read_trace(entries) -> tuple[Op, ...]:
    if not isinstance(entries, list) or len(entries) > calls.MAX_TRACE:
        raise MalformedResult("bad trace")

    def shapes(items):
        if not isinstance(items, list) or len(items) > 32:
            raise MalformedResult("bad trace")
        out = []
        for shape in items:
            if not isinstance(shape, list) or len(shape) > 16 or not all(type(n) is int and n >= 0 for n in shape):
                raise MalformedResult("bad trace")
            out.append(tuple(shape))
        return tuple(out)

    ops = []
    for e in entries:
        if not (isinstance(e, list) and len(e) == 4 and isinstance(e[0], str) and isinstance(e[3], bool)):
            raise MalformedResult("bad trace")
        ops.append(Op(e[0][:100], shapes(e[1]), shapes(e[2]), e[3]))
    return tuple(ops)
