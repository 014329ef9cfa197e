"""Data-parallel training step on the executor against torch DDP over gloo, same model and
batch (np=2 by default):

    python -m aluminum.run -n 2 bench/train.py
    python bench/train.py --hosts 2 [--np 4] [--link-mbit 1000]    # on emulated hosts

On several hosts (bench/hosts.py) every rank's gradients cross the hosts' links: the table's
header gives the host count, and torch DDP over gloo runs on the same cluster.

The set-ups take turns (an untimed step, then two timed ones each), so a change in load
hits them alike.  Rows: the sequential executor and the ParallelExecutor without
communication (each rank training alone: the compute a step needs), then the
ParallelExecutor with allreduces after the backward pass, overlapped with it, overlapped
and fused into 4 MiB buckets (the first 1 MiB), and with the reduce strategy; then torch
DDP over gloo.  Columns: median step time of the slowest rank, samples/s over all ranks,
the share of the step not explained by compute (step / the ParallelExecutor's
compute-only step - 1: time spent waiting on communication), and how busy the rank's
share of the cores was (process CPU time over wall time x cores per rank: near 100% means
no idle core was left for communication to overlap onto).  Last, weak scaling (samples/s
on N ranks / (N x samples/s on one)): rank 0 trains alone on its batch while the others
wait, once on the whole machine and once on its share of the cores (cores / N, as each
rank has in the N-rank runs).
"""
from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import aluminum as al  # noqa: E402
import aluminum.executor as ex  # noqa: E402
from aluminum.executor import layers  # noqa: E402

try:
    from . import hosts  # noqa: E402
except ImportError:       # run as a script: python bench/train.py
    import hosts  # noqa: E402

WIDTHS = (1024, 2048, 2048, 10)


def build():
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    startup.random_seed = 1
    with ex.program_guard(main, startup):
        image = layers.data("image", [WIDTHS[0]])
        label = layers.data("label", [1], "int64")
        hidden = image
        for i, width in enumerate(WIDTHS[1:-1]):
            hidden = layers.fc(hidden, width, act="relu", name=f"fc{i}")
        logits = layers.fc(hidden, WIDTHS[-1], name="logits")
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        ex.SGD(0.01).minimize(loss)
    return main, startup, loss


def step_seconds(step, comm, steps: int) -> tuple[float, float]:
    """(median step seconds of the slowest rank, this rank's CPU seconds per wall second)."""
    return interleaved({"": step}, comm, steps)[""]


def interleaved(steps_by_label: dict, comm, steps: int, per_turn: int = 2) -> dict:
    """``step_seconds`` of every set-up, ``{label: (seconds, cpu share)}``, measured in
    turns: each set-up runs one untimed step (its memory back in the caches), then
    ``per_turn`` timed ones, and the next set-up takes over; so a change in load hits them
    all alike, and none is timed on caches another one filled."""
    times = {label: [] for label in steps_by_label}
    cpu = dict.fromkeys(steps_by_label, 0.0)
    for _ in range(-(-steps // per_turn)):
        for label, step in steps_by_label.items():
            step()
            for _ in range(per_turn):
                comm.mpi_comm.Barrier()
                start, start_cpu = time.perf_counter(), time.process_time()
                step()
                cpu[label] += time.process_time() - start_cpu
                times[label].append(time.perf_counter() - start)
    return {label: (comm.mpi_comm.allreduce(statistics.median(times[label]), op=_max()),
                    cpu[label] / sum(times[label])) for label in steps_by_label}


def cores_per_rank(comm) -> float:
    return len(os.sched_getaffinity(0)) / comm.local_size


def pin_process(cores: set[int]) -> None:
    """Restrict every thread of this process (the engine's, the executor's) to ``cores``."""
    for thread in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(thread), cores)
        except OSError:   # a thread that just ended
            pass


def _max():
    from mpi4py import MPI

    return MPI.MAX


def executor_steps(comm, feed, threads) -> tuple[dict, list]:
    """``{label: one training step}`` of every executor set-up, and what to close after."""
    main, startup, loss = build()
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    sequential = ex.Executor()
    alone = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope,
                                exec_strategy=ex.ExecutionStrategy(threads))
    steps = {"sequential, no communication": lambda: sequential.run(main, feed, [loss], scope),
             "parallel, no communication": lambda: alone.run([loss], feed)}
    runners = [alone]
    for label, options in (("allreduce after backward", {"overlap": False}),
                           ("overlapped", {}),
                           ("overlapped + fused", {"fuse_all_reduce_ops": True,
                                                   "fuse_grad_size_mb": 4.0}),
                           ("reduce strategy + fused", {"reduce_strategy": "reduce",
                                                        "fuse_all_reduce_ops": True,
                                                        "fuse_grad_size_mb": 4.0})):
        runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope, comm=comm,
                                     build_strategy=ex.BuildStrategy(**options),
                                     exec_strategy=ex.ExecutionStrategy(threads))
        steps[label] = functools.partial(runner.run, [loss], feed)
        runners.append(runner)
    return steps, runners


