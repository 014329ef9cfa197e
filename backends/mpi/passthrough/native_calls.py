"""MPI's blocking C calls made directly for the runs of a plan on the same buffers.

A plan binds its buffers once, so each run can call ``MPI_Bcast``, ``MPI_Allreduce`` ... with
the addresses, counts and handles found when it was made, instead of handing mpi4py the
buffer specs to parse again on every call (most of mpi4py's time on a small call).
``native_call(mpi_comm, name, arguments)`` takes the mpi4py method's name and the arguments
``MPICall.arguments`` built for it and returns a callable doing the same C call, or None
where it cannot: not compiled, an MPI other than Open MPI (whose handles are pointers), a
call not listed in ``_KINDS``, or arguments other than ``[array, datatype]`` specs of
contiguous numpy arrays, ``MPI.IN_PLACE``, None, ints, datatypes and ops.  Counts are
derived as mpi4py derives them from the same specs (bytes over the datatype's extent, per
rank where the call takes a count per rank).

The call releases the GIL as mpi4py does (other threads - the progress engine, the stall
monitor - run while it waits) and raises ``MPI.Exception`` for an error code, as mpi4py
would, for the caller's ``call_error``.

What surprises people: the callable holds the arrays and keeps their addresses; it is only
for a plan's arguments, whose arrays the plan holds and never replaces.
"""
from __future__ import annotations

import ctypes
import re

try:
    import cython
except ImportError:   # (running uncompiled without Cython)
    from ....core import pure_cython as cython
import numpy as np
from mpi4py import MPI

__all__ = ["native_call"]

# The C signatures, by the mpi4py method that a State's ``calls.blocking`` names.
_KINDS = {"Barrier": 0, "Bcast": 1, "Allreduce": 2, "Reduce": 3, "Send": 4, "Allgather": 5,
          "Alltoall": 7, "Gather": 6, "Scatter": 8}   # (7 and 8: 5's and 6's C signatures)

_OPEN_MPI = MPI.get_vendor()[0] == "Open MPI"
_INT_MAX = 2 ** 31 - 1
_functions: dict[str, int] = {}


def native_call(mpi_comm, name: str, arguments: tuple):
    """A callable making ``mpi_comm.<name>(*arguments)``'s C call directly; None where it
    cannot (see the module's docstring)."""
    kind = _KINDS.get(name)
    if not cython.compiled or kind is None or not _OPEN_MPI:
        return None
    function = _function(name)
    if function is None:
        return None
    size = mpi_comm.Get_size()
    try:
        fields = _fields(kind, arguments, size)
    except _NotNative:
        return None
    if not all(-1 <= value <= _INT_MAX for value in fields[2:4] + fields[7:]):
        return None      # (counts beyond a C int: mpi4py's large-count calls)
    call = NativeCall()
    call.set(kind, function, MPI._handleof(mpi_comm), arguments, *fields)
    return call


def native_array_call(mpi_comm, name: str, arguments: tuple, positions: list):
    """``native_call``'s callable taking new arrays for the specs at ``positions`` of
    ``arguments`` (0 and 1, in order) on each call, as numpy arrays of the specs' own
    dtype, shape and layout (which the caller has checked); None where it cannot."""
    if not positions or len(positions) > 2 or positions[0] not in (0, 1) \
            or (len(positions) == 2 and positions != [0, 1]):
        return None
    call = native_call(mpi_comm, name, arguments)
    if call is None:
        return None
    call.first = positions[0]
    return call.on_arrays


class _NotNative(Exception):
    """Arguments this module does not translate."""


