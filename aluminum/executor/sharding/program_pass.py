"""The SEMI_AUTO_PARALLEL pass: layouts from the ops' strategies, redistributions between.

``shard_program(program, comm, loss_name)`` returns a copy of a trained program (forward,
``append_backward``'s gradient ops, optimizer ops) whose every tensor has a layout and
whose ops compute each rank's box:

1. The forward ops, in order.  Each op's sharding comes from its strategy (``op.shard``,
   strategy.py) or, without one, follows its first laid-out input.  Each input gets the
   layout the sharding asks for: a variable without one yet (data, parameters) simply
   takes it; any other is redistributed (a ``redistribute`` op, the planner's route) when
   its layout differs.  The outputs take the layouts the sharding gives them, Partial where
   a split dimension was summed over.  Ops whose local kernel would be wrong get a sharded
   kernel (rules.py, kernels.py).  A Partial loss is summed (one more redistribution).
2. The backward pass again, by ``append_backward`` over the sharded forward: the
   redistributions' gradients are their routes back (layouts/ops.py).  A gradient kernel
   gives an input's gradient split where the input is and Partial along split dimensions
   the input lacks (a replicated weight's gradient on a batch-split mesh dimension); where
   that differs from the input's layout (Partial read as Replicate), a redistribution
   follows it: that is where data parallelism's allreduce comes from, and Megatron's
   backward allreduce of a column-parallel layer's input gradient.  A sum over every rank
   into a whole tensor is the data-parallel pass's ``allreduce`` op (ops/collective.py),
   not a ``redistribute``: the same sum, in a bucket kept from step to step.
3. The optimizer ops as they were; their state (moments, velocities) is laid out as its
   parameter.

The program is the same on every rank; the rank matters only when it runs (each rank's
box).  Shapes must be whole: a batch dimension of -1 is refused.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..backward import GRAD, append_backward
from ..errors import ProgramError
from ..ir import Operator, Program
from ..layouts import Layout, Replicate
from ..layouts.mesh import known_comm
from ..ops import registry
from . import kernels  # noqa: F401  (registers the sharded kernels)
from .rules import check_shardable, local_kernel, reshape_keeps_boxes, signature
from .strategy import OpSharding, following, from_strategy


@dataclass
class Sharded:
    """What a sharded program runs over: ``comm``, whose ranks its meshes name."""

    comm: object


def shard_program(program: Program, comm, loss_name: str | None = None) -> Program:
    """``program`` sharded over ``comm``'s ranks (see the module docstring); ``loss_name``:
    the loss whose backward pass the program holds (None: a forward-only program)."""
    result = program.clone()
    block = result.global_block()
    ops = list(block.ops)
    fill = next((i for i, op in enumerate(ops) if op.attrs.get("op_role") == "loss_grad"),
                None)
    if fill is not None and loss_name is None:
        raise ProgramError("loss_name: the program has a backward pass; name its loss")
    forward = ops if fill is None else ops[:fill]
    after = [] if fill is None else ops[fill + 1:]
    post = [op for op in after if not _backward(op)]
    for name in [n for n in block.vars if "@GRAD" in n]:
        del block.vars[name]
    block.ops = []
    sharder = _Sharder(block, comm.size)
    for op in forward:
        sharder.add(op)
    if loss_name is not None:
        sharder.resolve(loss_name)
    if fill is not None:
        start = len(block.ops)
        append_backward(block.var(loss_name))
        block.ops = block.ops[:start] + _gradients_laid_out(block, block.ops[start:],
                                                            sharder)
        for op in post:
            _lay_out_state(block, op)
            block.ops.append(op)
    for var in block.vars.values():
        if var.layout is not None:
            known_comm(var.layout.mesh, comm)
    result.sharding = Sharded(comm)
    return result


def _backward(op) -> bool:
    return op.attrs.get("op_role") == "backward" or (
        op.type == "sum" and all("@GRAD" in name for name in op.output_names()))


def equivalent(a: Layout, b: Layout, shape, nranks: int) -> bool:
    """Whether every rank holds the same values under ``a`` and ``b`` (no summands)."""
    if a == b:
        return True
    if a.partial_dims or b.partial_dims:
        return False
    return all(a.box(rank, shape) == b.box(rank, shape) for rank in range(nranks))


class _Sharder:
    def __init__(self, block, nranks: int) -> None:
        self.block, self.nranks = block, nranks
        self.copies: dict = {}        # (name, layout) -> the redistributed variable
        self.count = 0

    def label(self, op) -> str:
        return f"op {op.type} #{len(self.block.ops)} (out {', '.join(op.output_names())})"

    def add(self, op) -> None:
        label = self.label(op)
        check_shardable(op, label)
        block = self.block
        for name in op.input_names() + op.output_names():
            if name and -1 in block.var(name).shape:
                raise ProgramError(f"{label}: variable {name!r} has shape "
                                   f"{list(block.var(name).shape)}; a sharded program needs "
                                   "whole shapes (layers.data(..., append_batch_size=False))")
        layouts = {slot: [block.var(n).layout if n else None for n in names]
                   for slot, names in op.inputs.items()}
        sig = signature(op, block, layouts)
        if sig is None:
            sharding = OpSharding(_flat(self.nranks), (None,))
            wanted = {slot: [sharding.layout("") for _ in names]
                      for slot, names in op.inputs.items()}
        else:
            sharding = self.sharding(op, label, sig, layouts)
            if op.type == "reshape":
                sig = signature(op, block, {"X": [sharding.layout(sig.inputs["X"][0])]})
            wanted = {slot: [sharding.layout(dims) for dims in dims_list]
                      for slot, dims_list in sig.inputs.items()}
        for slot, names in op.inputs.items():
            op.inputs[slot] = [self.as_layout(name, layout) if name else name
                               for name, layout in zip(names, wanted[slot])]
        if sig is None:
            outputs = {slot: [sharding.layout("")] * len(names)
                       for slot, names in op.outputs.items()}
        else:
            op.type, extra = local_kernel(op, block, sharding, sig)
            op.attrs.update(extra)
            op.attrs["sharding"] = {**sharding.to_dict(), "inputs": sig.inputs}
            outputs = {slot: [sharding.layout(dims, True, sig.resolved) for dims in dims_list]
                       for slot, dims_list in sig.outputs.items()}
        block.ops.append(op)
        for slot, names in op.outputs.items():
            for name, layout in zip(names, outputs[slot]):
                if name:
                    block.var(name).layout = layout
                    self.copies = {k: v for k, v in self.copies.items() if k[0] != name}

    def sharding(self, op, label, sig, layouts) -> OpSharding:
        if "shard" in op.attrs:
            sharding = from_strategy(label, sig, op.attrs["shard"], self.nranks)
        else:
            sharding = following(sig, layouts, self.nranks)
        if op.type != "reshape":
            return sharding
        x = self.block.var(op.inputs["X"][0])
        out = self.block.var(op.outputs["Out"][0])
        mapped = signature(op, self.block, {"X": [sharding.layout(sig.inputs["X"][0])]})
        keep = set(mapped.outputs["Out"][0]) & set(sig.inputs["X"][0])
        letters = tuple(letter if letter in keep else None for letter in sharding.letters)
        candidate = OpSharding(sharding.mesh, letters)
        x_layout = candidate.layout(mapped.inputs["X"][0])
        out_layout = candidate.layout(mapped.outputs["Out"][0])
        fits = reshape_keeps_boxes(x_layout, out_layout, x.shape, out.shape,
                                   range(self.nranks))
        if "shard" in op.attrs and (letters != sharding.letters or not fits):
            raise ProgramError(f"{label}: strategy {op.attrs['shard']} splits {list(x.shape)} "
                               f"where its parts are not parts of {list(out.shape)}; expected "
                               "splits only of dimensions whose parts stay whole rows of the "
                               "output")
        return candidate if fits else OpSharding(sharding.mesh, (None,) * len(letters))

    def as_layout(self, name: str, layout: Layout) -> str:
        """``name``, or a copy of it redistributed to ``layout``."""
        var = self.block.var(name)
        if var.layout is None:
            var.layout = layout
            return name
        if equivalent(var.layout, layout, var.shape, self.nranks):
            return name
        key = (name, layout)
        if key not in self.copies:
            target = f"{name}@as{self.count}"
            self.count += 1
            self.block.ops.append(redistribute_op(self.block, name, target, layout))
            self.copies[key] = target
        return self.copies[key]

    def resolve(self, name: str) -> None:
        """Make a Partial ``name`` whole: its producer writes a summand, a redistribution
        sums it into ``name``."""
        var = self.block.var(name)
        if var.layout is None or not var.layout.partial_dims:
            return
        summand = f"{name}@partial"
        self.block.create_var(summand, var.shape, var.dtype).layout = var.layout
        producer = next(op for op in reversed(self.block.ops) if name in op.output_names())
        for slot, names in producer.outputs.items():
            producer.outputs[slot] = [summand if n == name else n for n in names]
        self.block.ops.append(redistribute_op(self.block, summand, name,
                                              var.layout.for_gradient()))


def redistribute_op(block, source: str, target: str, layout: Layout) -> Operator:
    """``target = redistribute(source)`` to ``layout`` (not appended: the caller places it)."""
    var = block.var(source)
    block.create_var(target, var.shape, var.dtype)
    op = Operator("redistribute", {"X": [source]}, {"Out": [target]},
                  {"src": var.layout.to_dict(), "dst": layout.to_dict(),
                   "shape": tuple(var.shape), "dtype": var.dtype})
    registry.get(op.type).infer(block, op)
    return op


def _gradients_laid_out(block, ops, sharder: _Sharder) -> list:
    """The backward ops, each sharded gradient kernel followed by the redistribution of an
    input gradient it gives in another layout than the input's (module docstring, 2)."""
    out = []
    for op in ops:
        out.append(op)
        info = op.attrs.get("sharding")
        if not op.type.endswith(registry.GRAD_SUFFIX) or info is None:
            _lay_out_like_inputs(block, op)
            continue
        sharding = OpSharding.from_dict(info)
        for slot, names in op.outputs.items():
            forward_slot = slot[:-len("@GRAD")]
            for i, (name, source) in enumerate(zip(names, op.inputs[forward_slot])):
                if not name:
                    continue
                natural = sharding.gradient_layout(info["inputs"][forward_slot][i])
                wanted = block.var(source).layout.for_gradient()
                grad = block.var(name)
                if equivalent(natural, wanted, grad.shape, sharder.nranks):
                    grad.layout = wanted
                    continue
                summands = f"{name}@natural"
                block.create_var(summands, grad.shape, grad.dtype).layout = natural
                op.outputs[slot] = [summands if j == i else n for j, n in enumerate(names)]
                names = op.outputs[slot]
                out.append(_sum_op(block, summands, name, wanted, sharder.nranks))
    return out


