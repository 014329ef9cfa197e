"""``DirectCall``: a prepared call that compiled code makes without a Python call.

A plan keeps one prepared callable per mode and calls it on every run.  Where that callable
is a ``DirectCall`` (the MPI backend's native calls are), compiled callers make it through
``call()``, a C method: no argument tuple, no Python call protocol, which on a 4-byte call
is a measurable part of the whole.  Python code calls it as any callable: ``made()``.
"""
from __future__ import annotations

try:
    import cython
except ImportError:   # (running uncompiled without Cython)
    from ..core import pure_cython as cython

__all__ = ["DirectCall", "call_made"]


@cython.cclass
class DirectCall:
    """A no-argument call: subclasses define ``call()``."""

    def call(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} defines no call()")

    def __call__(self) -> None:
        self.call()


@cython.locals(direct="DirectCall")
def call_made(made) -> None:
    """``made()``, for any callable: in C where it is a ``DirectCall``."""
    if isinstance(made, DirectCall):
        direct = made
        direct.call()
    else:
        made()
