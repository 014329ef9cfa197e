"""Stream ordering of the host-transfer backend on every rank: slow streams, other streams.

The central property: an operation reads its inputs only after the stream has produced them
and writes its outputs only after earlier stream work has consumed the old contents, and work
enqueued after it sees its results.  Each of the 18 operations is checked on a stream that is
held shut by a flag while the call is made (so a call that waited for the stream would hang),
then runs slowly: a sleep, then the input written late, a read of the outputs' old contents,
the operation, a read of its results, and the inputs overwritten at once.

Every test runs twice: host buffers handed to MPI directly (the default) and staged through
host staging memory as device buffers are (``AL_HT_STAGE_HOST=1``).  Each operation's results
against numpy, over every array provider and mode, are the rank_ops_* tests' (backend ``ht``
of tests/mpi/backends.py); this file keeps what only a stream can show.
"""
import time

import numpy as np
import pytest

import aluminum as al
from aluminum.backends.ht.staging import staging_pool
from aluminum.backends.runtime import host
from conftest import rank_data
from backends import staging_communicator

N = 5   # elements per block


@pytest.fixture(scope="module", params=["direct", "staged"])
def ht(request):
    stream = host.HostStream()
    if request.param == "staged":
        comm = staging_communicator(stream)
    else:
        comm = al.HostTransferCommunicator(stream=stream)
    with comm:
        yield comm


@pytest.fixture()
def stream():
    s = host.HostStream()
    yield s
    s.close(timeout=10)


def data(rank, count=N * 4, seed=0):
    return rank_data(count, np.int64, rank, seed)


def total(size, count=N * 4, seed=0):
    return sum(data(r, count, seed) for r in range(size))


def blank(count):
    return np.full(count, -7, np.int64)


class Case:
    """One call of an operation on ``stream``: the arrays it reads (with the values the
    stream writes into them late) and writes (with the results expected there)."""

    def __init__(self, inputs, outputs, calls):
        self.inputs, self.outputs, self.calls = inputs, outputs, calls


