"""Barriers on every rank: every algorithm offered and every form hold every rank until the
last has entered, make what was written before them visible after them, and keep MPI and
the progress engine going while they wait (the shared-memory barrier waits on the node's
arrival board, not in MPI)."""
import os
import signal
import time

import numpy as np
import pytest
from mpi4py import MPI

import aluminum as al

world = MPI.COMM_WORLD     # (a separate communicator: never meets aluminum's barriers)
FORMS = {
    "call": lambda comm, algo: al.barrier(comm, algo=algo),
    "nonblocking": lambda comm, algo: al.nonblocking_barrier(comm, algo=algo).wait(),
    "plan.run": lambda comm, algo: al.barrier_init(comm, algo=algo).run(),
    "plan.start": lambda comm, algo: al.barrier_init(comm, algo=algo).start().wait(),
}


def algorithms(comm):
    return ["automatic", *al.algorithms("barrier", comm=comm)]


@pytest.mark.parametrize("form", sorted(FORMS))
def test_no_rank_leaves_before_the_last_has_entered(comm, form):
    for algo in algorithms(comm):
        for late in {0, comm.size - 1}:
            FORMS[form](comm, algo)              # (everyone here: the clocks start together)
            if comm.rank == late:
                time.sleep(0.1)
            entered = time.monotonic()           # (one clock for every process of a host)
            FORMS[form](comm, algo)
            left = time.monotonic()
            times = world.allgather((entered, left))
            last_in, first_out = max(t[0] for t in times), min(t[1] for t in times)
            assert first_out >= last_in, (algo, late, times)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_what_every_rank_wrote_before_a_barrier_is_seen_after_it(comm, form):
    if comm.local_size != comm.size:
        pytest.skip("the ranks share no memory across nodes")
    local = comm.mpi_comm.Split_type(MPI.COMM_TYPE_SHARED)
    window = MPI.Win.Allocate_shared(8 * comm.size if local.rank == 0 else 0, 8, comm=local)
    try:
        memory, _ = window.Shared_query(0)
        marks = np.frombuffer(memory, np.int64, comm.size)
        for algo in algorithms(comm):
            for step in range(1, 101):
                marks[comm.rank] = step
                FORMS[form](comm, algo)
                seen = marks.copy()
                FORMS[form](comm, algo)          # (nobody writes step + 1 before all read)
                assert (seen == step).all(), (algo, step, seen)
    finally:
        window.Free()
        local.Free()


@pytest.mark.parametrize("form", ["call", "nonblocking"])
@pytest.mark.parametrize("algo", ["automatic", "shared_memory"])
def test_a_barrier_keeps_mpi_progressing_for_a_peer_in_a_send(comm, algo, form):
    """Rank 0 enters the barrier with a large Irecv posted; rank 1 enters it only once its
    blocking Send of that message is done, which needs rank 0's MPI to progress (match
    the message and take its data) while rank 0 waits in the barrier."""
    if algo not in algorithms(comm) or comm.size < 2:
        pytest.skip(f"{algo} does not run here")
    peers = comm.mpi_comm.Dup()
    data = np.arange(1 << 22, dtype=np.float64)          # 32 MiB: a rendezvous message
    try:
        if comm.rank == 0:
            got = np.empty_like(data)
            request = peers.Irecv(got, source=1, tag=7)
            FORMS[form](comm, algo)
            request.Wait()
            np.testing.assert_array_equal(got, data)
        else:
            if comm.rank == 1:
                peers.Send(data, dest=0, tag=7)
            FORMS[form](comm, algo)
    finally:
        peers.Free()


def test_a_barrier_lets_the_engine_run_what_a_peer_waits_for(comm):
    """Rank 0 enters the barrier with a nonblocking ring allreduce in flight, which its
    progress engine's thread must step (taking the GIL) before rank 1 gets to the barrier."""
    if comm.size < 2:
        pytest.skip("one rank")
    buf = np.ones(1 << 16, np.float32)
    if comm.rank != 0:
        time.sleep(0.2)                  # rank 0 is in the barrier by then
    request = al.nonblocking_allreduce(buf, comm, algo="ring")
    if comm.rank != 0:
        request.wait()
    al.barrier(comm)
    request.wait()
    np.testing.assert_array_equal(buf, np.full(buf.size, comm.size, np.float32))


def test_a_barrier_ends_when_a_peer_gives_its_board_slot_back_right_after_it():
    """Rank 1 is stopped inside a board barrier before it has seen rank 0 arrive; rank 0
    leaves the barrier and at once gives the communicator's board slot back (what dropping
    a communicator without free() does when it is collected); resumed, rank 1 must leave
    the barrier too, not wait on the slot's reset count."""
    other = al.MPICommunicator()
    try:
        if other.size < 2 or "shared_memory" not in al.algorithms("barrier", comm=other):
            pytest.skip("no barrier through the board here")
        pids = world.allgather(os.getpid())
        al.barrier(other, algo="shared_memory")
        if other.rank == 0:
            time.sleep(0.2)                          # rank 1 is waiting by then
            os.kill(pids[1], signal.SIGSTOP)
            try:
                al.barrier(other, algo="shared_memory")  # everyone arrived: leaves at once
                other.arrivals.release()
            finally:
                os.kill(pids[1], signal.SIGCONT)
        else:
            al.barrier(other, algo="shared_memory")
        world.Barrier()
    finally:
        other.free()


def test_automatic_takes_the_board_on_one_node(comm):
    name = al.barrier_init(comm).algorithm
    if comm.size > 1 and comm.local_size == comm.size:
        assert name == "barrier/shared_memory"
    elif comm.local_size != comm.size:
        assert name == "barrier/mpi_passthrough"
        assert "shared_memory" not in al.algorithms("barrier", comm=comm)
