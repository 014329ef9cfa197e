"""Peers measured in the same run as ours: raw mpi4py and torch.distributed over gloo.

Each peer runs the same point on the same buffers (see bench/ops.py) with its own library,
so a table shows "0.6× mpi4py at 1 MiB" from one job. mpi4py calls the MPI library with
buffer specs built once per point (the leanest Python can do); nonblocking means the
``I``-variant followed by ``Wait``. A v-variant (``alltoallv`` ...) is MPI's v-call with the
counts and displacements lists our call gets, as mpi4py code passes them. torch has no
out-of-place allreduce, reduce or bcast, so those run in place on the send buffer whatever
``--inplace`` says. torch's process group is
set up over MPI: rank 0 picks a free TCP port and broadcasts ``MASTER_ADDR``/``MASTER_PORT``
(loopback when every rank shares a node; gloo is also told to use the loopback interface
then, unless ``GLOO_SOCKET_IFNAME`` is already set).

A peer that cannot run a point (torch missing, a dtype MPI cannot reduce, an operation gloo
lacks) raises ``PeerUnavailable`` with the reason; the sweep drops that column and says why.
"""
from __future__ import annotations

import datetime
import os
import socket
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from aluminum.core import dtypes

from .ops import ROOT, Case, renewer

NAMES = ("mpi4py", "torch-gloo")


class PeerUnavailable(Exception):
    """This peer cannot run this point; the message says why."""


def parse_peers(text: str | None) -> list[str]:
    """``"mpi4py,torch-gloo"`` -> the list, checked; ValueError naming an unknown peer."""
    if not text:
        return []
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if name not in NAMES:
            raise ValueError(f"--compare: expected names from {', '.join(NAMES)}, got {name!r}")
    return list(dict.fromkeys(names))


def make_peer(name: str, world: MPI.Comm):
    """Create the peer `name` on every rank of `world` (collective)."""
    return MPI4PyPeer(world) if name == "mpi4py" else TorchGlooPeer(world)


