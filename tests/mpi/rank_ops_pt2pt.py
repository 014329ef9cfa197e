"""send/recv, sendrecv (in place too), multisendrecv and barrier on every rank.

Cross product (see op_cases.py): every test runs on each backend (MPI, host-transfer) in
each mode (blocking, nonblocking, persistent) on the same derandomized examples; each
example draws its array provider, and one explicit example per provider gives the full
backend x mode x provider product at one size.  Buffers an operation only reads are passed
read-only where the provider can say so.
"""
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aluminum as al
from backends import EVERY_MODE, WAIT_S, call, is_stream_ordered, settle
from conftest import rank_data
from op_cases import (DTYPES, PROVIDER_NAMES, SEEDS, SMALL_COUNTS, every_provider, filler,
                     read_only, ring, wrapper_for)

EXAMPLES = settings(max_examples=12)


@EVERY_MODE
@EXAMPLES
@every_provider(count=5)
@given(count=SMALL_COUNTS, dtype=DTYPES, seed=SEEDS, provider=PROVIDER_NAMES)
def test_send_recv_ring(backend_comm, mode, count, dtype, seed, provider):
    comm, wrap = backend_comm, wrapper_for(provider, dtype)
    nxt, prev = ring(comm)
    mine = rank_data(count, dtype, comm.rank, seed)
    original = mine.copy()
    result = filler(count, dtype)
    expected = rank_data(count, dtype, prev, seed)
    sendbuf, recvbuf = read_only(mine, provider), wrap(result)
    # Sends are posted first: on the host-transfer backend a receive holds its stream until
    # its message arrives, so a receive posted before the send on every rank never completes.
    if mode == "nonblocking":
        send = al.nonblocking_send(sendbuf, nxt, comm)
        recv = al.nonblocking_recv(recvbuf, prev, comm)
        al.wait_all([send, recv], timeout=WAIT_S)
        assert send.test() and recv.test()
    elif mode == "persistent":
        with al.send_init(sendbuf, nxt, comm) as send, al.recv_init(recvbuf, prev, comm) as recv:
            al.wait_all([send.start(), recv.start()], timeout=WAIT_S)
            np.testing.assert_array_equal(result, expected)
            result[...] = filler(count, dtype)     # a second run must write it again
            al.wait_all([send.start(), recv.start()], timeout=WAIT_S)
    elif comm.size == 1:
        al.sendrecv(sendbuf, 0, recvbuf, 0, comm)   # a blocking send to oneself may never return
    elif comm.rank == 0:
        al.send(sendbuf, nxt, comm)
        al.recv(recvbuf, prev, comm)
    else:
        al.recv(recvbuf, prev, comm)
        al.send(sendbuf, nxt, comm)
    settle(comm)
    np.testing.assert_array_equal(result, expected)
    np.testing.assert_array_equal(mine, original)


@EVERY_MODE
@EXAMPLES
@every_provider(count=5)
@given(count=SMALL_COUNTS, dtype=DTYPES, inplace=st.booleans(), seed=SEEDS,
       provider=PROVIDER_NAMES)
def test_sendrecv_ring(backend_comm, mode, count, dtype, inplace, seed, provider):
    comm, wrap = backend_comm, wrapper_for(provider, dtype)
    nxt, prev = ring(comm)
    mine = rank_data(count, dtype, comm.rank, seed)
    if inplace:
        buf = wrap(mine)
        call(comm, mode, "sendrecv", buf, nxt, buf, prev, comm)
        result = mine
    else:
        result = filler(count, dtype)
        call(comm, mode, "sendrecv", read_only(mine, provider), nxt, wrap(result), prev, comm)
        np.testing.assert_array_equal(mine, rank_data(count, dtype, comm.rank, seed))
    np.testing.assert_array_equal(result, rank_data(count, dtype, prev, seed))


def pair_count(src, dst, k, base):
    return (base + 3 * src + 5 * dst + 7 * k) % 11


@EVERY_MODE
@EXAMPLES
@every_provider(base=4, per_peer=2)
@given(base=st.integers(0, 10), dtype=DTYPES, per_peer=st.integers(1, 3), seed=SEEDS,
       provider=PROVIDER_NAMES)
def test_multisendrecv_all_pairs(backend_comm, mode, base, dtype, per_peer, seed, provider):
    """Every rank sends ``per_peer`` messages of different lengths to every rank (itself
    included); they must match in list order."""
    comm, wrap = backend_comm, wrapper_for(provider, dtype)
    rank, size = comm.rank, comm.size

    def message(src, dst, k):
        data = rank_data(pair_count(src, dst, k, base) + 64 * dst + 8 * k, dtype, src, seed)
        return data[64 * dst + 8 * k:]

    sends = [(read_only(message(rank, j, k), provider), j)
             for j in range(size) for k in range(per_peer)]
    recvs = [(filler(pair_count(j, rank, k, base), dtype), j)
             for j in reversed(range(size)) for k in range(per_peer)]
    call(comm, mode, "multisendrecv", sends, [(wrap(buf), j) for buf, j in recvs], comm)
    for (buf, j), k in zip(recvs, [k for _ in range(size) for k in range(per_peer)]):
        np.testing.assert_array_equal(buf, message(j, rank, k), err_msg=f"from {j} #{k}")


@EVERY_MODE
def test_multisendrecv_empty_lists(backend_comm, mode):
    call(backend_comm, mode, "multisendrecv", [], [], backend_comm)


