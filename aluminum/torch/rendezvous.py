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

Across nodes the address must be one the other nodes reach: rank 0's host name may not
resolve anywhere else (emulated hosts have no DNS entry; ``getfqdn()`` gives a bare name),
so rank 0 offers the address of its interface on an IPv4 network that every node has an
interface on (host name only when there is none).  Each rank also sets
``GLOO_SOCKET_IFNAME`` to its own interface on that network when the user has not: gloo
(``dist.new_group(backend="gloo")``) otherwise resolves the host name, and falls back to
the loopback address, which no other node reaches.

The surprise: ``import aluminum.torch`` starts MPI (``al.init``, about a second) when it
runs under an MPI launcher without ``MASTER_ADDR``/``MASTER_PORT``.  Outside a launcher it
changes nothing, so a child process started later does not inherit a one-rank setting.
"""
from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct

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
    if comm.node_count == 1:
        host = "127.0.0.1"
    else:
        host = _shared_network_address(comm)
    port = comm.mpi_comm.bcast(_free_port() if comm.rank == 0 else None, root=0)
    os.environ.setdefault("MASTER_ADDR", host)
    os.environ.setdefault("MASTER_PORT", str(port))


def _shared_network_address(comm: al.MPICommunicator) -> str:
    """Rank 0's address on a network every node of ``comm`` has an interface on (a
    collective); sets this rank's ``GLOO_SOCKET_IFNAME`` to its interface there unless set.
    Rank 0's host name when the nodes share no network (routed clusters: DNS knows it)."""
    everyone = comm.mpi_comm.allgather(_interfaces())
    elsewhere = {address for node in comm.nodes if 0 not in node for rank in node
                 for _, address, _ in everyone[rank]}
    for _, address, network in sorted(everyone[0], key=lambda found: str(found[2])):
        on_it = [[mine for mine, _, net in interfaces if net == network]
                 for interfaces in everyone]
        # (an address other nodes have too is a private network each has, e.g. docker0)
        if all(on_it) and address not in elsewhere:
            if "GLOO_SOCKET_IFNAME" not in os.environ:
                os.environ["GLOO_SOCKET_IFNAME"] = on_it[comm.rank][0]
            return str(address)
    return comm.mpi_comm.bcast(socket.getfqdn() if comm.rank == 0 else None, root=0)


_SIOCGIFADDR, _SIOCGIFNETMASK = 0x8915, 0x891B


def _interfaces() -> list[tuple[str, ipaddress.IPv4Address, ipaddress.IPv4Network]]:
    """This process's non-loopback IPv4 interfaces: (name, address, network); Linux ioctls,
    the primary address of each interface."""
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                address = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)[20:24]
                netmask = fcntl.ioctl(probe.fileno(), _SIOCGIFNETMASK, request)[20:24]
            except OSError:      # no IPv4 address on it
                continue
            interface = ipaddress.IPv4Interface((socket.inet_ntoa(address),
                                                 socket.inet_ntoa(netmask)))
            if not interface.ip.is_loopback:
                found.append((name, interface.ip, interface.network))
    return found


def _free_port() -> int:
    """A TCP port nothing listens on now (rank 0's TCPStore binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]
