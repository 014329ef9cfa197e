"""``AL_DEBUG=1``: check before every collective that all ranks are calling the same thing.

Like ``TORCH_DISTRIBUTED_DEBUG=DETAIL``: each rank allgathers a fingerprint of the call (op,
algorithm, dtypes, counts, reduction op, root) over a private duplicate of the communicator,
and every rank raises ``al.ArgumentError`` naming the ranks whose call differs, instead of
hanging or silently reducing mismatched buffers.  Point-to-point operations are not checked
(their peers legitimately differ).
"""
from __future__ import annotations

import os

from .core.buffers import Buffer
from .core.errors import ArgumentError

ENABLED = os.environ.get("AL_DEBUG", "0") not in ("", "0", "false", "False")

POINT_TO_POINT = frozenset({"send", "recv", "sendrecv", "multisendrecv"})


# Collectives whose first buffer has the same dtype and count on every rank.
_UNIFORM = frozenset({"allreduce", "reduce", "reduce_scatter", "allgather", "alltoall", "bcast"})


def fingerprint(op: str, algo: str, args: tuple) -> str:
    """A printable summary of one call: what every rank must agree on."""
    parts = [op, algo]
    first_buffer = next((arg for arg in args if isinstance(arg, Buffer)), None)
    if op in _UNIFORM and first_buffer is not None:
        parts.append(first_buffer.describe())
    for arg in args:
        if type(arg) is int:                                  # root
            parts.append(f"root={arg}")
        elif hasattr(arg, "is_logical"):                      # ReductionOp
            parts.append(arg.name)
    return " ".join(parts)


def check(comm, op: str, algo: str, args: tuple) -> None:
    """Raise on every rank if the ranks' fingerprints for this collective differ."""
    if op in POINT_TO_POINT:
        return
    mine = fingerprint(op, algo, args)
    debug_comm = comm.scratch("debug_comm", lambda: _FreeOnClose(comm.mpi_comm.Dup()))
    everyone = debug_comm.comm.allgather(mine)
    if any(print_ != everyone[0] for print_ in everyone):
        rows = "; ".join(f"rank {r}: {p}" for r, p in enumerate(everyone))
        raise ArgumentError(f"AL_DEBUG: ranks issued different collectives: {rows}")


class _FreeOnClose:
    def __init__(self, comm):
        self.comm = comm

    def close(self):
        self.comm.Free()
