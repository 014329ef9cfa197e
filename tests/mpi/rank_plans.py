"""Persistent plans, done callbacks, wait_any and comm.split on every rank.

The per-op results of plans are checked by the rank_ops_* property tests (their
``persistent`` mode); this file checks what is particular to plans and the engine hooks.
"""
import threading

import numpy as np
import pytest
from mpi4py import MPI

import aluminum as al

# Ranks hold each other back on COMM_WORLD: aluminum's communicators are duplicates of it,
# so this barrier never meets the operation left in flight on them.
hold_back = MPI.COMM_WORLD.Barrier

OPS = ["allreduce", "reduce", "reduce_scatter", "reduce_scatterv", "allgather", "allgatherv",
       "alltoall", "alltoallv", "bcast", "gather", "gatherv", "scatter", "scatterv",
       "barrier", "send", "recv", "sendrecv", "multisendrecv"]


def test_every_operation_has_a_plan():
    missing = [op for op in OPS if not callable(getattr(al, op + "_init", None))]
    assert not missing


@pytest.mark.parametrize("how", ["start", "run", "call"])
@pytest.mark.parametrize("algo", ["automatic", "mpi_passthrough", "ring"])
def test_repeated_runs_reuse_the_bound_buffers(comm, how, algo):
    buf = np.ones(7, np.int64)
    with al.allreduce_init(buf, comm, algo=algo) as plan:
        for run in range(1, 4):
            if how == "start":
                plan.start().wait()
            elif how == "run":
                plan.run()
            else:
                plan()
            np.testing.assert_array_equal(buf, np.full(7, comm.size ** run))


def test_avg_plan_divides_every_run(comm):
    buf = np.full(5, float(comm.rank + 1))
    out = np.zeros(5)
    expected = sum(range(1, comm.size + 1)) / comm.size
    with al.allreduce_init(buf, comm, op=al.AVG, recvbuf=out) as plan:
        for _ in range(3):
            out[:] = -1
            plan.start().wait()
            np.testing.assert_allclose(out, expected)


def test_out_of_place_plan_sees_new_contents_of_its_buffers(comm):
    send, recv = np.zeros(3, np.int32), np.zeros(3, np.int32)
    with al.allreduce_init(send, comm, recvbuf=recv) as plan:
        for value in (1, 5, -2):
            send[:] = value
            plan.run()
            np.testing.assert_array_equal(recv, np.full(3, value * comm.size))


def test_start_while_in_flight_raises(comm):
    if comm.size < 2:
        pytest.skip("needs a peer that has not started yet")
    buf = np.ones(4)
    with al.allreduce_init(buf, comm, algo="mpi_passthrough") as plan:
        if comm.rank == 0:
            request = plan.start()     # cannot complete: rank 1 has not started
            with pytest.raises(al.ArgumentError, match="still in flight"):
                plan.start()
            with pytest.raises(al.ArgumentError, match="still in flight"):
                plan.run()
            hold_back()
            request.wait()
        else:
            hold_back()
            plan.start().wait()
    np.testing.assert_array_equal(buf, np.full(4, float(comm.size)))


def test_plan_of_a_freed_communicator_raises(comm):
    sub = comm.split(0)
    plan = al.allreduce_init(np.ones(2), sub)
    plan.run()
    sub.free()
    with pytest.raises(al.CommunicatorError, match="communicator"):
        plan.start()
    with pytest.raises(al.CommunicatorError, match="communicator"):
        plan.run()
    plan.free()


