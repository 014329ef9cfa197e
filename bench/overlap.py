"""Overlap of numpy compute with a large nonblocking allreduce driven by the progress engine.

``python -m aluminum.run -n 2 bench/overlap.py [--bytes 16777216] [--trials 15] [--algo ...]``

Three measurements per trial, after a barrier each, interleaved across trials:

- ``compute``: element-wise numpy work (single-threaded, releases the GIL), calibrated on
  rank 0 to last about as long as the allreduce;
- ``comm``: ``al.nonblocking_allreduce(..., algo=--algo).wait()`` of ``--bytes`` float32;
- ``overlapped``: start the allreduce, run the same compute, then ``wait()``.

Reported: medians (max over ranks), the serial sum, the share of the shorter phase that was
hidden, ``(compute + comm - overlapped) / min(compute, comm)`` (1 = perfect overlap), and how
long the final ``wait()`` of the overlapped run took: the allreduce progressed in the
background for all but that.  On a 2-core machine with 2 ranks every core already runs a
rank's compute, and a host allreduce is itself CPU work (copies, reductions), so the two
share the cores: the communication proceeds during compute, but the total barely shrinks.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI

import aluminum as al
from aluminum.tuning import selector


class Compute:
    """``rounds`` rounds of in-place multiply-add over 1M float32 (about 1 ms a round)."""

    def __init__(self) -> None:
        self.a = np.random.default_rng(0).random(1 << 20, dtype=np.float32)
        self.b = np.ones_like(self.a)
        self.rounds = 1

    def __call__(self) -> None:
        a, b = self.a, self.b
        for _ in range(self.rounds):
            np.multiply(a, 0.5, out=a)
            np.add(a, b, out=a)

    def calibrate(self, seconds: float) -> None:
        start = time.perf_counter()
        self.rounds = 20
        self()
        per_round = (time.perf_counter() - start) / 20
        self.rounds = max(1, round(seconds / per_round))


def timed(comm, fn) -> float:
    comm.mpi_comm.Barrier()
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=16 << 20, help="allreduce size")
    parser.add_argument("--trials", type=int, default=15)
    parser.add_argument("--algo", default="automatic", help="allreduce algorithm")
    args = parser.parse_args(argv)
    comm = al.MPICommunicator()
    buf = np.ones(args.bytes // 4, np.float32)
    compute = Compute()

    def communicate():
        al.nonblocking_allreduce(buf, comm, algo=args.algo).wait()

    final_waits = []

    def overlapped():
        request = al.nonblocking_allreduce(buf, comm, algo=args.algo)
        compute()
        start = time.perf_counter()
        request.wait()
        final_waits.append((time.perf_counter() - start) * 1e3)

    for _ in range(3):
        communicate()
    comm_ms = statistics.median(timed(comm, communicate) for _ in range(5))
    compute.calibrate(comm.mpi_comm.bcast(comm_ms) / 1e3)
    compute.rounds = comm.mpi_comm.bcast(compute.rounds)
    samples = {"compute": [], "comm": [], "overlapped": []}
    for _ in range(args.trials):
        samples["compute"].append(timed(comm, compute))
        samples["comm"].append(timed(comm, communicate))
        samples["overlapped"].append(timed(comm, overlapped))
    samples["final wait"] = final_waits
    medians = {name: comm.mpi_comm.allreduce(statistics.median(values), op=MPI.MAX)
               for name, values in samples.items()}
    if comm.rank == 0:
        c, m, o = medians["compute"], medians["comm"], medians["overlapped"]
        hidden = (c + m - o) / min(c, m)
        algo = selector.choose(comm, "allreduce", args.algo, args.bytes).name
        print(f"# np={comm.size}, {args.bytes} B float32 {algo}, {compute.rounds} compute "
              f"rounds, median ms of {args.trials} trials (max over ranks)")
        print(f"compute alone {c:8.2f} ms")
        print(f"comm alone    {m:8.2f} ms")
        print(f"overlapped    {o:8.2f} ms   (serial sum {c + m:.2f} ms, "
              f"hidden {hidden:.0%} of the shorter phase)")
        print(f"  of which the wait() after compute {medians['final wait']:.2f} ms: the rest of "
              f"the allreduce progressed in the background during compute")
    comm.free()


if __name__ == "__main__":
    main()
