"""CPU time per small call on one rank: ours (as imported: compiled or not) against mpi4py.

    python bench/call_cpu.py [--calls 20000] [--rounds 5]
    AL_PURE_PYTHON=1 python bench/call_cpu.py      # the same, on the uncompiled modules

One rank (a singleton MPI job), 4 B float32, out of place.  Each row is timed with
``time.thread_time_ns`` (this thread's CPU time: other processes loading the cores add little)
over ``--calls`` calls, the rows interleaved round by round; each figure is the median over
rounds, in ns per call, with its ratio to the row's mpi4py counterpart measured in the same
rounds.  Rows: ``al.allreduce`` on the same buffers, on new buffers every call (``np.zeros``
in the call, for both libraries), ``plan.run()``, ``plan.start().wait()`` and
``al.nonblocking_allreduce(...).wait()`` (both against mpi4py's blocking call).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI

import aluminum as al


def rows(comm):
    """``[(name, ours, mpi4py's)]``: no-argument calls."""
    mpi = MPI.COMM_WORLD.Dup()
    f32, total, zeros = MPI.FLOAT, MPI.SUM, np.zeros
    send, recv = np.ones(1, np.float32), np.zeros(1, np.float32)
    plan = al.allreduce_init(send, comm, recvbuf=recv)
    plan_nb = al.allreduce_init(send, comm, recvbuf=recv)

    def peer():
        mpi.Allreduce([send, f32], [recv, f32], total)

    def peer_new():
        mpi.Allreduce([zeros(1, np.float32), f32], [zeros(1, np.float32), f32], total)

    return [
        ("al.allreduce", lambda: al.allreduce(send, comm, recvbuf=recv), peer),
        ("al.allreduce new buffers",
         lambda: al.allreduce(zeros(1, np.float32), comm, recvbuf=zeros(1, np.float32)),
         peer_new),
        ("plan.run()", plan.run, peer),
        ("plan.start().wait()", lambda: plan_nb.start().wait(), peer),
        ("nonblocking().wait()",
         lambda: al.nonblocking_allreduce(send, comm, recvbuf=recv).wait(), peer),
    ]


def per_call_ns(call, calls: int) -> float:
    clock = time.thread_time_ns
    begin = clock()
    for _ in range(calls):
        call()
    return (clock() - begin) / calls


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    comm = al.MPICommunicator()
    table = rows(comm)
    for _, ours, peer in table:   # warm up: plans made, kinds kept
        per_call_ns(ours, 100)
        per_call_ns(peer, 100)
    times: dict[str, tuple[list, list]] = {name: ([], []) for name, _, _ in table}
    for _ in range(args.rounds):
        for name, ours, peer in table:
            times[name][1].append(per_call_ns(peer, args.calls))
            times[name][0].append(per_call_ns(ours, args.calls))
    print(f"# compiled={al.compiled() if hasattr(al, 'compiled') else 'n/a'}, 1 rank, 4 B, "
          f"CPU ns per call, median of {args.rounds} rounds of {args.calls}")
    print(f"{'':28s} {'ours':>8s} {'mpi4py':>8s} {'ratio':>6s}")
    for name, (ours, peer) in times.items():
        a, b = statistics.median(ours), statistics.median(peer)
        print(f"{name:28s} {a:8.0f} {b:8.0f} {a / b:6.2f}")
    comm.free()


if __name__ == "__main__":
    main()
