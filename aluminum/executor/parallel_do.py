"""``ParallelDo``: Paddle's parallel_do, lowered onto the places machinery of places.py.

The seed's design::

    pd = ParallelDo(["cpu:0", "cpu:1"])
    with pd.do():
        x_ = pd.read_input(x)            # this place's rows of x
        loss_ = layers.mean(...(x_))     # the block, written once
        pd.write_output(loss_)
    loss = layers.mean(pd())             # the places' outputs, concatenated

When the ``with`` block closes, its ops are taken out of the program and written again
once per place on place-local variables (``places.on_place``, as the multi-device pass
does): each ``read_input`` becomes one ``split`` into nearly equal parts along the batch
dimension, each ``write_output`` one ``concat`` of the places' values.  Parameters and
anything else the block reads without producing it are shared.  ``append_backward`` then
differentiates the lowered ops like any others: every place's gradient of a shared
parameter is accumulated by one ``sum`` op in place order (parallel_do_grad's reduction
across places), and with a communicator the data-parallel pass reduces it across ranks.
The places' copies are independent chains in the SSA graph, so ``ParallelExecutor`` runs
them side by side; the sequential ``Executor`` runs them one after the other, with the same
result.
"""
from __future__ import annotations

from contextlib import contextmanager

from .errors import ProgramError
from .ir import Variable, default_main_program, unique_name
from .places import on_place, place_name

__all__ = ["ParallelDo"]


class ParallelDo:
    """The ops written inside ``do()`` run once per place on that place's rows."""

    def __init__(self, places: list[str]) -> None:
        if not places:
            raise ProgramError("places: expected at least one place, got none")
        self.places = list(places)
        self._reads: list[Variable] = []
        self._writes: list[Variable] = []
        self._outputs: list[Variable] | None = None

    def read_input(self, var: Variable) -> Variable:
        """Declare that the block reads ``var`` split by rows over the places; use the
        returned variable inside the block."""
        self._reads.append(var)
        return var

    def write_output(self, var: Variable) -> None:
        """Declare a variable the block produces; ``pd()`` returns the places' values of
        it concatenated along the first axis."""
        self._writes.append(var)

    @contextmanager
    def do(self):
        """The block: ops appended to the main program meanwhile are its body."""
        if self._outputs is not None:
            raise ProgramError("parallel_do: do() was already used; make another ParallelDo")
        block = default_main_program().global_block()
        start = len(block.ops)
        yield self
        body, block.ops = block.ops[start:], block.ops[:start]
        self._outputs = _lower(block, body, self._reads, self._writes, len(self.places))

    def __call__(self) -> Variable | list[Variable]:
        """The merged outputs, in ``write_output`` order (one variable if there is one)."""
        if self._outputs is None:
            raise ProgramError("parallel_do: call pd() after the `with pd.do():` block")
        return self._outputs[0] if len(self._outputs) == 1 else list(self._outputs)


def _lower(block, body: list, reads: list[Variable], writes: list[Variable],
           places: int) -> list[Variable]:
    produced = {name for op in body for name in op.output_names() if name}
    for var in writes:
        if var.name not in produced:
            raise ProgramError(f"parallel_do: write_output({var.name!r}), but the block does "
                               "not produce it")
    local = {name for name in produced if not block.var(name).persistable} | \
        {var.name for var in reads}
    shared = set(block.vars) - local   # read as they are; written by place 0 only
    for var in reads:
        parts = [place_name(var.name, place, always=True) for place in range(places)]
        for part in parts:
            block.create_var(part, var.shape, var.dtype, stop_gradient=var.stop_gradient)
        block.append_op("split", {"X": [var.name]}, {"Out": parts}, {"num": places, "axis": 0})
    for place in range(places):
        block.ops += [on_place(block, op, place, shared, always=True) for op in body]
    merged = []
    for var in writes:
        out = block.create_var(unique_name(f"{var.name}.merged"), var.shape, var.dtype)
        block.append_op("concat", {"X": [place_name(var.name, place, always=True)
                                         for place in range(places)]},
                        {"Out": [out.name]}, {"axis": 0})
        merged.append(out)
    return merged
