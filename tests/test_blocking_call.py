"""A passthrough state's ``blocking_call``: the blocking MPI call a plan's repeated runs make,
built from the state's ``post`` and bound once (no MPI job needed: a stand-in communicator
records the MPI calls)."""
import pytest
from mpi4py import MPI

import aluminum as al
from aluminum.backends.mpi.passthrough.mpi_errors import wrap_mpi_errors
from aluminum.backends.mpi.passthrough.mpi_request import MPIRequestState


class RecordingMPI:
    """An MPI communicator whose blocking ``Reduce`` appends its arguments to ``log`` (or
    raises ``error``), and which has no nonblocking calls at all."""

    def __init__(self, log, error=None):
        self.log, self.error = log, error

    def Reduce(self, *args):
        if self.error is not None:
            raise self.error
        self.log.append(("Reduce",) + args)


class StandInComm:
    def __init__(self, mpi):
        self.mpi_comm = self._mpi = mpi
        self.size = 3


class FakeReduce(MPIRequestState):
    """A passthrough-style state: ``post`` makes ``I<op>``, ``finish`` post-processes."""

    name = "reduce/fake_passthrough"

    def __init__(self, comm, stream, spec, log):
        self.comm, self.spec, self.log = comm, spec, log

    def post(self):
        return self.comm._mpi.Ireduce(self.spec, self.comm.size, 0)

    def finish(self):
        self.log.append(("finish", self.spec))


wrap_mpi_errors(FakeReduce)


def test_the_bound_call_makes_the_blocking_call_then_finishes_on_every_call():
    log = []
    call = FakeReduce.blocking_call(StandInComm(RecordingMPI(log)), None, "spec", log)
    assert log == []                       # bound, not called
    call()
    call()
    assert log == [("Reduce", "spec", 3, 0), ("finish", "spec")] * 2


def test_an_mpi_failure_in_the_bound_call_raises_operation_error_naming_the_op():
    log = []
    failing = RecordingMPI(log, MPI.Exception(MPI.ERR_TRUNCATE))
    call = FakeReduce.blocking_call(StandInComm(failing), None, "spec", log)
    with pytest.raises(al.OperationError, match="reduce/fake_passthrough: MPI failed") as caught:
        call()
    assert isinstance(caught.value.__cause__, MPI.Exception)
    assert log == []                       # no finish after a failed call
