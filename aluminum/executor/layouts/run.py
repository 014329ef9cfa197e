"""Running a planned redistribution on this rank with aluminum's public calls.

Every rank of the communicator calls ``redistribute`` with the same arguments (SPMD): a
rank off both meshes passes None and gets None, but it takes part in making the
sub-communicators of the mesh lines (``comm.split``, collective, once per mesh dimension
and communicator, in the order the steps first need them).  A rank's local tensor is its
box of the whole tensor (``Layout.box``), a summand of it along Partial dimensions.
"""
from __future__ import annotations

import math
import weakref

import numpy as np

import aluminum as al

from ..errors import ExecutionError, ProgramError
from .mesh import Layout, Replicate
from .planner import Redistribution, plan_redistribution
from .steps import Step, split_bounds
from .traffic import record, record_allreduce

_lines: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # comm -> {key: sub}


def redistribute(local, src: Layout, dst: Layout, shape, comm=None, *, dtype=None,
                 plan: Redistribution | None = None):
    """This rank's part of the tensor of ``shape`` laid out as ``dst``, from its part
    ``local`` in layout ``src`` (None off ``src``'s mesh); None off ``dst``'s mesh.
    ``comm``: the communicator the meshes' ranks belong to (default: ``src``'s mesh's);
    ``dtype``: the tensor's (default ``local``'s; needed where ``local`` is None).
    Collective over ``comm``; the route is ``plan`` or ``plan_redistribution``'s."""
    comm = _communicator(comm, src, dst)
    if plan is None:
        if dtype is None and local is None:
            raise ProgramError(f"dtype: rank {comm.rank} holds no part of {src} (local is "
                               "None), so redistribute needs the tensor's dtype= there")
        plan = plan_redistribution(src, dst, shape, dtype or np.asarray(local).dtype)
    shape, rank = plan.shape, comm.rank
    value = _check_local(local, src, shape, rank, plan.dtype)
    for step in plan.steps:
        value = run_step(step, value, shape, comm, plan.dtype)
    return value


def redistribute_backward(grad, src: Layout, dst: Layout, shape, comm=None, *,
                          dtype=None, grad_layout: Layout | None = None,
                          input_grad_layout: Layout | None = None):
    """The gradient of ``redistribute(x, src, dst)``'s input from ``grad``, its output's
    gradient laid out as ``grad_layout`` (default ``dst.for_gradient()``): the same
    tensor, redistributed to ``input_grad_layout`` (default ``src.for_gradient()``).

    The steps of the route back are the forward steps' adjoints where the layouts call for
    them: an allgather's gradient arriving as summands (Partial) goes back by
    reduce-scatter, one arriving replicated by a slice; an all-to-all goes back by the
    inverse all-to-all; Partial -> Replicate by nothing (the replicated gradient is every
    summand's); a slice by an allgather (to Replicate) or a pad (to Partial)."""
    return redistribute(grad, grad_layout or dst.for_gradient(),
                        input_grad_layout or src.for_gradient(), shape, comm, dtype=dtype)


def _communicator(comm, src: Layout, dst: Layout):
    comm = comm if comm is not None else src.mesh.comm or dst.mesh.comm
    if comm is None:
        raise ExecutionError("redistribute: needs a communicator (comm=, or a DeviceMesh "
                             "made with comm=)")
    for name, layout in (("src", src), ("dst", dst)):
        if max(layout.mesh.ranks) >= comm.size:
            raise ProgramError(f"{name}: the mesh {layout.mesh} is larger than the "
                               f"communicator ({comm.size} ranks)")
    return comm


def _check_local(local, src: Layout, shape, rank: int, dtype: str):
    expected = src.local_shape(rank, shape)
    if expected is None:
        if local is not None:
            raise ProgramError(f"local: rank {rank} is not on the mesh of {src}: expected "
                               f"None, got an array of shape {list(np.shape(local))}")
        return None
    if local is None or tuple(np.shape(local)) != expected:
        given = "None" if local is None else f"shape {list(np.shape(local))}"
        raise ProgramError(f"local: expected rank {rank}'s part of {src} for a tensor of "
                           f"shape {list(shape)}: shape {list(expected)}, got {given}")
    return np.ascontiguousarray(local, dtype=dtype)


