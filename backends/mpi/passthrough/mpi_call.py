"""One MPI operation, declared once: ``MPICall``, the base of the passthrough States.

A passthrough State declares its MPI calls (``calls``: the blocking, nonblocking and
persistent mpi4py methods), how their arguments are built from the State's own
(``arguments``), and what the result needs afterwards (``finishing``: AVG's division, the
logical ops' 0/1).  Every form is derived from that by the code below:

- nonblocking: the State itself, ``start`` calling ``I<op>``, ``step`` polling it (for a
  plan's repeated starts, ``fresh`` makes the ``I<op>`` call and finish step once: MPI's
  C call made directly where ``native_calls`` can, else mpi4py's);
- bound (``blocking_call``): ``<Op>`` with its arguments made once, for a plan's runs;
- blocking (``run_blocking``): the bound form made and called at once;
- persistent: ``<Op>_init`` on the plan's buffers, started for each of its runs;
- on new arrays (``array_call``, ``array_fresh``): ``<Op>``, and a State posting ``I<op>``,
  with everything but the arrays made once.

Where the order of a reduction's operands changes its bits (``order_sensitive``), the
blocking forms wait for ``I<op>`` instead and there is no persistent form, so that every form
gives the same bits.  States whose forms really differ (receives checking a status, allreduce
in deterministic mode, multisendrecv) override the form they change.

MPI failures raise ``al.OperationError`` naming the State (``mpi_errors.py``): in
``run_blocking`` directly; the callables of the bound and new-array forms raise mpi4py's
exception and their caller raises ``call_error``'s instead (a frame fewer on every call).
"""
from __future__ import annotations

import functools
import itertools
from typing import NamedTuple

from mpi4py import MPI

from ....core.buffers import Buffer
from ....engine.state import Action
from ..datatypes import mpi_datatype
from .mpi_errors import MPIState, operation_error
from .native_calls import (native_array_call, native_array_post, native_call,
                           native_persistent, native_post)
from .persistent import PersistentRequest

_CONTINUE, _COMPLETE = Action.CONTINUE, Action.COMPLETE

# Point-to-point is untagged (Aluminum: a receive matches a send of the same count); it uses
# this one tag on the duplicated communicator, which custom algorithms' tags never equal.
POINT_TO_POINT_TAG = 0


class MPICalls(NamedTuple):
    """The names of the ``MPI.Comm`` methods making an operation's forms."""

    blocking: str            # "Allgather"
    nonblocking: str         # "Iallgather"
    persistent: str | None   # "Allgather_init"; None: MPI has no persistent form


