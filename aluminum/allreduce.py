"""Allreduce: every rank ends with the element-wise reduction of every rank's buffer."""
from __future__ import annotations

from .core.ops import OPS
from .forms import INIT_DOC, public_forms
from .validate import (Checked, expect_count, input_buffer, output_buffer, reduction_op,
                       same_or_disjoint)

__all__ = ["allreduce", "nonblocking_allreduce", "allreduce_init"]


def _checks(buf, comm, op, recvbuf) -> Checked:
    if recvbuf is None:
        sendbuf = recvbuf = output_buffer(buf, comm, "buf")
    else:
        sendbuf = input_buffer(buf, comm, "buf")
        recvbuf = output_buffer(recvbuf, comm, "recvbuf")
        expect_count(recvbuf, sendbuf.count, sendbuf.dtype, "recvbuf")
        if same_or_disjoint(sendbuf, recvbuf):
            sendbuf = recvbuf
    op = reduction_op(op, sendbuf.dtype)
    return Checked(recvbuf.nbytes, (sendbuf, recvbuf, op), inplace=sendbuf is recvbuf)


allreduce, nonblocking_allreduce, allreduce_init = public_forms(
    OPS["allreduce"], _checks, __name__,
    doc="""Reduce ``buf`` element-wise across all ranks of ``comm``; every rank gets the result.

    In place (the result overwrites ``buf``) unless ``recvbuf`` is given, in which case ``buf``
    is only read and ``recvbuf`` (same count and dtype) receives the result.  Every rank gets
    bit-identical results.  On stream-bound backends the call returns once the work is
    enqueued on ``stream`` (default: the communicator's); on the MPI backend it returns when
    the result is in place.
    """,
    init_doc=INIT_DOC + """  On the MPI backend
    its starts run as an MPI-4 persistent collective (``MPI_Allreduce_init``), matching
    the other ranks' starts of their plans; ``run()`` calls ``MPI_Allreduce``, matching
    blocking calls.""")
