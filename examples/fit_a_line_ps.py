"""fit_a_line as Paddle's placement design writes it (issue 11771): ONE program, placed by a
parameter-server strategy; every rank runs its part of it; the transfers follow from where
the variables live.

    python -m aluminum.run -n 3 --roles trainer:2,pserver:1 examples/fit_a_line_ps.py

Without --roles the last rank is the pserver and the others are trainers.  Prints the
placement and the per-role programs, trains, and checks the pserver's parameters against a
single-process run of the same program on the whole batch.
"""
import os
import sys

import numpy as np

import aluminum as al
import aluminum.executor as ex
from aluminum.executor import layers

STEPS, SAMPLES = 40, 240


def build():
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    startup.random_seed = 1
    with ex.program_guard(main, startup):
        x = layers.data("x", [13], "float64")
        y = layers.data("y", [1], "float64")
        prediction = layers.fc(x, 1, name="fc")
        loss = layers.mean(layers.square_error_cost(prediction, y))
        ex.SGD(learning_rate=0.05).minimize(loss)
    return main, startup, loss


def dataset():
    rng = np.random.default_rng(0)
    features = rng.normal(size=(SAMPLES, 13))
    prices = features @ rng.normal(size=(13, 1)) + 0.5 + 0.01 * rng.normal(size=(SAMPLES, 1))
    return features, prices


def main() -> int:
    comm = al.MPICommunicator()
    spec = os.environ.get("AL_ROLES") or f"trainer:{comm.size - 1},pserver:1"
    cluster = ex.Cluster.from_spec(spec, comm)
    program, startup, loss = build()
    ex.place(program, ex.ParameterServerStrategy(), cluster)
    if comm.rank == 0:
        print(ex.explain_placement(program))
        placed = ex.plan_transfers(program)
        for role, ranks in cluster.roles.items():
            print(f"\n--- {role} program ---")
            print(placed.listing(ranks[0]))
        print()
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    features, prices = dataset()
    trainers = cluster.roles["trainer"]
    feed = {}
    if comm.rank in trainers:
        index = trainers.index(comm.rank)
        feed = {"x": ex.shard(features, len(trainers), index),
                "y": ex.shard(prices, len(trainers), index)}
    runner = ex.ParallelExecutor(program, loss_name=loss.name, scope=scope, comm=comm)
    losses = [runner.run([loss], feed)[0] for _ in range(STEPS)]
    runner.close()

    # the same program unplaced, one process, the whole batch
    reference, reference_startup, reference_loss = build()
    alone = ex.Scope()
    ex.Executor().run(reference_startup, scope=alone)
    for _ in range(STEPS):
        ex.Executor().run(reference, {"x": features, "y": prices}, [reference_loss], alone)
    ok = True
    if cluster.role_of(comm.rank) == "pserver":
        for name in ("fc.w", "fc.b"):
            if name in scope and cluster.ranks(program.global_block().var(name).place) == \
                    (comm.rank,):
                ok &= np.allclose(scope[name], alone[name], rtol=1e-10, atol=1e-12)
        print(f"pserver rank {comm.rank}: parameters equal one process's full-batch run: {ok}")
    else:
        ok = losses[-1][0] < 0.05 * losses[0][0]
        print(f"trainer rank {comm.rank}: loss {losses[0][0]:.4f} -> {losses[-1][0]:.4f}")
    ok = comm.mpi_comm.allreduce(bool(ok), op=__import__("mpi4py").MPI.LAND)
    if comm.rank == 0:
        print(f"fit_a_line_ps over {comm.size} ranks ({cluster.describe()}): "
              f"{'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