class MPICall(MPIState):
    """A State calling one MPI operation; subclasses declare ``name``, ``calls``,
    ``arguments`` and, where they apply, ``finishing`` and ``order_sensitive``.  Built as
    every State, ``cls(comm, stream, *op_args)``; the spec methods take the same arguments."""

    calls: MPICalls
    request: MPI.Request | None = None
    finish = None   # the nonblocking form's finish step, set by ``start``
    posted = None   # ``fresh``'s States: the nonblocking call, made once

    def __init__(self, comm, stream, *op_args):
        self.comm, self.args = comm, (stream, *op_args)

    # The spec.

    @staticmethod
    def arguments(comm, stream, *op_args) -> tuple:
        """The MPI call's arguments (buffer specs ``[array, ..., datatype]`` made by
        ``spec``, ``send_spec``, ``layout_spec``; roots, ops, tags)."""
        raise NotImplementedError

    @staticmethod
    def finishing(comm, stream, *op_args) -> tuple | None:
        """``(op, buf, count)``: after MPI, ``op.finish`` the first ``count`` elements of
        ``buf`` (all when None; ``buf`` the last of the State's buffers); None (default):
        nothing to finish."""
        return None

    @staticmethod
    def order_sensitive(comm, stream, *op_args) -> bool:
        """Whether MPI may reduce the operands in another order when blocking than when not
        (a floating-point SUM, PROD or AVG on 3 ranks or more: Open MPI's ``MPI_Reduce`` and
        ``MPI_Ireduce`` did on 3 ranks).  False by default (no reduction)."""
        return False

    # The forms.

    @classmethod
    def finish_step(cls, comm, *args):
        """``finishing``'s step as a callable on the State's own buffer; None where it would
        change nothing (``ReductionOp.finishes``)."""
        found = cls.finishing(comm, *args)
        if found is None:
            return None
        op, buf, count = found
        if not op.finishes(comm.size):
            return None
        return functools.partial(op.finish, buf.array if count is None else buf.array[:count],
                                 comm.size)

    @classmethod
    def run_blocking(cls, comm, *args) -> None:
        call = cls.blocking_call(comm, *args)
        try:
            call()
        except MPI.Exception as exc:
            raise operation_error(cls.name, exc) from exc

    @classmethod
    def blocking_call(cls, comm, *args):
        """``<Op>`` bound to its arguments (``I<op>`` waited for where the order matters),
        then the finish step; the bare call where there is none: MPI's C call made
        directly where ``native_calls`` can, else mpi4py's."""
        mpi, arguments = comm.mpi_comm, cls.arguments(comm, *args)
        if cls.order_sensitive(comm, *args):
            # (mpi4py's: ``run_blocking`` makes this form for one call, where building a
            # native call in Python cost more than mpi4py's parsing of the specs)
            call = functools.partial(_wait, getattr(mpi, cls.calls.nonblocking), *arguments)
        else:
            call = native_call(mpi, cls.calls.blocking, arguments) or \
                functools.partial(getattr(mpi, cls.calls.blocking), *arguments)
        finish = cls.finish_step(comm, *args)
        if finish is None:
            return call

        def call_and_finish():
            call()
            finish()
        return call_and_finish

    @classmethod
    def persistent(cls, comm, *args) -> PersistentRequest | None:
        """``<Op>_init`` on these arguments; None where the order matters, or where MPI (or
        mpi4py) lacks the persistent form."""
        name = cls.calls.persistent
        if name is None or cls.order_sensitive(comm, *args):
            return None
        make = getattr(comm.mpi_comm, name, None)
        if make is None:
            return None
        arguments = cls.arguments(comm, *args)
        try:
            request = make(*arguments)
        except (NotImplementedError, MPI.Exception):
            return None
        return PersistentRequest(comm, cls.name, request, cls.finish_step(comm, *args),
                                 native_persistent(request, arguments=arguments))

    @classmethod
    def array_call(cls, comm, *args):
        """``<Op>`` on new arrays, the arguments made once with ``args``' buffers standing
        in for them; None where the order matters, or where an argument is made from a
        buffer otherwise than ``[buf.array, ...]``."""
        found = _array_slots(cls, comm, args)
        if found is None:
            return None
        buffers, arguments, slots = found
        call = native_array_call(comm.mpi_comm, cls.calls.blocking, arguments,
                                 [position for position, _ in slots]) \
            or _on_arrays(getattr(comm.mpi_comm, cls.calls.blocking), arguments, slots)
        finish = _array_finish(cls, comm, args, buffers)
        if call is None or finish is None:
            return call
        return finish and _then_finish(call, len(buffers), finish)

    @classmethod
    def posts_plainly(cls, comm, *args) -> bool:
        """Whether ``MPICall``'s own ``start`` and ``step`` (post ``I<op>``, poll it, then
        the finish step) make a nonblocking run of ``args``: by default where the subclass
        neither starts, polls nor is built its own way (a receive's status); a subclass
        that does so only for some arguments says which."""
        return cls.start is MPICall.start and cls.step is MPICall.step \
            and cls.__init__ is MPICall.__init__

    @classmethod
    def fresh(cls, comm, *args):
        """The State of a plan's nonblocking starts, its nonblocking call and finish step
        made once for all (``posting``) where it ``posts_plainly``; else the plain
        constructor, a new State per start."""
        if not cls.posts_plainly(comm, *args):
            return super().fresh(comm, *args)
        return cls.posting(comm, *args)

    @classmethod
    def array_fresh(cls, comm, *args):
        """A new State per call on new arrays, posting ``I<op>`` on them with everything
        else made once with ``args``' buffers standing in for them (as ``array_call``),
        the finish step on the new last array; None where the State does not
        ``posts_plainly``, or where ``array_call`` has no form."""
        if not cls.posts_plainly(comm, *args):
            return None
        found = _array_slots(cls, comm, args)
        if found is None:
            return None
        buffers, arguments, slots = found
        if not buffers:
            return None
        mpi = comm.mpi_comm
        post = native_array_post(mpi, cls.calls.nonblocking, arguments,
                                 [position for position, _ in slots]) \
            or _on_arrays(getattr(mpi, cls.calls.nonblocking), arguments, slots)
        finish = _array_finish(cls, comm, args, buffers)
        if post is None or finish is False:
            return None
        return array_states(cls, comm, args, post, finish)

    @classmethod
    def posting(cls, comm, *args):
        """``fresh``'s factory: ``posted_states`` calling ``I<op>`` on arguments made
        here, then the finish step."""
        arguments = cls.arguments(comm, *args)
        posted = native_post(comm.mpi_comm, cls.calls.nonblocking, arguments) or \
            functools.partial(getattr(comm.mpi_comm, cls.calls.nonblocking), *arguments)
        return posted_states(cls, comm, args, posted, cls.finish_step(comm, *args))

    def start(self) -> None:
        posted = self.posted
        if posted is not None:
            self.request = posted()
            return
        comm, args = self.comm, self.args
        self.finish = self.finish_step(comm, *args)
        self.request = getattr(comm.mpi_comm, self.calls.nonblocking)(
            *self.arguments(comm, *args))

    def step(self) -> Action:
        if not self.request.Test():
            return _CONTINUE
        if self.finish is not None:
            self.finish()
        return _COMPLETE


