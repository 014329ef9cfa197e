"""How close our allreduce comes to the least Python can do, on 2 ranks of one node.

    python -m aluminum.run -n 2 bench/allreduce_floors.py [--sizes 64KiB:16MiB] [--step 4]
        [--touch] [--seconds 0.4] [--rounds 5]

Next to mpi4py and our ``shared_memory`` algorithm (on private buffers, and on
``al.shared_empty`` buffers), three hand-written allreduces of a few lines each, with
nothing around them (no validation, dispatch, state machine or engine) and the same
synchronisation (a counter per rank in an MPI shared window, spun on):

- ``floor_staged``: each rank copies its vector into shared memory, then adds both staged
  vectors into its buffer: the shortest design for private buffers (ours also splits the
  work between the ranks and pipelines it in chunks, which pays from about 1 MiB up);
- ``floor_zero_copy``: on shared buffers, each rank adds its half of both buffers and writes
  the sum into both: no copies at all;
- ``floor_cma``: single copy on private buffers, with ``process_vm_readv`` (Linux cross-memory
  attach): each rank reads the peer's half of its vector 256 KiB at a time, adds it into its
  own, then reads the peer's finished half.  Left out, with the reason, where the kernel
  refuses (no ptrace permission between the ranks).

The gap between ours and the floor of the same design is the cost of being a library; the
gap between the floors and mpi4py is what the design itself can win.  Timing and ``--touch``
as in ``allreduce_vs_copy.py``.  In place, float32 SUM; each floor's result is checked once.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys

import numpy as np
from mpi4py import MPI

import aluminum as al
from aluminum.bench.allreduce_vs_copy import add_measure_arguments, measure, touched
from aluminum.backends.mpi.algorithms.shared_buffers import SharedBuffers
from aluminum.bench.sizes import format_size, parse_sizes

CMA_CHUNK = 256 << 10


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Flags:
    """One counter per rank in a shared window: ``sync()`` returns once both ranks called it
    as often as this one has."""

    def __init__(self, world: MPI.Comm):
        self.rank, self.peer = world.Get_rank(), 1 - world.Get_rank()
        self._win = MPI.Win.Allocate_shared(256 if self.rank == 0 else 0, 8, comm=world)
        self._win.Lock_all(MPI.MODE_NOCHECK)
        self._flags = memoryview(self._win.Shared_query(0)[0]).cast("q")
        self._calls = 0

    def sync(self) -> None:
        self._calls += 1
        self._win.Sync()
        self._flags[self.rank * 16] = self._calls
        while self._flags[self.peer * 16] < self._calls:
            pass
        self._win.Sync()

    def free(self) -> None:
        self._win.Unlock_all()
        self._win.Free()


def floor_staged(world, flags: Flags, buf: np.ndarray):
    """Copy in, synchronise, add both staged copies, synchronise (the staging is reused)."""
    win = MPI.Win.Allocate_shared(2 * buf.nbytes if flags.rank == 0 else 0, 64, comm=world)
    staged = np.frombuffer(win.Shared_query(0)[0], buf.dtype).reshape(2, -1)
    mine, theirs = staged[flags.rank], staged[flags.peer]

    def call():
        np.copyto(mine, buf)
        flags.sync()
        np.add(mine, theirs, out=buf)
        flags.sync()                    # the peer is done reading our staging
    return call, win


def floor_zero_copy(comm, flags: Flags, buf: np.ndarray):
    """On ``al.shared_empty`` buffers (allocated alike on both ranks, so the peer's buffer is
    at the same allocation and offset): add this rank's half of both, write it into both."""
    buffers = SharedBuffers.find(comm)
    index, offset = buffers.locate(buf)
    place = (index, offset, index, offset, buf.nbytes)
    peer = buffers.arrays([place, place], buf.dtype)[0][flags.peer]
    half = buf.size // 2
    lo, hi = (0, half) if flags.rank == 0 else (half, buf.size)
    mine, theirs = buf[lo:hi], peer[lo:hi]

    def call():
        flags.sync()                    # both vectors are in place
        np.add(mine, theirs, out=mine)
        np.copyto(theirs, mine)
        flags.sync()
    return call


