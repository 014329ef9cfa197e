"""Fault probes of issue 29, run as tests/test_faults.py runs its cases (same helpers):

- a skipped first ``shared_memory`` use times out naming the operation that needed the
  window (``allreduce/shared_memory``, its collective number), the window and the late rank;
- a frozen peer ends the job about 2 x AL_TIMEOUT after the fault, not 6 x: a rank that has
  already raised ``al.TimeoutError`` for a peer, now stopped, waits one AL_TIMEOUT for it at
  ``al.finalize()``, not the full 4 x AL_TIMEOUT finalize timeout (a merely late peer still
  gets that: tests/test_watchdog.py's late rank arrives after 6 s of AL_TIMEOUT=1.5).
"""
import re

import pytest

from test_faults import NPROCS, TIMEOUT_S, expect, run_case


@NPROCS
@pytest.mark.parametrize("blocking", [True, False])
def test_skipped_first_shared_memory_use_names_the_operation(nprocs, blocking, tmp_path):
    _, reports, out, _ = run_case(nprocs, f'''
        comm = al.MPICommunicator()
        buf = np.ones(1024, np.float32)
        al.allreduce(buf, comm, algo="ring")           # collective #1 on comm
        late = comm.size - 1
        fault()
        if comm.rank != late:                          # collective #2: the window's first use
            if {blocking}:
                attempt(comm.rank, "skip", lambda: al.allreduce(buf, comm, algo="shared_memory"))
            else:
                attempt(comm.rank, "skip", lambda: al.nonblocking_allreduce(
                    buf, comm, algo="shared_memory").wait())
        al.finalize()
        report(comm.rank, "exit")
    ''', tmp_path=tmp_path)
    late = nprocs - 1
    for rank in range(late):
        expect(reports, out, [rank], "skip", "TimeoutError",
               match=rf"^allreduce/shared_memory \(collective #2 on this communicator, rank "
                     rf"{rank} of {nprocs}\): allocating the communicator's shared window "
                     rf".*never arrived at collective #2.*\[{late}\]")


FROZEN = '''
    import warnings
    comm = al.MPICommunicator()
    buf = np.ones(64, np.float32)
    al.allreduce(buf, comm)
    shown = warnings.showwarning

    def show(message, *args, **kwargs):     # finalize's last words, then os._exit(1)
        if "al.finalize()" in str(message):
            report(comm.rank, "finalize_gave_up", al.TimeoutError(str(message)))
        shown(message, *args, **kwargs)

    warnings.showwarning = show
    fault()
    if comm.rank == comm.size - 1:
        os.kill(os.getpid(), signal.SIGSTOP)
    attempt(comm.rank, "frozen", lambda: al.allreduce(buf, comm))
'''


@NPROCS
def test_a_frozen_peer_already_timed_out_on_ends_the_job_one_timeout_later(nprocs, tmp_path):
    code, reports, out, _ = run_case(nprocs, FROZEN, env={"AL_FINALIZE_TIMEOUT": None},
                                     tmp_path=tmp_path)
    frozen = nprocs - 1
    expect(reports, out, range(frozen), "frozen", "TimeoutError",
           match=rf"never arrived.*\[{frozen}\]")
    # error at AL_TIMEOUT, finalize gives up one AL_TIMEOUT later (was 4 x AL_TIMEOUT).  The
    # first rank to give up exits non-zero and the launcher ends the job: a rank giving up
    # in the same instant may be ended before it reports (seen on 3 ranks in CI).
    gave_up = [rank for rank in range(frozen) if (rank, "finalize_gave_up") in reports]
    assert gave_up, f"no rank's finalize gave up:\n{out}"
    expect(reports, out, gave_up, "finalize_gave_up", within=2 * TIMEOUT_S + 1.5,
           match=re.escape(f"ranks [{frozen}] of this node, which an earlier "
                           f"al.TimeoutError of this rank named as never arrived, are stopped "
                           f"(SIGSTOP or a debugger) and have not reached it within "
                           f"AL_TIMEOUT={TIMEOUT_S:g} s either"))
    assert code != 0, out
