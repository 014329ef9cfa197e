"""Allreduce: every rank ends with the element-wise reduction of every rank's buffer."""
from __future__ import annotations

from .core.reduction import ReductionOp
from .plan import Plan
from .recall import call_blocking, call_nonblocking
from .validate import (check_comm, check_stream, expect_count, input_buffer, output_buffer,
                       reduction_op, same_or_disjoint)

__all__ = ["allreduce", "nonblocking_allreduce", "allreduce_init"]


def allreduce(buf, comm, stream=None, *, op=ReductionOp.SUM, recvbuf=None,
              algo: str = "automatic") -> None:
    """Reduce ``buf`` element-wise across all ranks of ``comm``; every rank gets the result.

    In place (the result overwrites ``buf``) unless ``recvbuf`` is given, in which case ``buf``
    is only read and ``recvbuf`` (same count and dtype) receives the result.  Every rank gets
    bit-identical results.  On stream-bound backends the call returns once the work is
    enqueued on ``stream`` (default: the communicator's); on the MPI backend it returns when
    the result is in place.
    """
    call_blocking("allreduce", (buf, recvbuf), comm, stream, (op, algo),
                  _allreduce, buf, comm, stream, op, recvbuf, algo)


def nonblocking_allreduce(buf, comm, stream=None, *, op=ReductionOp.SUM, recvbuf=None,
                          algo: str = "automatic"):
    """Start ``allreduce`` and return a ``Request``; buffers must not be touched until it
    completes (``req.wait()`` or ``req.test()``)."""
    return call_nonblocking("allreduce", (buf, recvbuf), comm, stream, (op, algo),
                            _allreduce, buf, comm, stream, op, recvbuf, algo)


def allreduce_init(buf, comm, stream=None, *, op=ReductionOp.SUM, recvbuf=None,
                   algo: str = "automatic") -> Plan:
    """Validate ``allreduce`` once; return its persistent ``Plan`` (``start()`` runs it
    nonblocking, ``run()`` blocking, always on the buffers given here).  On the MPI backend
    its starts run as an MPI-4 persistent collective (``MPI_Allreduce_init``), matching
    the other ranks' starts of their plans; ``run()`` calls ``MPI_Allreduce``, matching
    blocking calls."""
    return _allreduce(buf, comm, stream, op, recvbuf, algo).prepare()


def _allreduce(buf, comm, stream, op, recvbuf, algo) -> Plan:
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
    return Plan(comm, "allreduce", algo, recvbuf.nbytes, (stream, sendbuf, recvbuf, op),
                inplace=sendbuf is recvbuf)
