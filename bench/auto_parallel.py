"""AUTO_PARALLEL benchmark: the searched strategy against pure data and pure model
parallelism, predicted (the search's cost model, calibrated on this machine) and measured.

    python -m aluminum.run -n 4 python bench/auto_parallel.py [--steps 15] [--cached]
        [--json out.json] [--fusion on|off|both] [--recalibrate]

For a deep-narrow MLP, a wide MLP and a memory-bounded one (Adam, bound 0.95 x data
parallelism's memory estimate): per strategy the predicted and measured step time (the
slowest rank's, median over the steps; every strategy of every model takes its turn, one
step each, so that a slow spell of the machine falls on all rows alike),
predicted/measured, the bytes moved per step (summed over ranks: the planner's prediction
and the runtime's count), the collective calls per step (the model's count and the
runtime's), the memory estimate per rank and the search time; then how many rows are
within ±25 %, the job's mean pred/meas (its speed against its calibration) and the
measured ratio of rows that ran the same strategy (the measurement's own spread); the JSON
keeps each row's step times (``step_ms``).
Pure model parallel is Megatron's column/row alternation.  Each strategy runs twice,
taking turns: with each gradient summed by its own allreduce (the BuildStrategy default)
and with the sums fused in buckets (``BuildStrategy(fuse_all_reduce_ops=True)``, the
search told so); ``--fusion off`` or ``on`` runs only one.  The machine is calibrated
afresh for the first model (a few seconds), since a calibration made under another load (or
another state of the VM) predicts every step too slow or too fast; ``--cached`` reads the
cached one instead (``calibrate.cache_path()``), as the search does outside the bench.
``--recalibrate`` calibrates afresh once more after the rows are measured and predicts
every row with that calibration too: two calibrations of the same machine some 20-30 s
apart, and how many rows they predict more than 25 % apart (how far the model's input
moves on this machine, a floor under the ±25 % target that no form of the model lowers).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

import numpy as np
from mpi4py import MPI

import aluminum as al
import aluminum.executor as ex
from aluminum.executor import layers
from aluminum.executor.sharding.auto import fc_chain
from aluminum.executor.sharding.calibrate import program_model
from aluminum.executor.sharding.search import data_parallel, estimate, model_parallel

WORLD = MPI.COMM_WORLD
MODELS = {   # name: (batch, widths, optimizer, bounded)
    "deep-narrow": (512, [64] * 17, ex.SGD, False),
    "wide": (32, [1024] * 4, ex.SGD, False),
    "memory-bounded": (192, [128] * 7, ex.Adam, True),
}


def build(batch, widths, optimizer, shards):
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        h = layers.data("x", (batch, widths[0]), "float64", append_batch_size=False)
        t = layers.data("t", (batch, widths[-1]), "float64", append_batch_size=False)
        for i, width in enumerate(widths[1:]):
            h = layers.fc(h, width, act="tanh", name=f"l{i}",
                          shard=None if shards is None else shards[i])
        loss = layers.mean(layers.square_error_cost(h, t))
        optimizer(0.001).minimize(loss)
    return main, startup, loss


def executor(comm, spec, shards, fused=False, model=None, bound=None) -> dict:
    """``spec``'s executor under ``shards`` (None: searched with ``model`` under ``bound``
    MB), made and warmed up, as ``take_turns`` runs it (``fused``: the gradient sums fused
    in buckets, ``fuse_all_reduce_ops``)."""
    batch, widths, optimizer, _ = spec
    strategy = ex.BuildStrategy(fuse_all_reduce_ops=fused)
    mode = ex.ParallelMode.AUTO_PARALLEL if shards is None else \
        ex.ParallelMode.SEMI_AUTO_PARALLEL
    ex.set_parallel_context(parallel_mode=mode, comm=comm, cost_model=model,
                            max_memory_mb=bound)
    main, startup, loss = build(batch, widths, optimizer, shards)
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    pe = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope, build_strategy=strategy)
    ex.reset_parallel_context()      # (the executor took what it needs from it)
    rng = np.random.default_rng(0)
    feed = {"x": rng.normal(size=(batch, widths[0])), "t": rng.normal(size=(batch, widths[-1]))}
    for _ in range(4):      # (the first steps of a configuration make its sub-communicators)
        pe.run([loss.name], feed)
    return {"pe": pe, "loss": loss.name, "feed": feed, "main": main, "times": [], "moved": 0}


def told_fusion(model, fused: bool):
    """``model`` told whether the gradient sums are fused, in BuildStrategy's buckets."""
    strategy = ex.BuildStrategy(fuse_all_reduce_ops=fused)
    return dataclasses.replace(model, buckets=(strategy.first_bucket_mb,
                                               strategy.fuse_grad_size_mb) if fused else None)


