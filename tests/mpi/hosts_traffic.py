"""Across emulated hosts only (tests/test_multirank.py::test_ranks_across_hosts): what
crosses between hosts, read from each host's own ``eth0`` counter, and what the communicator
knows of its nodes, and where the launcher lets the progress engine run."""
import os
import threading

import numpy as np
import pytest

import aluminum as al
from conftest import tuning_table

HEADERS = 1.08     # TCP/IP/Ethernet framing of full-size segments, plus MPI's own headers
BOTH_WAYS = 1.12   # and the acknowledgements of as much coming the other way


def my_host_counters() -> tuple[int, int]:
    """Bytes this host (network namespace) has received and sent through eth0 so far."""
    with open("/proc/net/dev") as table:
        for line in table:
            name, _, fields = line.partition(":")
            if name.strip() == "eth0":
                values = fields.split()
                return int(values[0]), int(values[8])
    pytest.fail("no eth0 in this network namespace: not on an emulated host")


def bytes_per_call(comm, call, repeats: int = 3) -> list[tuple[float, float]]:
    """(received, sent) by each host, node by node, for one ``call()``: the least over
    ``repeats`` calls counted one by one (after one call that opens the connections), so
    that a TCP retransmission in one of them does not count as the algorithm's bytes."""
    call()
    counted = []
    for _ in range(repeats):
        comm.mpi_comm.Barrier()
        before = my_host_counters()
        comm.mpi_comm.Barrier()     # no host sends the call's bytes before all have read
        call()
        comm.mpi_comm.Barrier()
        counted.append([a - b for a, b in zip(my_host_counters(), before)])
    mine = tuple(float(min(values)) for values in zip(*counted))
    counts = comm.mpi_comm.allgather(mine if comm.local_rank == 0 else None)
    return [counts[node[0]] for node in comm.nodes]


def host_bytes_per_allreduce(comm, algo: str, count: int) -> float:
    """The most any host sent out per allreduce of ``count`` float32 with ``algo``."""
    data = np.ones(count, np.float32)

    def call():
        buf = data.copy()
        al.allreduce(buf, comm, algo=algo)
        np.testing.assert_array_equal(buf, np.full(count, comm.size, np.float32))
    return max(sent for _, sent in bytes_per_call(comm, call))


@pytest.fixture(scope="module")
def hosts(comm):
    if comm.node_count < 2:
        pytest.skip("runs across emulated hosts only")
    return comm.node_count


def test_the_communicator_knows_its_nodes(comm, hosts):
    mine = next(node for node in comm.nodes if comm.rank in node)
    assert len(mine) == comm.local_size and mine.index(comm.rank) == comm.local_rank
    assert sorted(r for node in comm.nodes for r in node) == list(range(comm.size))
    assert comm.mpi_comm.allgather(comm.nodes) == [comm.nodes] * comm.size


@pytest.fixture
def table_picking_shared_memory(comm, hosts):
    """The selector's table for this test: shared_memory at every size, in rules measured
    on one node and across this many nodes."""
    rules = [{"backend": "mpi", "op": "allreduce", "comm_size": comm.size,
              "by_bytes": [[0, "shared_memory"]], **nodes} for nodes in ({}, {"nodes": hosts})]
    with tuning_table("shared_memory_table", comm.rank, rules):
        yield


def test_the_progress_engine_may_run_on_every_core(comm, hosts):
    """The emulated hosts share this machine's cores and each counts only its own
    node-local ranks, so engines pinned by node-local rank would share one core with the
    same rank of every other host (which stalled nonblocking collectives between hosts
    for seconds to minutes: docs/hosts.md).  The launcher leaves the engines unpinned."""
    requests = [al.nonblocking_allreduce(np.ones(4), comm) for _ in range(3)]
    al.wait_all(requests)          # (several in flight at once: the engine thread runs)
    engines = [thread for thread in threading.enumerate() if thread.name == "AlProgress"]
    assert engines, "no progress engine thread after nonblocking calls in flight together"
    for engine in engines:
        assert os.sched_getaffinity(engine.native_id) == os.sched_getaffinity(0)


