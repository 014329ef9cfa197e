"""The MPI backend's services (backends/services.py): MPI start-up, communicators and their
node-local parts, the bounded small collectives of backends/mpi/rendezvous.py, the arrival
board's shared window and the roll call.  The host-transfer and NCCL backends build their
communicators with these too (they bootstrap over MPI).

Nothing imports ``mpi4py.MPI`` before ``start``: importing it initializes MPI, and ``start``
sets how (``MPI_THREAD_MULTIPLE``: the progress engine calls MPI from its own thread; Open
MPI's AVX op component off unless ``OMPI_MCA_op`` says otherwise: it saturates 8/16-bit
integer sums, aluminum's rule is wrap-around).  A program that imported ``mpi4py.MPI``
itself first keeps its own settings.
"""
from __future__ import annotations

import os
import sys
import time
import warnings

import numpy as np

from ...core.errors import CommunicatorError
from .. import register_services
from ..services import Group, NodeBoard, Services

ROLL_CALL_TAG = 32767     # above every operation's tag (Communicator.next_tag), on admin
_sent: list = []          # roll-call messages nobody received (a peer unreachable)


class MPIServices(Services):
    name = "mpi"

    def start(self, group=None):
        import mpi4py

        if "mpi4py.MPI" not in sys.modules:
            # (backends/mpi/datatypes.py copes when it is too late for this: MPI started by
            # the user)
            os.environ.setdefault("OMPI_MCA_op", "^avx")
        mpi4py.rc.thread_level = "multiple"
        from mpi4py import MPI

        # The backend's operations load here, at al.init(), not at some rank's first
        # communicator: loading takes a while, and that rank would come late to the
        # communicator's creation, which other ranks' timeouts count.
        from . import backend, rendezvous  # noqa: F401

        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            warnings.warn("aluminum: MPI was initialized without MPI_THREAD_MULTIPLE; "
                          "nonblocking operations may be unsafe", RuntimeWarning, stacklevel=3)
        world = group if group is not None else MPI.COMM_WORLD
        return world, rendezvous.dup(world, "al.init() (MPI_Comm_idup of the default group)")

    def stopped(self) -> bool:
        from mpi4py import MPI

        return MPI.Is_finalized()

    def abort(self, status: int) -> None:
        from mpi4py import MPI

        if MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1:
            MPI.COMM_WORLD.Abort(status)

    def open_group(self, parent, what: str) -> Group:
        """``parent`` duplicated twice (the second for ``admin``) and split per node; every
        rank learns every node's ranks (two small collectives), so node-aware algorithms
        need no agreement per call."""
        from mpi4py import MPI

        from . import rendezvous

        if not isinstance(parent, MPI.Comm) or parent == MPI.COMM_NULL:
            raise CommunicatorError(f"mpi_comm: expected an mpi4py communicator, got {parent!r}")
        ops = rendezvous.dup(parent, f"{what} (MPI_Comm_idup)")
        # split() and copy() make their MPI collectives on admin, never on ops: the engine
        # starts the operations' nonblocking collectives on ops from its own thread, at
        # times that differ between ranks, and a blocking collective among them would be
        # matched out of order (MPI_ERR_TRUNCATE, corrupted operations in flight).
        admin = ops.Dup()
        local = ops.Split_type(MPI.COMM_TYPE_SHARED)
        rank = ops.Get_rank()
        seen = admin.allgather(tuple(local.allgather(rank)))
        return Group(ops=ops, admin=admin, local=local, rank=rank, size=ops.Get_size(),
                     local_rank=local.Get_rank(), local_size=local.Get_size(),
                     nodes=tuple(sorted(set(seen))))

    def split(self, admin, color, key):
        from mpi4py import MPI

        part = admin.Split(MPI.UNDEFINED if color is None else color, key)
        return None if part == MPI.COMM_NULL else part

    def private_copy(self, group, what: str):
        from . import rendezvous

        return rendezvous.dup(group, what)

    def free(self, *handles) -> None:
        from mpi4py import MPI

        if not MPI.Is_finalized():
            for handle in handles:
                handle.Free()

    def agree(self, group, what, value, timeout=None, missing=None, give_up=None) -> int:
        from . import rendezvous

        return rendezvous.agree(group, what, value, timeout, missing, give_up)

    def all_set(self, group, what, flags):
        from mpi4py import MPI

        from . import rendezvous

        common = np.zeros_like(flags)
        rendezvous.wait(group, group.Iallreduce(flags, common, MPI.BAND), what)
        return common

    def allgather(self, group, what, row):
        from . import rendezvous

        gathered = np.zeros((group.Get_size(), len(row)), row.dtype)
        rendezvous.wait(group, group.Iallgather(row, gathered), what)
        return gathered

    def stranded(self, group) -> bool:
        from . import rendezvous

        return rendezvous.stranded(group)

    def stranded_any(self) -> bool:
        from . import rendezvous

        return rendezvous.stranded_any()

    def open_board(self, world, slots: int) -> NodeBoard | None:
        return _MPIBoard(world, slots) if world.Get_size() > 1 else None

    def measure_link(self, world, wanted: bool):
        from .link_probe import measure_link

        return measure_link(world, wanted)

    def roll_call(self, admin, count, number, ranks, seconds):
        from mpi4py import MPI

        mine = np.array([count], np.int64)
        for rank in ranks:
            admin.Isend(mine, dest=rank, tag=ROLL_CALL_TAG).Free()   # (unanswerable if down)
        _sent.append(mine)
        buffers = {rank: np.zeros(1, np.int64) for rank in ranks}
        listening = {rank: admin.Irecv(buffers[rank], source=rank, tag=ROLL_CALL_TAG)
                     for rank in ranks}
        heard: dict[int, int] = {}
        deadline = time.monotonic() + seconds
        while listening and time.monotonic() < deadline:
            for rank, request in list(listening.items()):
                if request.Test():
                    heard[rank] = max(heard.get(rank, -1), int(buffers[rank][0]))
                    if heard[rank] >= number:
                        del listening[rank]
                    else:
                        listening[rank] = admin.Irecv(buffers[rank], source=rank,
                                                      tag=ROLL_CALL_TAG)
            time.sleep(0.01)
        for request in listening.values():
            request.Cancel()
            request.Wait(MPI.Status())
        return heard