@EVERY_MODE
@pytest.mark.parametrize("longer", [False, True], ids=["shorter", "longer"])
def test_receive_of_another_count_raises_and_comm_stays_usable(backend_comm, longer, mode):
    comm = backend_comm
    if longer and comm.size == 1:
        pytest.skip("Open MPI's self transport truncates a longer message to oneself silently")
    nxt, prev = ring(comm)
    sent = np.arange(6, dtype=np.int32)
    result = filler(5 if longer else 7, np.int32)
    with pytest.raises(al.OperationError, match=f"recv from rank {prev}"):
        call(comm, mode, "sendrecv", sent, nxt, result, prev, comm)
    if is_stream_ordered(comm) and mode != "blocking":
        # The failure fails the communicator's stream too, which reports it once (a
        # blocking call's failure surfaced through that report already, in ``call``).
        with pytest.raises(al.OperationError, match=f"recv from rank {prev}"):
            settle(comm)
    call(comm, "blocking", "barrier", comm)
    ok = filler(6, np.int32)
    call(comm, "blocking", "sendrecv", sent + comm.rank, nxt, ok, prev, comm)
    np.testing.assert_array_equal(ok, sent + prev)


@pytest.mark.parametrize("op", ["recv", "sendrecv", "multisendrecv"])
@pytest.mark.parametrize("fresh", [False, True], ids=["same-buffer", "new-arrays"])
@pytest.mark.parametrize("mode", ["blocking", "nonblocking"])
def test_a_repeated_receive_still_checks_the_message_count(comm, op, fresh, mode):
    """Receives into the same buffer again run the remembered plan, and receives into new
    arrays of a kind seen before that kind's call (MPI's call made directly where
    compiled), blocking or started and waited for: a message of another count still
    raises al.OperationError naming the sender, and a matching one after it lands (ranks
    0 and 1)."""
    if comm.size < 2:
        pytest.skip("needs two ranks")
    if comm.rank > 1:
        return
    peer = 1 - comm.rank
    out, token = np.zeros(3), np.ones(1)
    for length in (3, 3, 2, 3, 4, 3):     # matching, shorter, matching, longer, matching
        if fresh:
            out, token = np.zeros(3), np.ones(1)
        if comm.rank == 0:
            message, reply = np.arange(float(length)) + length, np.zeros(1)
            if op == "recv":
                al.send(message, peer, comm)
            elif op == "sendrecv":
                al.sendrecv(message, peer, reply, peer, comm)
            else:
                al.multisendrecv([(message, peer)], [(reply, peer)], comm)
            continue

        def receive():
            if op == "recv":
                call(comm, mode, "recv", out, peer, comm)
            elif op == "sendrecv":
                call(comm, mode, "sendrecv", token, peer, out, peer, comm)
            else:
                call(comm, mode, "multisendrecv", [(token, peer)], [(out, peer)], comm)
        _receives_only_its_count(receive, out, length)


def test_a_receive_plan_checks_the_message_count_on_every_run(comm):
    """A persistent receive (``al.recv_init``) run and started again and again: a message
    of another count raises al.OperationError naming the sender on that run, and the
    matching ones around it land (ranks 0 and 1)."""
    if comm.size < 2:
        pytest.skip("needs two ranks")
    if comm.rank > 1:
        return
    peer, lengths = 1 - comm.rank, (3, 2, 3, 4, 3)   # matching, shorter, ..., longer, ...
    if comm.rank == 0:
        for _ in ("run", "start"):
            for length in lengths:
                al.send(np.arange(float(length)) + length, peer, comm)
        return
    out = np.zeros(3)
    with al.recv_init(out, peer, comm) as plan:
        for way in ("run", "start"):
            for length in lengths:
                out[:] = -1
                receive = plan.run if way == "run" else lambda: plan.start().wait(WAIT_S)
                _receives_only_its_count(receive, out, length)


def _receives_only_its_count(receive, out, length):
    """``receive()`` of a message of ``length`` elements from rank 0 (``np.arange(length)
    + length``) into ``out`` (3 elements): it lands where ``length`` is 3, else the receive
    raises al.OperationError naming the sender."""
    if length == 3:
        receive()
        np.testing.assert_array_equal(out, np.arange(3.0) + 3)
    else:
        with pytest.raises(al.OperationError, match="recv from rank 0"):
            receive()


@EVERY_MODE
def test_barrier_waits_for_the_last_rank(backend_comm, mode):
    comm = backend_comm
    last = comm.size - 1
    if comm.rank == last:
        time.sleep(0.2)
    entered = time.time()
    call(comm, mode, "barrier", comm)
    left = time.time()
    entries = comm.mpi_comm.allgather(entered)
    assert left >= entries[last]



def test_a_barrier_plan_waits_for_the_last_rank_run_after_run(backend_comm):
    """A plan's blocking runs (``MPI_Barrier`` itself on the MPI backend, not the persistent
    request its starts use) and its starts both wait for the last rank, every time."""
    comm = backend_comm
    last = comm.size - 1
    with al.barrier_init(comm) as plan:
        for run in ["run", "start", "run", "run"]:
            if comm.rank == last:
                time.sleep(0.05)
            entered = time.time()
            if run == "run":
                plan.run()
                settle(comm)
            else:
                plan.start().wait(timeout=WAIT_S)
            left = time.time()
            assert left >= comm.mpi_comm.allgather(entered)[last]

def test_send_before_recv_posted_nonblocking(backend_comm):
    """Large sends posted first complete once the matching receives are posted."""
    comm = backend_comm
    nxt, prev = ring(comm)
    count = (1 << 18) + 1
    mine = np.full(count, comm.rank, np.float64)
    result = np.empty(count)
    send = al.nonblocking_send(mine, nxt, comm)
    time.sleep(0.05)
    al.recv(result, prev, comm)
    send.wait(timeout=WAIT_S)
    settle(comm)
    assert np.all(result == prev)
