"""What every passthrough State shares: one posted MPI request, polled, then finished.

Also the mpi4py buffer specifications the passthrough calls build from ``Buffer`` records.
"""
from __future__ import annotations

from mpi4py import MPI

from ....engine.state import Action, State
from ..datatypes import mpi_datatype

# Point-to-point is untagged (Aluminum: a receive matches a send of the same count); it uses
# this one tag on the duplicated communicator, which custom algorithms' tags never equal.
POINT_TO_POINT_TAG = 0


class MPIRequestState(State):
    """A nonblocking MPI call: ``post`` starts it, ``step`` polls ``Test``, ``finish``
    post-processes the result (AVG division, logical 0/1) once MPI reports completion."""

    request: MPI.Request | None = None
    status: MPI.Status | None = None   # set by states that check what they received

    def post(self) -> MPI.Request:
        raise NotImplementedError

    def finish(self) -> None:
        """Nothing to post-process by default."""

    def start(self) -> None:
        self.request = self.post()

    def step(self) -> Action:
        if not self.request.Test(self.status):
            return Action.CONTINUE
        self.finish()
        return Action.COMPLETE


def spec(buf) -> list:
    """``[array, datatype]``: the whole buffer."""
    return [buf.array, mpi_datatype(buf.dtype)]


def send_spec(sendbuf, recvbuf):
    """``MPI.IN_PLACE`` when the operation is in place (``sendbuf is recvbuf``), else ``spec``."""
    return MPI.IN_PLACE if sendbuf is recvbuf else spec(sendbuf)


def layout_spec(buf, counts, displs) -> list:
    """``[array, counts, displs, datatype]``: a v-variant's per-rank blocks of ``buf``."""
    return [buf.array, counts, displs, mpi_datatype(buf.dtype)]
