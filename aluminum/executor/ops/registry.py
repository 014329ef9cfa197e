"""``OpKind``: what an op type is; ``register`` / ``get``; the generic gradient op.

An op's kernel takes ``ins`` (slot -> list of arrays), the attrs, the executor's context and
``out`` (the ``Destinations`` of its outputs) and returns its outputs (slot -> list of
arrays).  A differentiable kind also has ``backward(ins, outs, douts, attrs, out)``
returning the gradients of its inputs (slot -> list, None where it has none); the gradient
op ``<type>_grad`` runs it, reading the forward inputs (same slots), the forward outputs
(``<slot>@OUT``) and the output gradients (``<slot>@GRAD``), and writing input gradients
(``<slot>@GRAD``).  Kernels only use the array API, so cupy arrays run them too.
"""
from __future__ import annotations

import contextvars

import numpy as np

from ..errors import ProgramError

_KINDS: dict[str, OpKind] = {}
GRAD_SUFFIX = "_grad"


class Destinations:
    """Where the executor wants some of an op's outputs written: ``get(slot, index=0)`` is
    an array to write that output into, or None (anywhere, the usual case).

    A destination is C-contiguous and has the output's declared shape and dtype (reshaping
    it gives a view); the executor hands out none that an input of the op could share
    memory with (see executor/buckets.py for the rules).  A kernel that writes into it
    (``np.matmul(a, b, out=...)``, ``x.sum(axis, out=...)``) returns the destination itself
    as that output; a kernel that ignores it is just as correct, as the executor copies
    what it returned into the destination.  The parallel executor hands them out so that a
    gradient is computed straight into its allreduce bucket (see buckets.py); destinations
    are only ever numpy arrays."""

    __slots__ = ("slots",)

    def __init__(self, slots: dict[str, list] | None = None) -> None:
        self.slots = slots or {}

    def get(self, slot: str, index: int = 0):
        arrays = self.slots.get(slot)
        return None if arrays is None or index >= len(arrays) else arrays[index]

    def __bool__(self) -> bool:
        return bool(self.slots)


ANYWHERE = Destinations()


class OpKind:
    """Base class of op types; subclasses set ``type`` and override what they need."""

    type = ""
    differentiable = True
    communicates = False   # scheduled first by the parallel executor

    def infer(self, block, op) -> None:
        """Set the shapes/dtypes of ``op``'s outputs in ``block``; raise ``ProgramError``
        on inputs it cannot take.  Default: every output like the first input."""
        first = block.var(op.input_names()[0])
        for name in op.output_names():
            out = block.var(name)
            out.shape, out.dtype = first.shape, first.dtype

    def compute(self, ins: dict, attrs: dict, ctx, out: Destinations) -> dict:
        """The outputs of the op on ``ins``; ``out`` says where the executor would like
        some of them (``ANYWHERE`` when called directly)."""
        raise NotImplementedError

    def backward(self, ins: dict, outs: dict, douts: dict, attrs: dict,
                 out: Destinations) -> dict:
        """The gradients of the inputs; ``out`` is keyed by the forward input slots."""
        raise ProgramError(f"op {self.type}: has no gradient")

    def bind(self, op, scope, ctx):
        """``op`` (of this kind) bound to ``scope`` and ``ctx`` for an executor that runs it
        many times (``PreparedOp``): a no-argument callable doing what the executor's own
        path does (read the inputs from ``scope``, compute, store the outputs there), with
        the lookups every run would repeat made once; None (the default): the executor's
        path.  What the callable raises the executor names as it names ``compute``'s
        errors."""
        return None


# The executor's context of the gradient op running on this thread: ``backward`` methods
# take none (most need none), the few that communicate read it with ``backward_context()``.
_backward_context: contextvars.ContextVar = contextvars.ContextVar("backward_context",
                                                                   default=None)


def backward_context():
    """Inside a kind's ``backward``: the executor's context of the running gradient op
    (what ``compute`` gets as ``ctx``); None outside one."""
    return _backward_context.get()


class GradKind(OpKind):
    """``<type>_grad`` of a differentiable kind."""

    differentiable = False

    def __init__(self, forward: OpKind) -> None:
        self.forward, self.type = forward, forward.type + GRAD_SUFFIX

    def infer(self, block, op) -> None:
        for slot, names in op.outputs.items():
            forward_slot = slot[:-len("@GRAD")]
            for name, source in zip(names, op.inputs.get(forward_slot, [])):
                if name:
                    grad, var = block.var(name), block.var(source)
                    grad.shape, grad.dtype = var.shape, var.dtype

    def compute(self, ins: dict, attrs: dict, ctx, out: Destinations) -> dict:
        forward_ins = {s: v for s, v in ins.items() if "@" not in s}
        outs = {s[:-4]: v for s, v in ins.items() if s.endswith("@OUT")}
        douts = {s[:-5]: v for s, v in ins.items() if s.endswith("@GRAD")}
        for slot, arrays in douts.items():   # an output nobody differentiated: zeros
            douts[slot] = [np.zeros_like(o) if d is None else d
                           for d, o in zip(arrays, outs[slot])]
        if out:   # the destination of ``X@GRAD`` is the backward's destination of ``X``
            out = Destinations({slot[:-len("@GRAD")]: arrays
                                for slot, arrays in out.slots.items()})
        token = _backward_context.set(ctx)
        try:
            grads = self.forward.backward(forward_ins, outs, douts, attrs, out)
        finally:
            _backward_context.reset(token)
        return {slot + "@GRAD": grads.get(slot, [None] * len(forward_ins[slot]))
                for slot in forward_ins}


def register(kind_class: type) -> type:
    """Class decorator: register one instance of ``kind_class`` under its ``type``."""
    _KINDS[kind_class.type] = kind_class()
    return kind_class


def get(type_: str) -> OpKind:
    kind = _KINDS.get(type_)
    if kind is not None:
        return kind
    if type_.endswith(GRAD_SUFFIX):
        forward = _KINDS.get(type_[:-len(GRAD_SUFFIX)])
        if forward is not None and forward.differentiable:
            kind = _KINDS[type_] = GradKind(forward)
            return kind
    raise ProgramError(f"op {type_!r}: no such op type (known: {', '.join(sorted(_KINDS))})")


def known() -> list[str]:
    return sorted(_KINDS)


def unbroadcast(grad, shape: tuple, out=None):
    """Sum ``grad`` down to ``shape`` (undo numpy broadcasting), the last sum into ``out``
    when one is given; ``grad`` itself (not ``out``) when nothing needs summing."""
    sums = [(0, False)] * (grad.ndim - len(shape)) + [
        (axis, True) for axis, size in enumerate(shape)
        if size == 1 and grad.shape[grad.ndim - len(shape) + axis] != 1]
    for step, (axis, keepdims) in enumerate(sums):
        last = step == len(sums) - 1
        grad = grad.sum(axis=axis, keepdims=keepdims, out=out if last else None)
    return grad
