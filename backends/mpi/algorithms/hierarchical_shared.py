"""The hierarchical allreduce's node phases on ``al.shared_empty`` buffers: read and write
the node's shared segments directly instead of passing blocks round a ring.

Where every rank of a node passes arrays lying in its shared segments (SharedBuffers),
local rank ``r`` reduces block ``r`` straight out of every rank's send array into its own
result, and later copies the other blocks straight out of the other ranks' results.  No
staging copies and no messages inside the node but three kinds of synchronisation, all
point to point on the operation's tags (so concurrent operations never match each other's):

- the announcement of where each rank's arrays lie (a ring allgather of 5 integers), which
  also tells every rank that the others have entered the call (their data is written);
- per chunk, a barrier before reading the others' finished blocks;
- a barrier at the end, so that no rank returns (and overwrites its buffer) while another
  still reads it.

Block ``r`` is reduced in the order the ring reduce-scatter reduces it, ``((x[r+1] (op)
x[r+2]) (op) ...) (op) x[r]`` (local ranks, wrapping), so shared and private buffers give
the same bits.
"""
from __future__ import annotations

import numpy as np

from .program import ProgramState, ring_allgather
from .shared_buffers import NOT_SHARED, SharedBuffers

_NOTHING = np.empty(0, np.uint8)


def shared_arrays(state: ProgramState, node, send: np.ndarray, recv: np.ndarray):
    """Every local rank's (send, recv) arrays when all ranks of ``node`` pass arrays in
    their shared segments (each a list in local-rank order), else None: the same answer on
    every rank of the node.  Doubles as the node's entry barrier."""
    registry = SharedBuffers.find(state.comm)
    mine = NOT_SHARED if registry is None else registry.place(send, recv)
    places = np.empty((len(node), len(NOT_SHARED)), np.int64)
    places[node.index(state.comm.rank)] = mine
    yield from ring_allgather(state, list(places), node)
    if (places[:, 0] < 0).any() or (places[:, 2] < 0).any():
        return None
    return registry.arrays([tuple(int(v) for v in row) for row in places], recv.dtype)


def node_barrier(state: ProgramState, node, tag: int | None = None):
    """Return once every rank of ``node`` has entered (dissemination: ``log2 L`` rounds of
    empty messages)."""
    size, me = len(node), node.index(state.comm.rank)
    distance = 1
    while distance < size:
        yield from state.exchange(_NOTHING, node[(me + distance) % size], _NOTHING,
                                  node[(me - distance) % size], tag)
        distance *= 2


def reduce_my_block(op, sends: list[np.ndarray], bounds: slice, local: int,
                    out: np.ndarray, scratch: np.ndarray) -> None:
    """``out`` = the reduction of ``sends[i][bounds]`` over the node, in the ring's order
    (``out`` may be this rank's own send block: it is read last)."""
    size = len(sends)
    others = [sends[(local + k) % size][bounds] for k in range(1, size)]
    mine = sends[local][bounds]
    if size == 2:
        op.ufunc(others[0], mine, out=out)
        return
    partial = scratch[:out.size]
    op.ufunc(others[0], others[1], out=partial)
    for block in others[2:]:
        op.ufunc(partial, block, out=partial)
    op.ufunc(partial, mine, out=out)
