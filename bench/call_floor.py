"""What a small blocking call costs in pure Python, next to ours and mpi4py's, on 4 B.

    python -m aluminum.run -n 2 bench/call_floor.py [--iters 2000] [--rounds 5]

For allreduce (in place and out of place), bcast and barrier, interleaved and timed as
``python -m aluminum.bench`` times a sweep (each call after an untimed barrier; per call the
slowest rank; the median over calls; the best of ``--rounds`` rounds):

- ``mpi4py``: the blocking call as the sweep's mpi4py peer makes it (``comm.Allreduce(...)``);
- ``MPI persistent``: ``Start`` + ``Wait`` of the same call made once with ``<Op>_init``,
  straight through mpi4py: what a plan's start runs, without the engine.  A blocking call
  cannot use it: MPI never matches it with the blocking call another rank makes;
- ``python floor``: a Python function with ``al.<op>``'s signature that only does what a
  repeated call must: recognise the call (the same buffers, communicator, stream and
  options) and re-check what may have changed on the same arrays (dtype, shape, flags: numpy
  lets all three change in place), then make the ``mpi4py`` row's call.  No stall-inspector
  arrival count, no ordering against queued nonblocking calls, no plan: the least any
  pure-Python library with the same checks can cost;
- ``plan.run()``: an ``al.<op>_init`` plan run blocking;
- ``al.<op>``: the blocking call, found in the plan cache;
- ``start().wait()`` (allreduce only): a plan's nonblocking run, through the progress engine;
- ``nonblocking().wait()`` (allreduce only): ``al.nonblocking_allreduce(...).wait()``.

The case "new buffers" allocates both arrays in every timed call (``np.zeros``), as code
writing ``al.allreduce(np.ones(n), comm, recvbuf=np.empty(n))`` does: ``mpi4py`` makes its
call on them; ``python floor`` first recognises their kind (the communicator, stream and
options of the kept one, each array's dtype, shape and flags, both owning their memory so
they cannot overlap), the least a pure-Python library that keeps decisions per kind and
checks each call's arrays can do; ``al.allreduce`` is ours.

The ratio column is each row over ``mpi4py`` in the same run.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
from mpi4py import MPI

import aluminum as al
from aluminum.bench.sweep import time_interleaved


def python_floor(arrays: tuple, comm, stream, options: tuple, run):
    """A call taking ``(arrays, comm, stream, options)`` that checks it is the remembered
    one, then calls ``run()``; written out for zero, one and two arrays, as the leanest
    Python can."""
    def differs(*_):
        raise AssertionError("not the remembered call")

    if not arrays:
        def call(given, comm_, stream_, options_):
            if comm_ is not comm or stream_ is not stream or options_ != options:
                differs()
            run()
        return call
    a, a_dtype, a_shape, a_flags = arrays[0], arrays[0].dtype, arrays[0].shape, \
        arrays[0].flags.num
    if len(arrays) == 1:
        def call(given, comm_, stream_, options_):
            if given[0] is not a or comm_ is not comm or stream_ is not stream \
                    or options_ != options or a.dtype is not a_dtype or a.shape != a_shape \
                    or a.flags.num != a_flags:
                differs()
            run()
        return call
    b, b_dtype, b_shape, b_flags = arrays[1], arrays[1].dtype, arrays[1].shape, \
        arrays[1].flags.num

    def call(given, comm_, stream_, options_):
        if given[0] is not a or given[1] is not b or comm_ is not comm \
                or stream_ is not stream or options_ != options or a.dtype is not a_dtype \
                or a.shape != a_shape or a.flags.num != a_flags or b.dtype is not b_dtype \
                or b.shape != b_shape or b.flags.num != b_flags:
            differs()
        run()
    return call


def python_floor_new(arrays: tuple, comm, stream, options: tuple, run):
    """A call taking ``((a, b), comm, stream, options)`` for two new arrays that checks they
    are of the kind of ``arrays`` and cannot overlap, then calls ``run(a, b)``."""
    kind = tuple(state for array in arrays
                 for state in (array.dtype, array.shape, array.flags.num))
    owndata = 0x0004

    def call(given, comm_, stream_, options_):
        a, b = given
        if comm_ is not comm or stream_ is not stream or options_ != options \
                or (a.dtype, a.shape, a.flags.num, b.dtype, b.shape, b.flags.num) != kind \
                or not kind[2] & kind[5] & owndata:
            raise AssertionError("not the kept kind")
        run(a, b)
    return call


def cases(comm, inplace_buf, send, recv):
    """``{case: {row: call}}``; every call is collective and runs the case once."""
    mpi = MPI.COMM_WORLD.Dup()
    f32 = MPI.FLOAT
    auto = (al.ReductionOp.SUM, "automatic")
    out = {}

    ar_in = python_floor((inplace_buf,), comm, None, auto,
                         lambda: mpi.Allreduce(MPI.IN_PLACE, [inplace_buf, f32], MPI.SUM))
    plan_in = al.allreduce_init(inplace_buf, comm)
    out["allreduce in place"] = {
        "mpi4py": lambda: mpi.Allreduce(MPI.IN_PLACE, [inplace_buf, f32], MPI.SUM),
        "MPI persistent": _start_wait(mpi.Allreduce_init(MPI.IN_PLACE, inplace_buf)),
        "python floor": lambda: ar_in((inplace_buf,), comm, None, auto),
        "plan.run()": plan_in.run,
        "al.allreduce": lambda: al.allreduce(inplace_buf, comm),
    }
    ar_out = python_floor((send, recv), comm, None, auto,
                          lambda: mpi.Allreduce([send, f32], [recv, f32], MPI.SUM))
    plan_out = al.allreduce_init(send, comm, recvbuf=recv)
    plan_nb = al.allreduce_init(send, comm, recvbuf=recv)
    out["allreduce out of place"] = {
        "mpi4py": lambda: mpi.Allreduce([send, f32], [recv, f32], MPI.SUM),
        "MPI persistent": _start_wait(mpi.Allreduce_init(send, recv)),
        "python floor": lambda: ar_out((send, recv), comm, None, auto),
        "plan.run()": plan_out.run,
        "al.allreduce": lambda: al.allreduce(send, comm, recvbuf=recv),
        "start().wait()": lambda: plan_nb.start().wait(),
        "nonblocking().wait()":
            lambda: al.nonblocking_allreduce(send, comm, recvbuf=recv).wait(),
    }
    zeros = np.zeros
    new = python_floor_new((send, recv), comm, None, auto,
                           lambda a, b: mpi.Allreduce([a, f32], [b, f32], MPI.SUM))
    out["allreduce out of place, new buffers"] = {
        "mpi4py": lambda: mpi.Allreduce([zeros(1, np.float32), f32],
                                        [zeros(1, np.float32), f32], MPI.SUM),
        "python floor": lambda: new((zeros(1, np.float32), zeros(1, np.float32)), comm, None,
                                    auto),
        "al.allreduce": lambda: al.allreduce(zeros(1, np.float32), comm,
                                             recvbuf=zeros(1, np.float32)),
    }
    bc = python_floor((recv,), comm, None, (0, "automatic"), lambda: mpi.Bcast([recv, f32], 0))
    plan_bc = al.bcast_init(recv, comm)
    out["bcast"] = {
        "mpi4py": lambda: mpi.Bcast([recv, f32], 0),
        "MPI persistent": _start_wait(mpi.Bcast_init(recv)),
        "python floor": lambda: bc((recv,), comm, None, (0, "automatic")),
        "plan.run()": plan_bc.run,
        "al.bcast": lambda: al.bcast(recv, comm),
    }
    ba = python_floor((), comm, None, ("automatic",), mpi.Barrier)
    plan_ba = al.barrier_init(comm)
    out["barrier"] = {
        "mpi4py": mpi.Barrier,
        "MPI persistent": _start_wait(mpi.Barrier_init()),
        "python floor": lambda: ba((), comm, None, ("automatic",)),
        "plan.run()": plan_ba.run,
        "al.barrier": lambda: al.barrier(comm),
    }
    return out


def _start_wait(request):
    start, wait = request.Start, request.Wait

    def run():
        start()
        wait()
    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=2000, help="timed calls per row")
    parser.add_argument("--rounds", type=int, default=5, help="keep the best of this many")
    args = parser.parse_args(argv)
    comm = al.MPICommunicator()
    world = MPI.COMM_WORLD
    sync = world.Dup()
    inplace_buf = np.ones(1, np.float32)
    send, recv = np.ones(1, np.float32), np.zeros(1, np.float32)
    table = cases(comm, inplace_buf, send, recv)
    if world.rank == 0:
        print(f"# np={world.size}, 4 B float32, median µs of the slowest rank per call, "
              f"each call after a barrier, best of {args.rounds} interleaved rounds, "
              f"compiled: {al.compiled()}")
    for case, rows in table.items():
        names, calls = list(rows), list(rows.values())
        best = [float("inf")] * len(calls)
        for round_ in range(args.rounds):
            times = time_interleaved(calls, args.iters, 50 if round_ == 0 else 0,
                                     sync.Barrier, first=round_)
            for k, mine in enumerate(times):
                slowest = np.empty_like(mine)
                world.Allreduce(mine, slowest, MPI.MAX)
                best[k] = min(best[k], float(np.median(slowest)) * 1e6)
        if world.rank == 0:
            print(f"\n{case}\n{'':22s} {'µs':>7s} {'ratio':>7s}")
            for name, value in zip(names, best):
                print(f"{name:22s} {value:7.2f} {value / best[0]:7.2f}")
            sys.stdout.flush()
    sync.Free()
    comm.free()


if __name__ == "__main__":
    main()