def test_single_node_algorithms_are_neither_offered_nor_chosen(comm, hosts,
                                                               table_picking_shared_memory):
    assert "shared_memory" not in al.algorithms("allreduce", comm=comm)
    assert "shared_memory" not in al.algorithms("barrier", comm=comm)
    al.barrier(comm)             # automatic: the arrival board's barrier would raise here
    for nbytes in (4, 1 << 16, 1 << 22):
        buf = np.ones(nbytes // 4, np.float32)
        al.allreduce(buf, comm)      # automatic: the table's shared_memory would raise here
        np.testing.assert_array_equal(buf, np.full(buf.size, comm.size, np.float32))


def test_hierarchical_sends_the_least_any_allreduce_can_between_hosts(comm, hosts):
    if "hierarchical" not in al.algorithms("allreduce", comm=comm):
        pytest.skip(f"nodes of different sizes: {comm.nodes}")
    count = 1 << 20                                      # 4 MiB
    bound = 2 * count * 4 * (hosts - 1) / hosts
    hierarchical = host_bytes_per_allreduce(comm, "hierarchical", count)
    assert bound <= hierarchical <= HEADERS * bound, (hierarchical, bound)
    if comm.local_size > 1:                              # a flat ring crosses more
        ring = host_bytes_per_allreduce(comm, "ring", count)
        assert ring >= 1.3 * hierarchical, (ring, hierarchical)


def offers_hierarchical(comm, op):
    if "hierarchical" not in al.algorithms(op, comm=comm):
        pytest.skip(f"nodes of different sizes: {comm.nodes}")


def test_hierarchical_reduce_sends_each_shard_across_once(comm, hosts):
    """Every host but the root's sends the vector once; the root's sends none of it."""
    offers_hierarchical(comm, "reduce")
    count, root = 1 << 20, comm.size - 1                 # 4 MiB, rooted on the last node
    data, result = np.ones(count, np.float32), np.zeros(count, np.float32)
    counts = bytes_per_call(comm, lambda: al.reduce(data, comm, root=root, recvbuf=result,
                                                    algo="hierarchical"))
    if comm.rank == root:
        np.testing.assert_array_equal(result, np.full(count, comm.size, np.float32))
    nbytes = 4 * count
    for k, (_, sent) in enumerate(counts[:-1]):
        assert nbytes <= sent <= HEADERS * nbytes, (k, sent, nbytes)
    assert counts[-1][1] <= 0.1 * nbytes, counts        # TCP's acknowledgements only


def test_hierarchical_bcast_brings_the_vector_into_each_host_once(comm, hosts):
    offers_hierarchical(comm, "bcast")
    count, root = 1 << 20, comm.size - 1
    data = np.full(count, 3.0, np.float32) if comm.rank == root else np.zeros(count,
                                                                               np.float32)
    counts = bytes_per_call(comm, lambda: al.bcast(data, comm, root=root,
                                                   algo="hierarchical"))
    np.testing.assert_array_equal(data, np.full(count, 3.0, np.float32))
    nbytes = 4 * count
    for k, (received, sent) in enumerate(counts[:-1]):
        assert nbytes <= received <= BOTH_WAYS * nbytes, (k, received, nbytes)
    assert counts[-1][0] <= 0.1 * nbytes, counts        # the root's host gets nothing back
    assert max(sent for _, sent in counts) <= HEADERS * nbytes, counts


def test_hierarchical_allgather_sends_each_hosts_share_once(comm, hosts):
    """Each host sends and receives the other hosts' shares once: S(H−1)/H each way."""
    offers_hierarchical(comm, "allgather")
    count = (1 << 20) // comm.size                       # 4 MiB gathered
    mine = np.full(count, comm.rank, np.float32)
    expected = np.repeat(np.arange(comm.size, dtype=np.float32), count)
    result = np.zeros(count * comm.size, np.float32)

    def gather(algo):
        result[:] = 0
        al.allgather(mine, comm, recvbuf=result, algo=algo)
        np.testing.assert_array_equal(result, expected)
    counts = bytes_per_call(comm, lambda: gather("hierarchical"))
    bound = 4 * count * comm.size * (hosts - 1) / hosts
    for k, (received, sent) in enumerate(counts):
        assert bound <= sent <= BOTH_WAYS * bound and bound <= received <= BOTH_WAYS * bound, \
            (k, received, sent, bound)
    if comm.local_size > 1:                              # a flat ring crosses more
        ring = max(sent for _, sent in bytes_per_call(comm, lambda: gather("ring")))
        assert ring >= 1.3 * max(sent for _, sent in counts), (ring, counts)