def posted_states(cls, comm, args: tuple, post, finish=None):
    """A plan's nonblocking starts of a State class ``cls`` (``fresh``'s callable): one
    State, returned for every start, whose start calls ``post()`` (a callable making the
    nonblocking call and returning its request, polled with ``Test()``) and whose finish
    step, if any, is ``finish()``.  A plan starts again only once its last start
    completed, and such a State keeps nothing of a run but the request ``start`` replaces.
    It is of a subclass of ``cls`` running ``MPICall``'s own ``start`` and ``step``
    (``_posted_class``): what ``cls`` overrides serves States built its own way."""
    posted = _posted_class(cls)
    state = posted.__new__(posted)
    state.comm, state.args, state.posted, state.finish = comm, args, post, finish
    return itertools.repeat(state).__next__     # (the same State, by a C call)


def array_states(cls, comm, args: tuple, post, finish=None):
    """Nonblocking calls on new arrays of a State class ``cls`` (``array_fresh``'s
    callable): a callable taking a call's new arrays and returning a new State whose start
    calls ``post(*arrays)`` (returning the request) and whose finish step, if any, is
    ``finish(last array)``; of ``_posted_class(cls)``, as ``posted_states``'s."""
    cls = _posted_class(cls)
    new = cls.__new__

    def on_arrays(*arrays):
        state = new(cls)
        state.comm, state.args = comm, args
        state.posted = functools.partial(post, *arrays)
        if finish is not None:
            state.finish = functools.partial(finish, arrays[-1])
        return state
    return on_arrays


_POSTED: dict = {}   # class -> its subclass for posted States


def _posted_class(cls) -> type:
    """``cls`` with ``MPICall.start`` and ``MPICall.step`` (made once per class, same name):
    a State that ``posted_states`` or ``array_states`` made only posts its call and polls
    it, and on every small nonblocking call a subclass's ``super()`` hop would cost a frame
    per start and poll.  (``cls`` may be any ``MPIState``: the attributes those two read
    default to None.)"""
    found = _POSTED.get(cls)
    if found is None:
        found = _POSTED[cls] = type(cls.__name__, (cls,), {
            "start": MPICall.start, "step": MPICall.step, "__module__": cls.__module__,
            "__qualname__": cls.__qualname__, "__doc__": cls.__doc__, "posted": None,
            "finish": None, "request": None})
    return found


