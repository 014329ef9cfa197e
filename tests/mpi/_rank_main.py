"""Entry point of one rank of a multi-rank test: run pytest on the given file, log per rank.

Each rank writes its pytest output to ``$AL_TEST_LOGDIR/rank<N>.log``.  A rank whose test
fails writes the failure to its log and aborts the whole job at once: its peers may be
blocked in a collective the failing rank will never join (a fixture's ``comm.free()``
among them), and waiting for them would only delay the report.
"""
import os
import sys

import pytest
from mpi4py import MPI

rank = MPI.COMM_WORLD.Get_rank()
logdir = os.environ["AL_TEST_LOGDIR"]


class AbortOnFailure:
    """Abort the job from the first failed test, after writing its report to the log."""

    def pytest_runtest_logreport(self, report):
        if report.failed:
            print(f"\n--- rank {rank}: {report.nodeid} failed ({report.when}) ---\n"
                  f"{report.longreprtext}", flush=True)
            sys.stdout.flush()
            MPI.COMM_WORLD.Abort(1)


with open(os.path.join(logdir, f"rank{rank}.log"), "w", buffering=1) as log:
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    code = pytest.main(["-x", "-q", "-p", "no:cacheprovider", "--no-header", "-rfE",
                        *sys.argv[1:]], plugins=[AbortOnFailure()])
    log.flush()
if code != 0:
    MPI.COMM_WORLD.Abort(int(code))
