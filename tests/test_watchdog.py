"""AL_TIMEOUT's watchdog: a collective some rank never joins ends in al.TimeoutError naming
that rank, blocking calls included, instead of hanging."""
import os
import re
import sys
import textwrap

import numpy as np
import pytest

import aluminum as al
from aluminum import dispatch, watchdog
from aluminum.launch import launch

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
            {second}                             # blocking: must not hang
        except al.TimeoutError as exc:
            print("rank", comm.rank, "timeout:", exc, flush=True)
        else:
            print("rank", comm.rank, "no timeout", flush=True)
    if comm.rank == {late}:
        {second}                                 # finally joins #2
    al.finalize()
    print("rank", comm.rank, "done", flush=True)
""")


def _run(nprocs, late, timeout="1.5", second="al.allreduce(buf, comm)"):
    script = LATE_RANK.format(late=late, second=second)
    result = launch(nprocs, [sys.executable, "-c", script], timeout=120,
                    env={**os.environ, "AL_TIMEOUT": timeout}, capture=True)
    assert result.returncode == 0, result.stdout
    return result.stdout


@pytest.mark.parametrize("op, second", [("allreduce", "al.allreduce(buf, comm)"),
                                        ("barrier", "al.barrier(comm)")])
def test_blocking_collective_names_the_rank_that_never_arrived(op, second):
    out = _run(3, late=1, second=second)
    for rank in (0, 2):
        line = next(l for l in out.splitlines() if l.startswith(f"rank {rank} timeout:"))
        assert op in line and "AL_TIMEOUT=1.5" in line, line
        assert "ranks that never arrived at collective #2 on this communicator: [1]" in line
    assert "no timeout" not in out
    assert all(f"rank {r} done" in out for r in range(3))


@pytest.mark.skipif(watchdog.ENABLED, reason="this process runs with AL_TIMEOUT set")
def test_without_al_timeout_blocking_calls_stay_direct(monkeypatch):
    """Without AL_TIMEOUT blocking calls never go through the engine (only counted)."""
    def through_the_engine(*args, **kwargs):
        raise AssertionError("a blocking call went through the progress engine")

    monkeypatch.setattr(dispatch, "submit", through_the_engine)
    with al.MPICommunicator() as comm:
        buf = np.arange(4, dtype=np.float32)
        al.allreduce(buf, comm, algo="mpi_passthrough")     # first call: the full path
        al.barrier(comm)
        np.testing.assert_array_equal(buf, np.arange(4, dtype=np.float32) * comm.size)


CHURN = textwrap.dedent("""
    import gc, time, warnings
    import numpy as np
    import aluminum as al
    from aluminum import watchdog

    warnings.simplefilter("always")
    watchdog.SLOTS = 64                  # (before al.init: 64 slots per process)
    al.init()
    kept = [al.MPICommunicator() for _ in range(3)]
    for i in range(150):                 # far more than 64 made: freed or dropped ones
        comm = al.MPICommunicator()      # must give their slots back
        al.allreduce(np.ones(2), comm)
        if i % 2:
            comm.free()
        del comm
        gc.collect()
    comm = al.MPICommunicator()
    buf = np.ones(4)
    if comm.rank == 1:
        time.sleep(1.5)
    al.allreduce(buf, comm)
    assert np.all(buf == comm.size)
    for other in kept:
        al.allreduce(buf, other)
    al.finalize()
    print("rank", comm.rank, "done", flush=True)
""")


def test_counter_slots_come_back_from_freed_and_dropped_communicators():
    """The arrival board has a slot per live communicator: communicators freed or dropped
    give theirs back, so the 151st still names the rank that is late, without AL_TIMEOUT."""
    result = launch(3, [sys.executable, "-c", CHURN], timeout=120, capture=True,
                    env={**{k: v for k, v in os.environ.items() if k != "AL_TIMEOUT"},
                         "AL_STALL_WARN_S": "0.4"})
    assert result.returncode == 0, result.stdout
    for rank in (0, 2):
        assert re.search(rf"allreduce/\w+ \(blocking call, rank {rank} of 3\) has been waited "
                         rf"for 0.4 s .*?never arrived at collective #1 on this "
                         rf"communicator: \[1\]", result.stdout), result.stdout
    assert "rank 1 of 3) has been waited" not in result.stdout
    assert all(f"rank {r} done" in result.stdout for r in range(3))
