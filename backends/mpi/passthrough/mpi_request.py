"""What every passthrough State shares: one posted MPI request, polled, then finished.

Also the mpi4py buffer specifications the passthrough calls build from ``Buffer`` records.
"""
from __future__ import annotations

import functools

from mpi4py import MPI

from ....engine.state import Action, State
from ..datatypes import mpi_datatype
from .persistent import PersistentRequest

# Point-to-point is untagged (Aluminum: a receive matches a send of the same count); it uses
# this one tag on the duplicated communicator, which custom algorithms' tags never equal.
POINT_TO_POINT_TAG = 0


class MPIRequestState(State):
    """A nonblocking MPI call: ``post`` starts it, ``step`` polls ``Test``, ``finish``
    post-processes the result (AVG division, logical 0/1) once MPI reports completion."""

    request: MPI.Request | None = None
    status: MPI.Status | None = None   # set by states that check what they received

    def post(self) -> MPI.Request:
        raise NotImplementedError

    def finish(self) -> None:
        """Nothing to post-process by default."""

    def order_sensitive(self) -> bool:
        """Whether MPI may reduce this call's operands in another order when blocking than
        when not (a floating-point SUM, PROD or AVG on 3 ranks or more: Open MPI's
        ``MPI_Reduce`` and ``MPI_Ireduce`` did on 3 ranks): then every form runs the
        nonblocking call, so that all give the same bits.  False by default (no
        reduction)."""
        return False

    @classmethod
    def ordered_run_blocking(cls, comm, *args) -> bool:
        """For ``run_blocking`` overrides: run the call as ``blocking_call`` would when its
        order matters, returning True; False (nothing run) when it does not."""
        state = cls(comm, *args)
        if not state.order_sensitive():
            return False
        _post_and_wait(state)
        return True

    @classmethod
    def persistent(cls, comm, *args) -> PersistentRequest | None:
        """The same call as an MPI-4 persistent operation on these arguments: ``post`` runs
        once against a stand-in communicator on which ``I<op>`` makes ``<Op>_init`` (so
        every state's ``post`` serves both forms).  None for states that check a status
        (receives) or where the MPI library lacks the persistent form."""
        state = cls(comm, *args)
        if state.status is not None or state.order_sensitive():
            return None
        state.comm = _OtherForm(comm, persistent=True)
        try:
            request = state.post()
        except (AttributeError, NotImplementedError, MPI.Exception):
            return None
        finally:
            state.comm = comm
        finish = state.finish if cls.finish is not MPIRequestState.finish else None
        return PersistentRequest(comm, cls.name, request, finish)

    @classmethod
    def blocking_call(cls, comm, *args):
        """The blocking MPI call (``<Op>``) bound to these arguments, then ``finish``: made
        like ``persistent``, from ``post`` against a stand-in communicator on which
        ``I<op>(...)`` binds ``<Op>`` to the arguments instead of calling anything.  States
        that check a status take ``State``'s (``run_blocking`` bound): ``post`` does not
        pass the status a blocking receive fills."""
        state = cls(comm, *args)
        if state.status is not None:
            return super().blocking_call(comm, *args)
        if state.order_sensitive():   # in the nonblocking call's order
            return functools.partial(_post_and_wait, state)
        state.comm = _OtherForm(comm, persistent=False)
        try:
            call = state.post()
        finally:
            state.comm = comm
        if cls.finish is MPIRequestState.finish:
            return call
        finish = state.finish

        def call_and_finish():
            call()
            finish()
        return call_and_finish

    def start(self) -> None:
        self.request = self.post()

    def step(self) -> Action:
        if not self.request.Test(self.status):
            return Action.CONTINUE
        self.finish()
        return Action.COMPLETE


def _post_and_wait(state: MPIRequestState) -> None:
    state.post().Wait()
    state.finish()


class _OtherForm:
    """A communicator whose ``_mpi.I<op>(...)`` makes another form of the call: MPI-4's
    persistent ``<Op>_init(...)`` (``Iallgather`` -> ``Allgather_init``), or the blocking
    ``<Op>`` bound to those arguments, not yet called (``functools.partial``); every other
    attribute is the real one's."""

    def __init__(self, comm, persistent: bool) -> None:
        self._comm, self._persistent = comm, persistent
        self._mpi = self

    def __getattr__(self, name: str):
        if name.startswith("I") and name[1:2].islower():
            blocking = name[1].upper() + name[2:]
            if self._persistent:
                return getattr(self._comm.mpi_comm, blocking + "_init")
            call = getattr(self._comm.mpi_comm, blocking)
            return lambda *arguments: functools.partial(call, *arguments)
        return getattr(self._comm, name)


def pair_call(call, sendbuf, recvbuf, *after):
    """``array_call``'s callable for ``call(send spec, receive spec, *after)``: on the
    receive array alone in place (``sendbuf is recvbuf``, sending ``MPI.IN_PLACE``), else
    on the send and receive arrays."""
    datatype = mpi_datatype(recvbuf.dtype)
    if sendbuf is recvbuf:
        in_place = MPI.IN_PLACE
        return lambda recv: call(in_place, [recv, datatype], *after)
    send_type = mpi_datatype(sendbuf.dtype)
    return lambda send, recv: call([send, send_type], [recv, datatype], *after)


def then_finish(call, in_place: bool, op, size: int, count: int | None = None):
    """``pair_call``'s callable followed by ``op.finish`` (AVG's division, the logical ops'
    0/1) on the receive array's first ``count`` elements (all of them when None)."""
    if in_place:
        def call_and_finish(recv):
            call(recv)
            op.finish(recv if count is None else recv[:count], size)
        return call_and_finish

    def call_and_finish_out(send, recv):
        call(send, recv)
        op.finish(recv if count is None else recv[:count], size)
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
