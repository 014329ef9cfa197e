"""How far a training step's time wanders on this machine while nothing else runs: what
bounds any prediction of it made from a calibration taken seconds earlier.

    python -m aluminum.run -n 4 python bench/step_drift.py [--seconds 120] [--json out.json]

Builds the auto-parallel benchmark's three MLPs (bench/auto_parallel.py) under pure data
and pure model parallelism, six executors, then for ``--seconds`` measures window after
window: in each, the six take turns one step each, 15 times, and each gets the median of
the slowest rank's step times.  Printed: each program's range (slowest window / fastest);
the range of the window's common factor (geometric mean over the six) and each program's
range with it divided out (how much the programs move together); and for lags of 2 to 40
seconds, the share of (window, same program that much later) pairs more than 25 % apart --
how often even an oracle that knew a program's step time exactly would miss it by more
than the auto-parallel target that many seconds later.

What surprises people: the common factor moves most, and on this VM it moves for one
process alone too (docs/auto_parallel.md, "How much of a miss is the machine's").
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from mpi4py import MPI

import aluminum as al
from aluminum.executor.sharding.search import data_parallel, model_parallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from auto_parallel import MODELS, executor, take_turns  # noqa: E402

WORLD = MPI.COMM_WORLD
LAGS_S = (2, 5, 10, 20, 40)


def programs(comm) -> list[dict]:
    """Each model's executor under pure data and pure model parallelism, warmed up
    (``auto_parallel.executor``), with its ``label``."""
    runs = []
    for name, spec in MODELS.items():
        depth = len(spec[1]) - 1
        for kind, shards in (("DP", [data_parallel(comm.size)] * depth),
                             ("MP", model_parallel(depth, comm.size))):
            runs.append({**executor(comm, spec, shards), "label": f"{name} {kind}"})
    return runs


def windows(runs, seconds: float, steps: int = 15) -> tuple[np.ndarray, np.ndarray]:
    """(start seconds of each window, window × program median step seconds); in each
    window the programs take turns (``auto_parallel.take_turns``)."""
    start, starts, medians = time.perf_counter(), [], []
    while not WORLD.bcast(time.perf_counter() - start > seconds):
        starts.append(time.perf_counter() - start)
        for run in runs:
            run["times"] = []
        take_turns(runs, steps)
        medians.append([np.median(run["times"]) for run in runs])
    return np.array(starts), np.array(medians)


def summary(starts: np.ndarray, medians: np.ndarray) -> dict:
    """The ranges and the oracle's misses at each lag (module docstring)."""
    common = np.exp(np.log(medians).mean(axis=1))
    alone = medians / common[:, None]
    width = float(np.median(np.diff(starts))) if len(starts) > 1 else 1.0
    misses = {}
    for lag_s in LAGS_S:
        lag = max(1, round(lag_s / width))
        if lag < len(medians):
            apart = np.abs(np.log(medians[lag:] / medians[:-lag]))
            misses[lag_s] = float((apart > np.log(1.25)).mean())
    return {"window_s": width, "range": (medians.max(0) / medians.min(0)).tolist(),
            "common_range": float(common.max() / common.min()),
            "range_common_out": (alone.max(0) / alone.min(0)).tolist(),
            "oracle_misses": misses}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    with al.MPICommunicator() as comm:
        runs = programs(comm)
        starts, medians = windows(runs, args.seconds)
        for run in runs:
            run["pe"].close()
    if WORLD.rank != 0:
        return
    labels = [run["label"] for run in runs]
    found = summary(starts, medians)
    print(f"# {WORLD.size} ranks, {len(starts)} windows of {found['window_s']:.1f} s, "
          f"load average {' '.join(open('/proc/loadavg').read().split()[:3])}")
    print("| program | range | range, common factor out |\n|---|---|---|")
    for label, whole, alone in zip(labels, found["range"], found["range_common_out"]):
        print(f"| {label} | {whole:.2f} | {alone:.2f} |")
    print(f"# common factor's range {found['common_range']:.2f}")
    print("# an oracle's misses (> ±25 %) that many seconds later: " + ", ".join(
        f"{lag} s {share:.0%}" for lag, share in found["oracle_misses"].items()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"ranks": WORLD.size, "labels": labels, "starts": starts.tolist(),
                       "medians_ms": (medians * 1e3).tolist(), **found}, out, indent=1)


if __name__ == "__main__":
    main()
