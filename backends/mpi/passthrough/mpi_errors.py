"""Blocking MPI calls raise ``al.OperationError`` naming the operation, never a raw
``mpi4py.MPI.Exception`` (everything aluminum raises derives from ``al.AluminumError``).

Nonblocking operations need nothing here: the engine wraps whatever a state raises.
Mismatched counts or dtypes between ranks are the usual cause (``MPI_ERR_TRUNCATE``), hence
the hint at ``AL_DEBUG``.
"""
from __future__ import annotations

from mpi4py import MPI

from ....core.errors import OperationError
from ....engine.state import State


def operation_error(name: str, exc: MPI.Exception) -> OperationError:
    """The error a blocking ``name`` raises for an MPI failure ``exc``."""
    return OperationError(f"{name}: MPI failed: {exc.Get_error_string()} (ranks calling with "
                          f"different counts or dtypes? AL_DEBUG=1 names the rank whose call "
                          f"differs)")


class MPIState(State):
    """A passthrough State: what the callables of its bound and new-array forms raise for
    an MPI failure becomes ``operation_error`` (its ``run_blocking`` raises that itself)."""

    @classmethod
    def call_error(cls, exc: Exception) -> Exception | None:
        return operation_error(cls.name, exc) if isinstance(exc, MPI.Exception) else None
