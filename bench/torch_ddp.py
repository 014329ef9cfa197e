"""Data-parallel training step time, three ways side by side, and small ``dist.all_reduce``
latency, gloo against "aluminum".

    python -m aluminum.run -n 2 bench/torch_ddp.py [--steps 20] [--batch 8]
    python bench/torch_ddp.py --hosts 2 [--np 4] [--link-mbit 1000]   # on emulated hosts

Set-ups (same model, same data, torch threads = 1 per rank): torch DDP over gloo, torch DDP
over the "aluminum" backend, aluminum.torch.DistributedDataParallel, and the same model with
no communication at all (the floor).  The model is an MLP with 32 MiB of float32 gradients;
the set-ups take turns step by step, every step is timed between barriers, and the median is
reported with samples/s (global batch / median step).  Latency: the median over repeats of
the mean time of a batch of calls, per size, with a barrier before each batch.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.distributed as dist

import aluminum.torch as altorch

try:
    from . import hosts
except ImportError:       # run as a script: python bench/torch_ddp.py
    import hosts

SIZES = [4, 64, 1024, 16384, 65536]          # bytes of float32


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(),
                               torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
                               torch.nn.Linear(2048, 1024))


def step_times(parallels: dict, steps: int, batch: int, barrier) -> dict[str, list[float]]:
    """Seconds of each timed step of each set-up; the set-ups take turns step by step, so
    load that comes and goes on the machine weighs on all of them alike."""
    optimizers = {mode: torch.optim.SGD(parallel.parameters(), lr=1e-3)
                  for mode, parallel in parallels.items()}
    inputs, targets = torch.randn(batch, 1024), torch.randn(batch, 1024)
    times: dict[str, list[float]] = {mode: [] for mode in parallels}
    for step in range(steps + 3):                   # 3 warm-up steps (bucket rebuild)
        for mode, parallel in parallels.items():
            barrier()
            start = time.perf_counter()
            optimizers[mode].zero_grad()
            torch.nn.functional.mse_loss(parallel(inputs), targets).backward()
            optimizers[mode].step()
            if step >= 3:
                times[mode].append(time.perf_counter() - start)
    return times


def latency_us(group, nbytes: int, calls: int, repeats: int) -> float:
    tensor = torch.ones(nbytes // 4)
    means = []
    for _ in range(repeats):
        dist.barrier(group)
        start = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(tensor, group=group)
        means.append((time.perf_counter() - start) / calls)
    return statistics.median(means) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8, help="samples per rank per step")
    parser.add_argument("--repeats", type=int, default=15,
                        help="latency: batches of calls per size (median over them)")
    hosts.add_options(parser)
    args = parser.parse_args()
    launched = hosts.launch_on_hosts(args, __file__, sys.argv[1:])
    if launched is not None:
        sys.exit(launched)
    torch.set_num_threads(1)
    dist.init_process_group("aluminum")
    ours, gloo = dist.group.WORLD, dist.new_group(backend="gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    grad_mib = sum(p.numel() * 4 for p in make_model().parameters()) / 2 ** 20

    def barrier():
        dist.barrier(ours)
    parallels = {
        "local (no comm)": make_model(),
        "gloo-ddp": torch.nn.parallel.DistributedDataParallel(make_model(), process_group=gloo),
        "aluminum-ddp": torch.nn.parallel.DistributedDataParallel(make_model(),
                                                                  process_group=ours),
        "aluminum-dp": altorch.DistributedDataParallel(make_model()),
    }
    times = step_times(parallels, args.steps, args.batch, barrier)
    parallels["aluminum-dp"].close()
    rows = [(mode, statistics.median(seconds)) for mode, seconds in times.items()]
    latency = [(n, latency_us(gloo, n, 50, args.repeats),
                latency_us(ours, n, 500, args.repeats)) for n in SIZES]
    if rank != 0:
        dist.destroy_process_group()
        return
    gloo_step = dict(rows)["gloo-ddp"]
    print(f"# np={size} on {ours.comm.node_count} host(s), torch threads=1, MLP with "
          f"{grad_mib:.1f} MiB of gradients, "
          f"{args.batch} samples/rank/step, median of {args.steps} steps")
    print(f"{'set-up':<16}{'step ms':>10}{'samples/s':>12}{'vs gloo DDP':>13}")
    for mode, median in rows:
        print(f"{mode:<16}{median * 1e3:>10.1f}{args.batch * size / median:>12.1f}"
              f"{median / gloo_step:>12.2f}x")
    print(f"\n# dist.all_reduce (float32, sync), median us")
    print(f"{'bytes':>8}{'gloo':>10}{'aluminum':>10}{'ratio':>8}")
    for nbytes, g, a in latency:
        print(f"{nbytes:>8}{g:>10.1f}{a:>10.1f}{a / g:>8.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