def line_comm(comm, mesh, dim: int):
    """The sub-communicator of the mesh line along ``dim`` through this rank (None off
    the mesh); made on first use with ``comm.split``, collective over ``comm``."""
    table = _subs(comm, mesh)
    key = (mesh, dim)
    if key not in table:
        coord = mesh.coordinate(comm.rank)
        color = None
        if coord is not None:    # the line's index: the coordinates off ``dim``
            color = 0
            for c, size in zip(coord[:dim] + coord[dim + 1:], mesh.shape[:dim] + mesh.shape[dim + 1:]):
                color = color * size + c
        table[key] = comm.split(color, key=0 if coord is None else coord[dim])
    return table[key]


def ranks_comm(comm, ranks: tuple, mesh):
    """The sub-communicator of ``ranks`` (sorted; this rank's rank there is its place
    among them), None off them; made on first use with ``comm.split``, collective over
    ``comm``; ``mesh``: one the ranks' step involves."""
    table = _subs(comm, mesh)
    key = ("ranks", ranks)
    if key not in table:
        inside = comm.rank in ranks
        table[key] = comm.split(0 if inside else None, key=comm.rank)
    return table[key]


def _subs(comm, mesh) -> dict:
    try:
        return _lines.setdefault(comm, {})
    except TypeError:    # not weakly referenceable: keep them on the mesh instead
        return mesh.__dict__.setdefault("_lines", {})


def run_step(step: Step, value, shape, comm, dtype: str):
    """``value`` (this rank's part in ``step.src``, of ``dtype``) as its part in
    ``step.dst``."""
    rank = comm.rank
    if step.kind in ("allreduce", "reduce_scatter", "allgather", "alltoall"):
        group = line_comm(comm, step.src.mesh, step.mesh_dim)
        if value is None:
            return None
        return _COLLECTIVES[step.kind](step, value, shape, group, rank)
    if step.kind == "pad":
        return _pad(step, value, shape, rank)
    if step.kind == "reduce":
        return _reduce(step, value, shape, comm, np.dtype(dtype))
    if step.kind == "bcast":
        return _bcast(step, value, shape, comm, np.dtype(dtype))
    out_box = step.dst.box(rank, shape)
    if out_box is None and rank not in (p.source for p in step.pieces):
        return None
    return _exchange(step, value, shape, comm, rank, out_box, np.dtype(dtype))


def _within(outer, inner) -> tuple:
    return tuple(slice(a - o, b - o) for (a, b), (o, _) in zip(inner, outer))


def _pad(step: Step, value, shape, rank):
    if value is None:
        return None
    dim = step.mesh_dim
    before = step.src.placements[dim]
    out_box = step.dst.box(rank, shape)
    if isinstance(before, Replicate):    # one summand keeps the value, the others zeros
        return value if step.src.mesh.coordinate(rank)[dim] == 0 else np.zeros_like(value)
    out = np.zeros(tuple(b - a for a, b in out_box), value.dtype)
    out[_within(out_box, step.src.box(rank, shape))] = value
    return out


def _allreduce(step, value, shape, group, rank):
    out = np.array(value, order="C", copy=True)
    if group.size > 1:
        al.allreduce(out, group)
        record_allreduce(out.size, out.itemsize, group.size, group.rank)
    return out


def _line_blocks(whole: tuple, axis: int, parts: int) -> list[tuple]:
    """The shapes of the ``parts`` blocks of an array of shape ``whole`` split along
    ``axis`` like ``numpy.array_split``."""
    return [whole[:axis] + (b - a,) + whole[axis + 1:]
            for a, b in split_bounds(whole[axis], parts)]


