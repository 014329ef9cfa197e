"""MPI's blocking C calls made directly, for the runs of a plan and calls of a kept kind.

A plan binds its buffers once, so each run can call ``MPI_Bcast``, ``MPI_Allreduce`` ... with
the addresses, counts and handles found when it was made, instead of handing mpi4py the
buffer specs to parse again on every call (most of mpi4py's time on a small call); a kept
kind of call on new arrays (recall.py) reads only the arrays' addresses per call.
``native_call(mpi_comm, name, arguments)`` takes the mpi4py method's name and the arguments
``MPICall.arguments`` built for it and returns a callable doing the same C call, or None
where it cannot: not compiled, an MPI other than Open MPI (whose handles are pointers), a
call not listed in ``_BUILDERS``, a communicator other than an ``MPI.Comm``, or arguments
other than ``[array, datatype]`` and ``[array, counts, displacements, datatype]`` specs of
contiguous numpy arrays, ``MPI.IN_PLACE``, None, ints, datatypes and ops.  Counts are
derived as mpi4py derives them from the same specs (bytes over the datatype's extent, per
rank where the call takes a count per rank); the v-variants' counts and displacements are
held as C int arrays.  The receiving calls (``Recv``, ``Sendrecv``, ``Sendrecv_replace``)
read their status in C and check the received count; ``native_exchange`` posts and waits
for a multisendrecv's every message in one C call (``post``: posts them, its request
tested in C); ``native_post`` makes the nonblocking
call (``MPI_I<op>`` on the blocking call's arguments) and returns its ``NativeRequest``,
tested and waited for in C (``native_array_post``: on new arrays each time).

The call releases the GIL as mpi4py does (other threads - the progress engine, the stall
monitor - run while it waits) and raises ``MPI.Exception`` for an error code, as mpi4py
would, for the caller's ``call_error``; the receiving calls and the exchange raise what
their ``on_error`` makes (``al.OperationError`` naming the sender).  Except where it
cannot wait: posting a nonblocking call, starting a persistent one and testing either
keep the GIL for a *quick* call (``quick``: at most ``QUICK_BYTES`` in its buffers and no
reduction op of Python's): such a call returns in well under a microsecond whatever the
peers do, less than releasing and taking back the GIL costs, while a larger one may copy
its data inside ``MPI_Test``, and a Python op needs the GIL on whichever thread MPI runs
it.

What surprises people: the callable holds the arrays it was made with and their
addresses, so it is only for a plan's arguments, which the plan holds and never replaces;
``on_arrays`` takes new arrays of the same dtype, shape and layout, as the caller checked.
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

from ....engine.direct import DirectCall

__all__ = ["native_call", "native_array_call", "native_array_post", "native_exchange",
           "native_persistent", "native_post", "probe_function", "quick"]

_OPEN_MPI = MPI.get_vendor()[0] == "Open MPI"
QUICK_BYTES = 4096    # a quick call's buffers hold at most this many bytes in all (``quick``)
_INT_MAX = 2 ** 31 - 1
_functions: dict[str, int | None] = {}


def native_call(mpi_comm, name: str, arguments: tuple, positions: tuple = (),
                on_error=None):
    """A callable making ``mpi_comm.<name>(*arguments)``'s C call directly; None where it
    cannot (see the module's docstring).  ``positions``: which of the call's buffers (0: its
    first, 1: its second) ``on_arrays`` replaces; None where one of them is no buffer it
    can replace.  The receiving calls (``Recv``, ``Sendrecv``, ``Sendrecv_replace``, their
    arguments without the status) need ``on_error(code, count)``: the exception to raise for
    an MPI error ``code`` (count -1), or for a message of another ``count`` than the
    receive's (code 0)."""
    build = _BUILDERS.get(name)
    if not cython.compiled or build is None or not _OPEN_MPI \
            or not isinstance(mpi_comm, MPI.Comm) \
            or (name in _RECEIVING) != (on_error is not None):
        return None
    function = _function(name)
    get_count = _function("Get_count") if on_error is not None else 0
    if function is None or get_count is None:
        return None
    try:
        signature, values, slots, held = build(arguments, mpi_comm.Get_size())
    except _NotNative:
        return None
    array_slots = [slots[position] for position in positions]
    if any(slot < 0 for slot in array_slots):
        return None
    call = NativeCall()
    call.set(signature, function, [*values, MPI._handleof(mpi_comm)],
             (*array_slots, -1, -1)[:2], (arguments, held))
    call.quick = quick(arguments)
    if on_error is not None:
        count, datatype = _RECEIVING[name](values)
        call.check(get_count, count, datatype, on_error)
    return call


def probe_function() -> int | None:
    """The address of ``MPI_Iprobe`` for compiled callers to drive MPI's progress with
    while they wait on something else (board_wait.py); None where calls cannot be made
    directly (see the module's docstring)."""
    return _function("Iprobe") if cython.compiled and _OPEN_MPI else None


def native_post(mpi_comm, name: str, arguments: tuple, on_error=None):
    """A callable making the nonblocking ``mpi_comm.<name>(*arguments)`` (``Iallreduce``
    ...) as one C call and returning its request, a ``NativeRequest`` (``Test()`` and
    ``Wait()`` as mpi4py's); None where it cannot (see the module's docstring).  A receive
    (``Irecv``) needs ``on_error`` as ``native_call``'s: its request checks the received
    count when it completes."""
    call = _posting(mpi_comm, name, arguments, (), on_error)
    return None if call is None else call.post


def native_array_post(mpi_comm, name: str, arguments: tuple, positions: list,
                      on_error=None):
    """``native_post``'s callable taking, on each call, new arrays for the call's buffers at
    ``positions`` (as ``native_array_call``'s) and returning the request of the call on
    them, which holds them until it is done with; None where it cannot."""
    if not _array_positions(positions):
        return None
    call = _posting(mpi_comm, name, arguments, tuple(positions), on_error)
    return None if call is None else call.post_on_arrays


def _posting(mpi_comm, name: str, arguments: tuple, positions: tuple, on_error):
    """The ``NativeCall`` of the blocking form of the nonblocking call ``name``, made
    nonblocking (``NativeCall.posting``); None where it cannot."""
    blocking = _POSTED.get(name)
    call = None if blocking is None else native_call(mpi_comm, blocking, arguments,
                                                     positions, on_error)
    functions = [_function(f) for f in (name, "Test", "Wait")] if call is not None else [None]
    if None in functions:
        return None
    call.posting(*functions)
    return call


def _array_positions(positions: list) -> bool:
    """Whether ``positions`` are ones the calls on new arrays take: [0], [1] or [0, 1]."""
    return bool(positions) and len(positions) <= 2 and positions[0] in (0, 1) \
        and (len(positions) == 1 or positions == [0, 1])


def quick(arguments) -> bool:
    """Whether a call on ``arguments`` (an mpi4py call's: buffer specs, ops ...) is quick:
    at most ``QUICK_BYTES`` in its numpy arrays, and no reduction op defined in Python
    (see the module's docstring)."""
    total = 0
    for argument in arguments:
        for item in argument if type(argument) is list else (argument,):
            if type(item) is np.ndarray:
                total += item.nbytes
            elif type(item) is MPI.Op and not item.is_predefined:
                return False
    return total <= QUICK_BYTES


def native_array_call(mpi_comm, name: str, arguments: tuple, positions: list, on_error=None):
    """``native_call``'s callable taking, on each call, new arrays for the call's buffers
    at ``positions`` (0: its first, 1: its second, in order), each of its spec's own dtype,
    shape and layout (the caller checked); None where it cannot."""
    if not _array_positions(positions):
        return None
    call = native_call(mpi_comm, name, arguments, tuple(positions), on_error)
    return None if call is None else call.on_arrays


def native_exchange(mpi_comm, recvs: list, sends: list, tag: int, on_error,
                    arrays: list | None = None):
    """A callable posting ``MPI_Irecv`` for each ``(spec, peer)`` of ``recvs``, then
    ``MPI_Isend`` for each of ``sends``, all with ``tag``, then waiting for them all in that
    order, in C; None where it cannot (see the module's docstring).  It raises
    ``on_error(code, index, count)``: for an MPI error ``code`` of message ``index``
    (receives first; count -1), or for receive ``index`` getting ``count`` elements, not
    its own count (code 0).  ``arrays``: for each message (receives first) which of the
    arrays its ``on_arrays(*arrays)`` takes on new arrays it uses."""
    if not cython.compiled or not _OPEN_MPI or not isinstance(mpi_comm, MPI.Comm):
        return None
    functions = [_function(name) for name in ("Irecv", "Isend", "Wait", "Get_count", "Test")]
    if None in functions:
        return None
    try:
        specs = [np.array([value for spec, peer in messages
                           for value in (*_message(spec), _int(peer))] or [0], np.uint64)
                 for messages in (recvs, sends)]
        tag = _int(tag)
    except _NotNative:
        return None
    exchange = NativeExchange()
    exchange.set(functions, len(recvs), len(sends), specs, tag, MPI._handleof(mpi_comm),
                 ((recvs, sends), specs), on_error,
                 np.array(arrays if arrays is not None else [], np.intp))
    return exchange


class _NotNative(Exception):
    """Arguments this module does not translate."""


# Each builder: (signature in native_calls.pxd, the C arguments but the communicator, where
# the addresses of the call's first and second buffers go among them (-1: nowhere), what to
# hold).

def _barrier(arguments, size):
    if arguments:
        raise _NotNative
    return 0, [], (-1, -1), None


def _bcast(arguments, size):
    buf, root = arguments
    a, count, datatype = _message(buf)
    return 1, [a, count, datatype, _int(root)], (0, -1), None


def _reduction(arguments, size, block=False):
    """Allreduce, and Reduce_scatter_block where ``block`` (a count per rank)."""
    send, recv, op = arguments
    b, count, datatype = _message(recv)
    if block and send is MPI.IN_PLACE:
        count = _divided(count, size)
    if send is MPI.IN_PLACE:
        return 2, [1, b, count, datatype, _op(op)], (-1, 1), None
    a, send_count, send_type = _message(send)
    if send_type != datatype or send_count != (count * size if block else count):
        raise _NotNative
    return 2, [a, b, count, datatype, _op(op)], (0, 1), None


def _reduce(arguments, size):
    send, recv, op, root = arguments
    if recv is None:              # (off the root)
        a, count, datatype = _message(send)
        return 3, [a, 0, count, datatype, _op(op), _int(root)], (0, -1), None
    b, count, datatype = _message(recv)
    if send is MPI.IN_PLACE:
        return 3, [1, b, count, datatype, _op(op), _int(root)], (-1, 1), None
    a, send_count, send_type = _message(send)
    if (send_count, send_type) != (count, datatype):
        raise _NotNative
    return 3, [a, b, count, datatype, _op(op), _int(root)], (0, 1), None


def _send(arguments, size):
    buf, dest, tag = arguments
    a, count, datatype = _message(buf)
    return 4, [a, count, datatype, _int(dest), _int(tag)], (0, -1), None


def _recv(arguments, size):
    buf, src, tag = arguments
    b, count, datatype = _message(buf)
    return 12, [b, count, datatype, _int(src), _int(tag)], (0, -1), None


def _sendrecv(arguments, size):
    send, dest, send_tag, recv, src, recv_tag = arguments
    a, send_count, send_type = _message(send)
    b, count, datatype = _message(recv)
    return 13, [a, send_count, send_type, _int(dest), _int(send_tag), b, count, datatype,
                _int(src), _int(recv_tag)], (0, 5), None


def _sendrecv_replace(arguments, size):
    buf, dest, send_tag, src, recv_tag = arguments
    b, count, datatype = _message(buf)
    return 14, [b, count, datatype, _int(dest), _int(send_tag), _int(src), _int(recv_tag)], \
        (0, -1), None


def _gathering(arguments, size, to_all):
    """Allgather and Alltoall (``to_all``: sends a count per rank too)."""
    send, recv = arguments
    b, count, datatype = _message(recv)
    count = _divided(count, size)
    if send is MPI.IN_PLACE:
        return 5, [1, 0, _null(), b, count, datatype], (-1, 3), None
    a, send_count, send_type = _message(send)
    if to_all:
        send_count = _divided(send_count, size)
    return 5, [a, send_count, send_type, b, count, datatype], (0, 3), None


def _rooted(arguments, size, gather):
    """Gather and Scatter: the root's gathered (scattered) side has a count per rank."""
    send, recv, root = arguments
    a, send_count, send_type = _side(send)
    b, count, datatype = _side(recv)
    if gather and _is_spec(recv):
        count = _divided(count, size)
    if not gather and _is_spec(send):
        send_count = _divided(send_count, size)
    return 6, [a, send_count, send_type, b, count, datatype, _int(root)], \
        (0 if _is_spec(send) else -1, 3 if _is_spec(recv) else -1), None


def _reduce_scatter(arguments, size):
    send, recv, counts, op = arguments
    b, _, datatype = _message(recv)
    held = _ints(counts, size)
    a = 1 if send is MPI.IN_PLACE else _message(send)[0]
    return 7, [a, b, _address(held), datatype, _op(op)], \
        (-1 if send is MPI.IN_PLACE else 0, 1), held


def _allgatherv(arguments, size):
    send, recv = arguments
    b, counts, displs, datatype, held = _layout(recv, size)
    a, send_count, send_type = (1, 0, _null()) if send is MPI.IN_PLACE else _message(send)
    return 8, [a, send_count, send_type, b, counts, displs, datatype], \
        (-1 if send is MPI.IN_PLACE else 0, 3), held


def _gatherv(arguments, size):
    send, recv, root = arguments
    a, send_count, send_type = _side(send)
    b, counts, displs, datatype, held = _layout(recv, size) if recv is not None else \
        (0, 0, 0, _null(), None)
    return 9, [a, send_count, send_type, b, counts, displs, datatype, _int(root)], \
        (0 if _is_spec(send) else -1, 3 if recv is not None else -1), held


def _scatterv(arguments, size):
    send, recv, root = arguments
    a, counts, displs, send_type, held = _layout(send, size) if send is not None else \
        (0, 0, 0, _null(), None)
    b, count, datatype = _side(recv)
    return 10, [a, counts, displs, send_type, b, count, datatype, _int(root)], \
        (0 if send is not None else -1, 4 if _is_spec(recv) else -1), held


def _alltoallv(arguments, size):
    send, recv = arguments
    b, counts, displs, datatype, held = _layout(recv, size)
    if send is MPI.IN_PLACE:
        return 11, [1, 0, 0, _null(), b, counts, displs, datatype], (-1, 4), held
    a, send_counts, send_displs, send_type, send_held = _layout(send, size)
    return 11, [a, send_counts, send_displs, send_type, b, counts, displs, datatype], \
        (0, 4), (held, send_held)


_BUILDERS = {
    "Barrier": _barrier, "Bcast": _bcast, "Allreduce": _reduction,
    "Reduce_scatter_block": lambda arguments, size: _reduction(arguments, size, True),
    "Reduce": _reduce, "Send": _send,
    "Allgather": lambda arguments, size: _gathering(arguments, size, False),
    "Alltoall": lambda arguments, size: _gathering(arguments, size, True),
    "Gather": lambda arguments, size: _rooted(arguments, size, True),
    "Scatter": lambda arguments, size: _rooted(arguments, size, False),
    "Reduce_scatter": _reduce_scatter, "Allgatherv": _allgatherv, "Gatherv": _gatherv,
    "Scatterv": _scatterv, "Alltoallv": _alltoallv, "Recv": _recv, "Sendrecv": _sendrecv,
    "Sendrecv_replace": _sendrecv_replace,
}
# The nonblocking calls made in C, by their blocking call (whose builder and signature, plus
# NONBLOCKING, they take); not the receives, whose States check their status.
_POSTED = {f"I{name[0].lower()}{name[1:]}": name for name in _BUILDERS
           if name not in ("Sendrecv", "Sendrecv_replace")}   # (Open MPI 5's Isendrecv
                                                               # hides the true count)
NONBLOCKING = 100
# The receiving calls: (expected count, datatype handle) from their builder's C arguments.
_RECEIVING = {"Recv": lambda values: (values[1], values[2]),
              "Sendrecv": lambda values: (values[6], values[7]),
              "Sendrecv_replace": lambda values: (values[1], values[2])}


def _is_spec(spec) -> bool:
    return spec is not None and spec is not MPI.IN_PLACE


def _message(spec) -> tuple:
    """``(address, count, datatype handle)`` of an ``[array, datatype]`` spec."""
    if type(spec) is not list or len(spec) != 2:
        raise _NotNative
    array, datatype = spec
    return _array(array, datatype) + (MPI._handleof(datatype),)


def _layout(spec, size: int) -> tuple:
    """``(address, counts address, displacements address, datatype handle, held)`` of an
    ``[array, counts, displacements, datatype]`` spec."""
    if type(spec) is not list or len(spec) != 4:
        raise _NotNative
    array, counts, displs, datatype = spec
    address, _ = _array(array, datatype)
    held = (_ints(counts, size), _ints(displs, size))
    return address, _address(held[0]), _address(held[1]), MPI._handleof(datatype), held


def _array(array, datatype) -> tuple:
    """``(address, count)`` of a contiguous numpy array in units of ``datatype``."""
    if type(array) is not np.ndarray or not array.flags.c_contiguous \
            or type(datatype) is not MPI.Datatype:
        raise _NotNative
    extent = datatype.Get_extent()[1]
    if extent <= 0 or array.nbytes % extent or array.nbytes // extent > _INT_MAX:
        raise _NotNative
    return _address(array), array.nbytes // extent


def _side(spec) -> tuple:
    """``_message`` of a rooted call's side: None (unused off the root) and ``MPI.IN_PLACE``
    are the null address and 1, with no count or datatype."""
    if not _is_spec(spec):
        return int(spec is MPI.IN_PLACE), 0, _null()
    return _message(spec)


def _ints(values, size: int) -> np.ndarray:
    """``size`` counts or displacements as a C int array."""
    try:
        wide = np.asarray(values, dtype=np.int64)
    except (TypeError, ValueError) as exc:
        raise _NotNative from exc
    if wide.shape != (size,) or (wide.size and (wide.min() < 0 or wide.max() > _INT_MAX)):
        raise _NotNative
    return np.ascontiguousarray(wide, dtype=np.intc)


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _null() -> int:
    return MPI._handleof(MPI.DATATYPE_NULL)


def _op(op) -> int:
    if type(op) is not MPI.Op:
        raise _NotNative
    return MPI._handleof(op)


def _divided(count: int, size: int) -> int:
    if count % size:
        raise _NotNative
    return count // size


def _int(value) -> int:
    if type(value) is not int or not -_INT_MAX <= value <= _INT_MAX:
        raise _NotNative
    return value & (2 ** 64 - 1)      # (two's complement: the C side takes the low bits)


def _function(name: str) -> int | None:
    """The address of ``MPI_<name>`` in the libmpi this process loaded (None: not found)."""
    if name not in _functions:
        found, paths = None, set()
        try:
            with open("/proc/self/maps", encoding="utf-8") as maps:   # (Linux only)
                paths = set(re.findall(r"(/\S*/libmpi\.so[.\d]*)$", maps.read(),
                                       re.MULTILINE))
        except OSError:
            pass
        if len(paths) == 1:
            try:
                found = ctypes.cast(getattr(ctypes.CDLL(paths.pop()), f"MPI_{name}"),
                                    ctypes.c_void_p).value
            except (OSError, AttributeError):
                found = None
        _functions[name] = found
    return _functions[name]


@cython.cclass
class NativeCall(DirectCall):
    """One C call of MPI with its arguments, made by calling the object; a receiving call
    checks the count its status says (``check``)."""

    __slots__ = ("signature", "function", "values", "first_slot", "second_slot", "held",
                 "quick", "on_error", "expected", "get_count", "count_type", "test_function",
                 "wait_function")

    def set(self, signature: int, function: int, values: list, slots: tuple, held) -> None:
        if len(values) > 12:
            raise ValueError(f"expected at most 12 C arguments, got {len(values)}")
        self.signature, self.function, self.held = signature, function, held
        self.first_slot, self.second_slot = slots
        self.on_error, self.expected = None, -1
        if cython.compiled:
            for index, value in enumerate(values):
                self.values[index] = value

    def posting(self, function: int, test: int, wait: int) -> None:
        """Make the call nonblocking: ``function`` (``MPI_I<op>``, at that address) on the
        same arguments, its request tested and waited for with ``MPI_Test`` and
        ``MPI_Wait`` at ``test`` and ``wait``; ``post()`` makes it."""
        self.signature += NONBLOCKING
        self.function, self.test_function, self.wait_function = function, test, wait

    @cython.locals(code=cython.int, request="NativeRequest")
    def post(self) -> NativeRequest:
        """The nonblocking call (``posting``), made; its request."""
        request = self._request()
        request.held = self           # (the arrays stay alive while MPI may use them)
        if not cython.compiled:
            return request
        request.test_function, request.wait_function = self.test_function, self.wait_function
        request.at = cython.cast(cython.size_t, cython.address(request.handle))
        if self.quick:
            code = _al_mpi_call(self.signature, self.function, self.values,
                                cython.address(request.handle))
        else:
            with cython.nogil:
                code = _al_mpi_call(self.signature, self.function, self.values,
                                    cython.address(request.handle))
        if code != 0:
            raise MPI.Exception(code)
        return request

    @cython.locals(code=cython.int, request="NativeRequest", index=cython.int)
    def post_on_arrays(self, first, second=None) -> NativeRequest:
        """``post`` on new arrays, put where ``on_arrays`` puts them; the request holds
        them while MPI may use them."""
        if type(first) is not np.ndarray or (second is not None
                                             and type(second) is not np.ndarray):
            raise TypeError("expected numpy arrays")
        request = self._request()
        request.held = first if second is None else (first, second)
        if not cython.compiled:
            return request
        values = cython.declare(cython.size_t[12])
        for index in range(12):
            values[index] = self.values[index]
        values[self.first_slot] = _al_array_data(first)
        if second is not None and self.second_slot >= 0:
            values[self.second_slot] = _al_array_data(second)
        request.test_function, request.wait_function = self.test_function, self.wait_function
        request.at = cython.cast(cython.size_t, cython.address(request.handle))
        if self.quick:
            code = _al_mpi_call(self.signature, self.function, values,
                                cython.address(request.handle))
        else:
            with cython.nogil:
                code = _al_mpi_call(self.signature, self.function, values,
                                    cython.address(request.handle))
        if code != 0:
            raise MPI.Exception(code)
        return request

    @cython.locals(request="NativeRequest")
    def _request(self) -> NativeRequest:
        """A new request of the nonblocking call, checking the received count where
        ``check`` set one."""
        request = NativeRequest.__new__(NativeRequest)
        request.quick = self.quick
        if self.expected >= 0:
            request.receives(self.get_count, self.expected, self.count_type, self.on_error)
        return request

    def check(self, get_count: int, expected: int, datatype: int, on_error) -> None:
        """After each call, read the received count with ``MPI_Get_count`` (at address
        ``get_count``) in units of ``datatype``; raise ``on_error(0, count)`` unless it is
        ``expected``, and ``on_error(code, -1)`` for an MPI error ``code``."""
        self.get_count, self.expected, self.count_type = get_count, expected, datatype
        self.on_error = on_error

    def on_arrays(self, first, second=None) -> None:
        """The call on new arrays: ``first``'s address where the first of ``native_call``'s
        ``positions`` went, ``second``'s (if given) where the second went."""
        if type(first) is not np.ndarray or (second is not None
                                             and type(second) is not np.ndarray):
            raise TypeError("expected numpy arrays")
        if cython.compiled:
            self._call(_al_array_data(first), self.first_slot,
                       0 if second is None else _al_array_data(second),
                       -1 if second is None else self.second_slot)

    def call(self) -> None:
        """The call (a ``DirectCall``: compiled callers make it in C)."""
        if cython.compiled:
            self._call(0, -1, 0, -1)

    @cython.locals(code=cython.int, index=cython.int, count=cython.int)
    def _call(self, first: cython.size_t, first_slot: cython.int, second: cython.size_t,
              second_slot: cython.int) -> None:
        """The call with the address ``first`` at ``first_slot`` and ``second`` at
        ``second_slot`` (-1: none), those on a copy of the arguments: another thread may
        make the same call on other arrays meanwhile (sends to other ranks may)."""
        values = cython.declare(cython.size_t[12])
        status = cython.declare(cython.size_t[8])   # (an MPI_Status: 24 bytes in Open MPI)
        if first_slot < 0 and second_slot < 0:   # (the arguments as made: nothing to copy)
            with cython.nogil:
                code = _al_mpi_call(self.signature, self.function, self.values, status)
        else:
            for index in range(12):
                values[index] = self.values[index]
            if first_slot >= 0:
                values[first_slot] = first
            if second_slot >= 0:
                values[second_slot] = second
            with cython.nogil:
                code = _al_mpi_call(self.signature, self.function, values, status)
        if code != 0:
            if self.on_error is not None:
                raise self.on_error(code, -1)
            raise MPI.Exception(code)
        if self.expected >= 0:
            count = _al_get_count(self.get_count, status, self.count_type)
            if count != self.expected:
                raise self.on_error(0, count)


@cython.cclass
class NativeRequest:
    """The request of a nonblocking call ``NativeCall.post`` made: ``Test()`` and
    ``Wait()`` as mpi4py's ``Request`` (``MPI.Exception`` for an error code), on the
    handle at address ``at`` (its own ``handle``).  A receive's (``checks``) reads its
    status and, once it completed, raises ``on_error(0, count)`` for a message of another
    count than ``expected``, and ``on_error(code, -1)`` for an MPI error ``code``."""

    __slots__ = ("handle", "at", "test_function", "wait_function", "held", "status", "quick",
                 "checks", "get_count", "count_type", "expected", "on_error")

    @cython.locals(code=cython.int, done=cython.int)
    def Test(self) -> bool:   # noqa: N802 (mpi4py's name)
        """Whether the call completed (then a nonblocking call's request is freed, as
        ``MPI_Test`` does; a persistent one stays, inactive until started again)."""
        if not cython.compiled:
            return True
        done = 0
        if self.quick:
            code = _al_test(self.test_function, cython.cast(cython.p_void, self.at),
                            cython.address(done), self.status)
        else:
            with cython.nogil:
                code = _al_test(self.test_function, cython.cast(cython.p_void, self.at),
                                cython.address(done), self.status)
        if code != 0:
            raise self._failed(code)
        if done == 0:
            return False
        if self.checks:
            self._check()
        return True

    @cython.locals(code=cython.int)
    def Wait(self) -> None:   # noqa: N802
        """Return once the call completed."""
        if not cython.compiled:
            return
        with cython.nogil:
            code = _al_wait(self.wait_function, cython.cast(cython.p_void, self.at),
                            self.status)
        if code != 0:
            raise self._failed(code)
        if self.checks:
            self._check()

    def receives(self, get_count: int, expected: int, datatype: int, on_error) -> None:
        """Check each completed receive as ``NativeCall.check`` says."""
        self.checks = True
        self.get_count, self.count_type = get_count, datatype
        self.expected, self.on_error = expected, on_error

    def _failed(self, code: int) -> Exception:
        return self.on_error(code, -1) if self.checks else MPI.Exception(code)

    @cython.locals(count=cython.int)
    def _check(self) -> None:
        count = _al_get_count(self.get_count, self.status, self.count_type)
        if count != self.expected:
            raise self.on_error(0, count)


def native_persistent(request, received: tuple | None = None, arguments: tuple | None = None):
    """A ``NativePersistent`` starting, testing and waiting for the persistent mpi4py
    request ``request`` with MPI's C calls; None where it cannot (not compiled, an MPI
    other than Open MPI, a function not found, not an ``MPI.Prequest``).  A receive's
    ``received``, ``(count, datatype, on_error)``: each completed run checks that ``count``
    elements of the mpi4py ``datatype`` came, raising ``on_error`` as ``native_call``'s.
    ``arguments``, those the request was made with: its starts and tests keep the GIL
    where they are ``quick``."""
    if not cython.compiled or not _OPEN_MPI or not isinstance(request, MPI.Prequest):
        return None
    functions = [_function(name) for name in ("Start", "Test", "Wait", "Get_count")]
    if None in functions:
        return None
    native = NativePersistent()
    native.set(request, *functions[:3])
    native.quick = arguments is not None and quick(arguments)
    if received is not None:
        count, datatype, on_error = received
        native.receives(functions[3], count, MPI._handleof(datatype), on_error)
    return native


@cython.cclass
class NativePersistent(NativeRequest):
    """``Start()`` and ``Test()`` of one persistent request as mpi4py's (``MPI.Exception``
    for an error code), each one C call rather than a method call parsing its arguments.

    The calls take the handle where mpi4py keeps it (``MPI._addressof``), not a copy:
    starting a persistent send or receive, Open MPI may put a new request in its place,
    and mpi4py must free that one.

    What surprises people: the request must not be freed while this is in use (a plan
    frees it only after its last run)."""

    __slots__ = ("start_function",)

    def set(self, request, start: int, test: int, wait: int) -> None:
        self.held = request         # (the mpi4py request, which holds the handle)
        self.start_function, self.test_function = start, test
        self.wait_function = wait
        self.at = MPI._addressof(request)

    @cython.locals(code=cython.int)
    def Start(self) -> None:   # noqa: N802 (mpi4py's name)
        if not cython.compiled:
            return
        if self.quick:
            code = _al_start(self.start_function, cython.cast(cython.p_void, self.at))
        else:
            with cython.nogil:
                code = _al_start(self.start_function, cython.cast(cython.p_void, self.at))
        if code != 0:
            raise MPI.Exception(code)


@cython.cclass
class NativeExchange(DirectCall):
    """Messages to post at once and wait for, made by calling the object
    (``native_exchange``)."""

    __slots__ = ("functions", "n_recv", "n_send", "tag", "recv_specs", "send_specs", "comm",
                 "held", "on_error", "which", "which_address", "distinct")

    def set(self, functions: list, n_recv: int, n_send: int, specs: list, tag: int,
            comm: int, held, on_error, which: np.ndarray) -> None:
        self.n_recv, self.n_send, self.tag, self.comm = n_recv, n_send, tag, comm
        self.held, self.on_error, self.which = held, on_error, which
        self.distinct = int(which.max()) + 1 if which.size else 0
        if cython.compiled:
            for index, function in enumerate(functions):
                self.functions[index] = function
            self.recv_specs, self.send_specs = _address(specs[0]), _address(specs[1])
            self.which_address = _address(which)

    @cython.locals(code=cython.int, failed=cython.int, got=cython.int)
    def call(self) -> None:
        """The exchange (a ``DirectCall``: compiled callers make it in C)."""
        if not cython.compiled:
            return
        failed, got = 0, -1
        with cython.nogil:
            code = _al_exchange(self.functions, self.n_recv, self.n_send, self.recv_specs,
                                self.send_specs, self.tag, self.comm, cython.address(failed),
                                cython.address(got))
        self._raise(code, failed, got)

    @cython.locals(code=cython.int, failed=cython.int, got=cython.int)
    def on_arrays(self, *arrays) -> None:
        """The exchange on new arrays, each message on the one ``native_exchange``'s
        ``arrays`` says (of its spec's dtype and count: the caller checked)."""
        if len(arrays) != self.distinct:
            raise TypeError(f"expected {self.distinct} arrays, got {len(arrays)}")
        for array in arrays:
            if type(array) is not np.ndarray:
                raise TypeError("expected numpy arrays")
        if not cython.compiled:
            return
        failed, got = 0, -1
        code = _al_exchange_arrays(self.functions, self.n_recv, self.n_send, self.recv_specs,
                                   self.send_specs, arrays, self.which_address, self.tag,
                                   self.comm, cython.address(failed), cython.address(got))
        self._raise(code, failed, got)

    def post(self) -> NativeExchangeRequest:
        """The exchange's messages posted (receives first), not waited for; their
        request."""
        return self._post(None)

    def post_on_arrays(self, *arrays) -> NativeExchangeRequest:
        """``post`` on new arrays, as ``on_arrays`` takes them; the request holds them."""
        if len(arrays) != self.distinct:
            raise TypeError(f"expected {self.distinct} arrays, got {len(arrays)}")
        for array in arrays:
            if type(array) is not np.ndarray:
                raise TypeError("expected numpy arrays")
        return self._post(arrays)

    @cython.locals(request="NativeExchangeRequest", code=cython.int, failed=cython.int,
                   n=cython.int)
    def _post(self, arrays) -> NativeExchangeRequest:
        request = NativeExchangeRequest.__new__(NativeExchangeRequest)
        request.exchange, request.arrays = self, arrays
        n = self.n_recv + self.n_send
        request.n, request.n_recv, request.remaining = n, self.n_recv, n
        if not cython.compiled:
            request.remaining = 0
            return request
        if not _al_exchange_alloc(n, cython.address(request.requests),
                                  cython.address(request.finished)):
            raise MemoryError("multisendrecv: no memory for the requests")
        failed = 0
        code = _al_exchange_post(self.functions, self.n_recv, self.n_send, self.recv_specs,
                                 self.send_specs, arrays, self.which_address, self.tag,
                                 self.comm, request.requests, cython.address(failed))
        if code != 0:
            request.remaining = 0      # (those posted were waited for)
            raise self.on_error(code, failed, -1)
        return request

    def _raise(self, code: int, failed: int, got: int) -> None:
        if code == -2:
            raise MemoryError("multisendrecv: no memory for the requests")
        if code != 0:
            raise self.on_error(max(code, 0), failed, got)


@cython.cclass
class NativeExchangeRequest:
    """The request of an exchange ``NativeExchange.post`` posted: ``Test()`` and ``Wait()``
    as mpi4py's ``Request``, each message's request tested (waited for) in C until all
    completed, every receive's count checked; an MPI error or a receive of another count
    raises the exchange's ``on_error(code, index, count)``."""

    __slots__ = ("requests", "finished", "n", "n_recv", "remaining", "exchange", "arrays")

    def Test(self) -> bool:   # noqa: N802 (mpi4py's name)
        if self.remaining:
            self._progress(0)
        return self.remaining == 0

    def Wait(self) -> None:   # noqa: N802
        if self.remaining:
            self._progress(1)

    @cython.locals(code=cython.int, failed=cython.int, got=cython.int, wait=cython.int)
    def _progress(self, wait: int) -> None:
        failed, got = 0, -1
        with cython.nogil:
            code = _al_exchange_progress(self.exchange.functions, self.n, self.n_recv,
                                         self.exchange.recv_specs, self.requests,
                                         self.finished, cython.address(self.remaining), wait,
                                         cython.address(failed), cython.address(got))
        if code != 0:
            raise self.exchange.on_error(max(code, 0), failed, got)

    def __dealloc__(self) -> None:
        if cython.compiled:
            _al_exchange_free(self.requests, self.finished)
