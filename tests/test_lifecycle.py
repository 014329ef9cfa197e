"""init/finalize and the launcher, each in a fresh process (finalize is one-way)."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

SCRIPT_AFTER_FINALIZE = textwrap.dedent("""
    import numpy as np
    import aluminum as al
    assert not al.initialized()
    al.init(); al.init()                      # idempotent
    assert al.initialized()
    comm = al.MPICommunicator()
    buf = np.arange(4, dtype=np.float32)
    al.finalize(); al.finalize()              # idempotent
    assert not al.initialized()
    for call in (lambda: al.allreduce(buf, comm), lambda: al.MPICommunicator(),
                 lambda: al.nonblocking_allreduce(buf, comm)):
        try:
            call()
        except al.CommunicatorError as exc:
            assert "finalized" in str(exc), exc
        else:
            raise AssertionError("call after finalize did not raise")
    assert buf.tolist() == [0, 1, 2, 3]
    print("ok")
""")


def test_calls_after_finalize_raise_communicator_error():
    result = subprocess.run([sys.executable, "-c", SCRIPT_AFTER_FINALIZE], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def _clean_env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OMPI_", "PRTE_", "PMIX_"))}


@pytest.mark.parametrize("nprocs", [2, 3])
def test_launcher_runs_as_root_without_user_environment(nprocs):
    code = ("import sys; assert 'aluminum' not in sys.modules and sys.path[0] == '', "
            "'the launcher changed what a program starts with'; "
            "import numpy as np, aluminum as al; c = al.MPICommunicator(); "
            "a = np.array([c.rank + 1]); al.allreduce(a, c); print(c.rank, c.size, a[0])")
    result = subprocess.run([sys.executable, "-m", "aluminum.run", "-n", str(nprocs),
                             "python", "-c", code], capture_output=True, text=True,
                            timeout=120, env=_clean_env())
    assert result.returncode == 0, result.stdout + result.stderr
    lines = sorted(result.stdout.split("\n"))[-nprocs:]
    expected_sum = nprocs * (nprocs + 1) // 2
    assert sorted(lines) == [f"{r} {nprocs} {expected_sum}" for r in range(nprocs)]


@pytest.mark.parametrize("cores, ranks, expected", [(2, 1, "2"), (2, 2, "1"), (2, 4, "1"),
                                                   (16, 4, "4"), (16, 3, "5")])
def test_launched_ranks_share_the_cores_among_their_blas_threads(monkeypatch, cores, ranks,
                                                                 expected):
    from aluminum.launch import launcher
    monkeypatch.setattr(launcher.os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert launcher.launch_env({}, ranks)["OMP_NUM_THREADS"] == expected
    assert launcher.launch_env({"OMP_NUM_THREADS": "7"}, ranks)["OMP_NUM_THREADS"] == "7"


def test_launcher_propagates_failure_exit_code():
    result = subprocess.run([sys.executable, "-m", "aluminum.run", "-n", "2", "python", "-c",
                             "import sys; sys.exit(3)"], capture_output=True, text=True,
                            timeout=120, env=_clean_env())
    assert result.returncode != 0


RAISES_ON_RANK_1 = textwrap.dedent("""
    import numpy as np, aluminum as al
    comm = al.MPICommunicator()
    al.allreduce(np.ones(1), comm)
    if comm.rank == 1:
        raise ValueError("rank 1 gives up")
    al.allreduce(np.ones(1), comm)     # rank 0 waits here for rank 1
""")


def test_an_uncaught_exception_ends_a_plain_mpiexec_job():
    """Without aluminum.run's wrapper (mpiexec running python itself): the failing rank
    aborts the job at exit instead of waiting in finalize for peers that wait for it."""
    from aluminum.launch import launch

    started = time.monotonic()
    result = launch(2, [sys.executable, "-c", RAISES_ON_RANK_1], timeout=60, capture=True)
    assert result.returncode != 0
    assert "ValueError: rank 1 gives up" in result.stdout, result.stdout
    assert time.monotonic() - started < 30


def test_launcher_timeout_kills_a_hung_job():
    from aluminum.launch import launch

    marker = f"al-hung-{os.getpid()}"
    with pytest.raises(subprocess.TimeoutExpired):
        launch(2, [sys.executable, "-c", f"import time; time.sleep(60)  # {marker}"], timeout=5,
               capture=True)
    assert not _running(marker), "ranks survived the timeout"


@pytest.mark.parametrize("capture", [True, False])
def test_launcher_retries_a_job_whose_mpiexec_failed_to_start(tmp_path, monkeypatch, capsys,
                                                              capture):
    """mpiexec's PMIx server sometimes fails to start on a loaded machine; no rank ran, so
    the launcher starts the job again (and only then)."""
    from aluminum.launch import launcher

    attempts = tmp_path / "attempts"
    fake_mpiexec = textwrap.dedent(f"""
        import pathlib, sys
        path = pathlib.Path({str(attempts)!r})
        n = len(path.read_text()) if path.exists() else 0
        path.write_text("x" * (n + 1))
        if n == 0:
            print("The {launcher.STARTUP_FAILURE}. We cannot", file=sys.stderr)
            sys.exit(213)
        print("ran", n)
        sys.exit(3)
    """)
    monkeypatch.setattr(launcher, "command",
                        lambda nprocs, argv: [sys.executable, "-c", fake_mpiexec])
    result = launcher.launch(2, ["prog"], timeout=60, capture=capture)
    assert result.returncode == 3 and attempts.read_text() == "xx"   # retried once, then not
    if capture:
        assert "ran 1" in result.stdout
    assert "mpiexec failed to start (attempt 1 of 3)" in capsys.readouterr().err


def test_ctrl_c_on_the_launcher_stops_the_whole_job(tmp_path):
    """The ranks run in their own session (so a timeout can kill them all); Ctrl-C on
    ``python -m aluminum.run`` must still stop them instead of leaving them running."""
    import signal

    marker = f"al-ctrl-c-{os.getpid()}"
    code = f"import sys, time; print('up', flush=True); time.sleep(60)  # {marker}"
    launcher = subprocess.Popen([sys.executable, "-m", "aluminum.run", "-n", "2", "python",
                                 "-c", code], stdout=subprocess.PIPE, text=True,
                                env=_clean_env())
    try:
        assert launcher.stdout.readline().strip() == "up"
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(timeout=30) == 130
        deadline = time.monotonic() + 10
        while _running(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(marker), "ranks survived Ctrl-C"
    finally:
        launcher.kill()


def _running(marker: str) -> bool:
    result = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    return bool(result.stdout.strip())
