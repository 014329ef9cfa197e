"""Allreduce: every rank ends with the element-wise reduction of every rank's buffer."""
from __future__ import annotations

import numpy as np

from . import dispatch, trace
from .buffers import contiguous_host_buffer
from .reduction import ReductionOp
from .validate import (check_comm, check_stream, expect_count, input_buffer, output_buffer,
                       reduction_op, same_or_disjoint)

__all__ = ["allreduce", "nonblocking_allreduce"]

# (backend, comm size, dtype, count, op, algo, in place) -> (State class, ReductionOp) for
# calls on numpy arrays that already passed validation once: a repeat call skips the selector
# and the argument parsing, which otherwise cost several times a small MPI allreduce itself.
_plans: dict = {}
dispatch.plan_caches.append(_plans)


def allreduce(buf, comm, stream=None, *, op=ReductionOp.SUM, recvbuf=None,
              algo: str = "automatic") -> None:
    """Reduce ``buf`` element-wise across all ranks of ``comm``; every rank gets the result.

    In place (the result overwrites ``buf``) unless ``recvbuf`` is given, in which case ``buf``
    is only read and ``recvbuf`` (same count and dtype) receives the result.  Every rank gets
    bit-identical results.  On stream-bound backends the call returns once the work is
    enqueued on ``stream`` (default: the communicator's); on the MPI backend it returns when
    the result is in place.
    """
    if stream is None:
        plan = _cached_plan(buf, recvbuf, comm, op, algo)
        if plan is not None:
            plan[0].run_blocking(comm, None, plan[2], plan[3], plan[1])
            return
    _allreduce(True, buf, comm, stream, op, recvbuf, algo)


def nonblocking_allreduce(buf, comm, stream=None, *, op=ReductionOp.SUM, recvbuf=None,
                          algo: str = "automatic"):
    """Start ``allreduce`` and return a ``Request``; buffers must not be touched until it
    completes (``req.wait()`` or ``req.test()``)."""
    if stream is None:
        plan = _cached_plan(buf, recvbuf, comm, op, algo)
        if plan is not None:
            return dispatch.submit(plan[0](comm, None, plan[2], plan[3], plan[1]))
    return _allreduce(False, buf, comm, stream, op, recvbuf, algo)


def _cached_plan(buf, recvbuf, comm, op, algo):
    """``(State class, ReductionOp, send Buffer, receive Buffer)`` for a repeat call on numpy
    arrays whose checks are cheap to redo, else None (the full path validates and explains)."""
    if type(buf) is not np.ndarray:
        return None
    inplace = recvbuf is None or recvbuf is buf
    if not inplace and type(recvbuf) is not np.ndarray:
        return None
    try:
        plan = _plans.get((comm.backend, comm.size, buf.dtype, buf.size, op, algo, inplace))
    except (AttributeError, TypeError):   # not a communicator, unhashable op: full path
        return None
    if plan is None or comm._mpi is None:
        return None
    flags = buf.flags
    if inplace:
        if not (flags.c_contiguous and flags.writeable):
            return None
        send = recv = contiguous_host_buffer(buf, buf, True)
    else:
        out_flags = recvbuf.flags
        if not (flags.c_contiguous and out_flags.c_contiguous and out_flags.writeable) \
                or recvbuf.dtype != buf.dtype or recvbuf.size != buf.size:
            return None
        # Two arrays that each own their memory are two allocations: disjoint, no need to
        # ask numpy (a third of this path's cost).
        if not (buf.base is None and recvbuf.base is None) and np.may_share_memory(buf, recvbuf):
            return None
        send = contiguous_host_buffer(buf, buf, flags.writeable)
        recv = contiguous_host_buffer(recvbuf, recvbuf, True)
    return plan[0], plan[1], send, recv


def _allreduce(blocking, buf, comm, stream, op, recvbuf, algo):
    comm = check_comm(comm)
    raw_op, inplace = op, recvbuf is None
    if inplace:
        sendbuf = recvbuf = output_buffer(buf, comm, "buf")
    else:
        sendbuf = input_buffer(buf, comm, "buf")
        recvbuf = output_buffer(recvbuf, comm, "recvbuf")
        expect_count(recvbuf, sendbuf.count, sendbuf.dtype, "recvbuf")
        if same_or_disjoint(sendbuf, recvbuf):
            sendbuf = recvbuf
    op = reduction_op(op, sendbuf.dtype)
    stream = check_stream(stream, comm)
    state_class = comm.backend.state_class("allreduce", algo, comm, recvbuf.nbytes,
                                           sendbuf is recvbuf)
    if stream is None and type(buf) is np.ndarray and type(recvbuf.obj) is np.ndarray \
            and not trace.ENABLED and not dispatch.checks_enabled():
        dispatch.remember(_plans, (comm.backend, comm.size, buf.dtype, buf.size, raw_op, algo,
                                   sendbuf is recvbuf),
                          (state_class, op))
    return dispatch.run(comm, "allreduce", state_class, recvbuf.nbytes, blocking,
                        (stream, sendbuf, recvbuf, op))
