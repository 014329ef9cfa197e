"""AUTO_PARALLEL: search the strategies of a program's fc chain, then shard it.

``auto_parallel_program(program, comm, loss_name, model, max_memory_mb)`` reads the
program's forward pass as a chain of fc layers, asks the search (search.py) for one matmul
strategy per layer, sets them on a copy (``op.shard``) and runs the SEMI_AUTO_PARALLEL pass
(program_pass.py) on it.  The search's answer is kept on the result as
``program.auto_parallel`` (an ``AutoParallel``).

Supported graphs: the forward ops are, in order, one or more fc layers -- ``matmul`` of the
previous layer's output (the first: any variable) by a 2-D parameter, optionally
``elementwise_add`` of a 1-D parameter, optionally ``relu``/``tanh``/``sigmoid`` -- then a
tail of ops that read no parameter and multiply nothing (the loss: ``square_error_cost``,
``softmax_with_cross_entropy``, ``mean`` ...), which follow the last layer's layout.  A
strategy set by hand on a layer's matmul (``shard=``) is kept: the search only chooses the
others, and so are the strategies of a strategy checkpoint (checkpoint.py), which can also
save the choice.  Anything else is a ``ProgramError`` naming the first op that breaks the
chain.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from ..errors import ProgramError
from .checkpoint import checkpoint_text, pinned_strategies, read_on_rank0, write_on_rank0
from .program_pass import shard_program
from .search import CostModel, Estimate, Layer, estimate, search

ACTIVATIONS = ("relu", "tanh", "sigmoid")
SUPPORTED = ("AUTO_PARALLEL searches chains of fc layers (matmul by a 2-D parameter, an "
             "optional bias add and relu/tanh/sigmoid, each layer reading the previous "
             "one's output) followed by a loss that reads no parameter")
ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2}


@dataclass
class AutoParallel:
    """What the search chose: per layer its matmul's output name, shape and strategy; the
    model's estimate of it; the seconds the search took; the memory bound (bytes)."""

    layers: list
    outputs: list
    strategies: list
    estimate: Estimate
    seconds: float
    max_memory: float | None
    model: CostModel


def fc_chain(program) -> tuple[list[Layer], list]:
    """The program's fc layers and their matmul ops; ``ProgramError`` if it is not a chain
    of them followed by a loss (module docstring)."""
    layers, matmuls, _, _ = _read_chain(program)
    return layers, matmuls


def loss_tail(program) -> tuple[list, str]:
    """The forward ops after the fc chain (the loss) and the name of the last layer's
    output they read."""
    _, _, tail, last = _read_chain(program)
    return tail, last


def _read_chain(program):
    block = program.global_block()
    ops = []
    for op in block.ops:
        if op.attrs.get("op_role") in ("loss_grad", "backward", "optimize"):
            break
        ops.append(op)

    def param(name, ndim):
        var = block.vars.get(name)
        return var is not None and var.is_parameter and len(var.shape) == ndim

    def fail(i, why):
        op = ops[i]
        raise ProgramError(f"op {op.type} #{i} (out {', '.join(op.output_names())}): {why}; "
                           f"{SUPPORTED}")

    layers, matmuls, i, current = [], [], 0, None
    while i < len(ops) and ops[i].type == "matmul":
        op = ops[i]
        x, w = op.inputs["X"][0], op.inputs["Y"][0]
        if not param(w, 2) or param(x, 2):
            fail(i, "its second input is not a 2-D parameter")
        if current is not None and x != current:
            fail(i, f"it reads {x!r}, not the previous layer's output {current!r}")
        if op.attrs.get("transpose_X") or op.attrs.get("transpose_Y"):
            fail(i, "a transposed matmul is not an fc layer")
        shape = block.var(x).shape
        if len(shape) != 2 or -1 in shape:
            fail(i, f"its input {x!r} has shape {list(shape)}; expected a 2-D whole shape "
                    "(layers.data(..., append_batch_size=False))")
        current, i = op.output_names()[0], i + 1
        if i < len(ops) and ops[i].type == "elementwise_add" and \
                ops[i].inputs["X"][0] == current and param(ops[i].inputs["Y"][0], 1):
            current, i = ops[i].output_names()[0], i + 1
        act = i < len(ops) and ops[i].type in ACTIVATIONS and ops[i].inputs["X"][0] == current
        if act:
            current, i = ops[i].output_names()[0], i + 1
        rows, inputs = shape
        layers.append(Layer(rows, inputs, block.var(w).shape[1], act,
                            op.attrs.get("shard"), _state(block, w)))
        matmuls.append(op)
    if not layers:
        if not ops:
            raise ProgramError(f"AUTO_PARALLEL: the program has no forward ops; {SUPPORTED}")
        fail(0, "the program does not start with an fc layer")
    for j in range(i, len(ops)):
        op = ops[j]
        if op.type in ("matmul", "mul") or any(param(n, len(block.var(n).shape))
                                                for n in op.input_names() if n):
            fail(j, "an op after the last fc layer's activation multiplies or reads a "
                    "parameter (each layer is matmul, bias, activation, in that order)")
    return layers, matmuls, ops[i:], current