class MPI4PyPeer:
    """Raw mpi4py on a private duplicate of the world communicator."""

    name = "mpi4py"

    def __init__(self, world: MPI.Comm):
        self.comm = world.Dup()

    def call(self, case: Case, nonblocking: bool,
             new_buffers: bool = False) -> Callable[[], Any]:
        """A no-argument callable running the point to completion with mpi4py;
        ``new_buffers``: on new buffers every call, as ``ops.our_call`` does."""
        if new_buffers and case.spec.name == "send":
            return self._new_pingpong(case)
        if new_buffers:
            caller = self._caller(case, nonblocking)
            new_send, new_recv = renewer(case.send), renewer(case.recv)
            return lambda: caller(new_send(), new_recv())
        spec, comm = case.spec, self.comm
        dtype = np.dtype(case.send[0].dtype if isinstance(case.send, list)
                         else case.send.dtype) if case.send is not None else None
        datatype = _mpi_datatype(dtype, spec.reduces) if dtype is not None else None
        send, recv = case.send, case.recv
        inplace = recv is None
        rank, name = case.rank, spec.name
        if name == "barrier":
            return _blocking_or_wait(comm.Barrier, comm.Ibarrier, nonblocking)
        if name == "send":
            return _pingpong(comm, [send, datatype], rank)
        if name in ("sendrecv", "multisendrecv"):
            return _exchange(comm, case, datatype)
        root = rank == ROOT
        s = MPI.IN_PLACE if inplace else [send, datatype]
        r = [send if inplace else recv, datatype]
        if name == "allreduce":
            args = (s, r, MPI.SUM)
            return _blocking_or_wait(lambda: comm.Allreduce(*args),
                                     lambda: comm.Iallreduce(*args), nonblocking)
        if name == "reduce":
            args = (MPI.IN_PLACE if inplace and root else [send, datatype], r, MPI.SUM, ROOT)
            return _blocking_or_wait(lambda: comm.Reduce(*args), lambda: comm.Ireduce(*args),
                                     nonblocking)
        if name == "bcast":
            args = ([send, datatype], ROOT)
            return _blocking_or_wait(lambda: comm.Bcast(*args), lambda: comm.Ibcast(*args),
                                     nonblocking)
        c = case.count
        if spec.variable:
            args = _variable_arguments(name, send, recv, case, datatype)
            start = "I" + _VARIABLE[name][0].lower() + _VARIABLE[name][1:]
            return _blocking_or_wait(lambda: getattr(comm, _VARIABLE[name])(*args),
                                     lambda: getattr(comm, start)(*args), nonblocking)
        if name in ("reduce_scatter", "reduce_scatterv"):
            args = (s, r, MPI.SUM)
            return _blocking_or_wait(lambda: comm.Reduce_scatter_block(*args),
                                     lambda: comm.Ireduce_scatter_block(*args), nonblocking)
        if name in ("allgather", "allgatherv"):
            args = (s, r)
            return _blocking_or_wait(lambda: comm.Allgather(*args),
                                     lambda: comm.Iallgather(*args), nonblocking)
        if name in ("alltoall", "alltoallv"):
            args = (s, r)
            return _blocking_or_wait(lambda: comm.Alltoall(*args),
                                     lambda: comm.Ialltoall(*args), nonblocking)
        if name in ("gather", "gatherv"):
            own = MPI.IN_PLACE if inplace and root else [send[:c] if inplace else send, datatype]
            args = (own, [send if inplace else recv, datatype] if root else None, ROOT)
            return _blocking_or_wait(lambda: comm.Gather(*args), lambda: comm.Igather(*args),
                                     nonblocking)
        if name in ("scatter", "scatterv"):
            whole = [send, datatype] if root else None
            own = (MPI.IN_PLACE if root else [send, datatype]) if inplace else [recv, datatype]
            args = (whole, own, ROOT)
            return _blocking_or_wait(lambda: comm.Scatter(*args),
                                     lambda: comm.Iscatter(*args), nonblocking)
        raise PeerUnavailable(f"mpi4py: no peer call for {name}")

    def _new_pingpong(self, case: Case) -> Callable[[], Any]:
        """``_pingpong`` with a new buffer for each half, as ``ops.our_call`` does."""
        comm, rank, new = self.comm, case.rank, renewer(case.send)
        dt = _mpi_datatype(np.dtype(case.send.dtype), False)
        if comm.Get_size() < 2:
            raise PeerUnavailable("mpi4py: a ping-pong needs at least 2 ranks")
        if rank == 0:
            return lambda: (comm.Send([new(), dt], 1), comm.Recv([new(), dt], 1))
        if rank == 1:
            return lambda: (comm.Recv([new(), dt], 0), comm.Send([new(), dt], 0))
        return lambda: None

    def _caller(self, case: Case, nonblocking: bool) -> Callable[[Any, Any], Any]:
        """``call``'s MPI call with the buffers as arguments, ``caller(send, recv)``
        (``recv`` None in place), each made into a buffer spec on every call as code
        passing new arrays does; the same MPI calls as ``call``."""
        spec, comm, name = case.spec, self.comm, case.spec.name
        dtype = np.dtype(case.send[0].dtype if isinstance(case.send, list)
                         else case.send.dtype) if case.send is not None else None
        dt = _mpi_datatype(dtype, spec.reduces) if dtype is not None else None
        inplace, root, rank, p, c = case.recv is None, case.rank == ROOT, case.rank, case.p, \
            case.count

        def method(blocking: str) -> Callable[..., Any]:
            if not nonblocking:
                return getattr(comm, blocking)
            start = getattr(comm, "I" + blocking[0].lower() + blocking[1:])
            return lambda *args: start(*args).Wait()

        if name == "barrier":
            barrier = method("Barrier")
            return lambda send, recv: barrier()
        if name == "sendrecv":
            right, left = (rank + 1) % p, (rank - 1) % p
            if inplace:
                return lambda send, recv: comm.Sendrecv_replace([send, dt], right, 0, left, 0)
            return lambda send, recv: comm.Sendrecv([send, dt], right, 0, [recv, dt], left, 0)
        if name == "multisendrecv":
            peers = [r for r in range(p) if r != rank]

            def exchange(send, recv):
                reqs = [comm.Irecv([buf, dt], peer) for buf, peer in zip(recv, peers)]
                reqs += [comm.Isend([buf, dt], peer) for buf, peer in zip(send, peers)]
                MPI.Request.Waitall(reqs)
            return exchange
        IN_PLACE, SUM = MPI.IN_PLACE, MPI.SUM
        if spec.variable:
            return _variable_caller(name, method(_VARIABLE[name]), case, dt)
        if name == "allreduce":
            call = method("Allreduce")
            if inplace:
                return lambda send, recv: call(IN_PLACE, [send, dt], SUM)
            return lambda send, recv: call([send, dt], [recv, dt], SUM)
        if name == "reduce":
            call = method("Reduce")
            if inplace:
                own = IN_PLACE if root else None
                return lambda send, recv: call(own or [send, dt], [send, dt], SUM, ROOT)
            return lambda send, recv: call([send, dt], [recv, dt], SUM, ROOT)
        if name == "bcast":
            call = method("Bcast")
            return lambda send, recv: call([send, dt], ROOT)
        blocks = {"reduce_scatter": "Reduce_scatter_block", "allgather": "Allgather",
                  "alltoall": "Alltoall"}
        kind = name[:-1] if name.endswith("v") else name
        if kind in blocks:
            call = method(blocks[kind])
            extra = (SUM,) if kind == "reduce_scatter" else ()
            if inplace:
                return lambda send, recv: call(IN_PLACE, [send, dt], *extra)
            return lambda send, recv: call([send, dt], [recv, dt], *extra)
        if kind == "gather":
            call = method("Gather")
            if inplace:
                if root:
                    return lambda send, recv: call(IN_PLACE, [send, dt], ROOT)
                return lambda send, recv: call([send[:c], dt], None, ROOT)
            if root:
                return lambda send, recv: call([send, dt], [recv, dt], ROOT)
            return lambda send, recv: call([send, dt], None, ROOT)
        if kind == "scatter":
            call = method("Scatter")
            if inplace:
                if root:
                    return lambda send, recv: call([send, dt], IN_PLACE, ROOT)
                return lambda send, recv: call(None, [send, dt], ROOT)
            if root:
                return lambda send, recv: call([send, dt], [recv, dt], ROOT)
            return lambda send, recv: call(None, [recv, dt], ROOT)
        raise PeerUnavailable(f"mpi4py: no peer call for {name}")

    def close(self) -> None:
        self.comm.Free()