def _array_slots(cls, comm, args: tuple):
    """``(buffers, arguments, slots)`` of the forms on new arrays: the distinct Buffers
    among ``args`` in order, the MPI call's arguments made with them, and per buffer
    ``(position of its spec, rest of its spec)``; None where the order matters or a buffer
    is in a list or no spec of its own (their States make their own forms)."""
    if cls.order_sensitive(comm, *args) or any(
            type(arg) in (list, tuple) and any(isinstance(part, Buffer) for part in arg)
            for arg in args):
        return None
    buffers = list({id(arg): arg for arg in args if isinstance(arg, Buffer)}.values())
    arguments = cls.arguments(comm, *args)
    slots = []
    for buf in buffers:
        position = _position(arguments, buf.array)
        if position is None:
            return None
        slots.append((position, tuple(arguments[position][1:])))
    return buffers, arguments, slots


def _array_finish(cls, comm, args: tuple, buffers: list):
    """The finish step of the forms on new arrays (``finishing``): ``op.finish`` on the
    first ``count`` elements (all when None) of the call's last array; None where nothing
    is to finish; False where what is finished is not the last of ``buffers`` (then there
    is no form on new arrays)."""
    found = cls.finishing(comm, *args)
    if found is None or not found[0].finishes(comm.size):
        return None
    op, buf, count = found
    if buf is not buffers[-1]:
        return False
    size = comm.size
    if count is None:
        return lambda recv: op.finish(recv, size)
    return lambda recv: op.finish(recv[:count], size)


def _wait(nonblocking, *arguments) -> None:
    nonblocking(*arguments).Wait()


def _position(arguments: tuple, array) -> int | None:
    """Where in ``arguments`` the buffer spec of ``array`` is (None: nowhere)."""
    for position, argument in enumerate(arguments):
        if type(argument) is list and argument[0] is array:
            return position
    return None


def _on_arrays(call, arguments: tuple, slots: list):
    """``call(*arguments)`` with the array of each ``(position, rest of its spec)`` of
    ``slots`` replaced by the callable's arguments, in order; None for more than two
    arrays, or two in the other order.  (Specs of one datatype, the usual case, are
    written out: unpacking a one-item tuple costs more than the call's own argument.)"""
    if not slots:
        return functools.partial(call, *arguments) if arguments else call
    if len(slots) == 1:
        (position, rest), = slots
        before, after = arguments[:position], arguments[position + 1:]
        if len(rest) == 1:
            datatype, = rest
            return lambda a: call(*before, [a, datatype], *after)
        return lambda a: call(*before, [a, *rest], *after)
    if len(slots) > 2 or slots[0][0] > slots[1][0]:
        return None
    (first, rest_a), (second, rest_b) = slots
    before, middle = arguments[:first], arguments[first + 1:second]
    after = arguments[second + 1:]
    if len(rest_a) == len(rest_b) == 1:
        (type_a,), (type_b,) = rest_a, rest_b
        return lambda a, b: call(*before, [a, type_a], *middle, [b, type_b], *after)
    return lambda a, b: call(*before, [a, *rest_a], *middle, [b, *rest_b], *after)


def _then_finish(call, arrays: int, finish):
    """``call`` on one or two arrays followed by ``finish`` (``_array_finish``'s) on the
    last one."""
    if arrays == 1:
        def call_and_finish(recv):
            call(recv)
            finish(recv)
        return call_and_finish

    def call_and_finish_out(send, recv):
        call(send, recv)
        finish(recv)
    return call_and_finish_out


def spec(buf) -> list:
    """``[array, datatype]``: the whole buffer."""
    return [buf.array, mpi_datatype(buf.dtype)]


def send_spec(sendbuf, recvbuf):
    """``MPI.IN_PLACE`` when the operation is in place (``sendbuf is recvbuf``), else ``spec``."""
    return MPI.IN_PLACE if sendbuf is recvbuf else spec(sendbuf)


def layout_spec(buf, counts, displs) -> list:
    """``[array, counts, displs, datatype]``: a v-variant's per-rank blocks of ``buf``."""
    return [buf.array, counts, displs, mpi_datatype(buf.dtype)]
