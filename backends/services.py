"""What a backend provides besides its operations: the process groups communicators are made
of, and the few small collectives the library makes for itself.

The API layer (communicators, ``al.init``/``al.finalize``, ``AL_DEBUG``, the arrival
counters that name late ranks) knows no transport: it asks a ``Services`` object, which it
finds through the registry (``get_services(name)``; a ``Backend`` names the services its
communicators are built with in ``Backend.services``).  The MPI backend's are
backends/mpi/services.py; a backend with another way to form groups (a multi-host or NCCL
bootstrap of its own) implements this class and registers it with ``register_services``.

Handles (``group``, ``admin``, ...) are whatever the services use for a group of
processes (an mpi4py communicator for MPI); the API only passes them back.  Every
collective here is bounded: a rank that never arrives makes the others raise
``al.TimeoutError`` within ``AL_TIMEOUT``, naming ``what`` (see backends/mpi/rendezvous.py).
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

Missing = Callable[[], str]                  # words which ranks never arrived
GiveUp = Callable[[float], "str | None"]     # asked with the seconds waited: a reason to stop


@dataclass(eq=False)
class Group:
    """A communicator's process group as the services made it: ``ops`` carries its
    operations, ``admin`` only the library's own collectives (split, copy, roll calls),
    never operations in flight; ``local`` is the node-local part.  ``nodes`` lists every
    node's ranks (rank order within a node), alike on every rank."""

    ops: Any
    admin: Any
    local: Any
    rank: int
    size: int
    local_rank: int
    local_size: int
    nodes: tuple[tuple[int, ...], ...]


class NodeBoard(abc.ABC):
    """Int64 counters, ``slots`` per process, in memory every process of the node reads and
    writes without any call into the transport (a stuck peer cannot block reading them).

    ``counters[i]`` is the node's process ``i``'s (board index ``i``), ``mine`` this
    process's; ``whole_job`` says whether the node holds every process of the job."""

    counters: list
    mine: Any
    whole_job: bool

    @abc.abstractmethod
    def locate(self, group: Any, size: int) -> tuple[list[int | None], list[str]]:
        """Board indices of ``group``'s ranks in rank order (None for a rank on another
        node), and each rank's host name."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the shared memory (collective over the node)."""


class Services(abc.ABC):
    """Process groups and the library's own small collectives, for one kind of transport."""

    name: str = ""

    # -- lifetime --------------------------------------------------------------------------

    @abc.abstractmethod
    def start(self, group: Any = None) -> tuple[Any, Any]:
        """Start the transport if nobody has (collective); return the default group
        (``group``, else every process) and a private copy of it for the library's own
        agreements."""

    @abc.abstractmethod
    def stopped(self) -> bool:
        """True once the transport is shut down: handles must no longer be freed."""

    @abc.abstractmethod
    def abort(self, status: int) -> None:
        """End every process of the job now with ``status`` (``MPI_Abort``) if there are
        others; returns only for a lone process or a transport not running."""

    # -- groups ----------------------------------------------------------------------------

    @abc.abstractmethod
    def open_group(self, parent: Any, what: str) -> Group:
        """A new group over ``parent``'s processes (collective, bounded, named ``what``);
        ``al.CommunicatorError`` naming ``mpi_comm`` when ``parent`` is no group handle."""

    @abc.abstractmethod
    def split(self, admin: Any, color: int | None, key: int) -> Any:
        """The part of ``admin``'s group with this ``color``, ranked by ``key`` (collective);
        None for ``color=None``.  The caller frees it."""

    @abc.abstractmethod
    def private_copy(self, group: Any, what: str) -> Any:
        """A duplicate of ``group`` whose traffic never meets the original's (bounded)."""

    @abc.abstractmethod
    def free(self, *handles: Any) -> None:
        """Release ``handles`` (local, no collective)."""

    # -- bounded collectives ---------------------------------------------------------------

    @abc.abstractmethod
    def agree(self, group: Any, what: str, value: int, timeout: float | None = None,
              missing: Missing | None = None, give_up: GiveUp | None = None) -> int:
        """The minimum of every rank's ``value``; ``timeout`` (default ``AL_TIMEOUT``) and
        ``give_up`` end the wait early with ``al.TimeoutError``."""

    @abc.abstractmethod
    def all_set(self, group: Any, what: str, flags: np.ndarray) -> np.ndarray:
        """Element-wise AND of every rank's uint8 ``flags`` (same length everywhere)."""

    @abc.abstractmethod
    def allgather(self, group: Any, what: str, row: np.ndarray) -> np.ndarray:
        """Every rank's uint8 ``row`` (same length everywhere), one row per rank."""

    @abc.abstractmethod
    def stranded(self, group: Any) -> bool:
        """True if a bounded wait timed out on ``group``: a collective is still pending on
        it, so it must never be freed."""

    @abc.abstractmethod
    def stranded_any(self) -> bool:
        """True once any bounded wait of this process timed out."""

    # -- what the arrival counters (aluminum/watchdog.py) need ------------------------------

    @abc.abstractmethod
    def open_board(self, world: Any, slots: int) -> NodeBoard | None:
        """The node's board of counters (collective over ``world``); None for a single
        process, which has no peer to wait for."""

    def measure_link(self, world: Any, wanted: bool) -> tuple[float, float] | None:
        """``(α seconds, β seconds per byte)`` of one message between two of ``world``'s
        nodes, the same on every rank (collective over ``world``, bounded); None on one
        node, where a rank passed ``wanted`` False, or where the services cannot measure
        (this default)."""
        return None

    @abc.abstractmethod
    def roll_call(self, admin: Any, count: int, number: int, ranks: list[int],
                  seconds: float) -> dict[int, int]:
        """Send ``count`` to each of ``ranks`` (on other nodes) and collect theirs for up to
        ``seconds``: ``{rank: the highest count it sent}`` for those that answered; a
        rank's answers below ``number`` do not end listening for it."""
