"""Run a Python program as one rank of a job, and end the whole job if it fails.

``python .../abort_on_error.py (script.py | -c code | -m module) [args]`` (by its path: as a
module it would import ``aluminum`` before the program could set the environment) runs the
program as ``python`` would (``sys.argv``, ``sys.path[0]``, ``__main__``).  If it
ends in an uncaught exception, or in ``SystemExit`` with a non-zero status, after MPI was
started, this rank prints its traceback and calls ``MPI_Abort`` on ``COMM_WORLD``, and
mpiexec ends every rank within seconds.  Without it the failing rank would wait at exit in
``al.finalize()`` (collective) for peers that wait in their next collective for it: the job
would hang until someone killed it.  Where MPI was never started the process simply exits
with that status, which ends the job too.

``python -m aluminum.run`` runs ``script.py`` and ``python script.py|-c|-m`` programs
through this module (aluminum/launch/launcher.py's ``command``; it lives with the MPI
backend, the one layer that may call MPI itself).  mpi4py's ``python -m mpi4py`` does the
same, but aborts only at interpreter exit, after ``al.finalize()`` would already have hung.
"""
from __future__ import annotations

import os
import runpy
import sys
import traceback

from mpi4py import run as mpi4py_run

# Frames of this module and of the machinery that runs the program: not the user's.
_LAUNCH_FILES = {__file__, runpy.__file__, "<frozen runpy>", mpi4py_run.__file__}


def main(argv: list[str]) -> int:
    """Run ``argv`` (``script.py ...``, ``-c code ...`` or ``-m module ...``); return 0, or
    abort the job (or exit with the status where MPI never started) if it failed."""
    if not argv or argv[0] in ("-c", "-m") and len(argv) < 2:
        print("usage: python abort_on_error.py (script.py | -c code | -m module) [args...]",
              file=sys.stderr)
        return 2
    if argv[0] in ("-c", "-m"):   # python's sys.path[0] for them (a script's is set below)
        sys.path[0] = "" if argv[0] == "-c" else os.getcwd()
    try:
        mpi4py_run.run_command_line(argv)
    except SystemExit as exc:
        status = _exit_status(exc.code)
        if status == 0:
            return 0
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        return _fail(status)
    except BaseException as exc:    # KeyboardInterrupt included: the peers would hang too
        _print_user_traceback(exc)
        return _fail(130 if isinstance(exc, KeyboardInterrupt) else 1)
    return 0


def _exit_status(code) -> int:
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _print_user_traceback(exc: BaseException) -> None:
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _LAUNCH_FILES:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def _fail(status: int) -> int:
    """Abort the job with ``status`` if this process started MPI, else return it."""
    sys.stdout.flush()
    sys.stderr.flush()
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.COMM_WORLD.Abort(status)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
