"""Direct reduce: every other rank sends its whole buffer to the root, which receives them
all at once and reduces them in rank order; (p−1)α + (p−1)nβ into the root, one message per
rank, and a reduction whose bits are those of ``((x0 (op) x1) (op) x2) ...`` in every form."""
from __future__ import annotations

import threading

import numpy as np
from mpi4py import MPI

from ..passthrough.mpi_errors import operation_error
from .program import ProgramState

SETS_KEPT = 4   # (dtype, count) kinds whose receive buffers a communicator keeps between calls


class DirectReduce(ProgramState):
    """Reduce by sending every buffer to the root; the root sums them in rank order.

    The root posts one receive per other rank, all at once, and once every operand is in
    reduces left to right in rank order, its own operand at its own rank's place:
    ``((x0 (op) x1) (op) x2) ...``.  The result has the bits of that numpy sum on every run,
    blocking, nonblocking or persistent, with or without deterministic mode (which it
    therefore always satisfies), and whichever form each rank uses: the messages are the
    same.  The order is not MPI's own reduce's, so the bits may differ from
    ``mpi_passthrough``'s.

    Memory: the root receives into ``p - 1`` buffers of the message size (``p - 2`` out of
    place, where the first arriving operand lands in ``recvbuf``), kept per communicator for
    the last ``SETS_KEPT`` kinds of message (``ReceiveSets``); only the root holds them.
    Bandwidth: the root takes ``(p - 1) n`` bytes in at once, so MPI's tree or pipelined
    reduce wins on many ranks or large messages; this one wins where few ranks make
    ``MPI_Ireduce`` (what an order-sensitive ``mpi_passthrough`` reduce runs in every form)
    slow.
    """

    name = "reduce/direct"

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
    def array_call(cls, comm, stream, sendbuf, recvbuf, op, root):
        """Off the root, repeated calls on new arrays: the one message, a blocking
        ``MPI_Send`` of the array under this call's tag (what ``program`` sends)."""
        if comm.rank == root:
            return None
        send, next_tag = comm.mpi_comm.Send, comm.next_tag
        return lambda array: send(array.view(np.uint8), root, next_tag())

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