def ring(comm):
    return (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size


def build(op, comm, s):
    """The ``Case`` of ``op`` on this rank; ``calls(blocking)`` issues it."""
    r, p = comm.rank, comm.size
    last = p - 1
    nxt, prev = ring(comm)
    if op == "allreduce":
        buf = blank(N)
        return Case([(buf, data(r, N))], [(buf, total(p, N))],
                    lambda b: [call(b, "allreduce", buf, comm, s, op=al.SUM)])
    if op == "allreduce_avg":
        send, recv = blank(N).astype(np.float64), blank(N).astype(np.float64)
        return Case([(send, data(r, N).astype(float))], [(recv, total(p, N) / p)],
                    lambda b: [call(b, "allreduce", send, comm, s, op=al.AVG, recvbuf=recv)])
    if op == "reduce":
        send, recv = blank(N), blank(N)
        outputs = [(recv, total(p, N))] if r == last else []
        return Case([(send, data(r, N))], outputs,
                    lambda b: [call(b, "reduce", send, comm, s, root=last, recvbuf=recv)])
    if op == "reduce_scatter":
        buf = blank(N * p)
        return Case([(buf, data(r, N * p))], [(buf[:N], total(p, N * p)[r * N:(r + 1) * N])],
                    lambda b: [call(b, "reduce_scatter", buf, comm, s)])
    if op == "reduce_scatterv":
        counts = [k + 1 for k in range(p)]
        send, recv = blank(sum(counts)), blank(counts[r])
        start = sum(counts[:r])
        return Case([(send, data(r, sum(counts)))],
                    [(recv, total(p, sum(counts))[start:start + counts[r]])],
                    lambda b: [call(b, "reduce_scatterv", send, counts, comm, s, recvbuf=recv)])
    if op == "allgather":
        send, recv = blank(N), blank(N * p)
        return Case([(send, data(r, N))], [(recv, np.concatenate([data(q, N) for q in range(p)]))],
                    lambda b: [call(b, "allgather", send, comm, s, recvbuf=recv)])
    if op == "allgatherv":
        counts = [k + 2 for k in range(p)]
        buf = blank(sum(counts))
        start = sum(counts[:r])
        return Case([(buf[start:start + counts[r]], data(r, counts[r]))],
                    [(buf, np.concatenate([data(q, counts[q]) for q in range(p)]))],
                    lambda b: [call(b, "allgatherv", buf, counts, None, comm, s)])
    if op == "alltoall":
        send, recv = blank(N * p), blank(N * p)
        expected = np.concatenate([data(q, N * p)[r * N:(r + 1) * N] for q in range(p)])
        return Case([(send, data(r, N * p))], [(recv, expected)],
                    lambda b: [call(b, "alltoall", send, comm, s, recvbuf=recv)])
    if op == "alltoallv":
        counts = [N] * p
        displs = [N * k for k in range(p)]
        send, recv = blank(N * p), blank(N * p)
        expected = np.concatenate([data(q, N * p)[r * N:(r + 1) * N] for q in range(p)])
        return Case([(send, data(r, N * p))], [(recv, expected)],
                    lambda b: [call(b, "alltoallv", send, counts, displs, counts, displs, comm,
                                    s, recvbuf=recv)])
    if op == "bcast":
        buf = blank(N)
        inputs, outputs = ([(buf, data(0, N))], []) if r == 0 else ([], [(buf, data(0, N))])
        return Case(inputs, outputs, lambda b: [call(b, "bcast", buf, comm, s, root=0)])
    if op == "gather":
        send, recv = blank(N), blank(N * p)
        outputs = [(recv, np.concatenate([data(q, N) for q in range(p)]))] if r == 0 else []
        return Case([(send, data(r, N))], outputs,
                    lambda b: [call(b, "gather", send, comm, s, root=0,
                                    recvbuf=recv if r == 0 else None)])
    if op == "gatherv":
        counts = [k + 1 for k in range(p)]
        send, recv = blank(counts[r]), blank(sum(counts))
        outputs = [(recv, np.concatenate([data(q, counts[q]) for q in range(p)]))] \
            if r == last else []
        return Case([(send, data(r, counts[r]))], outputs,
                    lambda b: [call(b, "gatherv", send, counts, None, comm, s, root=last,
                                    recvbuf=recv if r == last else None)])
    if op == "scatter":
        send, recv = blank(N * p), blank(N)
        return Case([(send, data(0, N * p))] if r == 0 else [],
                    [(recv, data(0, N * p)[r * N:(r + 1) * N])],
                    lambda b: [call(b, "scatter", send if r == 0 else None, comm, s, root=0,
                                    recvbuf=recv)])
    if op == "scatterv":
        counts = [k + 1 for k in range(p)]
        send, recv = blank(sum(counts)), blank(counts[r])
        start = sum(counts[:r])
        return Case([(send, data(0, sum(counts)))] if r == 0 else [],
                    [(recv, data(0, sum(counts))[start:start + counts[r]])],
                    lambda b: [call(b, "scatterv", send if r == 0 else None, counts, None, comm,
                                    s, root=0, recvbuf=recv)])
    if op == "barrier":
        return Case([], [], lambda b: [call(b, "barrier", comm, s)])
    if op == "send_recv":
        send, recv = blank(N), blank(N)
        return Case([(send, data(r, N))], [(recv, data(prev, N))],
                    lambda b: [call(b, "send", send, nxt, comm, s),
                               call(b, "recv", recv, prev, comm, s)])
    if op == "sendrecv":
        buf = blank(N)
        return Case([(buf, data(r, N))], [(buf, data(prev, N))],
                    lambda b: [call(b, "sendrecv", buf, nxt, buf, prev, comm, s)])
    if op == "multisendrecv":
        sends = [blank(N) for _ in range(p)]
        recvs = [blank(N) for _ in range(p)]
        return Case([(sends[q], data(r + 10 * q, N)) for q in range(p)],
                    [(recvs[q], data(q + 10 * r, N)) for q in range(p)],
                    lambda b: [call(b, "multisendrecv", [(sends[q], q) for q in range(p)],
                                    [(recvs[q], q) for q in range(p)], comm, s)])
    raise AssertionError(op)


def call(blocking, name, *args, **kwargs):
    """Issue ``al.<name>`` (None) or ``al.nonblocking_<name>`` (its Request); the stream is
    the argument just before the keyword arguments."""
    *args, stream = args
    if blocking:
        assert getattr(al, name)(*args, stream=stream, **kwargs) is None
        return None
    return getattr(al, "nonblocking_" + name)(*args, stream=stream, **kwargs)


OPS = ["allreduce", "allreduce_avg", "reduce", "reduce_scatter", "reduce_scatterv",
       "allgather", "allgatherv", "alltoall", "alltoallv", "bcast", "gather", "gatherv",
       "scatter", "scatterv", "barrier", "send_recv", "sendrecv", "multisendrecv"]


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "nonblocking"])
@pytest.mark.parametrize("op", OPS)
def test_slow_stream_orders_every_step(ht, stream, op, blocking):
    case = build(op, ht, stream)
    replica = build(op, ht, stream)       # same layout, other memory: what the outputs hold
    for array, values in replica.inputs:  # just before the operation
        np.copyto(array, values)
    old_contents = [array.copy() for array, _ in replica.outputs]
    gate = host.HostStreamFlag()
    stream.wait_flag(gate)                # nothing on the stream runs until the gate opens
    stream.enqueue_sleep(0.02)            # ... and then slowly
    for array, values in case.inputs:     # the producer writes the inputs late
        stream.enqueue(np.copyto, array, values)
    before, after = [], []
    for array, _ in case.outputs:         # a consumer of the outputs' old contents
        stream.enqueue(lambda a=array: before.append(a.copy()))
    requests = case.calls(blocking)       # returns although the stream is shut
    for array, _ in case.outputs:
        stream.enqueue(lambda a=array: after.append(a.copy()))
    for array, _ in case.inputs:          # the stream reuses the inputs right away
        stream.enqueue(array.fill, 99)
    if not blocking:
        assert not any(request.test() for request in requests)
    gate.set()
    if not blocking:
        al.wait_all(requests)
    stream.synchronize()
    for (array, expected), old, new, was in zip(case.outputs, before, after, old_contents):
        np.testing.assert_array_equal(old, was,
                                      err_msg="an output was written before the stream "
                                              "consumed its old contents")
        np.testing.assert_array_equal(new, expected, err_msg="wrong or late result")