def _state(block, param: str) -> int:
    """The optimizer's arrays of ``param``'s shape (Momentum's velocity, Adam's moments)."""
    shape = block.var(param).shape
    for op in block.ops:
        if op.inputs.get("Param") == [param]:
            return sum(1 for slot, names in op.inputs.items()
                       if slot not in ("Param", "Grad") for n in names
                       if n and block.var(n).shape == shape)
    return 0


def search_program(program, nranks: int, model: CostModel,
                   max_memory_mb: float | None = None) -> AutoParallel:
    """Search the strategies of ``program``'s fc chain on ``nranks`` ranks."""
    layers, matmuls = fc_chain(program)
    block = program.global_block()
    itemsize = ITEMSIZE.get(block.var(matmuls[0].inputs["X"][0]).dtype, model.itemsize)
    if itemsize != model.itemsize:
        model = CostModel(**{**model.__dict__, "itemsize": itemsize})
    bound = None if max_memory_mb is None else float(max_memory_mb) * 2**20
    start = time.perf_counter()
    strategies, _ = search(layers, nranks, model, max_memory=bound)
    seconds = time.perf_counter() - start
    return AutoParallel(layers, [op.output_names()[0] for op in matmuls], strategies,
                        estimate(layers, nranks, strategies, model), seconds, bound, model)


def auto_parallel_program(program, comm, loss_name: str | None,
                          model: CostModel | None = None, max_memory_mb: float | None = None,
                          buckets: tuple | None = None, load_file: str | None = None,
                          save_file: str | None = None):
    """``program`` with the searched strategies, sharded over ``comm``; ``model`` None:
    this machine's, its layers' kernels measured (``calibrate.program_model``);
    ``buckets``: ``(first_mb, cap_mb)`` where the executor will fuse the gradient sums
    into buckets (``fuse_gradient_sums``), and the search prices them so;
    ``load_file``: a strategy checkpoint whose layers keep its strategies, ``save_file``:
    where rank 0 writes the strategies chosen (checkpoint.py).  Collective over ``comm``."""
    chosen = program.clone()
    block = chosen.global_block()
    _, matmuls = fc_chain(chosen)
    weights = [op.inputs["Y"][0] for op in matmuls]
    shapes = [block.var(weight).shape for weight in weights]
    if load_file is not None:
        pinned = pinned_strategies(read_on_rank0(load_file, comm), load_file, weights, shapes,
                                   [op.attrs.get("shard") for op in matmuls], comm.size)
        for op, weight in zip(matmuls, weights):
            if weight in pinned:
                op.attrs["shard"] = pinned[weight]
    if model is None:
        from .calibrate import program_model
        model = program_model(chosen, comm)
    model = dataclasses.replace(model, buckets=buckets)
    found = search_program(chosen, comm.size, model, max_memory_mb)
    for op, strategy in zip(matmuls, found.strategies):
        op.attrs["shard"] = strategy
    if save_file is not None:
        write_on_rank0(save_file, checkpoint_text(weights, shapes, found.strategies, comm.size,
                                                  found.estimate), comm)
    result = shard_program(chosen, comm, loss_name)
    result.auto_parallel = found
    return result
