"""``--hosts H [--np N] [--link-mbit M]`` for the bench scripts run as ``python script.py``:
the script starts itself on N ranks (default 2 per host) over H emulated hosts with
aluminum's launcher (aluminum/launch/emulated_hosts.py: network namespaces, TCP between hosts, each link
limited to M Mbit/s if given), and returns the job's exit status.

    python bench/train.py --hosts 2 --link-mbit 1000     # 2 hosts x 2 ranks

Under mpiexec (the ranks themselves, or ``python -m aluminum.run --hosts 2 -n 4 script``)
the options are accepted and ignored: the job already has its hosts.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys

_MPI_ENV = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK")
_OPTIONS = ("--hosts", "--np", "--link-mbit")


def add_options(parser: argparse.ArgumentParser) -> None:
    """The three options, on ``parser``."""
    parser.add_argument("--hosts", type=int, default=None,
                        help="start this script on emulated hosts (network namespaces; "
                             "needs root)")
    parser.add_argument("--np", type=int, default=None,
                        help="with --hosts: ranks in all (default 2 per host)")
    parser.add_argument("--link-mbit", type=float, default=None,
                        help="with --hosts: limit each host's link to this rate")


def launch_on_hosts(args: argparse.Namespace, script: str, argv: list[str]) -> int | None:
    """Start ``script`` with ``argv`` (less these options) on ``args.hosts`` emulated hosts
    and return its exit status; None when there is nothing to launch (no ``--hosts``, or
    already under mpiexec)."""
    if args.hosts is None or any(key in os.environ for key in _MPI_ENV):
        return None
    from aluminum.launch import launch

    rest, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{option}=" for option in _OPTIONS)):
            rest.append(arg)
    nprocs = args.np if args.np is not None else 2 * args.hosts
    # SIGTERM (timeout(1), a scheduler) unwinds like Ctrl-C: the job stops, the hosts go.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return launch(nprocs, [sys.executable, script, *rest], hosts=args.hosts,
                      link_mbit=args.link_mbit).returncode
    except KeyboardInterrupt:
        return 130


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