def _mpi_datatype(dtype: np.dtype, reduces: bool) -> MPI.Datatype:
    if dtypes.is_half(dtype):
        if reduces:
            raise PeerUnavailable(f"mpi4py: MPI has no reduction for {dtype}")
        return MPI.UINT16_T
    try:
        return MPI.Datatype.fromcode(dtype.char)
    except (KeyError, ValueError) as exc:
        raise PeerUnavailable(f"mpi4py: no MPI datatype for {dtype}") from exc


# The v-variants' MPI calls.
_VARIABLE = {"reduce_scatterv": "Reduce_scatter", "allgatherv": "Allgatherv",
             "alltoallv": "Alltoallv", "gatherv": "Gatherv", "scatterv": "Scatterv"}


def _variable_arguments(name: str, send, recv, case: Case, dt) -> tuple:
    """The arguments of v-variant ``name``'s MPI call on these arrays (``recv`` None in
    place), with the case's counts and displacements lists."""
    counts, displs, root, c = case.counts, case.displs, case.rank == ROOT, case.count
    IN_PLACE = MPI.IN_PLACE
    inplace = recv is None
    if name == "reduce_scatterv":
        return (IN_PLACE if inplace else [send, dt], [send if inplace else recv, dt], counts,
                MPI.SUM)
    if name == "allgatherv":
        return (IN_PLACE if inplace else [send, dt],
                [send if inplace else recv, counts, displs, dt])
    if name == "alltoallv":
        whole = [send, counts, displs, dt]
        return (IN_PLACE, whole) if inplace else (whole, [recv, counts, displs, dt])
    if name == "gatherv":
        if inplace:
            return (IN_PLACE, [send, counts, displs, dt], ROOT) if root else \
                ([send[:c], dt], None, ROOT)
        return [send, dt], [recv, counts, displs, dt] if root else None, ROOT
    if inplace:                                                     # scatterv
        return ([send, counts, displs, dt], IN_PLACE, ROOT) if root else \
            (None, [send, dt], ROOT)
    return [send, counts, displs, dt] if root else None, [recv, dt], ROOT


