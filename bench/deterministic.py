"""What deterministic mode (``al.set_deterministic``) costs: allreduce with it off and on.

    python -m aluminum.run -n 3 bench/deterministic.py [--sizes 4096,65536,1048576,16777216]
                                                       [--iters 200] [--dtype float32]

On two ranks deterministic mode changes nothing (``x0 + x1`` has one answer), so run it on
three or more.  For each size and each allreduce algorithm (and the selector's choice) the
blocking call is timed with the mode off and on, interleaved in one run (each call after an
untimed barrier; per call the slowest rank; the median over calls).  ``MPI_Allreduce`` is the
mpi4py call on the same buffer, for scale: on three ranks or more the passthrough's blocking
float sums run ``MPI_Iallreduce``'s order (one answer per call), which is what its ``off``
row measures.  The ratio column is ``on`` over ``off`` of the same algorithm.
"""
from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import aluminum as al
from aluminum.bench.sweep import time_interleaved


def rows(comm, buf, dtype):
    """``{row: call}``: every call is collective and runs one allreduce."""
    mpi = MPI.COMM_WORLD.Dup()
    datatype = MPI.Datatype.fromcode(np.dtype(dtype).char)
    found = {"MPI_Allreduce (mpi4py)": lambda: mpi.Allreduce(MPI.IN_PLACE, [buf, datatype],
                                                             MPI.SUM)}
    for algo in ["automatic", *al.algorithms("allreduce")]:
        for mode in ("off", "on"):
            def call(algo=algo, on=mode == "on"):
                al.set_deterministic(on)
                al.allreduce(buf, comm, algo=algo)
            found[f"{algo} {mode}"] = call
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4096,65536,1048576,16777216",
                        help="bytes per rank, comma-separated")
    parser.add_argument("--iters", type=int, default=200, help="timed calls per row")
    parser.add_argument("--dtype", default="float32", help="a numpy float type")
    args = parser.parse_args(argv)
    comm = al.MPICommunicator()
    world = MPI.COMM_WORLD
    sync = world.Dup()
    dtype = np.dtype(args.dtype)
    if world.rank == 0:
        print(f"deterministic mode, {world.size} ranks, {dtype}, blocking allreduce in place; "
              f"median µs of the slowest rank")
        if world.size < 3:
            print("(on fewer than 3 ranks the mode changes nothing)")
    for nbytes in (int(s) for s in args.sizes.split(",")):
        buf = np.ones(max(1, nbytes // dtype.itemsize), dtype)
        calls = rows(comm, buf, dtype)
        times = time_interleaved(list(calls.values()), args.iters, warmup=3,
                                 barrier=sync.Barrier)
        medians = {}
        for name, seconds in zip(calls, times):
            slowest = np.max(world.allgather(seconds), axis=0)
            medians[name] = float(np.median(slowest)) * 1e6
        if world.rank == 0:
            print(f"\n{nbytes} B")
            for name, us in medians.items():
                ratio = ""
                if name.endswith(" on"):
                    ratio = f"  {us / medians[name[:-3] + ' off']:.2f}x"
                print(f"  {name:34s} {us:12.1f}{ratio}")
    al.set_deterministic(False)
    comm.free()
    sync.Free()


if __name__ == "__main__":
    main()
