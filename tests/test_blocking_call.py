"""The forms an ``MPICall`` derives from its one spec (the MPI calls and how their arguments
are built): bound, blocking, new-array and persistent (no MPI job needed: a stand-in
communicator records the MPI calls)."""
import numpy as np
import pytest
from mpi4py import MPI

import aluminum as al
from aluminum.backends.mpi.passthrough.mpi_call import MPICall, MPICalls, send_spec, spec
from aluminum.core.buffers import as_buffer


def snapshot(args) -> tuple:
    """An MPI call's arguments with each buffer spec's array as a list of its contents."""
    return tuple([part[0].tolist(), *part[1:]] if type(part) is list else part
                 for part in args)


class RecordingMPI:
    """An MPI communicator whose ``Reduce``, ``Ireduce`` (waited for) and ``Reduce_init``
    append their arguments (``snapshot``) to ``log``; ``Reduce`` raises ``error`` when
    given."""

    def __init__(self, log, error=None):
        self.log, self.error = log, error

    def Reduce(self, *args):
        if self.error is not None:
            raise self.error
        self.log.append(("Reduce",) + snapshot(args))

    def Ireduce(self, *args):
        log = self.log

        class Request:
            def Wait(self):
                log.append(("Ireduce",) + snapshot(args))
        return Request()

    def Reduce_init(self, *args):
        self.log.append(("Reduce_init",) + snapshot(args))
        log = self.log

        class Prequest:
            def Start(self):
                log.append("Start")

            def Wait(self):
                log.append("Wait")

            def Free(self):
                log.append("Free")
        return Prequest()


class StandInComm:
    size = 3

    def __init__(self, mpi):
        self.mpi_comm = mpi


class Halving:
    """A reduction whose finish halves the result (as AVG divides) and logs it."""

    def __init__(self, log, order_sensitive=False):
        self.log, self.sensitive = log, order_sensitive

    def finishes(self, size):
        return True

    def finish(self, result, size):
        self.log.append(("finish", result.tolist()))
        result //= 2


class FakeReduce(MPICall):
    name = "reduce/fake_passthrough"
    calls = MPICalls("Reduce", "Ireduce", "Reduce_init")

    @staticmethod
    def arguments(comm, stream, sendbuf, recvbuf, op):
        return send_spec(sendbuf, recvbuf), spec(recvbuf), "sum", 0

    @staticmethod
    def finishing(comm, stream, sendbuf, recvbuf, op):
        return op, recvbuf, 2

    @staticmethod
    def order_sensitive(comm, stream, sendbuf, recvbuf, op):
        return op.sensitive


def buffers(in_place=False):
    recvbuf = as_buffer(np.array([4, 6, 8], np.int32), "recvbuf")
    return (recvbuf if in_place else as_buffer(np.ones(3, np.int32), "buf")), recvbuf


def test_the_bound_call_makes_the_blocking_call_then_finishes_on_every_call():
    log = []
    sendbuf, recvbuf = buffers()
    call = FakeReduce.blocking_call(StandInComm(RecordingMPI(log)), None, sendbuf, recvbuf,
                                    Halving(log))
    assert log == []                       # bound, not called
    call()
    call()
    assert log == [
        ("Reduce", [[1, 1, 1], MPI.INT], [[4, 6, 8], MPI.INT], "sum", 0),
        ("finish", [4, 6]),                # the first ``count`` elements only
        ("Reduce", [[1, 1, 1], MPI.INT], [[2, 3, 8], MPI.INT], "sum", 0),
        ("finish", [2, 3])]


def test_where_the_order_matters_every_blocking_form_waits_for_the_nonblocking_call():
    log = []
    sendbuf, recvbuf = buffers(in_place=True)
    comm = StandInComm(RecordingMPI(log))
    op = Halving(log, order_sensitive=True)
    FakeReduce.run_blocking(comm, None, sendbuf, recvbuf, op)
    assert log == [
        ("Ireduce", MPI.IN_PLACE, [[4, 6, 8], MPI.INT], "sum", 0), ("finish", [4, 6])]
    assert FakeReduce.persistent(comm, None, sendbuf, recvbuf, op) is None
    assert FakeReduce.array_call(comm, None, sendbuf, recvbuf, op) is None


def test_the_new_array_form_calls_mpi_on_the_arrays_it_is_given():
    log = []
    sendbuf, recvbuf = buffers()
    call = FakeReduce.array_call(StandInComm(RecordingMPI(log)), None, sendbuf, recvbuf,
                                 Halving(log))
    send, recv = np.full(3, 7, np.int32), np.array([10, 12, 14], np.int32)
    call(send, recv)
    assert log == [
        ("Reduce", [[7, 7, 7], MPI.INT], [[10, 12, 14], MPI.INT], "sum", 0),
        ("finish", [10, 12])]
    assert recv.tolist() == [5, 6, 14] and recvbuf.array.tolist() == [4, 6, 8]


def test_the_persistent_form_is_made_on_the_plan_buffers_and_finishes_each_run():
    log = []
    sendbuf, recvbuf = buffers(in_place=True)
    made = FakeReduce.persistent(StandInComm(RecordingMPI(log)), None, sendbuf, recvbuf,
                                 Halving(log))
    assert log == [
        ("Reduce_init", MPI.IN_PLACE, [[4, 6, 8], MPI.INT], "sum", 0)]
    made.run()
    assert log[1:] == ["Start", "Wait", ("finish", [4, 6])]
    assert recvbuf.array.tolist() == [2, 3, 8]


def test_an_mpi_failure_raises_operation_error_naming_the_op():
    log = []
    sendbuf, recvbuf = buffers()
    error = MPI.Exception(MPI.ERR_TRUNCATE)
    comm = StandInComm(RecordingMPI(log, error))
    with pytest.raises(al.OperationError, match="reduce/fake_passthrough: MPI failed") as caught:
        FakeReduce.run_blocking(comm, None, sendbuf, recvbuf, Halving(log))
    assert caught.value.__cause__ is error
    assert log == []                       # no finish after a failed call
    # The bound call raises MPI's own exception; whoever calls it raises call_error's.
    with pytest.raises(MPI.Exception):
        FakeReduce.blocking_call(comm, None, sendbuf, recvbuf, Halving(log))()
    assert str(FakeReduce.call_error(error)) == str(caught.value)
    assert FakeReduce.call_error(ValueError("other")) is None


def test_only_small_calls_without_a_python_op_are_quick():
    """Posting, starting and testing a call keep the GIL only where it is quick: at most
    ``QUICK_BYTES`` in all its buffers, and no reduction op written in Python (MPI may run
    that on a thread which then needs the GIL)."""
    from aluminum.backends.mpi.passthrough.native_calls import QUICK_BYTES, quick
    half = np.zeros(QUICK_BYTES // 8, np.float32)      # QUICK_BYTES / 2 bytes
    assert quick(([half, MPI.FLOAT], [half.copy(), MPI.FLOAT], MPI.SUM))
    assert not quick(([half, MPI.FLOAT], [np.zeros(half.size + 1, np.float32), MPI.FLOAT],
                      MPI.SUM))
    assert not quick(([np.zeros(QUICK_BYTES + 1, np.uint8), MPI.BYTE], 0))
    python_op = MPI.Op.Create(lambda a, b, datatype: None, commute=True)
    try:
        one = np.zeros(1, np.float32)
        assert not quick(([one, MPI.FLOAT], [one.copy(), MPI.FLOAT], python_op))
    finally:
        python_op.Free()
