"""Host-transfer allreduce on host streams vs plain MPI allreduce, in one run.

``python -m aluminum.run -n 2 bench/ht_vs_mpi.py [--sizes 4:16MiB] [--step 4] [--batches 21]``

In-place float32 SUM allreduce, three variants interleaved batch by batch so that they see
the same machine noise:

- ``mpi``: ``al.allreduce`` on an ``al.MPICommunicator`` (blocking; algorithm "automatic");
- ``ht``: ``al.allreduce`` on an ``al.HostTransferCommunicator`` bound to a host stream, then
  ``comm.stream.synchronize()`` (a blocking HT call is only stream-ordered): staging copy in,
  MPI on the engine, copy back, all of it inside the timed region;
- ``ht nonblocking``: ``al.nonblocking_allreduce(...).wait()`` on the same communicator;
- ``ht pipelined``: the batch's blocking calls enqueued back to back and one
  ``synchronize()`` at the end, as a training loop uses a stream (the host never waits
  between operations); per-operation time.

Latency per batch = batch time / batch length after an untimed barrier; a rank reports the
median over batches and the table shows the maximum over ranks (OSU style).  ``ht/mpi`` is
the ratio the host-transfer backend is judged by (target: at most 1.3 at 1 MiB and above).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI

import aluminum as al
from aluminum.backends.runtime import host_runtime
from aluminum.bench.sizes import format_size, parse_sizes


def variants(mpi_comm, ht_comm, buf, per_batch: int):
    """Each variant runs ``per_batch`` operations."""
    stream = ht_comm.stream

    def mpi():
        for _ in range(per_batch):
            al.allreduce(buf, mpi_comm)

    def ht():
        for _ in range(per_batch):
            al.allreduce(buf, ht_comm)
            stream.synchronize()

    def ht_nonblocking():
        for _ in range(per_batch):
            al.nonblocking_allreduce(buf, ht_comm).wait()

    def ht_pipelined():
        for _ in range(per_batch):
            al.allreduce(buf, ht_comm)
        stream.synchronize()

    return {"mpi": mpi, "ht": ht, "ht nonblocking": ht_nonblocking,
            "ht pipelined": ht_pipelined}


def measure(mpi_comm, ht_comm, nbytes: int, batches: int) -> dict[str, float]:
    """Median latency (µs) of each variant on this rank."""
    buf = np.zeros(max(1, nbytes // 4), np.float32)
    per_batch = max(2, min(100, (1 << 22) // max(nbytes, 1)))
    runs = variants(mpi_comm, ht_comm, buf, per_batch)
    for fn in runs.values():     # warm-up: connections, threads, staging pool, page faults
        fn()
    samples: dict[str, list[float]] = {name: [] for name in runs}
    barrier = mpi_comm.mpi_comm.Barrier
    for _ in range(batches):
        for name, fn in runs.items():
            barrier()
            start = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - start) / per_batch * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4:16MiB", help="message sizes, e.g. 4:16MiB or 4,1MiB")
    parser.add_argument("--step", type=int, default=4, help="factor between sizes of a range")
    parser.add_argument("--batches", type=int, default=21, help="batches per variant and size")
    args = parser.parse_args(argv)
    mpi_comm = al.MPICommunicator()
    ht_comm = al.HostTransferCommunicator(stream=host_runtime().new_stream())
    rows = []
    for nbytes in parse_sizes(args.sizes, args.step):
        mine = measure(mpi_comm, ht_comm, nbytes, args.batches)
        worst = {name: mpi_comm.mpi_comm.allreduce(value, op=MPI.MAX)
                 for name, value in mine.items()}
        rows.append((nbytes, worst))
    if mpi_comm.rank == 0:
        names = list(rows[0][1])
        print(f"# np={mpi_comm.size}, in-place float32 SUM allreduce, median µs "
              f"(max over ranks), {args.batches} batches per variant")
        print(f"{'size':>9} " + " ".join(f"{n:>15}" for n in names)
              + f" {'ht/mpi':>8} {'nb/mpi':>8} {'pipe/mpi':>9}")
        for nbytes, worst in rows:
            print(f"{format_size(nbytes):>9} " + " ".join(f"{worst[n]:>15.1f}" for n in names)
                  + f" {worst['ht'] / worst['mpi']:>8.2f}"
                  + f" {worst['ht nonblocking'] / worst['mpi']:>8.2f}"
                  + f" {worst['ht pipelined'] / worst['mpi']:>9.2f}")
    ht_comm.free()
    mpi_comm.free()


if __name__ == "__main__":
    main()
