"""``dist.all_reduce`` on CUDA tensors over the "aluminum" backend, against its peers.

    python bench/torch_cuda.py [--sizes 4:64MiB] [--step 4] [--rounds 7] [--ranks 1,2]
                               [--json PATH]

Two tables, each peer measured in the same run, interleaved round by round:

1. one rank, this process: the "aluminum" group against a torch ``nccl`` group on the same
   tensor (in place, float32 SUM).  A batch is ``n`` calls then ``torch.cuda.synchronize()``;
   latency per call = batch time / n, the median over rounds.  (One rank is what one GPU
   allows NCCL.)
2. two ranks sharing the GPU (``python -m aluminum.run -n 2``): "aluminum" (the host-transfer
   path, as the ranks share a GPU) against a host-staged MPI allreduce of the same bytes
   (copy to pinned host memory, mpi4py ``Allreduce`` in place, copy back), each call followed
   by ``torch.cuda.synchronize()``; the median over rounds, the maximum over ranks.  The
   host-transfer twin's synchronous calls wait on the host unless ``AL_HT_BLOCKING=stream``
   (aluminum/torch/devices.py); the table's title says which ran.

Without a GPU it says so and exits 0.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def gpu_problem() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False"
    try:
        import cupy
    except ImportError:
        return "cupy is not installed"
    return None if cupy.is_available() else "cupy.is_available() is False"


def calls_per_batch(nbytes: int) -> int:
    return max(2, min(200, (1 << 26) // max(nbytes, 1)))


def timed(fn, calls: int, sync) -> float:
    """Seconds per call over one batch of ``calls`` (``sync`` at the end)."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls


def one_rank(sizes: list[int], rounds: int) -> dict:
    import torch
    import torch.distributed as dist

    import aluminum.torch  # noqa: F401 - registers the backend

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group("aluminum", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1)
    peers = {"aluminum": dist.group.WORLD, "nccl": dist.new_group(backend="nccl")}
    rows = {}
    for nbytes in sizes:
        tensor = torch.zeros(max(1, nbytes // 4), device="cuda")
        calls = calls_per_batch(nbytes)
        samples = {name: [] for name in peers}
        for name, group in peers.items():          # warm-up (the GPU twin is made here)
            timed(lambda: dist.all_reduce(tensor, group=group), 3, torch.cuda.synchronize)
        for _ in range(rounds):
            for name, group in peers.items():
                samples[name].append(timed(lambda: dist.all_reduce(tensor, group=group),
                                           calls, torch.cuda.synchronize))
        rows[nbytes] = {name: statistics.median(s) * 1e6 for name, s in samples.items()}
        print(f"  1 rank {nbytes} B: {rows[nbytes]}", flush=True)
    dist.destroy_process_group()
    return rows


def two_rank_worker(sizes: list[int], rounds: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    import aluminum.torch  # noqa: F401 - registers the backend

    torch.cuda.set_device(0)
    dist.init_process_group("aluminum")
    world = MPI.COMM_WORLD
    rows = {}
    for nbytes in sizes:
        count = max(1, nbytes // 4)
        tensor = torch.zeros(count, device="cuda")
        host = torch.empty(count, pin_memory=True)
        host_array = host.numpy()

        def ours():
            dist.all_reduce(tensor)
            torch.cuda.synchronize()

        def staged():
            host.copy_(tensor, non_blocking=True)
            torch.cuda.current_stream().synchronize()
            world.Allreduce(MPI.IN_PLACE, host_array, op=MPI.SUM)
            tensor.copy_(host, non_blocking=True)
            torch.cuda.synchronize()

        calls = max(2, calls_per_batch(nbytes) // 4)
        peers = {"aluminum (ht)": ours, "host-staged MPI": staged}
        samples = {name: [] for name in peers}
        for fn in peers.values():
            world.Barrier()
            timed(fn, 3, lambda: None)
        for _ in range(rounds):
            for name, fn in peers.items():
                world.Barrier()
                samples[name].append(timed(fn, calls, lambda: None))
        rows[nbytes] = {name: world.allreduce(statistics.median(s) * 1e6, op=MPI.MAX)
                        for name, s in samples.items()}
        if world.Get_rank() == 0:
            print(f"  2 ranks {nbytes} B: {rows[nbytes]}", flush=True)
    if world.Get_rank() == 0:
        Path(out).write_text(json.dumps(rows))
    dist.destroy_process_group()


def two_ranks(args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ht.json"
        cmd = [sys.executable, "-m", "aluminum.run", "-n", "2", "--timeout", str(args.timeout),
               sys.executable, str(HERE), "--worker", "--out", str(out), "--sizes",
               args.sizes, "--step", str(args.step), "--rounds", str(args.rounds)]
        code = subprocess.run(cmd, env=dict(os.environ, PYTHONUNBUFFERED="1")).returncode
        if code != 0 or not out.exists():
            print(f"two-rank job failed (exit code {code})", flush=True)
            return {}
        return {int(k): v for k, v in json.loads(out.read_text()).items()}


def table(title: str, rows: dict, ours: str, peer: str) -> str:
    from aluminum.bench.sizes import format_size

    lines = [title, f"| size | {ours} µs | {peer} µs | ratio |", "|---|---|---|---|"]
    for nbytes, row in sorted(rows.items()):
        lines.append(f"| {format_size(nbytes)} | {row[ours]:.1f} | {row[peer]:.1f} | "
                     f"{row[ours] / row[peer]:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/torch_cuda.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="4:64MiB", help="lo:hi or a,b,c (default 4:64MiB)")
    parser.add_argument("--step", type=int, default=4, help="factor between sizes (default 4)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per size")
    parser.add_argument("--timeout", type=float, default=300, help="seconds for the 2-rank job")
    parser.add_argument("--ranks", default="1,2", help="which tables: 1, 2 or 1,2 (default)")
    parser.add_argument("--json", help="write both tables' figures here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from aluminum.bench.sizes import parse_sizes

    sizes = parse_sizes(args.sizes, args.step)
    if args.worker:
        two_rank_worker(sizes, args.rounds, args.out)
        return 0
    problem = gpu_problem()
    if problem is not None:
        print(f"bench/torch_cuda.py: no GPU here ({problem}); nothing to run")
        return 0
    import torch

    device = torch.cuda.get_device_name(0)
    tables = {int(part) for part in args.ranks.split(",")}
    single = one_rank(sizes, args.rounds) if 1 in tables else {}
    shared = two_ranks(args) if 2 in tables else {}
    mode = os.environ.get("AL_HT_BLOCKING", "host")
    if single:
        print(table(f"\n# dist.all_reduce, CUDA float32 in place, 1 rank, {device}: per call "
                    f"(batch + synchronize), median of {args.rounds} rounds",
                    single, "aluminum", "nccl"))
    if shared:
        print(table(f"\n# dist.all_reduce, CUDA float32, 2 ranks sharing one {device} "
                    f"(HT blocking_mode={mode}): per call + synchronize, median of "
                    f"{args.rounds} rounds, max over ranks",
                    shared, "aluminum (ht)", "host-staged MPI"))
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "one_rank": single,
                                               "two_ranks_shared_gpu": shared,
                                               "ht_blocking_mode": mode}, indent=1))
    return 0 if shared or 2 not in tables else 1


if __name__ == "__main__":
    sys.exit(main())
