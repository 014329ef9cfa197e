"""Build a communicator's NCCL communicator: the unique-id exchange over MPI, then NCCL.

Two steps, kept apart so the first is testable without a GPU:

1. ``agree_on_unique_id`` (pure MPI, any picklable id): every rank reports whether it can
   run NCCL at all (an allgather, so a rank without a GPU makes *every* rank raise instead of
   leaving the others blocked in ``ncclCommInitRank``); then rank 0 makes the id
   (``nccl.get_unique_id()``) and broadcasts it, or broadcasts the error it got.
2. ``create_context``: ``NcclCommunicator(size, id, rank)`` on the current CUDA device, plus
   what the operations need beside it (see context.py).

The device is the one current when the communicator is built (as Aluminum: choose it first,
e.g. ``cupy.cuda.Device(local_rank).use()``).  NCCL refuses two ranks on one GPU.
"""
from __future__ import annotations

from typing import Any, Callable

from ...core.errors import AluminumError, CommunicatorError, UnsupportedError
from .context import NCCLContext


def nccl_problem() -> str | None:
    """Why this process cannot run NCCL (cupy, GPU or NCCL library missing), or None."""
    try:
        import cupy
    except ImportError as exc:
        return f"cupy is not installed ({exc}); pip install cupy-cuda13x"
    if not cupy.is_available():
        return "cupy.is_available() is False: no usable GPU"
    from cupy.cuda import nccl

    if not nccl.available:
        return "cupy.cuda.nccl is not available; pip install nvidia-nccl-cu13"
    return None


def agree_on_unique_id(mpi_comm, make_id: Callable[[], Any], problem: str | None = None):
    """Return rank 0's ``make_id()`` on every rank of ``mpi_comm`` (collective).

    ``problem`` is this rank's reason it cannot take part (None if it can): if any rank has
    one, every rank raises ``al.UnsupportedError`` naming the ranks and reasons.  If
    ``make_id`` raises on rank 0, every rank raises ``al.CommunicatorError``.
    """
    problems = mpi_comm.allgather(problem)
    failing = [(rank, text) for rank, text in enumerate(problems) if text]
    if failing:
        listed = "; ".join(f"rank {rank}: {text}" for rank, text in failing)
        raise UnsupportedError(f"comm: the nccl backend needs a GPU with NCCL on every rank, "
                               f"got {listed}")
    message = None
    if mpi_comm.Get_rank() == 0:
        try:
            message = (make_id(), None)
        except Exception as exc:  # noqa: BLE001 - sent to every rank, raised there
            message = (None, f"{type(exc).__name__}: {exc}")
    unique_id, error = mpi_comm.bcast(message, root=0)
    if error is not None:
        raise CommunicatorError(f"comm: rank 0 could not create the NCCL unique id ({error})")
    return unique_id


def create_context(size: int, unique_id, rank: int) -> NCCLContext:
    """``ncclCommInitRank`` on the current device, wrapped with the device operations."""
    from cupy.cuda import nccl

    from .device import CupyDeviceOps

    return NCCLContext(nccl.NcclCommunicator(size, unique_id, rank), nccl, CupyDeviceOps())


def setup(comm) -> None:
    """Backend hook run once per new ``al.NCCLCommunicator``: bootstrap its NCCL communicator
    and keep it in ``comm._scratch["nccl"]`` (destroyed when the communicator is freed)."""
    problem = nccl_problem()
    unique_id = agree_on_unique_id(comm.mpi_comm, get_unique_id, problem)
    try:
        comm._scratch["nccl"] = create_context(comm.size, unique_id, comm.rank)
    except AluminumError:
        raise
    except Exception as exc:  # cupy's NcclError / CUDARuntimeError
        raise CommunicatorError(
            f"comm: ncclCommInitRank failed on rank {comm.rank} ({type(exc).__name__}: "
            f"{exc}); every rank needs its own GPU, made current before the communicator is "
            f"built, e.g. cupy.cuda.Device(node_local_rank).use()") from exc


def get_unique_id():
    """A fresh NCCL unique id (128 bytes); needs the NCCL library, not a GPU."""
    from cupy.cuda import nccl

    return nccl.get_unique_id()