def alone_seconds(comm, feed, steps, threads, cores: int | None = None) -> float:
    """Rank 0's compute-only step while the other ranks wait (broadcast to all), on the
    whole machine or, with ``cores``, on that many of its cores."""
    alone = comm.split(0 if comm.rank == 0 else None)
    seconds = None
    if alone is not None:
        everything = os.sched_getaffinity(0)
        if cores is not None:
            pin_process(set(sorted(everything)[:cores]))
        main, startup, loss = build()
        scope = ex.Scope()
        ex.Executor().run(startup, scope=scope)
        runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope,
                                     exec_strategy=ex.ExecutionStrategy(threads))
        seconds = step_seconds(lambda: runner.run([loss], feed), alone, steps)[0]
        runner.close()
        alone.free()
        pin_process(everything)
    return comm.mpi_comm.bcast(seconds, root=0)


def torch_step(comm, feed):
    """One step of torch DDP over gloo on the same model and batch."""
    import torch
    import torch.distributed as dist

    import aluminum.torch  # noqa: F401 - its rendezvous: an address every host reaches

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=comm.rank, world_size=comm.size)
    layers_ = []
    for i, (a, b) in enumerate(zip(WIDTHS, WIDTHS[1:])):
        layers_.append(torch.nn.Linear(a, b))
        if i < len(WIDTHS) - 2:
            layers_.append(torch.nn.ReLU())
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*layers_))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    images = torch.from_numpy(feed["image"])
    labels = torch.from_numpy(feed["label"][:, 0])

    def step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()
    return step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64, help="samples per rank")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None,
                        help="executor threads per rank (default: the executor's, "
                             "ex.default_threads: 1 where a rank has no core to spare)")
    parser.add_argument("--no-torch", action="store_true")
    hosts.add_options(parser)
    args = parser.parse_args(argv)
    launched = hosts.launch_on_hosts(args, __file__, sys.argv[1:] if argv is None else argv)
    if launched is not None:
        return launched
    comm = al.MPICommunicator()
    rng = np.random.default_rng(comm.rank)
    feed = {"image": rng.normal(size=(args.batch, WIDTHS[0])).astype(np.float32),
            "label": rng.integers(0, WIDTHS[-1], (args.batch, 1))}
    steps, runners = executor_steps(comm, feed, args.threads)
    if not args.no_torch:
        steps["torch DDP over gloo"] = torch_step(comm, feed)
    rows = list(interleaved(steps, comm, args.steps).items())
    for runner in runners:
        runner.close()
    if not args.no_torch:
        import torch.distributed as dist

        dist.destroy_process_group()
    single = alone_seconds(comm, feed, args.steps, args.threads)
    share = max(1, int(cores_per_rank(comm)))
    single_share = alone_seconds(comm, feed, args.steps, args.threads, share)
    busy = [comm.mpi_comm.allreduce(cpu, op=_max()) for _, (_, cpu) in rows]
    if comm.rank == 0:
        gradients_mb = sum(a * b + b for a, b in zip(WIDTHS, WIDTHS[1:])) * 4 / 2 ** 20
        compute = rows[1][1][0]
        print(f"# np={comm.size} on {comm.node_count} host(s), batch {args.batch}/rank, "
              f"MLP {WIDTHS} ({gradients_mb:.0f} "
              f"MiB of float32 gradients), {args.threads or ex.default_threads(comm)} threads, "
              f"median of {args.steps}, "
              f"{cores_per_rank(comm):g} cores per rank")
        print(f"{'set-up':30s} {'step ms':>9s} {'samples/s':>10s} {'comm wait':>10s} "
              f"{'CPU busy':>9s}")
        for (label, (seconds, _)), cpu in zip(rows, busy):
            wait = max(0.0, seconds / compute - 1) if label != rows[0][0] else 0.0
            print(f"{label:30s} {seconds * 1e3:9.1f} {args.batch * comm.size / seconds:10.0f} "
                  f"{wait:10.0%} {cpu / cores_per_rank(comm):9.0%}")
        fused = dict(rows)["overlapped + fused"][0]
        print(f"# one rank alone on the whole machine: {single * 1e3:.1f} ms/step; weak-scaling "
              f"efficiency of overlapped + fused on {comm.size} ranks: {single / fused:.2f}")
        print(f"# one rank alone on {share} core(s), its share at np={comm.size}: "
              f"{single_share * 1e3:.1f} ms/step; weak-scaling efficiency: "
              f"{single_share / fused:.2f}")
    comm.free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
