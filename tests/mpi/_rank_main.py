"""Entry point of one rank of a multi-rank test: run pytest on the given file, log per rank.

Each rank writes its pytest output to ``$AL_TEST_LOGDIR/rank<N>.log``.  A rank whose tests
fail aborts the whole job, so its peers do not wait forever in a collective.
"""
import os
import sys

import pytest
from mpi4py import MPI

rank = MPI.COMM_WORLD.Get_rank()
logdir = os.environ["AL_TEST_LOGDIR"]
with open(os.path.join(logdir, f"rank{rank}.log"), "w", buffering=1) as log:
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    code = pytest.main(["-x", "-q", "-p", "no:cacheprovider", "--no-header", "-rfE",
                        *sys.argv[1:]])
    log.flush()
if code != 0:
    MPI.COMM_WORLD.Abort(int(code))
