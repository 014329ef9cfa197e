"""Reduce: the root gets the element-wise reduction of every rank's buffer."""
from __future__ import annotations

from .core.ops import OPS
from .forms import public_forms
from .validate import Checked, expect_count, in_place_or_pair, input_buffer, reduction_op

__all__ = ["reduce", "nonblocking_reduce", "reduce_init"]


def _checks(buf, comm, root, op, recvbuf) -> Checked:
    if comm.rank != root:
        sendbuf, recvbuf = input_buffer(buf, comm, "buf"), None
    else:
        sendbuf, recvbuf = in_place_or_pair(buf, recvbuf, comm)
        expect_count(recvbuf, sendbuf.count, sendbuf.dtype, "recvbuf")
    op = reduction_op(op, sendbuf.dtype)
    return Checked(sendbuf.nbytes, (sendbuf, recvbuf, op, root))


reduce, nonblocking_reduce, reduce_init = public_forms(
    OPS["reduce"], _checks, __name__,
    doc="""Reduce ``buf`` element-wise across all ranks of ``comm`` into the root's buffer.

    At the root the result overwrites ``buf`` (in place) unless ``recvbuf`` is given, in
    which case ``buf`` is only read and ``recvbuf`` (same count and dtype) gets the result.
    On every other rank ``buf`` is only read and ``recvbuf`` is ignored (it may be None).
    Blocking: returns when the result is at the root (this rank's part is done elsewhere);
    on stream-bound backends, once the work is enqueued on ``stream``.
    """)