def floor_cma(world, flags: Flags, buf: np.ndarray):
    """Single copy over ``process_vm_readv``.  A first read probes whether the kernel lets
    each rank read the other; if it refuses either, OSError on both (before any
    synchronisation a lone failing rank would leave its peer waiting in)."""
    readv = ctypes.CDLL(None, use_errno=True).process_vm_readv
    readv.restype = ctypes.c_ssize_t
    pid, address = world.sendrecv((os.getpid(), buf.ctypes.data), flags.peer,
                                  source=flags.peer)
    item, half = buf.itemsize, buf.size // 2
    mine = (0, half) if flags.rank == 0 else (half, buf.size)
    theirs = (half, buf.size) if flags.rank == 0 else (0, half)
    scratch = np.empty(CMA_CHUNK // item, buf.dtype)

    def read(local: int, remote: int, nbytes: int) -> None:
        here, there = _Iovec(local, nbytes), _Iovec(remote, nbytes)
        if readv(pid, ctypes.byref(here), 1, ctypes.byref(there), 1, 0) != nbytes:
            errno = ctypes.get_errno()
            raise OSError(errno, f"process_vm_readv: {os.strerror(errno)}")

    try:
        read(scratch.ctypes.data, address, min(buf.nbytes, scratch.nbytes))
        refused = None
    except OSError as exc:
        refused = str(exc)
    reasons = [why for why in world.allgather(refused) if why is not None]
    if reasons:
        raise OSError(reasons[0])

    def call():
        flags.sync()                    # the peer's vector is in place
        for start in range(mine[0], mine[1], len(scratch)):
            stop = min(mine[1], start + len(scratch))
            read(scratch.ctypes.data, address + start * item, (stop - start) * item)
            np.add(buf[start:stop], scratch[:stop - start], out=buf[start:stop])
        flags.sync()                    # both halves are finished
        read(buf.ctypes.data + theirs[0] * item, address + theirs[0] * item,
             (theirs[1] - theirs[0]) * item)
        flags.sync()                    # the peer has read our half
    return call


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/allreduce_floors.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_measure_arguments(parser, "64KiB:16MiB")
    args = parser.parse_args(argv)
    if MPI.COMM_WORLD.Get_size() != 2:
        raise SystemExit("allreduce_floors.py: the floors are written for exactly 2 ranks")

    comm = al.MPICommunicator()
    world = comm.mpi_comm.Dup()
    flags = Flags(world)
    sizes = parse_sizes(args.sizes, args.step)
    for size in sizes:
        series, staging, skipped = _series(comm, world, flags, size // 4)
        medians = measure(world, series, args.seconds, args.rounds, args.touch)
        if comm.rank == 0:
            _print_row(size, medians, first=size == sizes[0], skipped=skipped)
        del series
        staging.Free()
    flags.free()
    world.Free()
    comm.free()
    return 0


def _series(comm, world, flags: Flags, count: int):
    """(name -> (call, buffer), the staging window to free, {name: why it is left out})."""
    mpi_buf = touched(count)
    series = {"mpi4py": (lambda: world.Allreduce(MPI.IN_PLACE, mpi_buf, MPI.SUM), mpi_buf)}
    ours, ours_shared = touched(count), touched(count, comm)
    series["ours (private)"] = lambda: al.allreduce(ours, comm, algo="shared_memory"), ours
    series["ours (shared)"] = (lambda: al.allreduce(ours_shared, comm, algo="shared_memory"),
                               ours_shared)
    staged = touched(count)
    call, staging = floor_staged(world, flags, staged)
    series["floor_staged"] = _checked(world, call, staged), staged
    zero = touched(count, comm)
    series["floor_zero_copy"] = _checked(world, floor_zero_copy(comm, flags, zero), zero), zero
    skipped = {}
    cma = touched(count)
    try:
        series["floor_cma"] = _checked(world, floor_cma(world, flags, cma), cma), cma
    except OSError as exc:
        skipped["floor_cma"] = str(exc)
    return series, staging, skipped


def _checked(world, call, buf: np.ndarray):
    """``call``, once one run of it on every rank's ``rank + 1`` gave ``1 + 2``."""
    buf.fill(world.Get_rank() + 1)
    call()
    if not np.all(buf == 3):
        raise SystemExit(f"rank {world.Get_rank()}: a floor gave a wrong sum")
    buf.fill(0.0)
    return call


def _print_row(size: int, medians: dict, first: bool, skipped: dict) -> None:
    if first:
        print("# allreduce in place, float32 SUM, 2 ranks; median µs (max over ranks per "
              "iteration); ratio = / mpi4py")
        for name, why in skipped.items():
            print(f"# {name} left out: {why}")
        print(f"{'size':>8}" + "".join(f" {name:>22}" for name in medians))
    mpi = medians["mpi4py"]
    print(f"{format_size(size):>8}" + "".join(
        f" {value:>13.1f} ({value / mpi:4.2f}x)" for value in medians.values()), flush=True)


if __name__ == "__main__":
    sys.exit(main())