class _MPIBoard(NodeBoard):
    """An MPI-3 shared window over the node's processes of ``world``, ``slots`` int64 each."""

    def __init__(self, world, slots: int) -> None:
        from mpi4py import MPI

        from . import rendezvous

        self.local = world.Split_type(MPI.COMM_TYPE_SHARED)
        self.world_group = world.Get_group()
        self.hosts = _host_names(world)     # (for messages)
        rendezvous.enter(self.local, "al.init() (the arrival board's shared window)")
        self.window = MPI.Win.Allocate_shared(slots * 8, 8, comm=self.local)
        self.group = self.local.Get_group()
        self.counters = [memoryview(self.window.Shared_query(peer)[0]).cast("B").cast("q")
                         for peer in range(self.local.Get_size())]
        self.mine = self.counters[self.local.Get_rank()]
        self.whole_job = self.local.Get_size() == world.Get_size()

    def locate(self, group, size: int):
        from mpi4py import MPI

        members = group.Get_group()
        ranks = list(range(size))
        try:
            found = members.Translate_ranks(ranks, self.group)
            in_world = members.Translate_ranks(ranks, self.world_group)
        finally:
            members.Free()
        hosts = [self.hosts[rank] if rank != MPI.UNDEFINED else "?" for rank in in_world]
        return [None if index == MPI.UNDEFINED else index for index in found], hosts

    def close(self) -> None:
        from mpi4py import MPI

        self.counters = []
        self.mine = None
        if not MPI.Is_finalized():
            self.window.Free()
            self.group.Free()
            self.world_group.Free()
            self.local.Free()


def _host_names(world) -> list[str]:
    """Every rank's host name (``MPI_Get_processor_name``), bounded like every wait at
    ``al.init()`` (a nonblocking allgather of fixed-size names)."""
    from mpi4py import MPI

    from . import rendezvous

    mine = np.zeros(MPI.MAX_PROCESSOR_NAME, np.uint8)
    name = MPI.Get_processor_name().encode()[:MPI.MAX_PROCESSOR_NAME - 1]
    mine[:len(name)] = np.frombuffer(name, np.uint8)
    everyone = np.zeros((world.Get_size(), MPI.MAX_PROCESSOR_NAME), np.uint8)
    rendezvous.wait(world, world.Iallgather(mine, everyone), "al.init() (host names)")
    return [row.tobytes().rstrip(b"\0").decode(errors="replace") for row in everyone]


MPI_SERVICES = MPIServices()
register_services(MPI_SERVICES)