def _leading(whole: tuple, axis: int) -> bool:
    """Whether blocks along ``axis`` lie one after another in a C-ordered array of shape
    ``whole`` (every dimension before ``axis`` has size 1)."""
    return math.prod(whole[:axis]) == 1


def _reduce_scatter(step, value, shape, group, rank):
    """The line's sum of ``value``, this rank's block of the sharded axis: each block is
    sent C-contiguous (one copy where the axis is not the leading one) and this rank's
    arrives in its own layout, no copy after."""
    axis = step.dst.placements[step.mesh_dim].dim
    blocks = _line_blocks(value.shape, axis, group.size)
    counts = [math.prod(block) for block in blocks]
    if _leading(value.shape, axis):
        send = np.ascontiguousarray(value).reshape(-1)
    else:
        send = np.empty(value.size, value.dtype)
        start, index = 0, [slice(None)] * value.ndim
        for (a, b), count, block in zip(split_bounds(value.shape[axis], group.size), counts,
                                        blocks):
            index[axis] = slice(a, b)
            send[start:start + count].reshape(block)[...] = value[tuple(index)]
            start += count
    recv = np.empty(counts[group.rank], value.dtype)
    al.reduce_scatterv(send, counts, group, recvbuf=recv)
    record("reduce_scatterv", group.size, send.nbytes - recv.nbytes,
           recv.nbytes * (group.size - 1))
    return recv.reshape(blocks[group.rank])


def _allgather(step, value, shape, group, rank):
    """Every rank's block of the sharded axis, joined: gathered straight into the result
    where the axis is the leading one, else gathered as they lie and joined with one
    copy."""
    axis = step.src.placements[step.mesh_dim].dim
    whole = tuple(b - a for a, b in step.dst.box(rank, shape))
    blocks = _line_blocks(whole, axis, group.size)
    counts = [math.prod(block) for block in blocks]
    mine = np.ascontiguousarray(value).reshape(-1)
    if _leading(whole, axis):
        out = np.empty(whole, value.dtype)
        al.allgatherv(mine, counts, None, group, recvbuf=out.reshape(-1))
    else:
        recv = np.empty(sum(counts), value.dtype)
        al.allgatherv(mine, counts, None, group, recvbuf=recv)
        parts, start = [], 0
        for count, block in zip(counts, blocks):
            parts.append(recv[start:start + count].reshape(block))
            start += count
        out = np.concatenate(parts, axis=axis)
    record("allgatherv", group.size, mine.nbytes * (group.size - 1), out.nbytes - mine.nbytes)
    return out


def _alltoall(step, value, shape, group, rank):
    """The pieces, sent over the line's communicator with one ``alltoallv``."""
    members = step.src.mesh.line(rank, step.mesh_dim)
    out_box = step.dst.box(rank, shape)
    src_box = step.src.box(rank, shape)
    out = np.empty(tuple(b - a for a, b in out_box), value.dtype)
    _copy_own(out, out_box, value, src_box)
    outgoing = [np.zeros(0, value.dtype)] * len(members)
    incoming = [None] * len(members)
    for piece in step.pieces:
        if piece.source == rank:
            outgoing[members.index(piece.target)] = value[_within(src_box, piece.box)].ravel()
        if piece.target == rank:
            incoming[members.index(piece.source)] = piece.box
    send_counts = [part.size for part in outgoing]
    recv_counts = [0 if box is None else _size(box) for box in incoming]
    sendbuf = np.concatenate(outgoing) if outgoing else np.zeros(0, value.dtype)
    recvbuf = np.empty(sum(recv_counts), value.dtype)
    al.alltoallv(sendbuf, send_counts, None, recv_counts, None, group, recvbuf=recvbuf)
    record("alltoallv", group.size, sendbuf.nbytes, recvbuf.nbytes)
    start = 0
    for box, count in zip(incoming, recv_counts):
        if box is not None:
            out[_within(out_box, box)] = recvbuf[start:start + count].reshape(_dims(box))
        start += count
    return out


