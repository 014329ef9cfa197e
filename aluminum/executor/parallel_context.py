"""MindSpore's data-parallel facade, for users who do not want to pick passes themselves.

``set_parallel_context(parallel_mode=ParallelMode.DATA_PARALLEL, gradients_mean=True)`` makes
every ``ParallelExecutor`` built afterwards without ``comm=`` train data-parallel over the
context's communicator (all ranks of the job unless one is given), averaging gradients
(``gradients_mean=False`` sums them), as ``context.set_auto_parallel_context`` does for
MindSpore.  ``GradReducer`` is ``DistributedGradReducer``: for a training loop written by
hand, it allreduces a list of gradient arrays in one fused bucket per dtype.

What surprises people: the context is process-wide state (like MindSpore's), kept until
``reset_parallel_context()``; the default communicator is made collectively the first time
an executor or reducer needs it, so every rank must get there.
"""
from __future__ import annotations

import contextlib
import enum
import os
from dataclasses import dataclass

import numpy as np

import aluminum as al

from .errors import ProgramError

__all__ = ["GradReducer", "ParallelMode", "get_parallel_context", "reset_parallel_context",
           "set_parallel_context"]


class ParallelMode(str, enum.Enum):
    """How ``ParallelExecutor`` spreads training when not given a communicator."""

    STAND_ALONE = "stand_alone"
    DATA_PARALLEL = "data_parallel"
    SEMI_AUTO_PARALLEL = "semi_auto_parallel"   # ops' strategies set by hand (sharding/)
    AUTO_PARALLEL = "auto_parallel"             # strategies searched (sharding/search.py)


@dataclass
class ParallelContext:
    parallel_mode: ParallelMode = ParallelMode.STAND_ALONE
    gradients_mean: bool = True
    comm: object = None
    max_memory_mb: float | None = None
    cost_model: object = None
    strategy_ckpt_load_file: str | None = None
    strategy_ckpt_save_file: str | None = None

    def communicator(self):
        """The context's communicator (all ranks, made on first use) in data-parallel and
        (semi-)auto-parallel mode; None stand-alone."""
        if self.parallel_mode is ParallelMode.STAND_ALONE:
            return None
        if self.comm is None:
            self.comm = al.MPICommunicator()
        return self.comm


_context = ParallelContext()


def set_parallel_context(parallel_mode: ParallelMode | str | None = None,
                         gradients_mean: bool | None = None, comm=None,
                         max_memory_mb: float | None = None, cost_model=None,
                         strategy_ckpt_load_file=None, strategy_ckpt_save_file=None) -> None:
    """Set what ``ParallelExecutor`` does when built without ``comm=``; arguments left None
    keep their value.  AUTO_PARALLEL only: ``max_memory_mb``, the bound per rank on the
    search's memory estimate (parameters + gradients + activations); ``cost_model``, a
    ``sharding.search.CostModel`` to search with (None: this machine's, calibrated once and
    cached, see sharding/calibrate.py); ``strategy_ckpt_load_file``, a strategy checkpoint
    whose layers keep its strategies (the search chooses the others);
    ``strategy_ckpt_save_file``, where rank 0 writes the strategies chosen (JSON, see
    sharding/checkpoint.py; "" stops saving or loading)."""
    changes = {}     # (checked first: a bad argument changes nothing)
    if parallel_mode is not None:
        try:
            changes["parallel_mode"] = ParallelMode(parallel_mode)
        except ValueError:
            raise ProgramError(f"parallel_mode: expected one of "
                               f"{[mode.value for mode in ParallelMode]}, got "
                               f"{parallel_mode!r}") from None
    if gradients_mean is not None:
        changes["gradients_mean"] = bool(gradients_mean)
    if comm is not None:
        changes["comm"] = comm
    if max_memory_mb is not None:
        if not (isinstance(max_memory_mb, (int, float)) and max_memory_mb > 0):
            raise ProgramError(f"max_memory_mb: expected a number of MB > 0, got "
                               f"{max_memory_mb!r}")
        changes["max_memory_mb"] = float(max_memory_mb)
    if cost_model is not None:
        changes["cost_model"] = cost_model
    for name, path in (("strategy_ckpt_load_file", strategy_ckpt_load_file),
                       ("strategy_ckpt_save_file", strategy_ckpt_save_file)):
        if path is None:
            continue
        if not isinstance(path, (str, os.PathLike)):
            raise ProgramError(f"{name}: expected a file path (str or os.PathLike), got "
                               f"{path!r}")
        changes[name] = os.fspath(path) or None
    for name, value in changes.items():
        setattr(_context, name, value)


@contextlib.contextmanager
def swapped_context():
    """A stand-alone context for the block (the calibration's own executor), then back."""
    global _context
    saved, _context = _context, ParallelContext()
    try:
        yield
    finally:
        _context = saved


def get_parallel_context() -> ParallelContext:
    return _context


def reset_parallel_context() -> None:
    """Back to stand-alone, gradients averaged, no communicator (the one made by the
    context is not freed: executors may still use it)."""
    global _context
    _context = ParallelContext()


class GradReducer:
    """``grads = GradReducer(comm, mean=True)(grads)``: every rank gets the sum (``mean``:
    the average) of each gradient over the ranks of ``comm`` (default: the parallel
    context's).  Gradients are packed into one ``al.GradientBucket`` per dtype (private
    memory: a bucket per distinct set of shapes is kept for the next call with them), and
    returned as new arrays of the original shapes, in order."""

    def __init__(self, comm=None, mean: bool = True) -> None:
        self.comm = comm if comm is not None else \
            ParallelContext(ParallelMode.DATA_PARALLEL, comm=_context.comm).communicator()
        self.mean = mean
        self._buckets: dict[tuple, al.GradientBucket] = {}

    def __call__(self, grads: list) -> list[np.ndarray]:
        arrays = [np.asarray(grad) for grad in grads]
        result: list[np.ndarray | None] = [None] * len(arrays)
        for dtype in dict.fromkeys(array.dtype for array in arrays):
            members = [i for i, array in enumerate(arrays) if array.dtype == dtype]
            bucket = self._bucket(dtype, tuple(arrays[i].shape for i in members))
            for i, view in zip(members, bucket.views):
                view[...] = arrays[i]
            bucket.run()
            for i, view in zip(members, bucket.views):
                result[i] = view.copy()
        return result

    def _bucket(self, dtype, shapes: tuple) -> al.GradientBucket:
        key = (dtype, shapes)
        found = self._buckets.get(key)
        if found is None:
            found = self._buckets[key] = al.GradientBucket(
                shapes, dtype, self.comm, op=al.AVG if self.mean else al.SUM,
                memory=np.empty(sum(int(np.prod(shape)) for shape in shapes), dtype))
        return found