def test_a_run_that_mpi_fails_raises_operation_error_and_the_communicator_lives_on(comm):
    """A plan's repeated blocking run (MPI's C call made directly) that MPI fails - here a
    bcast whose root sends more than the other rank receives, MPI_ERR_TRUNCATE there -
    raises al.OperationError naming the operation, as a first call would; the
    communicator keeps working.  On two ranks of a sub-communicator (with more, a tree's
    inner ranks could stop forwarding after the error)."""
    pair = comm.split(0 if comm.rank < 2 else 1)
    if comm.size < 2 or comm.rank >= 2:
        pair.free()
        pytest.skip("runs on ranks 0 and 1")
    plan = al.bcast_init(np.arange(4.0) if pair.rank == 0 else np.zeros(2), pair, root=0)
    if pair.rank == 0:
        plan.run()
    else:
        with pytest.raises(al.OperationError, match="bcast"):
            plan.run()
    buf = np.full(3, 7.0) if pair.rank == 0 else np.zeros(3)
    for _ in range(3):
        al.bcast(buf, pair, root=0)
    np.testing.assert_array_equal(buf, np.full(3, 7.0))
    plan.free()
    pair.free()


def test_freed_plan_raises(comm):
    plan = al.bcast_init(np.zeros(3), comm)
    plan.free()
    plan.free()   # idempotent
    with pytest.raises(al.CommunicatorError, match="freed"):
        plan.run()


def test_done_callback_runs_once_with_its_request(comm):
    seen, threads = [], []

    def record(request):
        seen.append(request)
        threads.append(threading.current_thread().name)

    buf = np.arange(4.0)
    request = al.nonblocking_allreduce(buf, comm)
    request.add_done_callback(record)
    request.wait()
    assert seen == [request]
    late = []
    request.add_done_callback(late.append)   # already done: runs at once, here
    assert late == [request]
    np.testing.assert_array_equal(buf, np.arange(4.0) * comm.size)


def test_raising_done_callback_warns_and_the_request_still_completes(comm):
    def broken(request):
        raise ValueError("boom")

    request = al.nonblocking_barrier(comm)
    with pytest.warns(RuntimeWarning, match="boom"):
        request.add_done_callback(broken)
        request.wait()
        request.add_done_callback(broken)


def test_wait_any_returns_a_completed_request(comm):
    buffers = [np.full(3, float(i)) for i in range(3)]
    requests = [al.nonblocking_allreduce(b, comm) for b in buffers]
    index = al.wait_any(requests)
    assert 0 <= index < 3 and requests[index].test()
    al.wait_all(requests)
    for i, b in enumerate(buffers):
        np.testing.assert_array_equal(b, np.full(3, float(i * comm.size)))
    with pytest.raises(al.ArgumentError, match="requests"):
        al.wait_any([])


def test_wait_any_times_out_naming_the_requests(comm):
    if comm.size < 2:
        pytest.skip("needs a peer that has not started yet")
    buf = np.ones(2)
    if comm.rank == 0:
        request = al.nonblocking_allreduce(buf, comm, algo="mpi_passthrough")
        with pytest.raises(al.TimeoutError, match=f"#{request.seq}"):
            al.wait_any([request], timeout=0.05)
        hold_back()
        request.wait()
    else:
        hold_back()
        # (MPI never matches a nonblocking collective with a blocking one)
        al.nonblocking_allreduce(buf, comm, algo="mpi_passthrough").wait()


def test_split_follows_mpi_comm_split(comm):
    color = comm.rank % 2
    sub = comm.split(color, key=-comm.rank)        # reversed order within each color
    members = [r for r in range(comm.size) if r % 2 == color]
    assert sub.size == len(members)
    assert sub.rank == sorted(members, reverse=True).index(comm.rank)
    assert sub.backend is comm.backend
    total = np.array([comm.rank], np.int64)
    al.allreduce(total, sub)
    assert total[0] == sum(members)
    sub.free()


def test_split_with_undefined_color_returns_none(comm):
    sub = comm.split(0 if comm.rank == 0 else None)
    if comm.rank == 0:
        assert sub.size == 1
        sub.free()
    else:
        assert sub is None


def test_split_rejects_bad_color_and_key(comm):
    with pytest.raises(al.ArgumentError, match="color"):
        comm.split(-2)
    with pytest.raises(al.ArgumentError, match="key"):
        comm.split(0, key="first")
    al.barrier(comm)   # still usable