@pytest.mark.parametrize("op", OPS)
def test_host_blocking_mode_waits_for_the_stream_then_enqueues_results(ht, stream, op):
    """``blocking_mode="host"``: the call returns once the stream has produced the inputs and
    MPI is done; earlier stream work still saw the old outputs, later work sees results."""
    case = build(op, ht, stream)
    replica = build(op, ht, stream)
    for array, values in replica.inputs:
        np.copyto(array, values)
    old_contents = [array.copy() for array, _ in replica.outputs]
    stream.enqueue_sleep(0.02)
    for array, values in case.inputs:     # the producer writes the inputs late
        stream.enqueue(np.copyto, array, values)
    before, after = [], []
    for array, _ in case.outputs:
        stream.enqueue(lambda a=array: before.append(a.copy()))
    ht.blocking_mode = "host"
    try:
        case.calls(True)
    finally:
        ht.blocking_mode = "stream"
    assert len(before) == len(case.outputs), "the call returned before the stream reached it"
    for array, _ in case.outputs:
        stream.enqueue(lambda a=array: after.append(a.copy()))
    for array, _ in case.inputs:
        stream.enqueue(array.fill, 99)
    stream.synchronize()
    for (array, expected), old, new, was in zip(case.outputs, before, after, old_contents):
        np.testing.assert_array_equal(old, was)
        np.testing.assert_array_equal(new, expected, err_msg="wrong or late result")


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "nonblocking"])
def test_large_input_produced_late(ht, stream, blocking):
    count = (1 << 18) + 5
    buf = np.zeros(count, np.float32)
    stream.enqueue_sleep(0.05)
    stream.enqueue(buf.fill, ht.rank + 1)
    request = call(blocking, "allreduce", buf, ht, stream)
    seen = []
    stream.enqueue(lambda: seen.append(buf[[0, count // 2, -1]].copy()))
    stream.enqueue(buf.fill, -1)
    if request is not None:
        request.wait()
    stream.synchronize()
    assert np.all(seen[0] == ht.size * (ht.size + 1) / 2)


def test_large_send_then_receive_on_one_stream(ht, stream):
    """Every rank sends, then receives, on one stream: the send releases the stream once its
    data is copied out, or every rank's stream would wait for a receive queued behind it."""
    nxt, prev = ring(ht)
    count = (1 << 18) + 1                 # beyond MPI's eager limit
    mine, result = np.full(count, ht.rank, np.float64), np.empty(count)
    al.send(mine, nxt, ht, stream)
    stream.enqueue(mine.fill, -1)         # the stream reuses the send buffer at once
    al.recv(result, prev, ht, stream)
    stream.synchronize(timeout=60)
    assert np.all(result == prev)


def test_per_call_stream_leaves_the_communicator_stream_alone(ht, stream):
    gate = host.HostStreamFlag()
    ht.stream.wait_flag(gate)             # the communicator's stream is shut throughout
    buf = data(ht.rank, N)
    al.allreduce(buf, ht, stream)
    stream.synchronize(timeout=60)
    np.testing.assert_array_equal(buf, total(ht.size, N))
    request = al.nonblocking_allreduce(buf, ht, stream)
    request.wait(timeout=60)
    np.testing.assert_array_equal(buf, ht.size * total(ht.size, N))
    gate.set()
    ht.stream.synchronize()


def test_copy_binds_another_stream(ht, stream):
    gate = host.HostStreamFlag()
    ht.stream.wait_flag(gate)
    with ht.copy(stream) as other:
        assert other.stream is stream and (other.rank, other.size) == (ht.rank, ht.size)
        assert isinstance(other, al.HostTransferCommunicator)
        buf = data(ht.rank, N)
        al.allreduce(buf, other)
        other.stream.synchronize(timeout=60)
        np.testing.assert_array_equal(buf, total(ht.size, N))
    gate.set()
    ht.stream.synchronize()


def test_two_streams_post_in_issue_order(ht, stream):
    """Every rank issues A (first stream) then B (second), but each rank holds a different
    stream back; MPI must still see A before B everywhere, or the blocks would cross.
    (Alltoall: MPI's own collectives match by posting order, unlike the custom algorithms,
    whose messages carry per-operation tags.)"""
    first, second = ht.stream, stream
    gate = host.HostStreamFlag()
    (first if ht.rank % 2 == 0 else second).wait_flag(gate)
    a, b = data(ht.rank, N * ht.size, seed=1), data(ht.rank, N * ht.size, seed=2)
    requests = [al.nonblocking_alltoall(a, ht, first), al.nonblocking_alltoall(b, ht, second)]
    time.sleep(0.05)
    gate.set()
    al.wait_all(requests, timeout=60)
    r, p = ht.rank, ht.size
    for buf, seed in ((a, 1), (b, 2)):
        expected = [data(q, N * p, seed)[r * N:(r + 1) * N] for q in range(p)]
        np.testing.assert_array_equal(buf, np.concatenate(expected))


def test_wait_on_stream_does_not_block_the_host(ht, stream):
    gate = host.HostStreamFlag()
    ht.stream.wait_flag(gate)
    buf = data(ht.rank, N)
    request = al.nonblocking_allreduce(buf, ht)
    request.wait_on_stream(stream)        # returns although the operation cannot finish yet
    seen = []
    stream.enqueue(lambda: seen.append(buf.copy()))
    assert not request.done
    gate.set()
    stream.synchronize(timeout=60)
    np.testing.assert_array_equal(seen[0], total(ht.size, N))
    request.wait()


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "nonblocking"])
def test_failed_receive_fails_and_releases_the_stream(ht, stream, blocking):
    nxt, prev = ring(ht)
    sent, longer = np.arange(6, dtype=np.int32), np.zeros(7, np.int32)
    request = call(blocking, "sendrecv", sent, nxt, longer, prev, ht, stream)
    if request is not None:
        with pytest.raises(al.OperationError, match=f"recv from rank {prev}"):
            request.wait(timeout=60)
    with pytest.raises(al.OperationError, match=f"recv from rank {prev}"):
        stream.synchronize(timeout=60)    # the stream was released, and reports the failure
    stream.synchronize(timeout=60)        # ... once
    buf = data(ht.rank, N)
    al.allreduce(buf, ht, stream)
    stream.synchronize(timeout=60)
    np.testing.assert_array_equal(buf, total(ht.size, N))


def test_staging_buffers_are_reused_and_allreduce_of_host_memory_is_unstaged(ht, stream,
                                                                             request):
    def allocated():
        return staging_pool(ht).allocated

    buf = np.ones(3001, np.float64)       # a size class no other test uses
    before = allocated()
    al.nonblocking_allreduce(buf, ht, stream).wait()
    after = allocated()
    # host memory is staged only on the communicator made with AL_HT_STAGE_HOST=1
    assert (after > before) == (request.node.callspec.params["ht"] == "staged")
    for _ in range(5):
        al.nonblocking_allreduce(buf, ht, stream).wait()
    assert allocated() == after
    np.testing.assert_array_equal(buf, float(ht.size) ** 6)


def test_large_allreduce_spans_staging_size_classes(ht):
    for count in [(1 << 20) + 3, 1 << 18]:
        mine = np.full(count, ht.rank + 1, np.float32)
        al.allreduce(mine, ht)
        ht.stream.synchronize(timeout=60)
        assert np.all(mine == ht.size * (ht.size + 1) / 2)


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "nonblocking"])
def test_barrier_orders_every_stream_after_the_last_rank(ht, blocking):
    """Work enqueued after the barrier runs only once every rank's stream reached it."""
    last = ht.size - 1
    if ht.rank == last:
        ht.stream.enqueue_sleep(0.2)
    entered = []
    ht.stream.enqueue(lambda: entered.append(time.time()))
    left = []
    if blocking:
        al.barrier(ht)
    else:
        request = al.nonblocking_barrier(ht)
        request.wait_on_stream()
    ht.stream.enqueue(lambda: left.append(time.time()))
    ht.stream.synchronize(timeout=60)
    entries = ht.mpi_comm.allgather(entered[0])
    assert left[0] >= entries[last]