def _variable_caller(name: str, call: Callable[..., Any], case: Case, dt):
    """``call`` (v-variant ``name``'s MPI call) as ``caller(send, recv)``, its specs made on
    every call, written out per case as the other callers are."""
    counts, displs, root, c = case.counts, case.displs, case.rank == ROOT, case.count
    IN_PLACE, SUM, inplace = MPI.IN_PLACE, MPI.SUM, case.recv is None
    if name == "reduce_scatterv":
        if inplace:
            return lambda send, recv: call(IN_PLACE, [send, dt], counts, SUM)
        return lambda send, recv: call([send, dt], [recv, dt], counts, SUM)
    if name == "allgatherv":
        if inplace:
            return lambda send, recv: call(IN_PLACE, [send, counts, displs, dt])
        return lambda send, recv: call([send, dt], [recv, counts, displs, dt])
    if name == "alltoallv":
        if inplace:
            return lambda send, recv: call(IN_PLACE, [send, counts, displs, dt])
        return lambda send, recv: call([send, counts, displs, dt], [recv, counts, displs, dt])
    if name == "gatherv":
        if inplace:
            if root:
                return lambda send, recv: call(IN_PLACE, [send, counts, displs, dt], ROOT)
            return lambda send, recv: call([send[:c], dt], None, ROOT)
        if root:
            return lambda send, recv: call([send, dt], [recv, counts, displs, dt], ROOT)
        return lambda send, recv: call([send, dt], None, ROOT)
    if inplace:                                                     # scatterv
        if root:
            return lambda send, recv: call([send, counts, displs, dt], IN_PLACE, ROOT)
        return lambda send, recv: call(None, [send, dt], ROOT)
    if root:
        return lambda send, recv: call([send, counts, displs, dt], [recv, dt], ROOT)
    return lambda send, recv: call(None, [recv, dt], ROOT)


def _blocking_or_wait(blocking: Callable[[], Any], start: Callable[[], MPI.Request],
                      nonblocking: bool) -> Callable[[], Any]:
    if not nonblocking:
        return blocking
    return lambda: start().Wait()


def _pingpong(comm: MPI.Comm, spec: list, rank: int) -> Callable[[], Any]:
    if comm.Get_size() < 2:
        raise PeerUnavailable("mpi4py: a ping-pong needs at least 2 ranks")
    if rank == 0:
        return lambda: (comm.Send(spec, 1), comm.Recv(spec, 1))
    if rank == 1:
        return lambda: (comm.Recv(spec, 0), comm.Send(spec, 0))
    return lambda: None


def _exchange(comm: MPI.Comm, case: Case, datatype: MPI.Datatype) -> Callable[[], Any]:
    """sendrecv (ring shift) and multisendrecv (one message to and from every other rank)."""
    p, rank = case.p, case.rank
    if case.spec.name == "sendrecv":
        right, left = (rank + 1) % p, (rank - 1) % p
        if case.recv is None:
            spec = [case.send, datatype]
            return lambda: comm.Sendrecv_replace(spec, right, 0, left, 0)
        send, recv = [case.send, datatype], [case.recv, datatype]
        return lambda: comm.Sendrecv(send, right, 0, recv, left, 0)
    peers = [r for r in range(p) if r != rank]
    sends = [[buf, datatype] for buf in case.send]
    recvs = sends if case.recv is None else [[buf, datatype] for buf in case.recv]
    if case.recv is None:
        # In place the received data overwrites what is sent: receive into a scratch copy.
        recvs = [[np.empty_like(buf), datatype] for buf in case.send]

    def run():
        reqs = [comm.Irecv(buf, peer) for buf, peer in zip(recvs, peers)]
        reqs += [comm.Isend(buf, peer) for buf, peer in zip(sends, peers)]
        MPI.Request.Waitall(reqs)
    return run