def _reduce(step, value, shape, comm, dtype):
    """The summands to the one rank of ``step.dst``: ``al.reduce`` with the direct
    algorithm over the ranks of both meshes (rank order: the same bits every run); a
    root holding no summand adds zeros at its place."""
    root = step.dst.mesh.ranks[0]
    ranks = tuple(sorted({*step.src.mesh.ranks, root}))
    group = ranks_comm(comm, ranks, step.src.mesh)
    if comm.rank not in ranks:
        return None
    dims = tuple(shape)
    own = np.zeros(dims, dtype) if value is None else np.ascontiguousarray(value)
    out = np.empty(dims, dtype) if comm.rank == root else None
    al.reduce(own.reshape(-1), group, root=ranks.index(root),
              recvbuf=None if out is None else out.reshape(-1), algo=al.Algorithm.DIRECT)
    nbytes = own.nbytes
    if comm.rank == root:
        record("reduce", group.size, 0, nbytes * (len(step.src.mesh.ranks)
                                                  - (root in step.src.mesh.ranks)))
    else:
        record("reduce", group.size, nbytes, 0)
    return out


def _bcast(step, value, shape, comm, dtype):
    """The whole tensor from its one holder to the ranks that lack it: ``al.bcast`` over
    those ranks (placement's ``bcast_var`` is the same call), not a send per rank."""
    source = step.pieces[0].source
    targets = {piece.target for piece in step.pieces}
    ranks = tuple(sorted({source, *targets}))
    group = ranks_comm(comm, ranks, step.dst.mesh)
    rank = comm.rank
    if rank in targets:
        out = np.empty(tuple(shape), dtype)
        al.bcast(out.reshape(-1), group, root=ranks.index(source))
        record("bcast", group.size, 0, out.nbytes)
        return out
    if rank == source:
        sent = np.ascontiguousarray(value)
        al.bcast(sent.reshape(-1), group, root=ranks.index(source))
        record("bcast", group.size, sent.nbytes * (group.size - 1), 0)
    out_box = step.dst.box(rank, shape)     # the rest keep their own part
    if out_box is None:
        return None
    out = np.empty(_dims(out_box), dtype)
    src_box = step.src.box(rank, shape)
    if value is not None and src_box is not None:   # (else an empty part: nothing to keep)
        _copy_own(out, out_box, value, src_box)
    return out


def _exchange(step, value, shape, comm, rank, out_box, dtype):
    """Point to point (``al.multisendrecv`` over ``comm``): each piece from its holder."""
    src_box = step.src.box(rank, shape)
    sends, recvs, landing = [], [], []
    for piece in step.pieces:
        if piece.source == rank:
            sends.append((np.ascontiguousarray(value[_within(src_box, piece.box)]),
                          piece.target))
        if piece.target == rank:
            buffer = np.empty(_dims(piece.box), dtype)
            recvs.append((buffer, piece.source))
            landing.append(piece.box)
    if sends or recvs:
        al.multisendrecv(sends, recvs, comm)
        record("multisendrecv", comm.size, sum(b.nbytes for b, _ in sends),
               sum(b.nbytes for b, _ in recvs))
    if out_box is None:
        return None
    out = np.empty(_dims(out_box), dtype)
    if value is not None and src_box is not None:
        _copy_own(out, out_box, value, src_box)
    for (buffer, _), box in zip(recvs, landing):
        out[_within(out_box, box)] = buffer
    return out


def _copy_own(out, out_box, value, src_box) -> None:
    common = tuple((max(a, c), min(b, d)) for (a, b), (c, d) in zip(out_box, src_box))
    if all(a < b for a, b in common) or not common:
        out[_within(out_box, common)] = value[_within(src_box, common)]


def _dims(box) -> tuple:
    return tuple(b - a for a, b in box)


def _size(box) -> int:
    return int(np.prod(_dims(box)))


_COLLECTIVES = {"allreduce": _allreduce, "reduce_scatter": _reduce_scatter,
                "allgather": _allgather, "alltoall": _alltoall}