def test_split_host_transfer_communicator(comm):
    with al.HostTransferCommunicator() as ht:
        sub = ht.split(0)
        assert type(sub) is al.HostTransferCommunicator and sub.size == ht.size
        buf = np.ones(3, np.float32)
        al.allreduce(buf, sub)
        sub.stream.synchronize()
        np.testing.assert_array_equal(buf, np.full(3, float(comm.size), np.float32))
        sub.free()


# Collectives started on the caller's thread must not overtake nonblocking ones still
# queued in the engine: MPI needs one order on every rank (Open MPI's persistent and
# nonblocking collectives share a tag counter: overtaking one mismatched their messages,
# MPI_ERR_TRUNCATE).  One rank is held back in turn so the queues differ between ranks.
@pytest.mark.parametrize("first_call", ["plan_run", "plan_start", "blocking"])
def test_caller_thread_collectives_keep_the_order_of_queued_ones(comm, first_call):
    import time

    expected = [sum(r + 1 + i for r in range(comm.size)) for i in range(8)]
    for round_ in range(12):
        mine = np.zeros(5)
        plan = al.allreduce_init(mine, comm) if first_call != "blocking" else None
        queued = [np.full(10, comm.rank + 1 + i, np.float64) for i in range(8)]
        requests = [al.nonblocking_allreduce(b, comm, algo="mpi_passthrough")
                    for b in queued]
        if comm.rank == round_ % comm.size:
            time.sleep(0.002)
        mine[:] = comm.rank + 1
        if first_call == "plan_run":
            plan.run()
        elif first_call == "plan_start":
            requests.append(plan.start())
        else:
            al.allreduce(mine, comm, algo="mpi_passthrough")
        al.wait_all(requests, timeout=30)
        for buf, value in zip(queued, expected):
            np.testing.assert_array_equal(buf, np.full(10, float(value)))
        np.testing.assert_array_equal(mine, np.full(5, float(sum(range(1, comm.size + 1)))))
        if plan is not None:
            plan.free()


# Whether a call finds its plan in the cache depends on this rank's own buffer reuse, and a
# plan is often made on some ranks only; MPI matches a collective only with the same form
# on every rank (a persistent start never matches a blocking call), so these must not hang.
@pytest.mark.parametrize("mode", ["blocking", "nonblocking"])
def test_ranks_that_reuse_buffers_and_ranks_that_do_not_still_match(comm, mode):
    count = 1000
    call = al.bcast if mode == "blocking" else (
        lambda buf, comm: al.nonblocking_bcast(buf, comm).wait(timeout=30))
    kept = np.empty(count)
    for i in range(6):
        buf = kept if comm.rank == 0 else np.empty(count)
        buf[:] = i if comm.rank == 0 else -1
        call(buf, comm)
        np.testing.assert_array_equal(buf, np.full(count, float(i)))
    # (a blocking call never matches a nonblocking one: only blocking calls meet plan.run)
    plan = al.allreduce_init(kept, comm) if comm.rank == 0 and mode == "blocking" else None
    for i in range(6):
        buf = kept if comm.rank == 0 else np.full(count, float(comm.rank + i))
        if comm.rank == 0:
            buf[:] = i
        if plan is not None and i % 2:
            plan.run()                 # an explicit plan's run matches blocking calls
        elif mode == "blocking":
            al.allreduce(buf, comm)
        else:
            al.nonblocking_allreduce(buf, comm).wait(timeout=30)
        expected = sum(float(rank + i) for rank in range(comm.size))
        np.testing.assert_array_equal(buf, np.full(count, expected))
    if plan is not None:
        plan.free()