class TorchGlooPeer:
    """torch.distributed with the gloo backend, on the same ranks as the MPI job."""

    name = "torch-gloo"

    def __init__(self, world: MPI.Comm):
        try:
            import torch
            import torch.distributed as dist
        except ImportError as exc:
            raise PeerUnavailable("torch-gloo: torch is not installed (pip install "
                                  "'aluminum[torch]', i.e. torch==2.13.0)") from exc
        self.torch, self.dist = torch, dist
        local = world.Split_type(MPI.COMM_TYPE_SHARED)
        one_node = local.Get_size() == world.Get_size()
        local.Free()
        address = None
        if world.Get_rank() == 0:
            host = "127.0.0.1" if one_node else socket.gethostbyname(socket.gethostname())
            with socket.socket() as probe:
                probe.bind((host, 0))
                address = (host, probe.getsockname()[1])
        host, port = world.bcast(address, root=0)
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = host, str(port)
        if one_node:
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        if not dist.is_initialized():
            dist.init_process_group("gloo", rank=world.Get_rank(), world_size=world.Get_size(),
                                    timeout=datetime.timedelta(seconds=120))

    def tensor(self, array):
        """A torch tensor sharing `array`'s memory (bfloat16 through an int16 view)."""
        if array is None:
            return None
        if array.dtype == dtypes.bfloat16:
            return self.torch.from_numpy(array.view(np.int16)).view(self.torch.bfloat16)
        return self.torch.from_numpy(array)

    def call(self, case: Case, nonblocking: bool) -> Callable[[], Any]:
        """A no-argument callable running the point to completion with torch.distributed."""
        dist, name = self.dist, case.spec.name
        kw = {"async_op": True} if nonblocking else {}
        send = self.tensor(case.send) if not isinstance(case.send, list) else None
        recv = self.tensor(case.recv) if not isinstance(case.recv, list) else None
        c, root = case.count, case.rank == ROOT
        if name == "barrier":
            fn = lambda: dist.barrier(**kw)  # noqa: E731
        elif name == "allreduce":
            fn = lambda: dist.all_reduce(send, **kw)  # noqa: E731
        elif name == "reduce":
            fn = lambda: dist.reduce(send, ROOT, **kw)  # noqa: E731
        elif name == "bcast":
            fn = lambda: dist.broadcast(send, ROOT, **kw)  # noqa: E731
        elif name in ("reduce_scatter", "reduce_scatterv"):
            out = send[:c].clone() if recv is None else recv
            reduce_scatter = getattr(dist, "reduce_scatter_single", None) \
                or dist.reduce_scatter_tensor
            fn = lambda: reduce_scatter(out, send, **kw)  # noqa: E731
        elif name in ("allgather", "allgatherv"):
            whole, own = (send, send[case.rank * c:(case.rank + 1) * c]) if recv is None \
                else (recv, send)
            all_gather = getattr(dist, "all_gather_single", None) \
                or dist.all_gather_into_tensor
            fn = lambda: all_gather(whole, own, **kw)  # noqa: E731
        elif name in ("alltoall", "alltoallv"):
            out = send.clone() if recv is None else recv
            fn = lambda: dist.all_to_all_single(out, send, **kw)  # noqa: E731
        elif name in ("gather", "gatherv"):
            whole = send if recv is None else recv
            own = whole[:c].clone() if recv is None and root else send[:c]
            parts = list(whole.split(c)) if root else None
            fn = lambda: dist.gather(own, parts, ROOT, **kw)  # noqa: E731
        elif name in ("scatter", "scatterv"):
            own = send[:c].clone() if recv is None else recv[:c]
            parts = list(send.split(c)) if root else None
            fn = lambda: dist.scatter(own, parts, ROOT, **kw)  # noqa: E731
        else:
            return self._p2p(case)
        if nonblocking:
            start = fn
            return lambda: start().wait()
        return fn

    def _p2p(self, case: Case) -> Callable[[], Any]:
        dist, p, rank = self.dist, case.p, case.rank
        name = case.spec.name
        if name == "send":
            if p < 2:
                raise PeerUnavailable("torch-gloo: a ping-pong needs at least 2 ranks")
            buf = self.tensor(case.send)
            if rank == 0:
                return lambda: (dist.send(buf, 1), dist.recv(buf, 1))
            if rank == 1:
                return lambda: (dist.recv(buf, 0), dist.send(buf, 0))
            return lambda: None
        if name == "sendrecv":
            send = self.tensor(case.send)
            recv = send.clone() if case.recv is None else self.tensor(case.recv)
            pairs = [(send, (rank + 1) % p, recv, (rank - 1) % p)]
        else:
            peers = [r for r in range(p) if r != rank]
            sends = [self.tensor(buf) for buf in case.send]
            recvs = [buf.clone() for buf in sends] if case.recv is None \
                else [self.tensor(buf) for buf in case.recv]
            pairs = [(s, peer, r, peer) for s, r, peer in zip(sends, recvs, peers)]
        ops = []
        for send, dest, recv, src in pairs:
            ops += [dist.P2POp(dist.isend, send, dest), dist.P2POp(dist.irecv, recv, src)]

        def run():
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        return run

    def close(self) -> None:
        """Leave the process group up: gloo cannot be re-initialized cheaply, and exit tears
        it down."""
