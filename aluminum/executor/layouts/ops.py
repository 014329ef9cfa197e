"""The ``redistribute`` op (``layers.redistribute(x, layout)``) and its gradient op.

``Out`` is ``X`` (whose variable carries the layout ``attrs["src"]``) laid out as
``attrs["dst"]``: each rank's value of ``X`` and ``Out`` is its part of the tensor
(``Layout.box``); the variables keep the whole tensor's shape.  The gradient op
``redistribute_grad`` runs the route back (``redistribute_backward``): from
``attrs["grad_layout"]`` (default: ``dst`` with Partial as Replicate) to
``attrs["input_grad_layout"]`` (default: ``src`` likewise), so ``append_backward`` goes
through sharded programs.  Both run on the executor's communicator (a ParallelExecutor's
``comm``), else the one the mesh was made with, else the parallel context's.
"""
from __future__ import annotations

from ..errors import ExecutionError, ProgramError
from ..ir import Variable, default_main_program, unique_name
from ..ops.registry import OpKind, register
from .mesh import Layout, known_comm
from .run import redistribute as run_redistribute

TYPE = "redistribute"


def append_redistribute(x: Variable, layout: Layout, grad_layout: Layout | None = None,
                        input_grad_layout: Layout | None = None) -> Variable:
    """Append ``Out = redistribute(x)`` to ``x``'s program: ``x`` as ``layout``."""
    if x.layout is None:
        raise ProgramError(f"x: variable {x.name!r} has no layout; set x.layout = "
                           "ex.Layout(mesh, placements) first")
    if not isinstance(layout, Layout):
        raise ProgramError(f"layout: expected a Layout, got {type(layout).__name__}")
    block = getattr(x, "block", None) or default_main_program().global_block()
    out = block.create_var(unique_name(TYPE), x.shape, x.dtype)
    attrs = {"src": x.layout.to_dict(), "dst": layout.to_dict(), "shape": tuple(x.shape),
             "dtype": x.dtype}
    for name, given in (("grad_layout", grad_layout), ("input_grad_layout",
                                                       input_grad_layout)):
        if given is not None:
            attrs[name] = given.to_dict()
    block.append_op(TYPE, {"X": [x.name]}, {"Out": [out.name]}, attrs)
    _remember_comms(x.layout, layout, grad_layout, input_grad_layout)
    return out


def _remember_comms(*layouts) -> None:
    for layout in layouts:
        if layout is not None and layout.mesh.comm is not None:
            known_comm(layout.mesh, layout.mesh.comm)


def _layout(attrs: dict, name: str, op_type: str) -> Layout:
    return Layout.from_dict(attrs[name], f"op {op_type}: attrs[{name!r}]")


def _shape(attrs: dict, op_type: str) -> tuple:
    shape = tuple(attrs.get("shape", ()))
    if -1 in shape:
        raise ProgramError(f"op {op_type}: expected the whole tensor's shape, got "
                           f"{list(shape)} (a batch dimension cannot be redistributed)")
    return shape


def _comm(ctx, layouts, op_type: str):
    comm = getattr(ctx, "comm", None)
    for layout in layouts:
        comm = comm or known_comm(layout.mesh)
    if comm is None:
        from ..parallel_context import get_parallel_context
        comm = get_parallel_context().communicator()
    if comm is None:
        raise ExecutionError(f"op {op_type}: needs a communicator (a DeviceMesh made with "
                             "comm=, or ParallelExecutor(..., comm=...))")
    return comm


@register
class Redistribute(OpKind):
    type = TYPE
    communicates = True

    def infer(self, block, op):
        src, dst = _layout(op.attrs, "src", self.type), _layout(op.attrs, "dst", self.type)
        x = block.var(op.inputs["X"][0])
        shape = _shape(op.attrs, self.type)
        if tuple(x.shape) != shape:
            raise ProgramError(f"op {self.type}: attrs['shape'] {list(shape)} is not X's "
                               f"shape {list(x.shape)}")
        src.check(shape, f"op {self.type}: src")
        dst.check(shape, f"op {self.type}: dst")
        out = block.var(op.outputs["Out"][0])
        out.shape, out.dtype, out.layout = x.shape, x.dtype, dst

    def compute(self, ins, attrs, ctx, out):
        src, dst = _layout(attrs, "src", self.type), _layout(attrs, "dst", self.type)
        x = ins["X"][0]
        comm = _comm(ctx, (src, dst), self.type)
        return {"Out": [run_redistribute(x, src, dst, _shape(attrs, self.type), comm,
                                         dtype=_dtype(x, attrs))]}


@register
class RedistributeGrad(OpKind):
    """``X@GRAD`` from ``Out@GRAD``: the forward's route back (see the module docstring)."""

    type = TYPE + "_grad"
    differentiable = False
    communicates = True

    def _layouts(self, attrs):
        src, dst = _layout(attrs, "src", self.type), _layout(attrs, "dst", self.type)
        grad = _layout(attrs, "grad_layout", self.type) if "grad_layout" in attrs else \
            dst.for_gradient()
        wanted = _layout(attrs, "input_grad_layout", self.type) \
            if "input_grad_layout" in attrs else src.for_gradient()
        return grad, wanted

    def infer(self, block, op):
        _, wanted = self._layouts(op.attrs)
        for name, source in zip(op.outputs.get("X@GRAD", []), op.inputs["X"]):
            if name:
                grad, x = block.var(name), block.var(source)
                grad.shape, grad.dtype, grad.layout = x.shape, x.dtype, wanted

    def compute(self, ins, attrs, ctx, out):
        grad, wanted = self._layouts(attrs)
        dout = ins["Out@GRAD"][0]
        comm = _comm(ctx, (grad, wanted), self.type)
        dtype = _dtype(dout if dout is not None else ins["X"][0], attrs)
        return {"X@GRAD": [run_redistribute(dout, grad, wanted, _shape(attrs, self.type),
                                            comm, dtype=dtype)]}


def _dtype(value, attrs):
    return attrs.get("dtype") or (None if value is None else value.dtype)
