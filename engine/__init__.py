"""Progress engine: one background thread per process stepping ``State`` objects.

Knows nothing of MPI or CUDA.  See ``state.py`` for the State protocol, ``progress.py`` for
the engine thread and ``request.py`` for the handle a nonblocking call returns.  The engine
itself (``progress``) is imported on first use: importing this package starts nothing.
"""
from .request import Request, test_all, wait_all, wait_any
from .state import Action, RunType, State

__all__ = ["Action", "Request", "RunType", "State", "test_all", "wait_all", "wait_any"]
