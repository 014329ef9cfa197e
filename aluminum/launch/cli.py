"""``python -m aluminum.run -n N program [args...]``: mpiexec with this machine's settings."""
from __future__ import annotations

import argparse
import os
import signal
import sys

from ..core.errors import AluminumError
from .launcher import launch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aluminum.run", description=__doc__)
    parser.add_argument("-n", "--np", type=int, default=2, help="number of ranks (default 2)")
    parser.add_argument("--timeout", type=float, default=None, help="kill the job after this")
    parser.add_argument("--roles", default=None,
                        help="the job's cluster for placed programs, e.g. trainer:2,pserver:1 "
                             "(ranks in order; the script reads it as AL_ROLES, "
                             "ex.Cluster.from_env)")
    parser.add_argument("--hosts", type=int, default=None,
                        help="spread the ranks over this many emulated hosts (network "
                        "namespaces on this machine; needs root)")
    parser.add_argument("--link-mbit", type=float, default=None,
                        help="limit each emulated host's link to this rate (with --hosts)")
    parser.add_argument("program", nargs=argparse.REMAINDER,
                        help="script.py or a command such as: python -c '...'")
    args = parser.parse_args(argv)
    if not args.program:
        parser.error("expected a program to run")
    env = None
    if args.roles is not None:
        counts = [part.partition(":") for part in args.roles.split(",")]
        if not all(name and count.isdigit() and int(count) > 0 for name, _, count in counts):
            parser.error(f"--roles: expected role:count,... with counts >= 1 (e.g. "
                         f"trainer:2,pserver:1), got {args.roles!r}")
        if sum(int(count) for _, _, count in counts) != args.np:
            parser.error(f"--roles: {args.roles!r} names "
                         f"{sum(int(c) for _, _, c in counts)} ranks, expected -n {args.np}")
        env = dict(os.environ, AL_ROLES=args.roles)   # read by ex.Cluster.from_env
    # SIGTERM unwinds like Ctrl-C, so the job is stopped and emulated hosts are removed.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return launch(args.np, args.program, timeout=args.timeout, env=env, hosts=args.hosts,
                      link_mbit=args.link_mbit).returncode
    except KeyboardInterrupt:
        return 130
    except AluminumError as exc:
        print(f"python -m aluminum.run: {exc}", file=sys.stderr)
        return 2


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