def _every_op_on_fixed_buffers(comm):
    """``{op: (call, output, expected)}``: ``call(s)`` fills this rank's inputs for step
    ``s`` and runs the op blocking, always on the buffers made once here; ``output()`` is
    this rank's output buffer, and ``expected(s)`` what it must then hold, from numpy alone
    (None: nothing to check on this rank)."""
    size, rank, n = comm.size, comm.rank, 3
    root = size - 1
    right, left = (rank + 1) % size, (rank - 1) % size

    def mine(s, r=rank, count=n):          # rank r's contribution at step s
        return np.arange(count, dtype=np.float64) + 10 * s + 100 * r

    def every(s, count=n):
        return [mine(s, r, count) for r in range(size)]
    counts = [r + 1 for r in range(size)]
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int).tolist()
    b = {name: np.zeros(k) for name, k in [
        ("in", n), ("out", n), ("all", n * size), ("rs_in", n * size), ("v_in", counts[rank]),
        ("v_all", sum(counts)), ("msg", n), ("sr", n), ("recv", n), ("sent", n),
        ("got", n)]}

    def fill(name, values):
        b[name][:] = values
    cases = {
        "allreduce": (lambda s: (fill("in", mine(s)), al.allreduce(
            b["in"], comm, op=al.AVG, recvbuf=b["out"])), "out",
            lambda s: np.mean(every(s), axis=0)),
        "reduce": (lambda s: (fill("in", mine(s)), al.reduce(
            b["in"], comm, root=root, op=al.AVG, recvbuf=b["out"])), "out",
            lambda s: np.mean(every(s), axis=0) if rank == root else None),
        "reduce_scatter": (lambda s: (fill("rs_in", mine(s, count=n * size)),
                                      al.reduce_scatter(b["rs_in"], comm, recvbuf=b["out"])),
                           "out", lambda s: np.sum(every(s, n * size), axis=0)[
                               rank * n:(rank + 1) * n]),
        "allgather": (lambda s: (fill("in", mine(s)), al.allgather(
            b["in"], comm, recvbuf=b["all"])), "all", lambda s: np.concatenate(every(s))),
        "alltoall": (lambda s: (fill("rs_in", mine(s, count=n * size)), al.alltoall(
            b["rs_in"], comm, recvbuf=b["all"])), "all", lambda s: np.concatenate(
                [x[rank * n:(rank + 1) * n] for x in every(s, n * size)])),
        "allgatherv": (lambda s: (fill("v_in", mine(s, count=counts[rank])), al.allgatherv(
            b["v_in"], counts, displs, comm, recvbuf=b["v_all"])), "v_all",
            lambda s: np.concatenate([mine(s, r, counts[r]) for r in range(size)])),
        "bcast": (lambda s: (fill("msg", mine(s) if rank == root else -1),
                             al.bcast(b["msg"], comm, root=root)), "msg",
                  lambda s: mine(s, root)),
        "gather": (lambda s: (fill("in", mine(s)), al.gather(
            b["in"], comm, root=root, recvbuf=b["all"] if rank == root else None)), "all",
            lambda s: np.concatenate(every(s)) if rank == root else None),
        "scatter": (lambda s: (fill("all", np.concatenate(every(s)) if rank == root else -1),
                               al.scatter(b["all"] if rank == root else None, comm, root=root,
                                          recvbuf=b["out"])), "out", lambda s: mine(s)),
        "barrier": (lambda s: al.barrier(comm), "out", lambda s: None),
        "sendrecv": (lambda s: (fill("sr", mine(s)), al.sendrecv(
            b["sr"], right, b["recv"], left, comm)), "recv", lambda s: mine(s, left)),
        # (3 doubles go eagerly: every rank's send returns before its neighbour receives)
        "send, recv": (lambda s: (fill("sent", mine(s)), al.send(b["sent"], right, comm),
                                  al.recv(b["got"], left, comm)), "got",
                       lambda s: mine(s, left)),
    }
    return {op: (call, (lambda name: lambda: b[name])(out), expected)
            for op, (call, out, expected) in cases.items()}


def test_repeated_blocking_calls_see_new_contents_and_match_numpy(comm):
    """From the second blocking call on the same buffers, the call's plan (found in the
    cache) runs its state's blocking call bound once (``State.blocking_call``: MPI datatypes
    and buffer specs made once): each run must still read the buffers' new contents, and
    finish (AVG) every time."""
    for op, (call, output, expected) in _every_op_on_fixed_buffers(comm).items():
        for step in range(4):
            call(step)
            want = expected(step)
            if want is not None:
                np.testing.assert_allclose(output(), want, err_msg=f"{op}, run {step}")
