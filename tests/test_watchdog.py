"""AL_TIMEOUT's watchdog: a collective some rank never joins ends in al.TimeoutError naming
that rank, blocking calls included, instead of hanging."""
import os
import sys
import textwrap

import numpy as np
import pytest

import aluminum as al
from aluminum import dispatch, watchdog
from aluminum.launcher import launch

LATE_RANK = textwrap.dedent("""
    import time
    import numpy as np
    import aluminum as al

    comm = al.MPICommunicator()
    buf = np.ones(4, np.float32)
    al.allreduce(buf, comm)                      # collective #1: everyone
    if comm.rank == {late}:
        time.sleep(6)                            # misses #2 for a while
    else:
        try:
            al.allreduce(buf, comm)              # blocking: must not hang
        except al.TimeoutError as exc:
            print("rank", comm.rank, "timeout:", exc, flush=True)
        else:
            print("rank", comm.rank, "no timeout", flush=True)
    if comm.rank == {late}:
        al.allreduce(buf, comm)                  # finally joins #2
    al.finalize()
    print("rank", comm.rank, "done", flush=True)
""")


def _run(nprocs, late, timeout="1.5"):
    result = launch(nprocs, [sys.executable, "-c", LATE_RANK.format(late=late)], timeout=120,
                    env={**os.environ, "AL_TIMEOUT": timeout}, capture=True)
    assert result.returncode == 0, result.stdout
    return result.stdout


def test_blocking_collective_names_the_rank_that_never_arrived():
    out = _run(3, late=1)
    for rank in (0, 2):
        line = next(l for l in out.splitlines() if l.startswith(f"rank {rank} timeout:"))
        assert "allreduce" in line and "AL_TIMEOUT=1.5" in line, line
        assert "ranks that never arrived at collective #2 on this communicator: [1]" in line
    assert "no timeout" not in out
    assert all(f"rank {r} done" in out for r in range(3))


@pytest.mark.skipif(watchdog.ENABLED, reason="this process runs with AL_TIMEOUT or AL_STALL_WARN_S set")
def test_without_al_timeout_blocking_calls_stay_direct(monkeypatch):
    """No watchdog, no cost: blocking calls never go through the engine, nothing is counted."""
    def through_the_engine(*args, **kwargs):
        raise AssertionError("a blocking call went through the progress engine")

    monkeypatch.setattr(dispatch, "submit", through_the_engine)
    with al.MPICommunicator() as comm:
        buf = np.arange(4, dtype=np.float32)
        al.allreduce(buf, comm, algo="mpi_passthrough")     # first call: the full path
        al.barrier(comm)
        np.testing.assert_array_equal(buf, np.arange(4, dtype=np.float32) * comm.size)
        assert watchdog.ArrivalCounters.of(comm) is None
