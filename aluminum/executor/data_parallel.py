"""Data parallelism across ranks (Paddle's multi_devices_graph_pass and all_reduce_deps_pass,
MindSpore's gradient reducer), on one place per rank.

``data_parallel_program`` rewrites a trained program: the loss gradient is scaled
(``gradient_scale``: "coeff_num_device" multiplies it by 1/N, the only averaging;
"one" leaves it; "customized" removes its fill so the user feeds ``<loss>@GRAD``;
"samples" weights each rank and place by its number of samples, see below), and one
``allreduce`` op is inserted right after the op that finishes each parameter gradient, so
it can run while the rest of the backward pass computes.

Which mode equals full-batch training: with a loss that is the mean over the samples fed
(``layers.mean`` of per-sample losses, plus terms that do not depend on the samples),
"coeff_num_device" equals it only when every rank and place gets the same number of
samples (an uneven share weights its mean loss as much as a full one), "samples" for
every split, empty shares included.  Under "samples" the loss gradient of each place is its
number of samples (``sample_count``: the rows of the first batched data variable the loss
reads), so a rank's gradient is the sum of its per-sample gradients; every bucket carries
the rank's sample count after its gradients (``buckets.py``: the counts are summed by the
bucket's own allreduce, no collective of their own), and each reduced bucket is divided by
the total.  A rank or place with no samples contributes zero.  Without a communicator
(several places in one process) each place's loss gradient is its share of the process's
samples instead.  The allreduces keep program order
as one chain (``build_graph`` orders communication ops), so every rank issues them in the
same order whatever the thread timing: MPI ranks can never deadlock or mismatch.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

import aluminum as al

from .backward import GRAD, _ops_feeding
from .errors import ProgramError
from .ir import Operator, Program
from .places import place_name, replicate

GRADIENT_SCALES = ("coeff_num_device", "one", "customized", "samples")
REDUCE_STRATEGIES = ("all_reduce", "reduce")


def data_parallel_program(program: Program, loss_name: str, num_devices: int,
                          gradient_scale: str = "coeff_num_device", overlap: bool = True,
                          fuse_grad_size_mb: float | None = None,
                          first_bucket_mb: float = 1.0, reduce_strategy: str = "all_reduce",
                          rank: int = 0, places: int = 1,
                          across_ranks: bool = True) -> Program:
    """A copy of ``program`` that averages (or sums) parameter gradients across ranks and
    ``places`` places in each process (``num_devices`` = places x ranks; places.py
    replicates the forward and backward ops and sums each gradient over the places first;
    ``across_ranks=False``: one process, no communication ops).

    ``overlap=False`` puts every allreduce after the whole backward pass instead (the
    baseline overlap is measured against).  ``fuse_grad_size_mb``: gradients are grouped,
    in the order the backward pass finishes them, into buckets of at most that size (the
    first at most ``first_bucket_mb``, as DDP's; ``al.assign_buckets`` is the rule, the same
    as aluminum.torch's DDP), one ``fused_allreduce`` per bucket right after its last
    gradient is finished.

    ``reduce_strategy="reduce"`` (Paddle's ReduceStrategy.Reduce, a sharded optimizer): each
    parameter has one owner rank (owners balanced by bytes, see ``owners``); its gradient is
    reduced to the owner only, only the owner runs its optimizer ops (so the program depends
    on ``rank``), and the updated parameter is broadcast from the owner at the end of the
    step.  Same results as "all_reduce"; each rank updates about 1/N of the parameters."""
    if gradient_scale not in GRADIENT_SCALES:
        raise ProgramError(f"gradient_scale: expected one of {', '.join(GRADIENT_SCALES)}, "
                           f"got {gradient_scale!r}")
    if reduce_strategy not in REDUCE_STRATEGIES:
        raise ProgramError(f"reduce_strategy: expected one of {', '.join(REDUCE_STRATEGIES)}, "
                           f"got {reduce_strategy!r}")
    result = program.clone()
    block = result.global_block()
    loss_grad = loss_name + GRAD
    fills = [i for i, op in enumerate(block.ops)
             if op.type == "fill_constant" and op.output_names() == [loss_grad]]
    if len(fills) != 1:
        raise ProgramError(f"loss_name: {loss_name!r} has no backward pass in this program "
                           "(call an optimizer's minimize or append_backward first)")
    counted = None
    if gradient_scale == "coeff_num_device":
        block.ops[fills[0]].attrs["value"] = 1.0 / num_devices
    elif gradient_scale == "customized":
        del block.ops[fills[0]]
        block.var(loss_grad).stop_gradient = True
    elif gradient_scale == "samples":
        counted = _counted_input(block, loss_name)
        fill = block.ops[fills[0]]
        block.ops[fills[0]] = Operator("sample_count", {"X": [counted]}, {"Out": [loss_grad]},
                                       {"shape": list(fill.attrs["shape"]),
                                        "dtype": fill.attrs["dtype"], "op_role": "loss_grad"})
    if places > 1:
        result = replicate(result, places)
        block = result.global_block()
    samples = None
    if counted is not None:
        copies = [place_name(counted, place) for place in range(places)]
        if not across_ranks:   # each place's share of the process's samples
            for op in block.ops:
                if op.type == "sample_count":
                    op.inputs["Total"] = list(copies)
            return result
        samples = block.create_var(loss_name + "@SAMPLES", (1,), "float64",
                                   stop_gradient=True).name
        block.ops.insert(0, Operator("sample_count", {"X": copies}, {"Out": [samples]},
                                     {"shape": [1], "dtype": "float64"}))
    if not across_ranks:
        return result
    grads = {p.name + GRAD for p in block.vars.values() if p.is_parameter}
    last_writer = {}
    for index, op in enumerate(block.ops):
        if op.attrs.get("op_role") == "optimize":
            continue
        for name in op.output_names():
            if name in grads:
                last_writer[name] = index
    if not last_writer:
        raise ProgramError("program: no parameter gradient to reduce")
    if not overlap:
        end = max(last_writer.values())
        last_writer = {name: end for name in last_writer}
    order = sorted(last_writer, key=lambda name: (last_writer[name], name))
    owner = None
    if reduce_strategy == "reduce":
        params = [name[:-len(GRAD)] for name in order]
        owner = {param + GRAD: rank_ for param, rank_ in owners(
            block, params, num_devices // places).items()}
    # latest insertion point first, so that each insertion leaves the earlier points where
    # they are
    for bucket, name in sorted(enumerate(order), reverse=True,
                               key=lambda item: (last_writer[item[1]], item[0])):
        attrs = {"op_role": "communication", "gradient_scale": gradient_scale}
        if owner is not None:
            attrs["root"] = owner[name]
        inputs = {"X": [name]} if samples is None else {"X": [name], "Samples": [samples]}
        block.append_op("allreduce" if owner is None else "reduce", inputs, {"Out": [name]},
                        {**attrs, "bucket": bucket})
        block.ops.insert(last_writer[name] + 1, block.ops.pop())
    if fuse_grad_size_mb is not None:
        fuse_gradient_reductions(block, fuse_grad_size_mb, first_bucket_mb)
    if owner is not None:
        _shard_the_optimizer(block, {name[:-len(GRAD)]: root for name, root in owner.items()},
                             rank)
    return result


def _counted_input(block, loss_name: str) -> str:
    """The variable whose rows are the samples under ``gradient_scale="samples"``: the
    first fed batched variable (first dimension -1, written by no op, not persistable)
    that an op the loss depends on reads."""
    written = {name for op in block.ops for name in op.output_names()}
    for index in _ops_feeding(block.ops, loss_name):
        for name in block.ops[index].input_names():
            var = block.vars.get(name)
            if var is not None and name not in written and not var.persistable and \
                    len(var.shape) > 0 and var.shape[0] == -1:
                return name
    raise ProgramError(f"gradient_scale: 'samples' counts the rows of a batched data "
                       f"variable (first dimension -1) that the loss reads, but "
                       f"{loss_name!r} reads none; use 'coeff_num_device'")


def owners(block, params: list[str], num_devices: int) -> dict[str, int]:
    """The rank that updates each parameter: largest first, each to the rank with the
    fewest bytes so far (ties to the lower rank), as Paddle balances its Reduce strategy."""
    load = [0] * num_devices
    chosen = {}
    for name in sorted(params, key=lambda p: (-_nbytes(block.var(p)), p)):
        rank = min(range(num_devices), key=lambda r: (load[r], r))
        chosen[name] = rank
        load[rank] += _nbytes(block.var(name))
    return chosen


def _shard_the_optimizer(block, owner: dict[str, int], rank: int) -> None:
    """Keep only the optimizer ops of the parameters ``rank`` owns, then broadcast every
    parameter from its owner, in name order (the same on every rank)."""
    block.ops = [op for op in block.ops
                 if op.attrs.get("op_role") != "optimize" or "Param" not in op.inputs
                 or owner.get(op.inputs["Param"][0], rank) == rank]
    for name in sorted(owner):
        block.append_op("broadcast", {"X": [name]}, {"Out": [name]},
                        {"op_role": "communication", "root": owner[name]})


def _nbytes(var) -> int:
    return int(np.prod(var.shape)) * np.dtype(var.dtype).itemsize


def fuse_gradient_reductions(block, cap_mb: float, first_mb: float = 1.0) -> None:
    """Group ``block``'s parameter-gradient ``allreduce``/``reduce`` ops into buckets, in
    place: in the order they run, by ``al.assign_buckets``'s rule (the first bucket at
    most ``first_mb``, the rest ``cap_mb``, one dtype and one ``root`` each, a single larger
    gradient alone), one ``fused_allreduce``/``fused_reduce`` per bucket where its last
    member was, so each bucket starts as soon as its last gradient is finished.  The
    data-parallel pass fuses its reductions with it (``fuse_grad_size_mb``), and so does
    the sharded pass its sums over every rank (``sharding.fuse_gradient_sums``).  A bucket
    pays one call and one α where each gradient paid its own; its first gradients wait for
    its last.  A reduction whose result an op other than the optimizer's reads before the
    last reduction (the backward pass reading a parameter's gradient on) stays as it is:
    delayed, that op would read the gradient unreduced or wait for the bucket."""
    params = {var.name + GRAD for var in block.vars.values() if var.is_parameter}
    ops = block.ops
    members = [index for index, op in enumerate(ops)
               if op.type in ("allreduce", "reduce") and op.outputs["Out"][0] in params]
    if not members:
        return
    end = members[-1]
    members = [index for index in members if not any(
        ops[index].outputs["Out"][0] in reader.input_names()
        for reader in ops[index + 1:end + 1] if reader.attrs.get("op_role") != "optimize")]
    grads = [block.var(ops[index].outputs["Out"][0]) for index in members]
    keys = [(str(grad.dtype), ops[index].type, ops[index].attrs.get("root"),
             tuple(ops[index].inputs.get("Samples", ()))) for grad, index in zip(grads, members)]
    fused = {}
    groups = al.assign_buckets([_nbytes(grad) for grad in grads], keys, cap_mb, first_mb)
    for bucket, group in enumerate(groups):
        bucket_ops = [ops[members[i]] for i in group]
        first = bucket_ops[0]
        inputs = {"X": [op.inputs["X"][0] for op in bucket_ops]}
        if "Samples" in first.inputs:
            inputs["Samples"] = list(first.inputs["Samples"])
        fused[members[group[-1]]] = Operator(
            "fused_" + first.type, inputs, {"Out": [op.outputs["Out"][0] for op in bucket_ops]},
            {**first.attrs, "bucket": bucket})
    dropped = set(members)
    block.ops = [fused.get(index, op) for index, op in enumerate(ops)
                 if index in fused or index not in dropped]


def check_ranks_agree(program: Program, comm) -> None:
    """Raise ``ProgramError`` on every rank unless every rank's program reduces the same
    gradients (names, shapes, dtypes) in the same order; collective.  Ranks whose programs
    differ would otherwise hang or fail inside a mismatched allreduce; the message names
    the first gradient they disagree on.  Costs one 32-byte allgather when they agree."""
    schedule = [[op.type, [[name, list(block_var.shape), str(block_var.dtype)]
                           for name in op.inputs["X"]
                           for block_var in [program.global_block().var(name)]],
                 op.attrs.get("gradient_scale")]
                for op in program.global_block().ops if op.attrs.get("op_role") ==
                "communication"]
    schedules = gather_if_ranks_differ(schedule, comm)
    if schedules is not None:
        raise ProgramError(_first_disagreement(schedules))


def gather_if_ranks_differ(value, comm) -> list | None:
    """None when every rank passed the same JSON-able ``value`` (one 32-byte allgather of
    its digest), else every rank's value, by rank; collective.  The agreement checks of
    data parallelism and of placement (placement/runtime.py) share it."""
    encoded = np.frombuffer(json.dumps(value).encode(), np.uint8)
    digest = np.frombuffer(hashlib.sha256(encoded.tobytes()).digest(), np.uint8)
    digests = np.empty(comm.size * digest.size, np.uint8)
    al.allgather(digest, comm, recvbuf=digests)
    if (digests.reshape(comm.size, -1) == digests[:digest.size]).all():
        return None
    sizes = np.empty(comm.size, np.int64)
    al.allgather(np.array([encoded.size], np.int64), comm, recvbuf=sizes)
    everything = np.empty(int(sizes.sum()), np.uint8)
    al.allgatherv(encoded, sizes, None, comm, recvbuf=everything)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return [json.loads(everything[offsets[r]:offsets[r + 1]].tobytes())
            for r in range(comm.size)]


def _first_disagreement(schedules: list) -> str:
    """Where rank ``r``'s flattened gradient list first differs from rank 0's."""
    def flat(schedule):
        return [(op_type, name, shape, dtype) for op_type, grads, _ in schedule
                for name, shape, dtype in grads]

    reference = flat(schedules[0])
    for rank, schedule in enumerate(schedules[1:], start=1):
        mine = flat(schedule)
        for index in range(max(len(reference), len(mine))):
            ours = reference[index] if index < len(reference) else None
            theirs = mine[index] if index < len(mine) else None
            if ours != theirs:
                def say(item):
                    return "nothing" if item is None else \
                        f"{item[1]!r} ({item[3]} {item[2]}, by {item[0]})"
                return (f"program: the ranks' data-parallel programs disagree on gradient "
                        f"#{index}: rank 0 reduces {say(ours)}, rank {rank} reduces "
                        f"{say(theirs)}; every rank must run the same program")
        if schedule != schedules[0]:
            ours, theirs = schedules[0][0][2], schedule[0][2]
            if ours != theirs:
                return (f"gradient_scale: every rank must use the same; rank 0 uses "
                        f"{ours!r}, rank {rank} {theirs!r}")
            return (f"program: rank {rank} groups its gradients into other allreduces than "
                    f"rank 0; every rank must run the same program with the same "
                    f"BuildStrategy")
    return "program: the ranks' data-parallel programs disagree"


def broadcast_parameters(program: Program, scope, comm, root: int = 0) -> None:
    """Copy every persistable variable of ``program`` from ``root``'s scope to every rank's
    (MindSpore's parameter_broadcast), in name order on every rank."""
    for name in sorted(v.name for v in program.global_block().vars.values()
                       if v.persistable and v.name in scope):
        value = np.ascontiguousarray(scope[name])
        al.bcast(value, comm, root=root)
        scope[name] = value


def shard(dataset, num_shards: int, shard_id: int, pad: bool = True):
    """Rank ``shard_id``'s share of ``dataset`` (a numpy array or a sequence).

    ``pad=True`` (MindSpore's distributed sampler): the samples are padded to a multiple of
    ``num_shards`` by wrapping around to the start, then dealt out round-robin, so every
    shard has the same number of samples; when ``num_shards`` does not divide the batch,
    the first samples are trained on twice, so training does not equal full-batch
    training.  ``pad=False`` (``numpy.array_split``): consecutive, uneven shards, the first
    ``len(dataset) % num_shards`` one sample longer, every sample exactly once (a shard may
    be empty); with ``BuildStrategy(gradient_scale="samples")`` training then equals
    full-batch training for every batch size and rank count."""
    if not isinstance(pad, bool):
        raise ProgramError(f"pad: expected True or False, got {pad!r}")
    if isinstance(num_shards, bool) or not isinstance(num_shards, (int, np.integer)) or \
            num_shards < 1:
        raise ProgramError(f"num_shards: expected a positive int, got {num_shards!r}")
    if isinstance(shard_id, bool) or not isinstance(shard_id, (int, np.integer)) or \
            not 0 <= shard_id < num_shards:
        raise ProgramError(f"shard_id: expected an int, 0 <= shard_id < {num_shards}, got "
                           f"{shard_id!r}")
    try:
        count = len(dataset)
    except TypeError:
        raise ProgramError(f"dataset: expected an array or a sequence of samples, got "
                           f"{type(dataset).__name__}") from None
    if pad:
        per_shard = -(-count // num_shards)
        indices = [i % count for i in range(per_shard * num_shards)][shard_id::num_shards]
    else:
        start = shard_id * (count // num_shards) + min(shard_id, count % num_shards)
        stop = start + count // num_shards + (shard_id < count % num_shards)
        indices = list(range(start, stop))
    if isinstance(dataset, np.ndarray):
        return dataset[indices]
    return [dataset[i] for i in indices]
