"""Run every ``tests/mpi/rank_*.py`` file as a real MPI program on 1, 2, 3 and 4 ranks, and
the operations and algorithms also across 2 emulated hosts.

Each rank runs the same pytest file; a failure on any rank fails the test and shows that
rank's output; every launch has a timeout, so a hang fails instead of stalling the suite.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aluminum.launch.emulated_hosts import EmulatedHostsError, check_privilege
from aluminum.launch import launch

try:
    check_privilege()
    NO_HOSTS = None
except EmulatedHostsError as exc:
    NO_HOSTS = str(exc)

HERE = Path(__file__).parent / "mpi"
# Files run in groups, one MPI job per group: an MPI start-up, a pytest start-up and the
# imports (torch's among them) cost each job 2.5-5 s on two cores, most of what a small file
# costs.  The rank_ops_* files (every operation on every backend, in every mode, over every
# array provider) are one group, the library's and the executor's files another (one job:
# 38 s on 4 ranks here, against 46 s as two); a file in no group below runs alone.  The torch
# files run alone: each makes and destroys torch.distributed's groups, and a gloo group made
# right after another was destroyed in the same process had its connection reset (once in 6
# runs).
GROUPS = {
    "rank_ops_*.py": "rank_ops_*.py",
    "core": ("rank_allreduce.py rank_algorithms.py rank_barrier.py rank_debug.py "
             "rank_nonblocking.py rank_overflow.py rank_plans.py rank_reduction_order.py "
             "rank_shared_buffers.py rank_nccl_bootstrap.py rank_ht_streams.py rank_executor_data_parallel.py "
             "rank_executor_zero_copy.py rank_uneven_batches.py rank_placement.py"),
}
GROUPED = {name for pattern in GROUPS.values() for part in pattern.split()
           for name in (p.name for p in HERE.glob(part))}
FILES = sorted(GROUPS) + sorted(p.name for p in HERE.glob("rank_*.py") if p.name not in GROUPED)
JOINED = "rank_ops_*.py"
TIMEOUT = float(os.environ.get("AL_TEST_TIMEOUT", "300"))


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
@pytest.mark.parametrize("filename", FILES)
def test_ranks(filename, nprocs, tmp_path):
    run_ranks(filename, nprocs, tmp_path)


# Across emulated hosts (network namespaces, one Open MPI daemon each: TCP between hosts,
# shared memory inside one): every operation in every mode, every allreduce algorithm
# offered there, and the bytes that cross between hosts, on 2 hosts of 1 and of 2 ranks;
# the algorithms and the traffic also on 3 hosts (not a power of two).  Data-parallel
# training (the executor, aluminum.torch.DistributedDataParallel, torch DDP and torch's
# collectives over the "aluminum" backend, each against its single-process or gloo
# reference) on 2 hosts of 2 ranks only, which has both links, to keep CI time down.
TRAINING = ("rank_executor_data_parallel.py", "rank_torch_ddp.py", "rank_torch_collectives.py")
ACROSS_HOSTS = [(name, hosts, nprocs)
                for name in (JOINED, "rank_algorithms.py", "hosts_traffic.py")
                for hosts, nprocs in ((2, 2), (2, 4))] + \
               [(name, 3, 3) for name in ("rank_algorithms.py", "hosts_traffic.py")] + \
               [(name, 2, 4) for name in TRAINING]


@pytest.mark.skipif(NO_HOSTS is not None, reason=f"no emulated hosts here: {NO_HOSTS}")
@pytest.mark.parametrize("filename, hosts, nprocs", ACROSS_HOSTS,
                         ids=[f"{name}-{hosts}hosts-x{nprocs // hosts}"
                              for name, hosts, nprocs in ACROSS_HOSTS])
def test_ranks_across_hosts(filename, hosts, nprocs, tmp_path):
    run_ranks(filename, nprocs, tmp_path, hosts=hosts)


def run_ranks(filename, nprocs, tmp_path, hosts=None):
    env = dict(os.environ, AL_TEST_LOGDIR=str(tmp_path), PYTHONHASHSEED="0")
    files = sorted(p for part in GROUPS.get(filename, filename).split()
                   for p in HERE.glob(part))
    argv = [sys.executable, str(HERE / "_rank_main.py"), *map(str, files)]
    try:
        result = launch(nprocs, argv, timeout=TIMEOUT, env=env, capture=True, hosts=hosts)
        failed = result.returncode != 0
        summary = f"exit code {result.returncode}"
        mpiexec_output = result.stdout
    except subprocess.TimeoutExpired as exc:
        failed, summary, mpiexec_output = True, f"timed out after {TIMEOUT:.0f} s", exc.output
    if failed:
        where = f" on {hosts} emulated hosts" if hosts else ""
        pytest.fail(f"{filename} on {nprocs} ranks{where}: {summary}\n"
                    f"{_rank_logs(tmp_path, nprocs)}\n--- mpiexec ---\n{mpiexec_output or ''}",
                    pytrace=False)


def _rank_logs(logdir: Path, nprocs: int) -> str:
    parts = []
    for rank in range(nprocs):
        log = logdir / f"rank{rank}.log"
        text = log.read_text()[-6000:] if log.exists() else "(no output)"
        parts.append(f"--- rank {rank} ---\n{text}")
    return "\n".join(parts)