def sums_over_every_rank(src: Layout, dst: Layout, nranks: int) -> bool:
    """Whether going from ``src`` to ``dst`` is the sum over every one of ``nranks`` ranks
    (in their order) into a whole tensor on each: Partial along every dimension of a mesh
    of all of them, Replicate along every one after."""
    return src.mesh.ranks == dst.mesh.ranks == tuple(range(nranks)) and \
        len(src.partial_dims) == src.mesh.ndim and \
        all(isinstance(p, Replicate) for p in dst.placements)


def _sum_op(block, summands: str, name: str, layout: Layout, nranks: int) -> Operator:
    """The op making gradient ``name``, laid out as ``layout``, from its ``summands``:
    where that is the sum over every rank of the communicator into a whole tensor on each
    (data parallelism's weight and bias gradients, a 1-D Megatron's input gradients), the
    data-parallel pass's ``allreduce`` op -- its bucket and persistent plan, the gradient
    written straight into the bucket -- else a redistribution along the planner's route."""
    if not sums_over_every_rank(block.var(summands).layout, layout, nranks):
        return redistribute_op(block, summands, name, layout)
    block.var(name).layout = layout
    op = Operator("allreduce", {"X": [summands]}, {"Out": [name]},
                  {"op_role": "communication", "gradient_scale": "one",
                   "bucket": f"sum of {name}"})
    registry.get(op.type).infer(block, op)
    return op


