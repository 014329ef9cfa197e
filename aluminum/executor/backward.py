"""``append_backward(loss)``: append the gradient ops of a program (reverse-mode autodiff).

For each op that (transitively) feeds ``loss``, in reverse order, a ``<type>_grad`` op
computes its inputs' gradients (``name@GRAD``) from its outputs'.  A variable read by
several ops gets one contribution from each (``name@GRAD@RENAME@k``), summed by a ``sum``
op in a fixed order before anything reads its gradient.  ``stop_gradient`` variables (data,
labels) get none.  The loss gradient starts as ones (``fill_constant``); the data-parallel
executor rescales it.
"""
from __future__ import annotations

from .errors import ProgramError
from .ir import Variable
from .ops import registry

GRAD = "@GRAD"


def grad_name(name: str) -> str:
    return name + GRAD


def append_backward(loss: Variable, parameter_list: list[str] | None = None,
                    no_grad_set: set[str] | None = None) -> list[tuple[Variable, Variable]]:
    """Append the backward pass of ``loss`` to its program; return ``[(param, grad)]`` for
    every trainable parameter (or those in ``parameter_list``) that ``loss`` depends on."""
    block = loss.block
    if [d for d in loss.shape if d != 1] or not loss.shape:
        raise ProgramError(f"loss: expected a one-element variable (shape [1]), got "
                           f"{loss.name} {list(loss.shape)}; reduce it first, e.g. with "
                           "layers.mean")
    forward_ops = list(block.ops)
    skip = set(no_grad_set or ())
    needed = _ops_feeding(forward_ops, loss.name)
    loss_grad = block.create_var(grad_name(loss.name), loss.shape, loss.dtype)
    block.append_op("fill_constant", {}, {"Out": [loss_grad.name]},
                    {"shape": loss.shape,
                     "value": 1.0, "dtype": loss.dtype, "op_role": "loss_grad"})
    contributions: dict[str, list[str]] = {loss.name: [loss_grad.name]}

    def finished(name: str) -> str | None:
        parts = contributions.get(name)
        if not parts:
            return None
        if len(parts) > 1:
            var = block.var(name)
            total = block.create_var(grad_name(name), var.shape, var.dtype)
            block.append_op("sum", {"X": parts}, {"Out": [total.name]})
            contributions[name] = [total.name]
        return contributions[name][0]

    for index in reversed(needed):
        op = forward_ops[index]
        kind = registry.get(op.type)
        out_grads = {slot: [finished(n) or "" for n in names]
                     for slot, names in op.outputs.items()}
        if not any(g for grads in out_grads.values() for g in grads) or not kind.differentiable:
            continue
        inputs = {slot: list(names) for slot, names in op.inputs.items()}
        inputs.update({slot + "@OUT": list(names) for slot, names in op.outputs.items()})
        inputs.update({slot + GRAD: grads for slot, grads in out_grads.items()})
        outputs = {}
        for slot, names in op.inputs.items():
            targets = []
            for name in names:
                var = block.var(name)
                if var.stop_gradient or name in skip or var.dtype.startswith("int"):
                    targets.append("")
                    continue
                parts = contributions.setdefault(name, [])
                target = grad_name(name) if not parts else \
                    f"{grad_name(name)}@RENAME@{len(parts)}"
                block.create_var(target, var.shape, var.dtype)
                parts.append(target)
                targets.append(target)
            outputs[slot + GRAD] = targets
        grad_op = block.append_op(op.type + registry.GRAD_SUFFIX, inputs, outputs, op.attrs)
        grad_op.attrs["op_role"] = "backward"

    params = [v for v in block.vars.values() if v.is_parameter and not v.stop_gradient
              and (parameter_list is None or v.name in parameter_list)]
    pairs = []
    for param in params:
        name = finished(param.name)
        if name is not None:
            pairs.append((param, block.var(name)))
    if not pairs:
        raise ProgramError(f"append_backward: loss {loss.name!r} depends on no trainable "
                           "parameter")
    return pairs


def _ops_feeding(ops, target: str) -> list[int]:
    """Indices of the ops whose outputs ``target`` depends on, in program order."""
    wanted, chosen = {target}, []
    for index in range(len(ops) - 1, -1, -1):
        op = ops[index]
        if wanted.intersection(op.output_names()):
            chosen.append(index)
            wanted.update(op.input_names())
    return sorted(chosen)
