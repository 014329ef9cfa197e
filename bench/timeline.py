"""One data-parallel training step on the executor as a text timeline: what overlaps what.

    python -m aluminum.run -n 2 bench/timeline.py            # overlapped + fused
    python -m aluminum.run -n 2 bench/timeline.py --no-overlap

Trains ``bench/train.py``'s MLP for a few steps with ``AL_TRACE`` on, then prints rank 0's
last step from the trace: one row per executor stream (the threads running compute ops, the
communication stream), each op a bar on a common time axis, then the op list in start order
and how much of the communication ran while compute ops ran on another stream.  The
Chrome trace itself (``$AL_TRACE``, default ``<tmp>/timeline.json``, one file per rank:
its path is printed) opens in chrome://tracing or Perfetto.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
TRACE = os.environ.get("AL_TRACE") or os.path.join(tempfile.gettempdir(), "timeline.json")
os.environ["AL_TRACE"] = TRACE   # before aluminum is imported: it reads AL_TRACE once

import numpy as np  # noqa: E402

import aluminum as al  # noqa: E402
import aluminum.executor as ex  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import WIDTHS, build  # noqa: E402

COLUMNS = 100


def train(comm, batch: int, steps: int, overlap: bool, threads: int) -> tuple[float, float]:
    """Run ``steps`` steps; the trace-clock (start, end) of the last one, in µs."""
    main, startup, loss = build()
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    options = {"fuse_all_reduce_ops": True, "fuse_grad_size_mb": 4.0} if overlap \
        else {"overlap": False}
    runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope, comm=comm,
                                 build_strategy=ex.BuildStrategy(**options),
                                 exec_strategy=ex.ExecutionStrategy(threads))
    rng = np.random.default_rng(comm.rank)
    feed = {"image": rng.normal(size=(batch, WIDTHS[0])).astype(np.float32),
            "label": rng.integers(0, WIDTHS[-1], (batch, 1))}
    for _ in range(steps - 1):
        runner.run([loss], feed)
    comm.mpi_comm.Barrier()
    start = al.trace.now_us()
    runner.run([loss], feed)
    end = al.trace.now_us()
    runner.close()
    return start, end


def spans(path: str, start: float, end: float) -> list[dict]:
    """The executor's op spans inside [start, end], times made relative to start (µs)."""
    events = [e for e in al.trace.read(path)
              if e.get("cat") == "executor" and e.get("ph") == "X"
              and start <= e["ts"] and e["ts"] + e["dur"] <= end]
    return [{"name": e["name"], "stream": e["args"]["stream"], "start": e["ts"] - start,
             "end": e["ts"] + e["dur"] - start} for e in events]


COMMUNICATION = {"allreduce", "fused_allreduce", "reduce", "fused_reduce", "broadcast"}


def is_communication(span: dict) -> bool:
    return span["name"] in COMMUNICATION


def overlap_us(communication: list[dict], compute: list[dict]) -> float:
    """How long at least one communication op ran while a compute op ran elsewhere."""
    def merged(items):
        out = []
        for begin, finish in sorted((s["start"], s["end"]) for s in items):
            if out and begin <= out[-1][1]:
                out[-1][1] = max(out[-1][1], finish)
            else:
                out.append([begin, finish])
        return out
    total = 0.0
    for a0, a1 in merged(communication):
        for b0, b1 in merged(compute):
            total += max(0.0, min(a1, b1) - max(a0, b0))
    return total


def chart(items: list[dict], length: float) -> list[str]:
    """One text row per stream: ``#`` where a compute op runs, ``C`` where communication."""
    rows = []
    for stream in sorted({s["stream"] for s in items}):
        cells = [" "] * COLUMNS
        for s in items:
            if s["stream"] != stream:
                continue
            first = int(s["start"] / length * COLUMNS)
            last = max(first, min(COLUMNS - 1, int(s["end"] / length * COLUMNS)))
            for i in range(first, last + 1):
                cells[i] = "C" if is_communication(s) else "#"
        rows.append(f"{stream:>14s} |{''.join(cells)}|")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64, help="samples per rank")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-overlap", action="store_true",
                        help="every allreduce after the backward pass, unfused")
    args = parser.parse_args(argv)
    comm = al.MPICommunicator()
    start, end = train(comm, args.batch, args.steps, not args.no_overlap, args.threads)
    rank = comm.rank
    comm.free()
    al.finalize()    # closes the trace files
    if rank != 0:
        return 0
    path = al.trace.output_path(TRACE, 0)
    items = spans(path, start, end)
    length = end - start
    communication = [s for s in items if is_communication(s)]
    compute = [s for s in items if not is_communication(s)]
    mode = "no overlap" if args.no_overlap else "overlapped + fused"
    print(f"# rank 0, last of {args.steps} steps, {mode}: {length / 1e3:.1f} ms; '#' compute "
          f"op, 'C' communication op, {length / COLUMNS / 1e3:.2f} ms per column")
    print("\n".join(chart(items, length)))
    print(f"{'start ms':>9s} {'ms':>7s}  {'stream':14s} op")
    for s in sorted(items, key=lambda s: s["start"]):
        if s["end"] - s["start"] >= length / 200 or is_communication(s):
            print(f"{s['start'] / 1e3:9.2f} {(s['end'] - s['start']) / 1e3:7.2f}  "
                  f"{s['stream']:14s} {s['name']}")
    busy = sum(s["end"] - s["start"] for s in communication)
    print(f"# communication ops: {busy / 1e3:.1f} ms in all; "
          f"{overlap_us(communication, compute) / 1e3:.1f} ms of it while compute ops ran "
          f"on another stream")
    print(f"# Chrome trace: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