def prepare(comm, model, spec, shards, bound, fused) -> dict:
    """One strategy's executor (``executor``) and its row's predictions (``shards`` None:
    the search's)."""
    model = told_fusion(model, fused)
    run = executor(comm, spec, shards, fused, model, bound)
    found = getattr(run["pe"].program, "auto_parallel", None)
    strategies = found.strategies if found else shards
    chain, _ = fc_chain(run["main"])
    predicted = estimate(chain, comm.size, strategies, model)
    run["row"] = {"strategies": [list(map(list, s)) for s in strategies], "fused": fused,
                  "predicted_ms": predicted.time * 1e3, "bytes_predicted": predicted.moved,
                  "collectives_predicted": predicted.collectives,
                  "memory_mb": predicted.memory / 2**20,
                  "search_ms": found.seconds * 1e3 if found else None}
    return run


def take_turns(runs: list[dict], steps: int) -> None:
    """The executors take turns, one step each, ``steps`` times (so a slow spell of the
    machine falls on all of them): each run's ``times`` gets the slowest rank's seconds
    per step, ``moved`` and ``calls`` the bytes received (summed over ranks) and the
    collectives of its last step."""
    for _ in range(steps):
        for run in runs:
            WORLD.Barrier()
            start = time.perf_counter()
            with ex.count_traffic() as traffic:
                run["pe"].run([run["loss"]], run["feed"])
            run["times"].append(WORLD.allreduce(time.perf_counter() - start, op=MPI.MAX))
            run["moved"] = WORLD.allreduce(traffic.received, op=MPI.SUM)
            run["calls"] = len(traffic.calls)


def measure(prepared: list[dict], steps: int) -> list[dict]:
    """Each prepared strategy's row with its measured step time (``take_turns``, then the
    median), its traffic and its step times; the executors are closed."""
    take_turns(prepared, steps)
    rows = []
    for run in prepared:
        run["pe"].close()
        rows.append({**run["row"], "measured_ms": float(np.median(run["times"])) * 1e3,
                     "step_ms": [t * 1e3 for t in run["times"]],
                     "bytes_measured": run["moved"], "collectives_measured": run["calls"]})
    return rows


def predict_again(comm, runs: list[dict]) -> list[float]:
    """Each run's step time (ms) predicted by a second calibration, made afresh after the
    rows were measured (and cached in place of the first): how far two calibrations of
    one machine, the rows' measurement between them, predict the same strategy apart."""
    models, again = {}, []
    for run in runs:
        spec = MODELS[run["model"]]
        if run["model"] not in models:
            program = build(*spec[:3], None)[0]
            models[run["model"]] = program_model(program, comm, refresh=not models)
        model = told_fusion(models[run["model"]], run["row"]["fused"])
        chain, _ = fc_chain(run["main"])
        strategies = [tuple(map(tuple, s)) for s in run["row"]["strategies"]]
        again.append(estimate(chain, comm.size, strategies, model).time * 1e3)
    return again


def short(strategies) -> str:
    names = {str(list(map(list, data_parallel(len_)))): "DP" for len_ in (2, 4)}
    kinds = [names.get(str(s), str(tuple(map(tuple, s))).replace(" ", "")) for s in strategies]
    if len(set(kinds)) == 1:
        return f"{kinds[0]} x{len(kinds)}"
    return ", ".join(kinds[:2]) + (" ..." if len(kinds) > 2 else "")


