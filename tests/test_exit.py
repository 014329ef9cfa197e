"""Exit never hangs on communicators dropped without ``free()`` (issue 29's fault probe).

Threads each run nonblocking ``shared_memory`` allreduces on a communicator of their own, and
the program drops them all and exits (the probe: 8 threads of 50 allreduces; here 16 of 20,
with which the old code hung in 5 runs of 6 instead of about 1 in 3). The communicators were
then kept alive only by the progress engine (its per-communicator queues), so they were
collected while ``al.finalize()`` stopped the engine, too late for it to close their shared
windows; MPI_Finalize then freed those one barrier at a time, in a per-rank order that depends
on thread timing, and hung in about 1 run of 3. The job runs several times, each under a
timeout."""
import os
import subprocess
import sys
import textwrap

import pytest

from aluminum.launch import launch

RUNS = 4
JOB_LIMIT_S = 60
THREADS, ALLREDUCES = 16, 20

PROGRAM = textwrap.dedent("""
    import threading
    import numpy as np
    import aluminum as al

    def work(comm):
        buf = np.ones(1000, np.float32)
        for _ in range({allreduces}):
            al.nonblocking_allreduce(buf, comm, algo="shared_memory").wait()
        assert (buf == comm.size ** {allreduces}).all()

    comms = [al.MPICommunicator() for _ in range({threads})]
    threads = [threading.Thread(target=work, args=(comm,)) for comm in comms]
    del comms                      # each thread holds its communicator; none is freed
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("EXITING", flush=True)
""")


@pytest.mark.timeout(RUNS * JOB_LIMIT_S + 60)
def test_dropped_shared_memory_communicators_of_threads_never_hang_exit(tmp_path):
    program = tmp_path / "threads_drop_communicators.py"
    program.write_text(PROGRAM.format(threads=THREADS, allreduces=ALLREDUCES))
    env = {k: v for k, v in os.environ.items() if k not in ("AL_TIMEOUT", "AL_DEBUG")}
    for run in range(RUNS):
        try:
            result = launch(2, [sys.executable, str(program)], timeout=JOB_LIMIT_S, env=env,
                            capture=True)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"run {run + 1} of {RUNS} hung at exit (killed after {JOB_LIMIT_S} "
                        f"s):\n{exc.output}")
        assert result.returncode == 0, result.stdout
        assert result.stdout.count("EXITING") == 2, result.stdout
