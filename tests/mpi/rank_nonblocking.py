"""Nonblocking operations through the progress engine, on every rank of a real MPI job."""
import os
import threading
import time

import numpy as np
import pytest

import aluminum as al
from aluminum.engine import Action, RunType, State
from aluminum.engine.progress import submit
from conftest import rank_data


@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.float64, al.bfloat16])
@pytest.mark.parametrize("op", [al.SUM, al.MAX, al.AVG])
@pytest.mark.parametrize("count", [0, 1, 7, 1000, (1 << 18) + 3])
@pytest.mark.parametrize("inplace", [True, False])
def test_nonblocking_allreduce_matches_blocking(comm, dtype, op, count, inplace):
    mine = rank_data(count, dtype, comm.rank, seed=count)
    expected = mine.copy()
    al.allreduce(expected, comm, op=op)
    if inplace:
        request = al.nonblocking_allreduce(mine, comm, op=op)
        result = mine
    else:
        original, result = mine.copy(), np.zeros_like(mine)
        request = al.nonblocking_allreduce(mine, comm, op=op, recvbuf=result)
    assert isinstance(request, al.Request)
    request.wait()
    assert request.test()
    np.testing.assert_array_equal(result, expected)
    if not inplace:
        np.testing.assert_array_equal(mine, original)


def expected_sum(comm, values):
    """What a SUM allreduce of ``values + rank`` gives."""
    return values * comm.size + sum(range(comm.size))


def test_many_in_flight_on_one_communicator(comm):
    buffers = [np.full(1 + 37 * i, i, np.int64) + comm.rank for i in range(64)]
    requests = [al.nonblocking_allreduce(buf, comm) for buf in buffers]
    al.wait_all(requests)
    for i, buf in enumerate(buffers):
        assert np.all(buf == expected_sum(comm, i)), f"buffer {i}"


def test_progress_happens_in_the_background(comm):
    buf = np.ones(1 << 20, np.float32) * (comm.rank + 1)
    request = al.nonblocking_allreduce(buf, comm)
    deadline = time.monotonic() + 30
    while not request.done and time.monotonic() < deadline:   # .done does not drive
        np.sqrt(np.arange(10000.0))
        time.sleep(0.001)
    assert request.done
    request.wait()
    assert np.all(buf == comm.size * (comm.size + 1) / 2)


def test_wait_all_and_test_all(comm):
    buffers = [np.arange(100, dtype=np.float64) + comm.rank + i for i in range(8)]
    requests = [al.nonblocking_allreduce(buf, comm, op=al.MAX) for buf in buffers]
    while not al.test_all(requests):
        pass
    assert all(r.test() for r in requests)
    for i, buf in enumerate(buffers):
        np.testing.assert_array_equal(buf, np.arange(100.0) + comm.size - 1 + i)


OPS_PER_THREAD = 1000


def test_eight_threads_on_separate_communicators(comm):
    comms = [al.MPICommunicator() for _ in range(8)]   # collective: same order everywhere
    errors = []

    def work(t):
        try:
            for batch in range(OPS_PER_THREAD // 10):
                buffers = [np.full(1 + (t * 7 + i) % 50, batch * 10 + i, np.int64) + comm.rank
                           for i in range(10)]
                requests = [al.nonblocking_allreduce(buf, comms[t]) for buf in buffers]
                if batch % 2:
                    al.wait_all(requests)
                else:
                    while not al.test_all(requests):
                        pass
                for i, buf in enumerate(buffers):
                    if not np.all(buf == expected_sum(comm, batch * 10 + i)):
                        raise AssertionError(f"thread {t} batch {batch} op {i}: {buf[:4]}")
        except BaseException as exc:   # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "threads hung"
    assert not errors, errors[0]
    for other in comms:
        other.free()


class Send(State):
    """Test-only point-to-point state: ``MPI_Isend`` polled by the engine, never bounded."""

    run_type = RunType.UNBOUNDED
    name = "test/isend"

    def __init__(self, comm, buf, peer, tag):
        self.comm, self.buf, self.peer, self.tag = comm, buf, peer, tag
        self.request = None

    def start(self):
        self.request = self.comm.mpi_comm.Isend(self.buf, self.peer, self.tag)

    def step(self):
        return Action.COMPLETE if self.request.Test() else Action.CONTINUE


class Recv(Send):
    name = "test/irecv"

    def start(self):
        self.request = self.comm.mpi_comm.Irecv(self.buf, self.peer, self.tag)


def test_sends_posted_before_receives_do_not_deadlock(comm):
    """Every rank queues 16 large (rendezvous) sends, then the 16 receives, on one queue:
    were they bounded (4 in flight), each rank's sends would wait for receives queued
    behind the other ranks' sends.  Same tag throughout: MPI's non-overtaking rule plus
    FIFO admission keeps the messages in order."""
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    count = 1 << 16
    outgoing = [np.full(count, comm.rank * 100 + i, np.int32) for i in range(16)]
    incoming = [np.zeros(count, np.int32) for _ in range(16)]
    sends = [submit(Send(comm, buf, right, 7)) for buf in outgoing]
    receives = [submit(Recv(comm, buf, left, 7)) for buf in incoming]
    al.wait_all(sends + receives, timeout=60)
    for i, buf in enumerate(incoming):
        assert np.all(buf == left * 100 + i), f"message {i}"


def test_engine_threads_of_a_node_pin_to_distinct_cores(comm):
    from aluminum.engine.progress import get_engine

    al.nonblocking_allreduce(np.zeros(1), comm).wait()
    engine = get_engine()
    assert engine.thread.name == "AlProgress" and engine.thread.daemon
    cores = comm.local_comm.allgather(engine.core)
    if comm.local_size > len(os.sched_getaffinity(0)) or os.environ.get("AL_PE_CORE"):
        return                              # oversubscribed (or overridden): no default pin
    assert None not in cores and len(set(cores)) == len(cores), cores
    assert os.sched_getaffinity(engine.thread.native_id) == {engine.core}