def spread(rows: list[dict]) -> dict:
    """What the rows say of the prediction and of the measurement: rows within ±25 %; the
    geometric mean of pred/meas (the job's speed against its calibration) and the rows
    within ±25 % once it is divided out; measured ratios of rows of one model and fusion
    that ran the same strategy (two executors of one program: the measurement's spread);
    where rows were predicted again (``predict_again``), the rows that prediction puts
    within ±25 % and the rows whose two predictions lie more than 25 % apart."""
    logs = np.log([r["predicted_ms"] / r["measured_ms"] for r in rows])
    limit = np.log(1.25)
    same = []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            if (a["model"], a["fused"], a["strategies"]) == (b["model"], b["fused"],
                                                             b["strategies"]):
                same.append(a["measured_ms"] / b["measured_ms"])
    found = {"within": int((abs(logs) <= limit).sum()),
             "job_factor": float(np.exp(logs.mean())),
             "within_job_factor_out": int((abs(logs - logs.mean()) <= limit).sum()),
             "same_strategy": same}
    if all("predicted_again_ms" in r for r in rows):
        again = np.log([r["predicted_again_ms"] / r["measured_ms"] for r in rows])
        found["within_again"] = int((abs(again) <= limit).sum())
        found["calibrations_apart"] = int((abs(again - logs) > limit).sum())
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--cached", action="store_true",
                        help="read the cached calibration instead of calibrating again")
    parser.add_argument("--json", default=None)
    parser.add_argument("--fusion", choices=("on", "off", "both"), default="both",
                        help="fuse the gradient sums in buckets (BuildStrategy's "
                             "fuse_all_reduce_ops), not, or both taking turns")
    parser.add_argument("--recalibrate", action="store_true",
                        help="calibrate again after the rows are measured and predict "
                             "them with that calibration too (its repeatability)")
    args = parser.parse_args()
    fusion = {"on": (True,), "off": (False,), "both": (False, True)}[args.fusion]
    prepared, labels = [], []
    refresh = not args.cached   # (the first model's calibration refreshes the cache)
    with al.MPICommunicator() as comm:
        size = comm.size
        for name, spec in MODELS.items():
            batch, widths, optimizer, bounded = spec
            depth = len(widths) - 1
            model = program_model(build(batch, widths, optimizer, None)[0], comm, refresh)
            refresh = False
            dp, mp = [data_parallel(size)] * depth, model_parallel(depth, size)
            bound = None
            if bounded:
                main_, _, _ = build(batch, widths, optimizer, None)
                chain, _ = fc_chain(main_)
                bound = 0.95 * estimate(chain, size, dp, model).memory / 2**20
            for label in ("searched", "data parallel", "model parallel"):
                for fused in fusion:
                    labels.append({"model": name, "bound_mb": bound, "strategy": label + (
                        "" if args.fusion != "both" else " fused" if fused else " unfused")})
            prepared += [{**prepare(comm, model, spec, shards, bound, fused), "model": name}
                         for shards in (None, dp, mp) for fused in fusion]
        rows = [{**label, **row} for label, row in zip(labels, measure(prepared, args.steps))]
        if args.recalibrate:
            for row, again in zip(rows, predict_again(comm, prepared)):
                row["predicted_again_ms"] = again
    if WORLD.rank == 0:
        load = open("/proc/loadavg").read().split()[:3]
        print(f"# {size} ranks, float64, {args.steps} steps; last cost model: op {model.op:.3g} s, "
              f"compute_scale {model.compute_scale:.2f}, op_scale {model.op_scale:.2f}, "
              f"call {model.call * 1e6:.0f} us, "
              f"reduction_call {model.reduction_call * 1e6:.0f} us, overlap {model.overlap:g}, "
              f"{len(model.steps)} step kinds and {len(model.kernels)} layer kernels measured")
        print(f"# load average {' '.join(load)} on {os.cpu_count()} CPUs")
        summary = spread(rows)
        print(f"# rows within ±25 %: {summary['within']} of {len(rows)}; pred/meas "
              f"geometric mean {summary['job_factor']:.2f} (this job's speed against its "
              f"calibration), {summary['within_job_factor_out']} within ±25 % with it divided "
              f"out; the same strategy in two rows of a model measured "
              f"{', '.join(f'{r:.2f}' for r in summary['same_strategy'])} apart")
        if args.recalibrate:
            print(f"# calibrated again after the rows: {summary['within_again']} of "
                  f"{len(rows)} rows within ±25 % of that prediction; the two calibrations "
                  f"predict {summary['calibrations_apart']} rows more than 25 % apart")
        print("| model | strategy | strategies | predicted ms | measured ms | pred/meas | "
              "bytes/step predicted | measured | collectives predicted | counted | "
              "memory MB | search ms |" + (" predicted again ms |" if args.recalibrate else ""))
        print("|---" * (12 + args.recalibrate) + "|")
        for r in rows:
            search = f"{r['search_ms']:.1f}" if r["search_ms"] is not None else ""
            bound = f" (bound {r['bound_mb']:.2f} MB)" if r["bound_mb"] else ""
            print(f"| {r['model']}{bound} | {r['strategy']} | {short(r['strategies'])} | "
                  f"{r['predicted_ms']:.2f} | {r['measured_ms']:.2f} | "
                  f"{r['predicted_ms'] / r['measured_ms']:.2f} | {r['bytes_predicted']:,.0f} | "
                  f"{r['bytes_measured']:,.0f} | {r['collectives_predicted']:.3g} | "
                  f"{r['collectives_measured']} | {r['memory_mb']:.2f} | {search} |"
                  + (f" {r['predicted_again_ms']:.2f} |" if args.recalibrate else ""))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as out:
                json.dump({"ranks": size, "load": load, "model": dataclasses.asdict(model),
                           "rows": rows, "summary": summary},
                          out, indent=1)


if __name__ == "__main__":
    main()
