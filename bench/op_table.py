"""Every operation's blocking call against its mpi4py counterpart at one size, in one table.

    python bench/op_table.py --np 2              # 4 B, out of place, automatic vs mpi4py
    python bench/op_table.py --np 2 --size 4KiB --inplace
    python bench/op_table.py --np 2 --nonblocking    # nonblocking start + wait, both sides

Runs ``python -m aluminum.bench --np N <op> --sizes SIZE --compare mpi4py --new-buffers``
for each of the 17 swept operations (``recv`` is ``send``'s ping-pong) and prints their
medians side by side with the ratio ours / mpi4py, twice: on the same buffers every call,
and on new buffers every call (both libraries called the same way, allocating them in the
timed call as ``al.allreduce(np.ones(n), comm)`` does). Each operation is its own MPI job,
so the ratios compare columns measured in the same job (the sweep interleaves all four),
not numbers across jobs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from aluminum import compiled   # (importing aluminum starts no MPI)
from aluminum.core.ops import OPS as OPS_TABLE

NEW_BUFFERS = " [new buffers]"   # sweep.NEW_BUFFERS_SUFFIX (importing sweep loads MPI)

# Every operation of the op table but ``recv``, which ``send``'s ping-pong times.
OPS = [name for name in OPS_TABLE if name != "recv"]


def measure(op: str, nprocs: int, size: str, inplace: bool, rounds: int,
            nonblocking: bool = False) -> dict[str, float]:
    """``{series name: median µs}`` of one sweep job at one size."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, f"{op}.json")
        command = [sys.executable, "-m", "aluminum.bench", "--np", str(nprocs), op,
                   "--sizes", size, "--compare", "mpi4py", "--rounds", str(rounds),
                   "--buffers", "private", "--new-buffers", "--json", path]
        if inplace:
            command.append("--inplace")
        if nonblocking:
            command.append("--nonblocking")
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        with open(path, encoding="utf-8") as handle:
            result = json.load(handle)
    return {series["name"]: series["points"][0]["median_us"]
            for series in result["series"] if series["points"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2, dest="nprocs")
    parser.add_argument("--size", default="4", help="bytes, e.g. 4, 4KiB (default 4)")
    parser.add_argument("--inplace", action="store_true")
    parser.add_argument("--nonblocking", action="store_true",
                        help="time nonblocking start + wait (mpi4py: I<op> + Wait)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated subset")
    args = parser.parse_args(argv)
    print(f"# np={args.nprocs}, {args.size} B, {'in place' if args.inplace else 'out of place'}"
          f"{', nonblocking' if args.nonblocking else ''}"
          f", median µs of the slowest rank, {args.rounds} interleaved rounds, compiled: "
          f"{compiled()}")
    new = NEW_BUFFERS
    print(f"{'':16s} {'same buffers every call':>29s}   {'new buffers every call':>29s}")
    print(f"{'op':16s} {'aluminum':>10s} {'mpi4py':>10s} {'ratio':>7s}   "
          f"{'aluminum':>10s} {'mpi4py':>10s} {'ratio':>7s}")
    nan = float("nan")
    for op in args.ops.split(","):
        medians = measure(op, args.nprocs, args.size, args.inplace, args.rounds,
                          args.nonblocking)
        ours, peer = medians.get("automatic", nan), medians.get("mpi4py", nan)
        ours_new, peer_new = medians.get("automatic" + new, nan), medians.get("mpi4py" + new, nan)
        print(f"{op:16s} {ours:10.2f} {peer:10.2f} {ours / peer:7.2f}   "
              f"{ours_new:10.2f} {peer_new:10.2f} {ours_new / peer_new:7.2f}", flush=True)


if __name__ == "__main__":
    main()
