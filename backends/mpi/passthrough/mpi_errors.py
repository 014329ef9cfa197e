"""Blocking MPI calls raise ``al.OperationError`` naming the operation, never a raw
``mpi4py.MPI.Exception`` (everything aluminum raises derives from ``al.AluminumError``).

Nonblocking operations need nothing here: the engine wraps whatever a state raises.
Mismatched counts or dtypes between ranks are the usual cause (``MPI_ERR_TRUNCATE``), hence
the hint at ``AL_DEBUG``.
"""
from __future__ import annotations

import functools

from mpi4py import MPI

from ....core.errors import OperationError


def operation_error(name: str, exc: MPI.Exception) -> OperationError:
    """The error a blocking ``name`` raises for an MPI failure ``exc``."""
    return OperationError(f"{name}: MPI failed: {exc.Get_error_string()} (ranks calling with "
                          f"different counts or dtypes? AL_DEBUG=1 names the rank whose call "
                          f"differs)")


def wrap_mpi_errors(cls: type) -> type:
    """Make ``cls.run_blocking`` and the calls ``cls.blocking_call`` returns raise
    ``operation_error`` instead of ``MPI.Exception``, and ``cls.call_error`` name that
    error for what the calls ``cls.array_call`` returns raise."""
    run_blocking = cls.run_blocking

    @functools.wraps(run_blocking)
    def checked_run_blocking(*args, **kwargs):
        try:
            return run_blocking(*args, **kwargs)
        except MPI.Exception as exc:
            raise operation_error(cls.name, exc) from exc

    cls.run_blocking = staticmethod(checked_run_blocking)
    make_call = cls.blocking_call

    @functools.wraps(make_call)
    def checked_blocking_call(*args):
        call = make_call(*args)

        def checked_call():
            try:
                call()
            except MPI.Exception as exc:
                raise operation_error(cls.name, exc) from exc
        return checked_call

    cls.blocking_call = staticmethod(checked_blocking_call)
    cls.call_error = staticmethod(
        lambda exc: operation_error(cls.name, exc) if isinstance(exc, MPI.Exception) else None)
    return cls