def _fields(kind: int, arguments: tuple, size: int) -> tuple:
    """``(a, b, count_a, count_b, type_a, type_b, op, root)`` for ``kind``'s C call."""
    null = MPI._handleof(MPI.DATATYPE_NULL)
    if kind == 0:
        if arguments:
            raise _NotNative
        return 0, 0, 0, 0, null, null, 0, 0
    if kind == 1:
        buf, root = arguments
        a, count, datatype = _message(buf)
        return a, 0, count, 0, datatype, null, 0, _int(root)
    if kind in (2, 3):
        send, recv, op = arguments[:3]
        root = _int(arguments[3]) if kind == 3 else 0
        if type(op) is not MPI.Op:
            raise _NotNative
        if recv is None:              # (a reduce off the root)
            b, count, datatype = 0, 0, null
            a, send_count, send_type = _message(send)
        else:
            b, count, datatype = _message(recv)
            a, send_count, send_type = (1, count, datatype) if send is MPI.IN_PLACE \
                else _message(send)
            if (send_count, send_type) != (count, datatype):
                raise _NotNative
        return a, b, send_count, 0, send_type, null, MPI._handleof(op), root
    if kind == 4:
        buf, dest, tag = arguments
        a, count, datatype = _message(buf)
        return a, 0, count, _int(tag), datatype, null, 0, _int(dest)
    if kind in (5, 7):   # a count per rank received; for alltoall, sent too
        send, recv = arguments
        b, count, datatype = _message(recv)
        if send is MPI.IN_PLACE:
            return 1, b, 0, _divided(count, size), null, datatype, 0, 0
        a, send_count, send_type = _message(send)
        if kind == 7:
            send_count = _divided(send_count, size)
        return a, b, send_count, _divided(count, size), send_type, datatype, 0, 0
    send, recv, root = arguments   # gather, scatter: the root's side has a count per rank
    a, send_count, send_type = _side(send)
    b, count, datatype = _side(recv)
    if kind == 6 and recv not in (None, MPI.IN_PLACE):
        count = _divided(count, size)
    if kind == 8 and send not in (None, MPI.IN_PLACE):
        send_count = _divided(send_count, size)
    return a, b, send_count, count, send_type, datatype, 0, _int(root)


def _side(spec) -> tuple:
    """``_message`` of a rooted call's side: None (unused off the root) and ``MPI.IN_PLACE``
    are the null address and 1, with no count or datatype."""
    if spec is None or spec is MPI.IN_PLACE:
        return int(spec is MPI.IN_PLACE), 0, MPI._handleof(MPI.DATATYPE_NULL)
    return _message(spec)


def _message(spec) -> tuple:
    """``(address, count, datatype handle)`` of an ``[array, datatype]`` spec."""
    if type(spec) is not list or len(spec) != 2:
        raise _NotNative
    array, datatype = spec
    if type(array) is not np.ndarray or not array.flags.c_contiguous \
            or type(datatype) is not MPI.Datatype:
        raise _NotNative
    extent = datatype.Get_extent()[1]
    if extent <= 0 or array.nbytes % extent:
        raise _NotNative
    return array.__array_interface__["data"][0], array.nbytes // extent, \
        MPI._handleof(datatype)


def _divided(count: int, size: int) -> int:
    if count % size:
        raise _NotNative
    return count // size


def _int(value) -> int:
    if type(value) is not int:
        raise _NotNative
    return value


def _function(name: str) -> int | None:
    """The address of ``MPI_<name>`` in the libmpi this process loaded (None: not found)."""
    if name not in _functions:
        found = None
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = set(re.findall(r"(/\S*/libmpi\.so[.\d]*)$", maps.read(), re.MULTILINE))
        if len(paths) == 1:
            try:
                found = ctypes.cast(getattr(ctypes.CDLL(paths.pop()), f"MPI_{name}"),
                                    ctypes.c_void_p).value
            except (OSError, AttributeError):
                found = None
        _functions[name] = found
    return _functions[name]


@cython.cclass
class NativeCall:
    """One C call of MPI with its arguments, made by calling the object."""

    __slots__ = ("kind", "function", "comm", "a", "b", "count_a", "count_b", "type_a",
                 "type_b", "op", "root", "held", "first")

    def set(self, kind: int, function: int, comm: int, held, a: int, b: int,
            count_a: int, count_b: int, type_a: int, type_b: int, op: int,
            root: int) -> None:
        self.kind, self.function, self.comm, self.held = kind, function, comm, held
        self.a, self.b, self.count_a, self.count_b = a, b, count_a, count_b
        self.type_a, self.type_b, self.op, self.root = type_a, type_b, op, root
        self.first = 0

    def on_arrays(self, first, second=None) -> None:
        """The call on new arrays: ``first``'s address for the spec at position
        ``self.first`` (0 or 1), ``second``'s (if given) for the one at position 1."""
        if type(first) is not np.ndarray or (second is not None
                                             and type(second) is not np.ndarray):
            raise TypeError("expected numpy arrays")
        if cython.compiled:
            if self.first == 0:
                self.a = _al_array_data(first)
                if second is not None:
                    self.b = _al_array_data(second)
            else:
                self.b = _al_array_data(first)
        self()

    @cython.locals(code=cython.int)
    def __call__(self) -> None:
        if cython.compiled:
            with cython.nogil:
                code = _al_mpi_call(self.kind, self.function, self.comm, self.a, self.b,
                                    self.count_a, self.count_b, self.type_a, self.type_b,
                                    self.op, self.root)
            if code != 0:
                raise MPI.Exception(code)
