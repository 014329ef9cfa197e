"""Progress engine: one background thread per process stepping ``State`` objects.

Knows nothing of MPI or CUDA.  See ``state.py`` for the State protocol, ``progress.py`` for
the engine thread and ``request.py`` for the handle a nonblocking call returns.
"""
from .state import Action, RunType, State

__all__ = ["Action", "RunType", "State"]
