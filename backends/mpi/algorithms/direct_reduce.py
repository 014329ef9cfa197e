"""Direct reduce: every other rank sends its whole buffer to the root, which receives them
all at once and reduces them in rank order; (p−1)α + (p−1)nβ into the root, one message per
rank, and a reduction whose bits are those of ``((x0 (op) x1) (op) x2) ...`` in every form."""
from __future__ import annotations

import functools
import threading

import numpy as np
from mpi4py import MPI

from ..passthrough.mpi_errors import operation_error
from ..passthrough.persistent import PersistentStart, free_requests
from .program import ProgramState

SETS_KEPT = 4   # (dtype, count) kinds whose receive buffers a communicator keeps between calls
# The one tag of every direct reduce's messages: above the tags of ``Communicator.next_tag``
# (1..32000), below the least MPI_TAG_UB MPI guarantees (32767).
DIRECT_REDUCE_TAG = 32001


class DirectReduce(ProgramState):
    """Reduce by sending every buffer to the root; the root sums them in rank order.

    The root posts one receive per other rank, all at once, and once every operand is in
    reduces left to right in rank order, its own operand at its own rank's place:
    ``((x0 (op) x1) (op) x2) ...``.  The result has the bits of that numpy sum on every run,
    blocking, nonblocking or persistent, with or without deterministic mode (which it
    therefore always satisfies), and whichever form each rank uses: the messages are the
    same.  The order is not MPI's own reduce's, so the bits may differ from
    ``mpi_passthrough``'s.

    Every form sends under one tag, ``DIRECT_REDUCE_TAG``, so that a plan binds its messages
    once (``persistent``: ``MPI_Send_init`` / ``MPI_Recv_init``) and still matches the
    other ranks' blocking and nonblocking calls.  No per-call tag is needed: messages from
    one rank to another on one communicator match in the order they were posted (MPI's
    non-overtaking rule), and every rank posts its direct reduces on a communicator in the
    order it issued them (blocking calls and plan runs after the nonblocking operations
    before them have started, the engine in submission order), which is the same on every
    rank.  The surprises: unlike ``al.<op>_init``'s plans elsewhere, whose ``start()``
    matches only the same plan's starts on the other ranks, a direct reduce plan's runs and
    starts match any form of the call; and after a direct reduce was abandoned
    (``al.TimeoutError``, a rank that skipped one), a receive it left posted takes the next
    call's message: the communicator's later direct reduces are out of step.

    Memory: the root receives into ``p - 1`` buffers of the message size (``p - 2`` out of
    place, where the first arriving operand lands in ``recvbuf``), kept per communicator for
    the last ``SETS_KEPT`` kinds of message (``ReceiveSets``), and a plan's persistent
    form holds a set of its own, bound to its requests; only the root holds them.
    Bandwidth: the root takes ``(p - 1) n`` bytes in at once, so MPI's tree or pipelined
    reduce wins on many ranks or large messages; this one wins where few ranks make
    ``MPI_Ireduce`` (what an order-sensitive ``mpi_passthrough`` reduce runs in every form)
    slow.
    """

    name = "reduce/direct"
    fixed_tag = DIRECT_REDUCE_TAG
    persistent_matches_calls = True

    def __init__(self, comm, stream, sendbuf, recvbuf, op, root):
        super().__init__(comm)
        self.sendbuf, self.recvbuf, self.op, self.root = sendbuf, recvbuf, op, root

    def program(self):
        own = self.sendbuf.array
        if self.comm.rank != self.root:
            yield from self.wait([self.isend(own, self.root)])
            return
        size, out = self.comm.size, self.recvbuf.array
        senders = [r for r in range(size) if r != self.root]
        in_place = self.sendbuf is self.recvbuf
        sets = ReceiveSets.of(self.comm)
        scratch = sets.take(own.dtype, own.size, max(0, len(senders) - (not in_place)))
        targets = (scratch if in_place else [out] + scratch)[:len(senders)]
        yield from self.wait([self.irecv(target, sender)
                              for target, sender in zip(targets, senders)])
        operands = targets[:self.root] + [own] + targets[self.root:]
        reduce_at_root(self.op, operands, self.root, out)
        sets.give(own.dtype, own.size, scratch)
        self.op.finish(out, size)

    @classmethod
    def blocking_call(cls, comm, stream, sendbuf, recvbuf, op, root):
        """Off the root, the one message bound once: a blocking ``MPI_Send`` of ``sendbuf``
        (what ``program`` sends); at the root, ``program`` run to its end."""
        if comm.rank == root:
            return super().blocking_call(comm, stream, sendbuf, recvbuf, op, root)
        return functools.partial(comm.mpi_comm.Send, sendbuf.array.view(np.uint8), root,
                                 DIRECT_REDUCE_TAG)

    @classmethod
    def array_call(cls, comm, stream, sendbuf, recvbuf, op, root):
        """Off the root, repeated calls on new arrays: the one message, a blocking
        ``MPI_Send`` of the array under this call's tag (what ``program`` sends)."""
        if comm.rank == root:
            return None
        send = comm.mpi_comm.Send
        return lambda array: send(array.view(np.uint8), root, DIRECT_REDUCE_TAG)

    @classmethod
    def persistent(cls, comm, stream, sendbuf, recvbuf, op, root) -> PersistentDirectReduce:
        """The messages bound once to the plan's buffers (``PersistentDirectReduce``)."""
        return PersistentDirectReduce(comm, sendbuf, recvbuf, op, root)

    @classmethod
    def call_error(cls, exc: Exception) -> Exception | None:
        return operation_error(cls.name, exc) if isinstance(exc, MPI.Exception) else None


