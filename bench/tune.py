"""``python -m aluminum.bench tune``: measure every algorithm, write the selector's table.

For every operation the backend offers more than one algorithm for, the tuner sweeps all of
them side by side (bench/sweep.py, same sizes and buffers; each point the best of
``--rounds`` rounds), in place and out of place: the two rank algorithms differently here
(between 32 KiB and 512 KiB on 2 ranks the shared-memory allreduce is up to 2× faster than
Open MPI's out of place, and up to 1.5× slower in place), so the rule for calls of unknown
placement must hold for both, and where the placements' best choices differ each also gets a
rule of its own (``rules_from``; the selector's ``placement`` key). Each rule assigns one
algorithm to each size, judging by the points' median latencies (an Avg moves with the odd
2 ms stall of a busy VM): never more than ``DEFAULT_MARGIN`` (10%) slower than the backend's default
(``mpi_passthrough``) in either mode — "automatic" must never lose to the plain library call
— and within that, at most ``MAX_SLOWDOWN`` (5%) slower than the fastest in either mode
where possible, and otherwise as few changes of algorithm as possible — each change must buy
at least ``SWITCH_PENALTY`` (10%) of summed relative slowdown — because neighbouring sizes
on a busy 2-core machine jitter by a few percent and a threshold per jitter would be noise,
not tuning. The backend's default (``mpi_passthrough``: C all the way, the least disturbed
by a busy CPU) is preferred unless another algorithm is more than ``DEFAULT_PREFERENCE``
(2%) faster. A change of algorithm starts a new threshold at the first size where it
applies, so a size between two measured ones uses the smaller's choice (the selector's
nearest-lower rule).

Where zero-copy applies (allreduce on a backend with ``al.shared_empty``), every algorithm is
also swept on shared buffers (on a communicator of their own, bench/sweep.py), and where their
best choices differ from the private buffers' the table gets rules of its own for
communicators with shared buffers (``"buffers": "shared"``): ``shared_memory`` reduces shared
buffers without copies and wins from far smaller sizes than on private ones, which it stages.

Nonblocking calls are swept the same way (each call timed to the end of its ``wait()``) and
get rules of their own (``"mode": "nonblocking"``), since they take other code paths: Open
MPI's nonblocking allreduce on fewer than 4 ranks reduces and broadcasts whole vectors, so
a custom algorithm may win there where the blocking library call does not. Blocking rules
carry no mode and also serve nonblocking calls the table has no rule for.

The measured latencies of every op (Avg) are printed (stdout, rank 0) before its rule, so the
evidence for each threshold is on screen. Thresholds are as good as the machine is quiet:
on the 2-core development VM, Open MPI's in-place allreduce of 64–512 KiB takes 1× or 2×
its best time depending on the job (independent of buffer alignment), so tune on an idle
machine and expect mid-size rules to move between runs.

Rounds are taken within one job, and some differences last a whole job: on the 2-core VM,
Open MPI's allreduce runs 1× or 2× its best for the whole job (where its shared memory lands;
out of place at 1 MiB: 112-305 µs in three jobs of one tune, 577 µs in the next job, while
the shared-memory allreduce took 117-286 µs), and one day's full tunes put the out-of-place
switch to ``shared_memory`` at 32 KiB in one and at 16 KiB in two others. ``tune --np N
--jobs K`` therefore measures in K jobs and treats each job as one more mode: an algorithm's
slowdown at a size is its worst over the jobs too, so the choice is the one that loses least
in any job (a choice by median times kept the library call at that 1 MiB, ahead in two of
the three jobs, and the next sweep's job ran it 2× slower than shared_memory). The first
K - 1 jobs record their measurements in a temporary file, the last decides and writes the
table.

It also runs a raw-MPI ping-pong between ranks 0 and 1 and fits the α-β model the selector
falls back on for comm sizes and operations the table lacks: α from the small sizes
(intercept), β from the large ones (slope), both clamped at 0; per size the one-way time is
half the median round trip, the lowest of ``rounds`` rounds.

The table (shared/DESIGN.md §4, ``aluminum-tuning/1``) goes to ``--output``, else
``$AL_TUNING_FILE``, else ``selector.user_table_path()``. Rules already in that file for
other (backend, op, comm size, mode) are kept, so ``tune --np 2`` then ``tune --np 4``
accumulate.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import socket
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
from mpi4py import MPI

from aluminum import Buffers
from aluminum.tuning import costmodel, selector

from . import ops, report, sweep
from .sizes import format_size

MAX_SLOWDOWN = 0.05
SWITCH_PENALTY = 0.10
DEFAULT_PREFERENCE = 0.02
DEFAULT_MARGIN = 0.10
PINGPONG_SMALL = [4, 16, 64, 256, 1024]
PINGPONG_LARGE = [64 << 10, 256 << 10, 1 << 20, 4 << 20]


Points = dict[str, list[sweep.Point]]   # series name -> its points, one per size


def tunable_ops(backend) -> list[str]:
    """Operations (known to the bench) for which `backend` offers a choice of algorithm by
    size: not barrier, which has no size (the cost model makes its choice)."""
    return [op for op, spec in ops.SPECS.items()
            if spec.kind != "barrier" and len(backend.ops.get(op, ())) > 1]


def choose(modes: Sequence[Sequence[Points]], default: str) -> list[tuple[int, str]]:
    """By-bytes rule entries from each algorithm's points in each mode (in place, out of
    place), a mode given as its measurements, one per job (``--jobs``); every list over the
    same sizes.

    An algorithm's slowdown at a size is its worst over the modes and jobs, relative to
    each one's fastest there. Only algorithms at most ``DEFAULT_MARGIN`` slower than
    `default` in every mode are eligible (in the median job: one job's noise does not bar an
    algorithm that is 2× faster in the others). Picks one algorithm per size with slowdown at
    most ``MAX_SLOWDOWN`` (or the least possible among the eligible), minimising total
    slowdown plus ``SWITCH_PENALTY`` per change of algorithm and ``DEFAULT_PREFERENCE`` per
    size not given to `default`: a shortest path over sizes × algorithms, as in Viterbi
    decoding."""
    measured = [job for jobs in modes for job in jobs]
    names = [name for name in measured[0] if all(name in job for job in measured)]
    sizes = [pt.size for pt in measured[0][names[0]]]
    # cost[name] = (total, path) of the best assignment of the sizes so far ending in name
    cost: dict[str, tuple[float, list[str]]] = {name: (0.0, []) for name in names}
    for i in range(len(sizes)):
        slowdown = dict.fromkeys(names, 0.0)
        for job in measured:
            best = min(job[name][i].median_us for name in names)
            for name in names:
                if best > 0:
                    slowdown[name] = max(slowdown[name], job[name][i].median_us / best - 1)
        safe = [name for name in names if default not in names or all(
            statistics.median(job[name][i].median_us / max(job[default][i].median_us, 1e-9)
                              for job in jobs) <= 1 + DEFAULT_MARGIN
            for jobs in modes)]
        allowed = max(MAX_SLOWDOWN, min(slowdown[name] for name in safe))
        step: dict[str, tuple[float, list[str]]] = {}
        for name in safe:
            if slowdown[name] > allowed:
                continue
            here = slowdown[name] + (0.0 if name == default else DEFAULT_PREFERENCE)
            total, path = min(((c + (SWITCH_PENALTY if i and prev != name else 0.0), p)
                               for prev, (c, p) in cost.items() if c != float("inf")),
                              key=lambda cp: cp[0])
            step[name] = (total + here, path + [name])
        cost = {name: step.get(name, (float("inf"), [])) for name in names}
    winners = min(cost.values(), key=lambda cp: cp[0])[1]
    by_bytes: list[tuple[int, str]] = []
    for size, winner in zip(sizes, winners):
        if not by_bytes or by_bytes[-1][1] != winner:
            by_bytes.append((size if by_bytes else 0, winner))
    return by_bytes


def rules_from(backend: str, op: str, p: int, modes: Sequence[Sequence[Points]],
               placements: Sequence[bool], default: str) -> list[selector.Rule]:
    """The rules for (backend, op, p) from ``modes[i]``, the measurements of ``placements[i]``
    (one per job): one rule that holds in every placement and job and, when in place and out
    of place each have a different best choice, one rule per placement too (used by calls
    whose placement is known; the first by the others)."""
    def rule(chosen, placement=None):
        by_bytes = tuple((ops.spec(op).selector_bytes(size, p), algo) for size, algo in chosen)
        return selector.Rule(backend, op, p, by_bytes, placement)

    rules = [rule(choose(modes, default))]
    if len(modes) == 2:
        each = [choose([placement], default) for placement in modes]
        if each[0] != each[1]:
            rules += [rule(chosen, selector.placement_of(inplace))
                      for chosen, inplace in zip(each, placements)]
    return rules


def shared_rules(private: Sequence[selector.Rule],
                 shared: Sequence[selector.Rule]) -> list[selector.Rule]:
    """The rules measured on shared buffers (``rules_from``'s) that choose otherwise than
    the private buffers' rule a call of the same placement would take (the selector's own
    ``rules_for``), limited to communicators with shared buffers."""
    table = selector.Table(tuple(private))

    def taken(rule):
        return table.rules_for(rule.backend, rule.op, rule.placement)[rule.comm_size]
    return [dataclasses.replace(rule, buffers=Buffers.SHARED) for rule in shared
            if rule.by_bytes != taken(rule).by_bytes]


def _placement_words(rule: selector.Rule) -> str:
    """" (nonblocking inplace calls)" and the like: whom a rule is limited to."""
    words = " ".join(w for w in (rule.mode, rule.placement) if w)
    if rule.buffers is not None:
        words = f"{words} {rule.buffers}-buffer".strip()
    return f" ({words} calls)" if words else ""


def fit_pingpong(world: MPI.Comm, iters: int = 200,
                 rounds: int = 3) -> costmodel.AlphaBeta | None:
    """α, β from a raw-MPI ping-pong between ranks 0 and 1 (None on other ranks; collective).

    The other ranks wait without spinning (a polled ``Ibarrier`` with sleeps), so that on an
    oversubscribed node they do not steal the two ranks' cores and inflate α."""
    rank = world.Get_rank()
    pair = world.Split(0 if rank < 2 else MPI.UNDEFINED, rank)
    one_way: dict[int, float] = {}
    if pair != MPI.COMM_NULL and pair.Get_size() == 2:
        for size in PINGPONG_SMALL + PINGPONG_LARGE:
            buf = np.zeros(size, np.uint8)
            peer = 1 - rank
            if rank == 0:
                fn = lambda: (pair.Send(buf, peer), pair.Recv(buf, peer))  # noqa: E731
            else:
                fn = lambda: (pair.Recv(buf, peer), pair.Send(buf, peer))  # noqa: E731
            n = sweep.scaled(iters, size, 20)
            one_way[size] = min(float(np.median(sweep.time_calls(fn, n, max(2, n // 10),
                                                                 pair.Barrier)))
                                for _ in range(rounds)) / 2
    if pair != MPI.COMM_NULL:
        pair.Free()
    done = world.Ibarrier()
    while not done.Test():
        time.sleep(1e-3)
    if rank != 0 or not one_way:
        return None
    small = costmodel.fit_alpha_beta(PINGPONG_SMALL, [one_way[s] for s in PINGPONG_SMALL])
    large = costmodel.fit_alpha_beta(PINGPONG_LARGE, [one_way[s] for s in PINGPONG_LARGE])
    return costmodel.AlphaBeta(max(small.alpha, 0.0), max(large.beta, 0.0))


def destination(output: str | None) -> Path:
    """Where the table goes: --output, else $AL_TUNING_FILE, else the user cache."""
    return Path(output or os.environ.get("AL_TUNING_FILE") or selector.user_table_path())


def merge(path: Path, rules: Sequence[selector.Rule]) -> list[selector.Rule]:
    """`rules` plus the rules already at `path` for other (backend, op, comm size, mode): a
    blocking-only tune keeps the nonblocking rules, and the other way round."""
    kept: list[selector.Rule] = []
    if path.exists():
        try:
            old = selector.read_table(path)
        except selector.TuningTableError as exc:
            warnings.warn(f"aluminum.bench tune: replacing unusable table {path}: {exc}")
        else:
            fresh = {(r.backend, r.op, r.comm_size, r.mode) for r in rules}
            kept = [r for r in old.rules
                    if (r.backend, r.op, r.comm_size, r.mode) not in fresh]
    return sorted(kept + list(rules),
                  key=lambda r: (r.backend, r.op, r.comm_size, r.mode or "",
                                 r.buffers or "", r.placement or ""))


def run(comm, world: MPI.Comm, sizes: list[int], *, iters: int, warmup: int, rounds: int,
        output: str | None, note: str, only: list[str] | None = None,
        placements: Sequence[bool] = (True, False), nonblocking: Sequence[bool] = (False, True),
        fresh: bool = False, progress: bool = True, record: str | None = None,
        earlier: Sequence[str] = ()) -> Path | None:
    """Sweep, fit, write the table (rank 0); return its path on rank 0, None elsewhere.

    `placements` lists the placements to sweep (True in place, False out of place),
    `nonblocking` the call forms (False blocking, True nonblocking: rules of mode
    "nonblocking").  `tune --jobs K` measures in K jobs: the first K - 1 only `record` their
    measurements (a JSON file; no table, no ping-pong), and the last decides by its own and
    the `earlier` jobs' measurements together (each job one more mode for ``choose``)."""
    backend = comm.backend
    rank = world.Get_rank()
    targets = [op for op in tunable_ops(backend) if not only or op in only]
    if rank == 0 and not targets:
        print(f"[tune] the {backend.name} backend offers no choice of algorithm for "
              f"{', '.join(only or ops.SPECS)}; only the ping-pong model is written",
              file=sys.stderr)
    jobs = Jobs(record, earlier if rank == 0 else ())
    rules = []
    for op in targets:
        for form in nonblocking:
            rules += _tune_op(comm, world, op, sizes, placements, form, jobs, iters=iters,
                              warmup=warmup, rounds=rounds, progress=progress)
    if record is not None:
        if rank == 0:
            jobs.save()
        return None
    model = fit_pingpong(world, rounds=rounds)
    if rank != 0:
        return None
    return write(destination(output), rules, model, metadata(comm.local_size, note),
                 fresh=fresh)


class Jobs:
    """This job's measurements and, for the deciding job, the earlier jobs' (``--jobs``).

    Keyed by ``"op/blocking|nonblocking/inplace|outofplace"``: ``{series name: [points]}``."""

    def __init__(self, record: str | None, earlier: Sequence[str]) -> None:
        self.record = record
        self.mine: dict[str, dict[str, list]] = {}
        self.earlier = [json.loads(Path(path).read_text()) for path in earlier]

    def decide_by(self, key: str, measured: Points) -> list[Points]:
        """Keep `measured` for recording; return it and the earlier jobs' measurements of
        `key` over the same sizes (each job one more "mode" for ``choose``)."""
        self.mine[key] = {name: [dataclasses.asdict(pt) for pt in points]
                          for name, points in measured.items()}
        sizes = [pt.size for pt in next(iter(measured.values()), [])]
        jobs = [measured]
        for job in self.earlier:
            theirs = {name: [sweep.Point(**pt) for pt in points]
                      for name, points in job.get(key, {}).items()}
            if theirs and all([pt.size for pt in points] == sizes for points in theirs.values()):
                jobs.append(theirs)
            else:   # (jobs run with the same arguments: not expected)
                print(f"[tune] {key}: an earlier job measured other sizes; left out",
                      file=sys.stderr)
        return jobs

    def save(self) -> None:
        Path(self.record).write_text(json.dumps(self.mine))


def _tune_op(comm, world: MPI.Comm, op: str, sizes: list[int], placements: Sequence[bool],
             nonblocking: bool, jobs: Jobs, **sweep_options) -> list[selector.Rule]:
    """Sweep every algorithm of `op` in each placement, in blocking or nonblocking form;
    return the rules chosen (on rank 0; an empty list elsewhere, and in recording jobs)."""
    backend, p, rank = comm.backend, world.Get_size(), world.Get_rank()
    form = "nonblocking" if nonblocking else "blocking"
    zero_copy = op == "allreduce" and backend.allocate_shared is not None
    modes, shared_modes = [], []
    for inplace in placements:
        algos = backend.algorithms(op)
        config = sweep.Config(op, sizes, algos, backend=backend.name, inplace=inplace,
                              nonblocking=nonblocking, shared=list(algos) if zero_copy else [],
                              **sweep_options)
        series = sweep.run(config, comm, world, [])
        if rank == 0:
            result = sweep.Result(op, backend.name, p, "float32", inplace, nonblocking, series)
            print("\n".join(report.format_matrix(result)), flush=True)
            key = f"{op}/{form}/{selector.placement_of(inplace)}"
            measured = {s.name: s.points for s in series if s.points}
            suffix = sweep.SHARED_SUFFIX
            modes.append(jobs.decide_by(key, {name: points for name, points in measured.items()
                                              if not name.endswith(suffix)}))
            if zero_copy:
                shared_modes.append(jobs.decide_by(
                    f"{key}/shared", {name[:-len(suffix)]: points
                                      for name, points in measured.items()
                                      if name.endswith(suffix)}))
    if rank != 0 or jobs.record is not None:
        return []
    if jobs.earlier:
        print(f"[tune] {op} ({form}): deciding by the worst of {len(modes[0])} jobs",
              file=sys.stderr, flush=True)
    if not all(modes):
        print(f"[tune] {op} ({form}): no algorithm could run; no rule", file=sys.stderr)
        return []
    default = backend.default_algorithm or next(iter(modes[0]))
    rules = rules_from(backend.name, op, p, modes, placements, default)
    if shared_modes and all(shared_modes):
        rules += shared_rules(rules, rules_from(backend.name, op, p, shared_modes, placements,
                                                default))
    if nonblocking:
        rules = [dataclasses.replace(rule, mode="nonblocking") for rule in rules]
    for rule in rules:
        print(f"[tune] {op} on {p} ranks{_placement_words(rule)}: " + ", ".join(
            f"{format_size(t)}: {a}" for t, a in rule.by_bytes), file=sys.stderr, flush=True)
    return rules


def write(path: Path, rules: Sequence[selector.Rule], model: costmodel.AlphaBeta | None,
          meta: dict, *, fresh: bool = False) -> Path:
    """Write the table (merged with `path`'s other rules unless `fresh`); return the path.

    The table is validated first, against the registered backends' algorithm names, so
    the tuner never writes a file the selector would reject."""
    from aluminum.backends import get_backend

    table = selector.Table(tuple(rules if fresh else merge(path, rules)), model, meta,
                           str(path))
    selector.parse_table(table.to_json(), str(path),
                         lambda backend, op: get_backend(backend).algorithms(op))
    return selector.write_table(table, path)


def metadata(ranks_per_node: int, note: str) -> dict:
    """Where and when the table was measured."""
    return {"created": datetime.datetime.now().isoformat(timespec="seconds"),
            "host": socket.gethostname(),
            "mpi": MPI.Get_library_version().splitlines()[0].split(",")[0].strip(),
            "ranks_per_node": ranks_per_node, "note": note}


def format_rules(table: selector.Table) -> str:
    """The table in words: metadata, model, then each rule's size ranges."""
    lines = [f"# tuning table: {table.source}"]
    meta = table.metadata
    if meta:
        lines.append("# " + ", ".join(f"{k} {meta[k]}" for k in ("created", "host", "mpi",
                                                                  "ranks_per_node")
                                      if k in meta))
        if "note" in meta:
            lines.append(f"# note: {meta['note']}")
    if table.model is not None:
        lines.append(f"# model: alpha = {table.model.alpha * 1e6:.3g} us, "
                     f"beta = {table.model.beta * 1e9:.4g} ns/B")
    if not table.rules:
        lines.append("(no rules: the selector uses the cost model or each backend's default)")
    for rule in table.rules:
        lines.append(f"{rule.backend} {rule.op}, {rule.comm_size} ranks"
                     f"{_placement_words(rule)}:")
        for i, (threshold, algo) in enumerate(rule.by_bytes):
            upper = (f"< {format_size(rule.by_bytes[i + 1][0])}"
                     if i + 1 < len(rule.by_bytes) else "and up")
            lines.append(f"  {format_size(threshold):>8} {upper:<12} {algo}")
    return "\n".join(lines) + "\n"
