"""Allreduce, reduce, bcast or allgather across emulated hosts: measured against the
two-level model and the link's bound.

    python bench/two_level.py --hosts 2 --np 4 --link-mbit 1000 [--sizes 1MiB,4MiB,16MiB]
        [--op allreduce|reduce|bcast|allgather] [--write tuning.json]

Starts itself on ``--np`` ranks over ``--hosts`` emulated hosts (aluminum.launch.emulated_hosts),
then, in one job:
1. fits α and β inside a host (ping-pong rank 0 ↔ 1) and between hosts (rank 0 ↔ the first
   rank of the next host) with ``costmodel.fit_alpha_beta``;
2. times every algorithm of ``--op`` offered across hosts, ``automatic`` and mpi4py's
   call (median of ``--iters``, the slowest rank per iteration; reduce and bcast rooted at
   rank 0; allgather sizes are the gathered result);
3. counts the bytes the busiest host sends to other hosts per call (its ``eth0`` tx
   counter, TCP/IP headers included) next to the least the busiest must send
   (``two_level_model.least_bytes``: allreduce ``2·S·(H − 1)/H``, reduce and bcast ``S``,
   allgather ``S·(H − 1)/H``);
4. prints the model's prediction for each, and the model's crossovers extrapolated to 64
   nodes of 8 ranks with the fitted parameters;
5. with ``--write``, adds a tuning rule measured across this many nodes (and the fitted
   ``inter_model``) to that table, which the selector then uses on multi-node communicators.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

SIZES_DEFAULT = "1MiB,4MiB,16MiB"
OPS = ("allreduce", "reduce", "bcast", "allgather")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--link-mbit", type=float, default=None)
    parser.add_argument("--sizes", default=SIZES_DEFAULT)
    parser.add_argument("--op", choices=OPS, default="allreduce")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--peer-max", default="16MiB",
                        help="largest size at which mpi4py's call is timed (it can be "
                             "very slow on shaped links)")
    parser.add_argument("--write", default=None, help="tuning table to add the rule to")
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    if "OMPI_COMM_WORLD_SIZE" not in os.environ:
        from aluminum.launch import launch

        return launch(args.np, [sys.executable, __file__, *sys.argv[1:]], hosts=args.hosts,
                      link_mbit=args.link_mbit, timeout=args.timeout).returncode
    return run(args)


def run(args) -> int:
    import aluminum as al
    from aluminum.tuning import costmodel, selector, two_level_model
    from aluminum.bench.sizes import format_size, parse_sizes

    comm = al.MPICommunicator()
    world = comm.mpi_comm
    layout = selector.node_layout(comm)
    if layout is None or layout[1] == 0:
        raise SystemExit("two_level: expected ranks on several hosts with as many on each, "
                         f"got nodes {comm.nodes}")
    nodes = two_level_model.Nodes(*layout)
    local, first_of_next = comm.nodes[0][1] if nodes.ranks_per_node > 1 else None, \
        comm.nodes[1][0]
    intra = ping_pong(world, 0, local) if local is not None else costmodel.AlphaBeta(0, 0)
    inter = ping_pong(world, 0, first_of_next)
    sizes = parse_sizes(args.sizes)
    peer_max = parse_sizes(args.peer_max)[0]
    op = args.op
    algos = ["automatic", *al.algorithms(op, comm=comm)]
    rows = []
    for size in sizes:
        for algo in algos + ["mpi4py"]:
            if algo == "mpi4py" and size > peer_max:
                continue
            call = calls(op, comm, size // 4, algo)
            seconds, sent = timed(world, call, args.iters)
            picked = algo
            if algo == "automatic":
                picked = selector.select_algorithm("mpi", op, comm.size, size,
                                                   "mpi_passthrough", False, False, layout)
            predicted = (two_level_model.predict(op, picked, nodes, size, intra, inter)
                         if picked in two_level_model.ALGORITHMS[op] else None)
            rows.append((size, algo, picked, seconds, sent, predicted))
    if comm.rank == 0:
        report(rows, nodes, intra, inter, args, format_size)
        if args.write:
            write_rule(args.write, op, rows, nodes, comm.size, inter)
    comm.free()
    return 0


def calls(op: str, comm, count: int, algo: str):
    """A callable running ``op`` once on ``count`` float32 with ``algo`` (``"mpi4py"``:
    mpi4py's blocking call), out of place; rooted ops at rank 0; allgather gathers ``count``
    in all."""
    import numpy as np

    import aluminum as al

    world, root = comm.mpi_comm, comm.rank == 0
    send, recv = np.ones(count, np.float32), np.empty(count, np.float32)
    mine = send[:count // comm.size]
    if algo == "mpi4py":
        return {"allreduce": lambda: world.Allreduce(send, recv),
                "reduce": lambda: world.Reduce(send, recv if root else None, root=0),
                "bcast": lambda: world.Bcast(send, root=0),
                "allgather": lambda: world.Allgather(mine, recv[:mine.size * comm.size])}[op]
    if op == "allgather":
        return lambda: al.allgather(mine, comm, recvbuf=recv[:mine.size * comm.size],
                                    algo=algo)
    return {"allreduce": lambda: al.allreduce(send, comm, recvbuf=recv, algo=algo),
            "reduce": lambda: al.reduce(send, comm, recvbuf=recv if root else None,
                                        algo=algo),
            "bcast": lambda: al.bcast(send, comm, algo=algo)}[op]


def ping_pong(world, a: int, b: int, sizes=(8, 1 << 16, 1 << 20, 4 << 20), repeats=5):
    """α, β between ranks ``a`` and ``b`` (half the median round trip per size, fitted);
    the other ranks wait."""
    import numpy as np

    from aluminum.tuning import costmodel

    rank, halves = world.Get_rank(), []
    for size in sizes:
        buf = np.zeros(size, np.uint8)
        trips = []
        for _ in range(repeats):
            world.Barrier()
            start = time.perf_counter()
            if rank == a:
                world.Send(buf, b)
                world.Recv(buf, b)
            elif rank == b:
                world.Recv(buf, a)
                world.Send(buf, a)
            trips.append(time.perf_counter() - start)
        halves.append(float(np.median(trips)) / 2)
    fitted = costmodel.fit_alpha_beta(list(sizes), halves) if rank == a else None
    fitted = world.bcast(fitted, root=a)
    # An unshaped link is as fast as memory: the fit is then noise and may come out negative.
    return costmodel.AlphaBeta(max(fitted.alpha, 0.0), max(fitted.beta, 0.0))


def timed(world, call, iters: int):
    """Median over ``iters`` of the slowest rank's time, and the median bytes the busiest
    host sent out of its ``eth0`` per call (0 where it cannot be read)."""
    import numpy as np
    from mpi4py import MPI

    call()                                   # warm-up: plans, windows, connections
    times, sent = [], []
    for _ in range(iters):
        world.Barrier()
        before = tx_bytes()
        start = time.perf_counter()
        call()
        elapsed = time.perf_counter() - start
        world.Barrier()
        sent.append(tx_bytes() - before)
        times.append(world.allreduce(elapsed, op=MPI.MAX))
    leads = _leads_host(world)
    return float(np.median(times)), world.allreduce(float(np.median(sent)) if leads else 0.0,
                                                    op=MPI.MAX)


def _leads_host(world) -> bool:
    """Whether this rank is its host's first (MPI's own node split, freed at once)."""
    from mpi4py import MPI

    node = world.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return node.Get_rank() == 0
    finally:
        node.Free()


def tx_bytes() -> int:
    """Bytes sent out of this host's ``eth0`` so far (``/proc/net/dev`` shows the reading
    process's network namespace; ``/sys/class/net`` would show the root one's)."""
    with open("/proc/net/dev") as table:
        for line in table:
            name, _, fields = line.partition(":")
            if name.strip() == "eth0":
                return int(fields.split()[8])
    return 0


def report(rows, nodes, intra, inter, args, format_size) -> None:
    from aluminum.tuning import two_level_model

    print(f"# {args.op} on {nodes.count} emulated hosts x {nodes.ranks_per_node} ranks, "
          f"links {args.link_mbit or 'unshaped'} Mbit/s, float32, out of place, "
          f"median of {args.iters}")
    print(f"# fitted: intra α={intra.alpha * 1e6:.1f} us β={intra.beta * 1e9:.3f} ns/B; "
          f"inter α={inter.alpha * 1e6:.1f} us β={inter.beta * 1e9:.3f} ns/B "
          f"({8 / inter.beta / 1e6 if inter.beta else 0:.0f} Mbit/s)")
    print(f"{'size':>8} {'series':<24} {'ms':>9} {'model ms':>9} {'model/meas':>10} "
          f"{'x bound':>8} {'host MiB sent':>13} {'bound MiB':>9}")
    for size, algo, picked, seconds, sent, predicted in rows:
        bound = two_level_model.lower_bound(nodes, size, inter, args.op)
        least = two_level_model.least_bytes(args.op, nodes, size)
        name = f"{algo} ({picked})" if algo == "automatic" else algo
        model = f"{predicted * 1e3:9.2f} {predicted / seconds:10.2f}" if predicted else \
            f"{'-':>9} {'-':>10}"
        print(f"{format_size(size):>8} {name:<24} {seconds * 1e3:9.2f} {model} "
              f"{seconds / bound if bound else 0:8.2f} {sent / 2**20:13.2f} "
              f"{least / 2**20:9.2f}")
    big = two_level_model.Nodes(64, 8)
    sizes = [4 << i for i in range(0, 26)]
    print(f"# model crossovers at 64 nodes x 8 ranks (fitted α, β): " + ", ".join(
        f"{algo} from {format_size(size)}"
        for size, algo in two_level_model.crossovers(big, intra, inter, sizes, op=args.op)))
    print(f"# model crossovers at {nodes.count} x {nodes.ranks_per_node}: " + ", ".join(
        f"{algo} from {format_size(size)}"
        for size, algo in two_level_model.crossovers(nodes, intra, inter, sizes,
                                                     op=args.op)))


def write_rule(path, op, rows, nodes, comm_size, inter) -> None:
    """Add the measured winners as a rule for this many nodes to the table at ``path``."""
    from pathlib import Path

    from aluminum.tuning import selector
    from aluminum.bench import tune

    winners = []
    for size in sorted({row[0] for row in rows}):
        ours = [row for row in rows if row[0] == size and row[1] not in ("automatic",
                                                                          "mpi4py")]
        best = min(ours, key=lambda row: row[3])[1]
        if not winners or winners[-1][1] != best:
            winners.append((0 if not winners else size, best))
    rule = selector.Rule("mpi", op, comm_size, tuple(winners), nodes=nodes.count)
    target = Path(path)
    old = selector.read_table(target) if target.exists() else None
    rules = [r for r in (old.rules if old else ()) if not (
        r.op == op and r.comm_size == comm_size and r.nodes == nodes.count)]
    table = selector.Table(tuple(rules) + (rule,), old.model if old else None,
                           dict(old.metadata) if old else tune.metadata(
                               nodes.ranks_per_node, "two_level.py"),
                           str(target), inter)
    selector.write_table(table, target)
    print(f"# wrote the rule {list(map(list, winners))} for {nodes.count} nodes to {target}")


if __name__ == "__main__":
    sys.exit(main())
