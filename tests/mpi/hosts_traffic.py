"""Across emulated hosts only (tests/test_multirank.py::test_ranks_across_hosts): what
crosses between hosts, read from each host's own ``eth0`` counter, and what the communicator
knows of its nodes."""
import json
import os
from pathlib import Path

import numpy as np
import pytest

import aluminum as al
from aluminum.tuning import selector

HEADERS = 1.08     # TCP/IP/Ethernet framing of full-size segments, plus MPI's own headers


def sent_by_my_host() -> int:
    """Bytes this host (network namespace) has sent out of eth0 so far."""
    with open("/proc/net/dev") as table:
        for line in table:
            name, _, fields = line.partition(":")
            if name.strip() == "eth0":
                return int(fields.split()[8])
    pytest.fail("no eth0 in this network namespace: not on an emulated host")


def host_bytes_per_allreduce(comm, algo: str, count: int, repeats: int = 3) -> float:
    """The most any host sent out per allreduce of ``count`` float32 with ``algo``."""
    data = np.ones(count, np.float32)
    al.allreduce(data.copy(), comm, algo=algo)           # connections, plans
    comm.mpi_comm.Barrier()
    before = sent_by_my_host()
    for _ in range(repeats):
        buf = data.copy()
        al.allreduce(buf, comm, algo=algo)
        np.testing.assert_array_equal(buf, np.full(count, comm.size, np.float32))
    comm.mpi_comm.Barrier()
    leader = comm.local_rank == 0
    sent = (sent_by_my_host() - before) / repeats if leader else 0.0
    return max(comm.mpi_comm.allgather(sent))


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
    path = Path(os.environ["AL_TEST_LOGDIR"]) / f"shared_memory_table.rank{comm.rank}.json"
    rules = [{"backend": "mpi", "op": "allreduce", "comm_size": comm.size,
              "by_bytes": [[0, "shared_memory"]], **nodes} for nodes in ({}, {"nodes": hosts})]
    path.write_text(json.dumps({"format": "aluminum-tuning/1", "rules": rules}))
    previous = os.environ.get("AL_TUNING_FILE")
    os.environ["AL_TUNING_FILE"] = str(path)
    selector.reload()
    try:
        yield
    finally:
        if previous is None:
            del os.environ["AL_TUNING_FILE"]
        else:
            os.environ["AL_TUNING_FILE"] = previous
        selector.reload()


def test_single_node_algorithms_are_neither_offered_nor_chosen(comm, hosts,
                                                               table_picking_shared_memory):
    assert "shared_memory" not in al.algorithms("allreduce", comm=comm)
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
