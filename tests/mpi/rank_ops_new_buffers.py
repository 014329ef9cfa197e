"""Calls on new arrays every time, as user code writes them (``al.allreduce(np.ones(n),
comm)``): after the first call of a kind, later ones reuse what was decided for it
(aluminum/recall.py), so each must still give its own answer (never an earlier buffer's
data), and arrays that differ from the kind, or are wrong, still get a first call's checks
and errors.  Compared with a numpy reference (op_cases.reduced, written from numpy alone).
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aluminum as al
from conftest import rank_data
from op_cases import REDUCTION_CASES, SEEDS, reduced

REPEATS = 3        # calls of one kind in a row, each on new arrays
COLLECTIVES = ["allreduce", "reduce", "reduce_scatter", "allgather", "alltoall", "bcast",
               "gather", "scatter", "allgatherv", "sendrecv", "multisendrecv"]
MODES = ["blocking", "nonblocking"]


def run(mode, name, *args, **kwargs):
    if mode == "blocking":
        getattr(al, name)(*args, **kwargs)
    else:
        getattr(al, "nonblocking_" + name)(*args, **kwargs).wait(timeout=20)


def expected(name, count, dtype, op, size, rank, seed, inplace):
    """What ``call`` leaves in its result buffer on this rank (None: nothing to check)."""
    data = [rank_data(count * size, dtype, r, seed) for r in range(size)]
    mine = data[rank]
    if name == "allreduce":
        return reduced(count * size, dtype, op, size, seed)
    if name == "reduce":
        return reduced(count * size, dtype, op, size, seed) if rank == 0 else None
    if name == "reduce_scatter":
        whole = reduced(count * size, dtype, op, size, seed)
        return whole[rank * count:(rank + 1) * count]
    if name in ("allgather", "allgatherv"):
        return np.concatenate([d[:count] for d in data])
    if name == "alltoall":
        return np.concatenate([d[rank * count:(rank + 1) * count] for d in data])
    if name == "bcast":
        return data[0]
    if name == "gather":
        return np.concatenate([d[:count] for d in data]) if rank == 0 else None
    if name == "scatter":
        return data[0][rank * count:(rank + 1) * count]
    if name == "sendrecv":
        return data[(rank - 1) % size]
    if name == "multisendrecv":
        return np.concatenate([data[peer][:count] for peer in range(size) if peer != rank]
                              or [np.zeros(0, dtype)])
    raise AssertionError(name)


def call(comm, mode, name, count, dtype, op, seed, inplace):
    """One call on new arrays (this rank's data for ``seed``); the result buffer."""
    size, rank = comm.size, comm.rank
    mine = rank_data(count * size, dtype, rank, seed)
    out = np.full(count * size, 7, dtype)
    if name == "allreduce":
        if inplace:
            run(mode, name, mine, comm, op=op)
            return mine
        run(mode, name, mine, comm, op=op, recvbuf=out)
    elif name == "reduce":
        run(mode, name, mine, comm, op=op, recvbuf=out if rank == 0 else None)
        return out if rank == 0 else None
    elif name == "reduce_scatter":
        out = out[:count].copy()
        run(mode, name, mine, comm, op=op, recvbuf=out)
    elif name == "allgather":
        run(mode, name, mine[:count].copy(), comm, recvbuf=out)
    elif name == "allgatherv":
        run(mode, name, mine[:count].copy(), [count] * size, None, comm, recvbuf=out)
    elif name == "alltoall":
        run(mode, name, mine, comm, recvbuf=out)
    elif name == "bcast":
        run(mode, name, mine, comm)
        return mine
    elif name == "gather":
        run(mode, name, mine[:count].copy(), comm, recvbuf=out if rank == 0 else None)
        return out if rank == 0 else None
    elif name == "scatter":
        out = out[:count].copy()
        run(mode, name, mine if rank == 0 else np.zeros(1, dtype), comm, recvbuf=out)
    elif name == "sendrecv":
        right, left = (rank + 1) % size, (rank - 1) % size
        if inplace:
            run(mode, name, mine, right, mine, left, comm)
            return mine
        run(mode, name, mine, right, out, left, comm)
    elif name == "multisendrecv":
        peers = [r for r in range(size) if r != rank]
        block = mine[:count].copy()        # one array sent to every peer
        recvs = [(np.full(count, 7, dtype), peer) for peer in peers]
        run(mode, name, [(block, peer) for peer in peers], recvs, comm)
        return np.concatenate([buf for buf, _ in recvs] or [np.zeros(0, dtype)])
    return out


@settings(max_examples=40)
@given(name=st.sampled_from(COLLECTIVES), mode=st.sampled_from(MODES),
       count=st.one_of(st.sampled_from([1, 2, 5]), st.integers(1, 300)),
       case=REDUCTION_CASES, inplace=st.booleans(), seed=SEEDS)
def test_each_call_on_new_arrays_gets_its_own_answer(comm, name, mode, count, case, inplace,
                                                    seed):
    """Several calls of one kind in a row, each on new arrays holding other data: each
    result is its own call's, and no later call writes an earlier call's buffer."""
    dtype, op = case
    results = []
    for repeat in range(REPEATS):
        results.append(call(comm, mode, name, count, dtype, op, seed + repeat, inplace))
    for repeat, result in enumerate(results):
        want = expected(name, count, dtype, op, comm.size, comm.rank, seed + repeat, inplace)
        if want is not None:
            np.testing.assert_array_equal(result, want, err_msg=f"{name} call #{repeat}")


def test_new_arrays_that_differ_from_a_seen_kind_get_a_first_calls_checks(comm):
    """Once a kind is kept, arrays of another count, a read-only or non-contiguous
    receive buffer and overlapping views raise what a first call raises, on every rank,
    before anything runs; the communicator stays usable."""
    send = np.arange(4.0)
    for _ in range(2):
        al.allreduce(send.copy(), comm, recvbuf=np.zeros(4))
    frozen = np.zeros(4)
    frozen.flags.writeable = False
    base = np.arange(8.0)
    bad = [(np.zeros(5), "recvbuf: expected 4 elements"),
           (np.zeros(4, np.float32), "recvbuf: expected 4 elements of float64"),
           (frozen, "recvbuf: expected a writable"),
           (np.zeros(8)[::2], "recvbuf: expected a C-contiguous")]
    for recvbuf, message in bad:
        before = recvbuf.copy()
        with pytest.raises(al.BufferError, match=message):
            al.allreduce(send.copy(), comm, recvbuf=recvbuf)
        np.testing.assert_array_equal(recvbuf, before)
    al.allreduce(base[:4], comm, recvbuf=base[4:])            # disjoint views: a kind
    with pytest.raises(al.BufferError, match="overlaps"):
        al.allreduce(base[:4], comm, recvbuf=base[2:6])
    out = np.zeros(4)
    al.allreduce(np.full(4, float(comm.rank)), comm, recvbuf=out)
    np.testing.assert_array_equal(out, np.full(4, sum(range(comm.size))))


def test_a_receive_of_a_seen_kind_still_checks_the_message_count(comm):
    """A receive on new arrays of a kept kind raises al.OperationError for a message of
    another count, as a first receive does (ranks 0 and 1)."""
    if comm.size < 2:
        pytest.skip("needs two ranks")
    if comm.rank > 1:
        return
    peer = 1 - comm.rank
    for length in (3, 3, 2, 4):        # two matching messages, then shorter and longer
        if comm.rank == 0:
            al.send(np.arange(float(length)), peer, comm)
        else:
            out = np.zeros(3)
            if length == 3:
                al.recv(out, peer, comm)
                np.testing.assert_array_equal(out, np.arange(3.0))
            else:
                with pytest.raises(al.OperationError, match="recv from rank 0"):
                    al.recv(out, peer, comm)



@pytest.mark.parametrize("op", [al.SUM, al.AVG, al.MAX])
def test_nonblocking_calls_on_new_arrays_in_flight_together_keep_their_own(comm, op):
    """Nonblocking calls of one kind on new arrays, out of place and in place, started one
    after another and waited for only at the end: each request completes with its own
    call's answer (AVG's division on its own receive buffer), also where the caller let go
    of the arrays of some calls meanwhile."""
    calls, size = 6, comm.size
    started = []
    for call_number in range(calls):
        out = np.full(5, -1.0)
        send = np.arange(5.0) + comm.rank + call_number
        inplace = np.arange(5.0) + comm.rank + call_number
        started.append((al.nonblocking_allreduce(send, comm, op=op, recvbuf=out), out,
                        al.nonblocking_allreduce(inplace, comm, op=op), inplace))
        al.nonblocking_allreduce(np.ones(5) * call_number, comm, op=op)   # not kept
    del send, out, inplace
    for call_number, (request, out, inplace_request, inplace) in enumerate(started):
        request.wait(timeout=20)
        inplace_request.wait(timeout=20)
        rows = np.array([np.arange(5.0) + r + call_number for r in range(size)])
        want = {al.SUM: rows.sum(0), al.AVG: rows.sum(0) / size, al.MAX: rows.max(0)}[op]
        np.testing.assert_allclose(out, want, rtol=1e-12, err_msg=f"call #{call_number}")
        np.testing.assert_allclose(inplace, want, rtol=1e-12, err_msg=f"in place #{call_number}")
    al.barrier(comm)
