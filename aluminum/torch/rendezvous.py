"""Where ``dist.init_process_group("aluminum")`` finds its rank, size and store under MPI.

torch's default ``init_method`` is ``env://``: it reads ``MASTER_ADDR``, ``MASTER_PORT``,
``RANK`` and ``WORLD_SIZE`` and every rank connects to a ``TCPStore`` served by rank 0.  MPI
already knows the rank and size, so under ``mpiexec`` (``python -m aluminum.run``)
``import aluminum.torch`` fills in whichever of the four are missing: rank and size from
MPI, the address and a free port chosen by rank 0 and broadcast to the others.

Why a real ``TCPStore`` rather than a private ``HashStore``: the aluminum process group
itself never touches the store (MPI does the rendezvous), but torch does for other groups
made later in the same job (``dist.new_group(backend="gloo")`` rendezvouses through it) and
for its optional store barriers (``TORCH_DIST_INIT_BARRIER=1``).  A per-process store
would make those hang.

The surprise: ``import aluminum.torch`` starts MPI (``al.init``, about a second) when it
runs under an MPI launcher without ``MASTER_ADDR``/``MASTER_PORT``.  Outside a launcher it
changes nothing, so a child process started later does not inherit a one-rank setting.
"""
from __future__ import annotations

import os
import socket

import aluminum as al

# Variables set by the launchers that start one process per MPI rank (Open MPI, PMIx, Hydra).
_LAUNCHER_SIZE = ("OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE")

_world: al.MPICommunicator | None = None


def under_mpi_launcher() -> bool:
    """True when this process was started by ``mpiexec`` (one of several ranks or one)."""
    return any(name in os.environ for name in _LAUNCHER_SIZE) or "PMIX_RANK" in os.environ


def world_communicator() -> al.MPICommunicator:
    """The communicator over every rank of the MPI job, made once and shared by the default
    "aluminum" process group (a collective the first time: every rank calls it)."""
    global _world
    if _world is None or _world.freed:
        _world = al.MPICommunicator()
    return _world


def fill_env_from_mpi() -> None:
    """Set ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK`` and ``WORLD_SIZE`` from MPI where the
    user has not (their values win); a collective over the job when the address or port is
    missing, a no-op outside an MPI launcher."""
    if not under_mpi_launcher():
        return
    needs_store = "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ
    if not needs_store and "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return
    comm = world_communicator()
    os.environ.setdefault("RANK", str(comm.rank))
    os.environ.setdefault("WORLD_SIZE", str(comm.size))
    if not needs_store:
        return
    address = None
    if comm.rank == 0:
        address = ("127.0.0.1" if comm.local_size == comm.size else socket.getfqdn(),
                   _free_port())
    address = comm.mpi_comm.bcast(address, root=0)
    os.environ.setdefault("MASTER_ADDR", address[0])
    os.environ.setdefault("MASTER_PORT", str(address[1]))


def _free_port() -> int:
    """A TCP port nothing listens on now (rank 0's TCPStore binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]
