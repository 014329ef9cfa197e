"""Allreduce: every rank ends with the element-wise reduction of every rank's buffer."""
from __future__ import annotations

from . import dispatch
from .reduction import ReductionOp
from .validate import (check_comm, check_stream, expect_count, input_buffer, output_buffer,
                       reduction_op, same_or_disjoint)

__all__ = ["allreduce", "nonblocking_allreduce"]


def allreduce(buf, comm, stream=None, *, op=ReductionOp.SUM, recvbuf=None,
              algo: str = "automatic") -> None:
    """Reduce ``buf`` element-wise across all ranks of ``comm``; every rank gets the result.

    In place (the result overwrites ``buf``) unless ``recvbuf`` is given, in which case ``buf``
    is only read and ``recvbuf`` (same count and dtype) receives the result.  Every rank gets
    bit-identical results.  On stream-bound backends the call returns once the work is
    enqueued on ``stream`` (default: the communicator's); on the MPI backend it returns when
    the result is in place.
    """
    _allreduce(True, buf, comm, stream, op, recvbuf, algo)


def nonblocking_allreduce(buf, comm, stream=None, *, op=ReductionOp.SUM, recvbuf=None,
                          algo: str = "automatic"):
    """Start ``allreduce`` and return a ``Request``; buffers must not be touched until it
    completes (``req.wait()`` or ``req.test()``)."""
    return _allreduce(False, buf, comm, stream, op, recvbuf, algo)


def _allreduce(blocking, buf, comm, stream, op, recvbuf, algo):
    comm = check_comm(comm)
    if recvbuf is None:
        sendbuf = recvbuf = output_buffer(buf, comm, "buf")
    else:
        sendbuf = input_buffer(buf, comm, "buf")
        recvbuf = output_buffer(recvbuf, comm, "recvbuf")
        expect_count(recvbuf, sendbuf.count, sendbuf.dtype, "recvbuf")
        if same_or_disjoint(sendbuf, recvbuf):
            sendbuf = recvbuf
    op = reduction_op(op, sendbuf.dtype)
    stream = check_stream(stream, comm)
    return dispatch.run(comm, "allreduce", algo, recvbuf.nbytes, blocking,
                        (stream, sendbuf, recvbuf, op))
