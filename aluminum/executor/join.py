"""Epochs of unequal length across ranks (torch's ``Join`` for the executor).

``with ex.join(runner): for batch in my_batches: runner.run(...)`` lets each rank run as
many steps as it has data: a rank whose data ends leaves the block and, in ``__exit__``,
keeps taking part in the other ranks' steps with zero gradients (it "shadows" their
allreduces: every bucket of the program, in program order, zero-filled) until every rank
has left; then every rank takes the parameters and optimizer state of a rank that ran the
most steps (a broadcast of every persistable variable), so all ranks leave equal.

The "still active" flag each rank contributes every step is the last element of every
bucket (buckets.py's tail: 1 from a step, 0 from a shadow), summed by the bucket's own
allreduce: a step costs no collective of its own.  A joined rank learns that everyone is
done when the first bucket of a shadow step comes back with no active rank; the ranks
still running read the same count and average over it.

What a step in which some ranks have joined averages, by ``BuildStrategy.gradient_scale``:
"coeff_num_device" divides the sum by the number of ranks that took part
(``divide_by_initial_world_size=False``, the default, as torch's DDP join with that
setting) or by the communicator's size (True: the joined ranks count as zero gradients);
"samples" divides by the samples of the ranks that took part (so a step equals full-batch
training on their samples, whatever the setting); "one" and "customized" sum what the ranks
that took part computed.

Entering the block is a collective: the ranks check that they join the same program with
the same setting (``ProgramError`` on every rank otherwise) and make every bucket the
program reduces in (in program order, so a rank that never runs a step still has them).
What surprises people: a rank that raises inside the block leaves without shadowing (as
torch's ``Join``: the others then wait for it); the reduce strategy is refused (a joined
owner would have to run its parameters' optimizer).
"""
from __future__ import annotations

import hashlib
import json
from types import TracebackType

import numpy as np

import aluminum as al

from .data_parallel import broadcast_parameters
from .errors import ProgramError

__all__ = ["join"]


def join(runner, divide_by_initial_world_size: bool = False, enable: bool = True) -> Join:
    """The context manager of the module docstring for ``runner``, a ``ParallelExecutor``
    made with ``comm=``; ``enable=False`` makes it do nothing (every rank must pass the
    same)."""
    return Join(runner, divide_by_initial_world_size, enable)


class Join:
    """See the module docstring; made by ``join``."""

    def __init__(self, runner, divide_by_initial_world_size: bool, enable: bool) -> None:
        if not isinstance(divide_by_initial_world_size, bool):
            raise ProgramError(f"divide_by_initial_world_size: expected True or False, got "
                               f"{divide_by_initial_world_size!r}")
        context = getattr(runner, "_context", None)   # the executor's comm and buckets
        comm = getattr(context, "comm", None)
        if comm is None:
            raise ProgramError(f"runner: expected a ParallelExecutor made with comm=, got "
                               f"{type(runner).__name__}"
                               f"{' without a communicator' if context else ''}")
        self.runner, self.comm, self.buckets = runner, comm, context.buckets
        self.divide_by_initial_world_size = divide_by_initial_world_size
        self.enable = enable
        self.reducers = [op for op in runner.program.global_block().ops
                         if op.attrs.get("op_role") == "communication"]
        kinds = {op.type for op in self.reducers}
        if kinds - {"allreduce", "fused_allreduce"}:
            raise ProgramError("runner: join needs BuildStrategy(reduce_strategy="
                               "'all_reduce'), got a program with "
                               f"{', '.join(sorted(kinds - {'allreduce', 'fused_allreduce'}))}"
                               " ops (the reduce strategy)")
        self.shadow_steps = 0

    def __enter__(self) -> Join:
        if self.enable:
            self._check_ranks_agree()
            for op in self.reducers:
                self._bucket(op)
            self.buckets.divide_by_initial_world_size = self.divide_by_initial_world_size
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if not self.enable or kind is not None:
            return
        while self._shadow_step():
            self.shadow_steps += 1
        self.buckets.divide_by_initial_world_size = False
        # the rank that shadowed the fewest steps ran the most (the lowest such rank)
        fewest = np.array([self.shadow_steps * self.comm.size + self.comm.rank], np.int64)
        al.allreduce(fewest, self.comm, op=al.MIN)
        broadcast_parameters(self.runner.program, self.runner.scope, self.comm,
                             root=int(fewest[0] % self.comm.size))

    def _shadow_step(self) -> bool:
        """Take part in one step of the ranks still running, with zeros; False (having
        run only the first allreduce) when no rank is running any more."""
        for index, op in enumerate(self.reducers):
            bucket = self._bucket(op)
            bucket.memory[...] = 0
            bucket.run()
            if self.comm.stream is not None:
                self.comm.stream.synchronize()
            ranks = float(bucket.tail[1])
            if not (ranks == int(ranks) and 0 <= ranks < self.comm.size):
                raise ProgramError(f"join: a rank that has joined found {ranks} ranks taking "
                                   f"part in a step, expected 0 to {self.comm.size - 1}; the "
                                   f"ranks issue different collectives")
            if index == 0 and ranks == 0:
                return False
        return True

    def _bucket(self, op):
        """``op``'s bucket, made (a collective) if this rank has none yet."""
        block = self.runner.program.global_block()
        variables = [block.var(name) for name in op.inputs["X"]]
        shapes = tuple(tuple(var.shape) for var in variables)
        if any(d < 0 for shape in shapes for d in shape):
            raise ProgramError(f"op {op.type}: join needs gradients of known shapes, got "
                               f"{dict(zip(op.inputs['X'], shapes))}")
        return self.buckets.get(op.attrs["bucket"], shapes, variables[0].dtype,
                                op.attrs.get("root"))

    def _check_ranks_agree(self) -> None:
        """Every rank joins the same program's allreduces with the same setting."""
        schedule = [[op.type, op.inputs["X"]] for op in self.reducers]
        mine = json.dumps([schedule, self.divide_by_initial_world_size]).encode()
        digest = np.frombuffer(hashlib.sha256(mine).digest()[:8], np.int64).copy()
        everyone = np.empty(self.comm.size, np.int64)
        al.allgather(digest, self.comm, recvbuf=everyone)
        differing = [rank for rank in range(self.comm.size) if everyone[rank] != everyone[0]]
        if differing:
            settings = np.empty(self.comm.size, np.int64)
            al.allgather(np.array([self.divide_by_initial_world_size], np.int64), self.comm,
                         recvbuf=settings)
            raise ProgramError(
                f"join: rank {differing[0]} joins with other settings than rank 0 "
                f"(divide_by_initial_world_size: rank 0 {bool(settings[0])}, rank "
                f"{differing[0]} {bool(settings[differing[0]])}; or another program); every "
                f"rank must join the same ParallelExecutor's program with the same settings")

