"""Broadcast: every rank's buffer gets a copy of the root's."""
from __future__ import annotations

from .core.ops import OPS
from .forms import public_forms
from .validate import Checked, input_buffer, output_buffer

__all__ = ["bcast", "nonblocking_bcast", "bcast_init"]


def _checks(buf, comm, root) -> Checked:
    check = input_buffer if comm.rank == root else output_buffer
    buf = check(buf, comm, "buf")
    return Checked(buf.nbytes, (buf, root))


bcast, nonblocking_bcast, bcast_init = public_forms(
    OPS["bcast"], _checks, __name__,
    doc="""Copy the root's ``buf`` into ``buf`` on every other rank (always in place).

    ``buf`` must have the same count and dtype on every rank; the root's is only read (it
    may be read-only), every other rank's is overwritten.  Blocking: returns when this
    rank's part is done; on stream-bound backends, once the work is enqueued on ``stream``.
    """)
