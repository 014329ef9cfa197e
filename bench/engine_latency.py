"""Progress-engine overhead: nonblocking allreduce start->wait latency vs the blocking call.

``python -m aluminum.run -n 2 bench/engine_latency.py [--sizes 4,1048576,4194304]
[--algos automatic,mpi_passthrough]``

For each size and algorithm, in-place float32 SUM (a named algorithm: both calls run the same
State class, so the ratio is the engine's cost; ``automatic``: each call asks the selector,
which has rules of its own for nonblocking calls, so the ratio is what a user sees, and the
row names both choices):

- ``blocking``: ``al.allreduce(buf, comm, algo=...)``: a custom algorithm's state driven on
  the caller's thread, or ``MPI_Allreduce`` for ``mpi_passthrough``;
- ``nonblocking``: ``al.nonblocking_allreduce(buf, comm, algo=...).wait()`` through the engine
  (``MPI_Iallreduce`` polled with ``MPI_Test`` for ``mpi_passthrough``);
- ``Iallreduce+Test`` (``mpi_passthrough`` only): those same MPI calls by hand on the
  caller's thread, the engine-free floor of the nonblocking path, since Open MPI's
  nonblocking allreduce (libnbc) is itself slower than its blocking one at 1-16 MiB here.

The variants run interleaved, batch by batch, so they see the same machine noise.  Latency
per batch = batch time / batch length after a barrier; each rank takes the median over
batches, and the table shows the maximum over ranks (OSU style).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI

import aluminum as al
from aluminum.tuning import selector


def variants(comm, buf, algo: str) -> dict:
    mpi = comm.mpi_comm

    def blocking():
        al.allreduce(buf, comm, algo=algo)

    def nonblocking():
        al.nonblocking_allreduce(buf, comm, algo=algo).wait()

    def iallreduce_test():
        request = mpi.Iallreduce(MPI.IN_PLACE, buf)
        while not request.Test():
            pass

    runs = {"blocking": blocking, "nonblocking": nonblocking}
    if algo == "mpi_passthrough":
        runs["Iallreduce+Test"] = iallreduce_test
    return runs


def measure(comm, nbytes: int, algo: str, batches: int) -> dict[str, float]:
    """Median latency (µs) of each variant on this rank."""
    buf = np.zeros(max(1, nbytes // 4), np.float32)
    runs = variants(comm, buf, algo)
    per_batch = max(1, min(200, (1 << 21) // max(nbytes, 1)))
    for fn in runs.values():            # warm-up: connections, engine thread, page faults
        for _ in range(min(per_batch, 20)):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(batches):
        for name, fn in runs.items():
            comm.mpi_comm.Barrier()
            start = time.perf_counter()
            for _ in range(per_batch):
                fn()
            samples[name].append((time.perf_counter() - start) / per_batch * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


def label(comm, algo: str, nbytes: int) -> str:
    """``algo``, or for ``automatic`` what blocking and nonblocking in-place calls pick."""
    if algo != "automatic":
        return algo
    picks = [selector.choose(comm, "allreduce", algo, nbytes, True, nonblocking)
             .name.split("/")[-1] for nonblocking in (False, True)]
    return "auto: " + (picks[0] if picks[0] == picks[1] else "/".join(picks))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4,1048576,4194304",
                        help="comma-separated message sizes in bytes")
    parser.add_argument("--algos", default="automatic,mpi_passthrough,shared_memory",
                        help="comma-separated algorithm names (automatic: the selector's)")
    parser.add_argument("--batches", type=int, default=41, help="batches per variant")
    args = parser.parse_args(argv)
    comm = al.MPICommunicator()
    rows = []
    for nbytes in (int(s) for s in args.sizes.split(",")):
        for algo in args.algos.split(","):
            mine = measure(comm, nbytes, algo, args.batches)
            worst = {name: comm.mpi_comm.allreduce(value, op=MPI.MAX)
                     for name, value in mine.items()}
            rows.append((nbytes, label(comm, algo, nbytes), worst))
    if comm.rank == 0:
        print(f"# np={comm.size}, in-place float32 SUM, median µs (max over ranks), "
              f"{args.batches} batches per variant")
        print(f"{'bytes':>9} {'algo':>30} {'blocking':>10} {'nonblocking':>12} "
              f"{'nb/blocking':>12} {'Iallreduce+Test':>16} {'nb/Iallreduce':>14}")
        for nbytes, algo, worst in rows:
            line = (f"{nbytes:>9} {algo:>30} {worst['blocking']:>10.1f} "
                    f"{worst['nonblocking']:>12.1f} "
                    f"{worst['nonblocking'] / worst['blocking']:>12.2f}")
            if "Iallreduce+Test" in worst:
                reference = worst["Iallreduce+Test"]
                line += f" {reference:>16.1f} {worst['nonblocking'] / reference:>14.2f}"
            print(line)
    comm.free()


if __name__ == "__main__":
    main()
