"""The opt-in NaN/Inf check (Paddle's FLAGS_check_nan_inf): ``Executor(check_nan_inf=True)``
or ``ParallelExecutor(..., exec_strategy=ExecutionStrategy(check_nan_inf=True))``.

Every float feed is checked before anything runs (a ``ProgramError`` naming the feed), and
every float output of every op right after the op (an ``ExecutionError`` naming the op, its
place, the output variable and the first bad element).  What surprises people: the check
comes after the op, so the bad value is in the scope to look at (a parameter an update made
infinite included), and nothing after that op runs; under the parallel executor "first" is
the first op found bad, in the order the ops happened to run.  Off by default and free when
off: nothing is wrapped.  On cupy arrays every check waits for the op's stream.
"""
from __future__ import annotations

import re

import numpy as np

from .errors import ExecutionError, ProgramError
from .executor import is_cupy
from .ir import Operator

_REPLICA = re.compile(r"@place(\d+)$")   # places.place_name's suffix


def check_feed_finite(feed: dict) -> None:
    """Raise ``ProgramError`` for the first fed array holding NaN or Inf."""
    for name, value in feed.items():
        problem = _first_not_finite(value)
        if problem is not None:
            raise ProgramError(f"feed {name!r}: expected finite values (check_nan_inf), got "
                               f"{problem}")


def check_outputs_finite(op: Operator, scope, place: str) -> None:
    """Raise ``ExecutionError`` if an output ``op`` wrote to ``scope`` holds NaN or Inf."""
    for name in op.output_names():
        if not name:
            continue
        problem = _first_not_finite(scope.get(name))
        if problem is not None:
            raise ExecutionError(f"op {op.type} on {place}: output {name!r} is not finite "
                                 f"({problem}) (check_nan_inf)")


def check_plan_outputs(plan, places: list[str]) -> None:
    """Make every prepared op of a ``RunPlan`` check its outputs after it runs; ``places``
    name the replicas of a multi-place program (an op writing ``x@place1`` ran on
    ``places[1]``)."""
    for handle, prepared in zip(plan.graph.ops, plan.prepared):
        if prepared is not None:
            prepared.run = _checked(prepared.run, handle.op, plan.scope,
                                    _place_of(handle.op, handle.place, places))


def _checked(run, op: Operator, scope, place: str):
    def run_and_check() -> None:
        run()
        check_outputs_finite(op, scope, place)
    return run_and_check


def _place_of(op: Operator, place: str, places: list[str]) -> str:
    for name in op.output_names():
        replica = _REPLICA.search(name or "")
        if replica and int(replica.group(1)) < len(places):
            return place.replace(places[0], places[int(replica.group(1))], 1)
    return place


def _first_not_finite(value) -> str | None:
    """"nan at [i, j]" for the first element of a float array that is not finite, else
    None (for integer arrays and anything else)."""
    dtype = getattr(value, "dtype", None)
    if dtype is None or dtype.kind not in "fc":
        return None
    if is_cupy(value):
        import cupy
        finite = cupy.isfinite(value)
        if bool(finite.all()):
            return None
        finite, value = cupy.asnumpy(finite), cupy.asnumpy(value)
    else:
        finite = np.isfinite(value)
        if finite.all():
            return None
    index = tuple(int(i) for i in np.argwhere(~finite)[0])
    return f"{value[index]} at {list(index)}"
