"""``python -m aluminum.run -n N program [args...]``: mpiexec with this machine's settings."""
from __future__ import annotations

import argparse
import sys

from .launcher import launch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aluminum.run", description=__doc__)
    parser.add_argument("-n", "--np", type=int, default=2, help="number of ranks (default 2)")
    parser.add_argument("--timeout", type=float, default=None, help="kill the job after this")
    parser.add_argument("program", nargs=argparse.REMAINDER,
                        help="script.py or a command such as: python -c '...'")
    args = parser.parse_args(argv)
    if not args.program:
        parser.error("expected a program to run")
    try:
        return launch(args.np, args.program, timeout=args.timeout).returncode
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
