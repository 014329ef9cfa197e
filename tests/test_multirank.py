"""Run every ``tests/mpi/rank_*.py`` file as a real MPI program on 1, 2, 3 and 4 ranks.

Each rank runs the same pytest file; a failure on any rank fails the test and shows that
rank's output; every launch has a timeout, so a hang fails instead of stalling the suite.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aluminum.launcher import launch

HERE = Path(__file__).parent / "mpi"
# The rank_ops_* files (every operation on every backend, in every mode, over every array
# provider) run in one job: one MPI start-up and one torch import per rank instead of three,
# which on two cores is most of what they cost.
JOINED = "rank_ops_*.py"
FILES = sorted({JOINED if p.name.startswith("rank_ops_") else p.name
                for p in HERE.glob("rank_*.py")})
TIMEOUT = float(os.environ.get("AL_TEST_TIMEOUT", "300"))


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
@pytest.mark.parametrize("filename", FILES)
def test_ranks(filename, nprocs, tmp_path):
    env = dict(os.environ, AL_TEST_LOGDIR=str(tmp_path), PYTHONHASHSEED="0")
    files = sorted(HERE.glob(filename)) if filename == JOINED else [HERE / filename]
    argv = [sys.executable, str(HERE / "_rank_main.py"), *map(str, files)]
    try:
        result = launch(nprocs, argv, timeout=TIMEOUT, env=env, capture=True)
        failed = result.returncode != 0
        summary = f"exit code {result.returncode}"
        mpiexec_output = result.stdout
    except subprocess.TimeoutExpired as exc:
        failed, summary, mpiexec_output = True, f"timed out after {TIMEOUT:.0f} s", exc.output
    if failed:
        pytest.fail(f"{filename} on {nprocs} ranks: {summary}\n"
                    f"{_rank_logs(tmp_path, nprocs)}\n--- mpiexec ---\n{mpiexec_output or ''}",
                    pytrace=False)


def _rank_logs(logdir: Path, nprocs: int) -> str:
    parts = []
    for rank in range(nprocs):
        log = logdir / f"rank{rank}.log"
        text = log.read_text()[-6000:] if log.exists() else "(no output)"
        parts.append(f"--- rank {rank} ---\n{text}")
    return "\n".join(parts)
