"""Forward a validated operation to its backend: blocking on this thread, or to the engine."""
from __future__ import annotations

from . import trace


def run(comm, op: str, algo: str, nbytes: int, blocking: bool, args: tuple):
    """Run ``op`` with the State class the backend picks; return a Request when nonblocking.

    ``args`` are the State constructor's arguments after ``comm``: ``(stream, ...)``.
    """
    state_class = comm.backend.state_class(op, algo, comm, nbytes)
    if trace.ENABLED:
        trace.api_call(op, comm, nbytes, state_class.name, blocking)
    if blocking:
        state_class.run_blocking(comm, *args)
        return None
    from .engine.progress import submit

    return submit(state_class(comm, *args))
