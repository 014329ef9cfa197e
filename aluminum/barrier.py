"""Barrier: no rank leaves until every rank of the communicator has entered."""
from __future__ import annotations

from .core.ops import OPS
from .forms import public_forms
from .validate import Checked

__all__ = ["barrier", "nonblocking_barrier", "barrier_init"]


def _checks(comm) -> Checked:
    return Checked(0, ())


barrier, nonblocking_barrier, barrier_init = public_forms(
    OPS["barrier"], _checks, __name__,
    doc="""Wait until every rank of ``comm`` has called ``barrier``.

    On the MPI backend the call blocks the host; on stream-bound backends it is enqueued on
    ``stream`` (default: the communicator's) and orders that stream's later work after it.
    """,
    nonblocking_doc="""Enter ``barrier`` and return a ``Request`` that completes once every
    rank entered it.""",
    init_doc="""Validate ``barrier`` once; return its persistent ``Plan`` (``start()`` enters
    it nonblocking, ``run()`` blocking).""")