def reduce_at_root(op, operands: list, root: int, out: np.ndarray) -> None:
    """``out = ((operands[0] (op) operands[1]) (op) operands[2]) ...``, before ``finish``.
    ``operands[root]`` is the root's own (it may be ``out``: in place); the others are
    received copies that may be overwritten, and one of them may be ``out``: the ranks
    before the root are folded into ``operands[0]`` first, so the root's own operand is
    read before ``out`` is written."""
    if len(operands) == 1:
        if operands[0] is not out:
            np.copyto(out, operands[0])
        return
    ufunc = op.ufunc
    total = operands[0]
    for index in range(1, len(operands)):
        target = out if index >= root else total
        ufunc(total, operands[index], out=target)
        total = target


class PersistentDirectReduce:
    """A direct reduce plan's messages as MPI persistent requests, made once: off the root
    ``MPI_Send_init`` of the plan's buffer, at the root one ``MPI_Recv_init`` per other rank
    into receive buffers of the plan's own (``recvbuf`` for the first, out of place), then
    the rank-order reduction.  ``run()`` runs it blocking, ``state()`` gives the engine a
    State that starts it (one for every start), ``free()`` frees the requests.  Runs and
    starts exchange the messages of ``DirectReduce``'s every form, so they match them."""

    def __init__(self, comm, sendbuf, recvbuf, op, root) -> None:
        self.comm, self.name, self.op, self.root = comm, DirectReduce.name, op, root
        mpi, own = comm.mpi_comm, sendbuf.array
        self.out = self.operands = None    # the root's result and operands, in rank order
        if comm.rank != root:
            self.requests = [mpi.Send_init(own.view(np.uint8), root, DIRECT_REDUCE_TAG)]
            return
        senders = [r for r in range(comm.size) if r != root]
        in_place = sendbuf is recvbuf
        self.out = recvbuf.array
        scratch = [np.empty(own.size, own.dtype)
                   for _ in range(max(0, len(senders) - (not in_place)))]
        targets = (scratch if in_place else [self.out] + scratch)[:len(senders)]
        self.requests = [mpi.Recv_init(target.view(np.uint8), sender, DIRECT_REDUCE_TAG)
                         for target, sender in zip(targets, senders)]
        self.operands = targets[:root] + [own] + targets[root:]

    def run(self) -> None:
        """Start every request, wait for each (for a few requests cheaper than
        ``Startall``/``Waitall``, which convert their lists on every call), reduce."""
        requests = self.requests
        for request in requests:
            request.Start()
        for request in requests:
            request.Wait()
        if self.out is not None:
            self._reduce()

    def state(self) -> PersistentStart:
        """A State making one nonblocking run; it holds nothing of its own, so a plan keeps
        one for every start."""
        return PersistentStart(self)

    def start(self) -> None:
        MPI.Prequest.Startall(self.requests)

    def test(self) -> bool:
        """Whether the started run completed (then reduced, at the root)."""
        try:
            done = MPI.Request.Testall(self.requests)
        except MPI.Exception as exc:
            raise operation_error(self.name, exc) from exc
        if done and self.out is not None:
            self._reduce()
        return done

    def _reduce(self) -> None:
        reduce_at_root(self.op, self.operands, self.root, self.out)
        self.op.finish(self.out, self.comm.size)

    def free(self) -> None:
        """Free the MPI requests; the plan waited for its last run first."""
        free_requests(self)

    __del__ = free


class ReceiveSets:
    """The root's receive buffers, kept per communicator (``comm.scratch``): one set per
    (dtype, count, how many), the last ``SETS_KEPT`` kinds.  A call takes a set and gives it
    back when done, so operations in flight together never share one (a second gets a new
    set, dropped afterwards if one is kept already)."""

    KEY = "direct_reduce_receive_sets"

    def __init__(self) -> None:
        self._free: dict[tuple, list] = {}
        self._lock = threading.Lock()   # blocking calls and the engine may share a comm

    @classmethod
    def of(cls, comm) -> ReceiveSets:
        return comm.scratch(cls.KEY, cls)

    def take(self, dtype: np.dtype, count: int, how_many: int) -> list:
        with self._lock:
            found = self._free.pop((dtype, count, how_many), None)
        if found is not None:
            return found
        return [np.empty(count, dtype) for _ in range(how_many)]

    def give(self, dtype: np.dtype, count: int, buffers: list) -> None:
        key = (dtype, count, len(buffers))
        with self._lock:
            if key in self._free or not buffers:
                return
            while len(self._free) >= SETS_KEPT:      # forget the oldest kind
                self._free.pop(next(iter(self._free)))
            self._free[key] = buffers
