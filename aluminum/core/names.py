"""The closed sets of names the library uses: algorithms, rule placements and modes, devices.

Each is a string enum: a member *is* its string (``Algorithm.RING == "ring"``, same hash,
``str()`` and JSON), so ``algo="ring"`` and ``algo=al.Algorithm.RING`` are one argument,
tuning tables keep their plain strings, and a typo in library code is an ``AttributeError``
instead of a name nobody registered.
"""
from __future__ import annotations

import enum

__all__ = ["Algorithm", "Device", "Mode", "Placement"]


class _Name(str, enum.Enum):
    """A string enum that prints, formats and reprs as its value (``f"{Algorithm.RING!r}"``
    is ``"'ring'"``), so messages read the same whether given a member or a string."""

    __str__ = str.__str__
    __format__ = str.__format__
    __repr__ = str.__repr__


class Algorithm(_Name):
    """What ``algo=`` accepts (``al.algorithms(op, backend)`` lists each op's)."""

    AUTOMATIC = "automatic"                  # the selector's choice (the default)
    MPI_PASSTHROUGH = "mpi_passthrough"      # the MPI library's own implementation
    RECURSIVE_DOUBLING = "recursive_doubling"
    RING = "ring"
    RABENSEIFNER = "rabenseifner"
    SHARED_MEMORY = "shared_memory"          # through node-shared memory (barrier: the
                                             # arrival board; al.shared_empty's buffers)
    HIERARCHICAL = "hierarchical"            # inside nodes, then across them
    DIRECT = "direct"                        # every rank straight to the root (reduce)
    HOST_TRANSFER = "host_transfer"          # the host-transfer backend's staging
    NCCL = "nccl"


class Placement(_Name):
    """Which calls a tuning rule applies to: in place, or out of place."""

    INPLACE = "inplace"
    OUTOFPLACE = "outofplace"


class Mode(_Name):
    """Which form of an operation a tuning rule applies to."""

    BLOCKING = "blocking"
    NONBLOCKING = "nonblocking"


class Buffers(_Name):
    """Which communicators a tuning rule applies to: those on which ``al.shared_empty``
    allocated buffers (their allreduces may run zero-copy), or the others."""

    SHARED = "shared"
    PRIVATE = "private"


class Device(_Name):
    """Where a buffer's memory lives (``Buffer.device``; torch's ``device.type`` names)."""

    HOST = "cpu"
    CUDA = "cuda"