def fuse_gradient_sums(program: Program, cap_mb: float, first_mb: float = 1.0) -> Program:
    """A copy of sharded ``program`` whose parameter gradients' ``allreduce`` ops (the sums
    over every rank, ``_sum_op``) are grouped into buckets by the data-parallel pass's own
    rule under ``BuildStrategy(fuse_all_reduce_ops=True)``
    (``data_parallel.fuse_gradient_reductions``): one ``fused_allreduce`` per bucket where
    its last gradient is finished.  Sums another op reads before the optimizer (an input
    gradient, Megatron's backward allreduce, a parameter used twice) stay as they are."""
    from ..data_parallel import fuse_gradient_reductions
    result = program.clone()
    result.sharding = program.sharding
    if hasattr(program, "auto_parallel"):
        result.auto_parallel = program.auto_parallel
    fuse_gradient_reductions(result.global_block(), cap_mb, first_mb)
    return result


def _lay_out_like_inputs(block, op) -> None:
    """Outputs of ``sum``, ``fill_constant`` and the like: laid out as the variable whose
    gradient they are, when the program says."""
    for name in op.output_names():
        var = block.vars.get(name)
        if var is None or var.layout is not None or "@GRAD" not in name:
            continue
        forward = block.vars.get(name.split("@GRAD")[0])
        if forward is not None and forward.layout is not None:
            var.layout = forward.layout.for_gradient()


def _lay_out_state(block, op) -> None:
    """An optimizer op's state (same shape as its parameter) laid out as the parameter."""
    if "Param" not in op.inputs:
        return
    param = block.var(op.inputs["Param"][0])
    for name in op.input_names() + op.output_names():
        var = block.var(name)
        if var is not param and var.layout is None and var.shape == param.shape:
            var.layout = param.layout


def _flat(nranks: int):
    from ..layouts import DeviceMesh
    return DeviceMesh((nranks,))
