"""Running a placed program: each rank keeps its ops and its part of the transfers.

``PlacedRun`` is what an executor holds for one placed program on one rank: the per-rank
program (``PlacedProgram.for_rank``), the communicator and the sub-communicators of the
collective transfers (one ``comm.split`` per distinct rank set, made once, in one order on
every rank), after checking that every rank placed the same program over the same cluster
(a 32-byte allgather; a ``ProgramError`` on every rank naming the first difference).

Values at the start: every rank ran the (unplaced) startup program, so a rank holding a
slice of a parameter cuts it from the whole value the first time it runs; after that the
slice is the state and the owners' values are what every reader receives.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import aluminum as al

from ..data_parallel import gather_if_ranks_differ
from ..errors import ExecutionError, ProgramError
from ..executor import (check_feed, check_fetch, check_readable, fetch_names, fetch_value,
                        run_op, store_feed)
from ..ir import Program
from .cluster import Cluster
from .place_pass import slice_rows, slices_of
from .transfers import PlacedProgram

_default: Cluster | None = None
SHAPES_KEPT = 4     # step shapes of a batch-dimension transfer whose plans a receiver keeps


def set_cluster(cluster: Cluster | None) -> None:
    """Make ``cluster`` the job's default (what ``place`` uses without one)."""
    global _default
    _default = cluster


def default_cluster() -> Cluster:
    """The default cluster: the one ``set_cluster`` gave, else the launcher's
    (``AL_ROLES``) over ``al.MPICommunicator()``."""
    global _default
    if _default is None:
        _default = Cluster.from_env(al.MPICommunicator())
    return _default


@dataclass(eq=False)
class Channel:
    """What one transfer op needs on this rank, worked out on its first run: the
    communicator it runs on, the root's rank there, and for a receiver of a fixed shape its
    private buffers and the persistent plan bound to them (empty and None for a sender).
    A transfer whose shape has a batch dimension has a ``header`` array (the shape it
    sends first) and, at a receiver, one buffer and plan per step shape seen (``shaped``:
    the last ``SHAPES_KEPT``)."""

    comm: object
    root: int
    buffers: list = field(default_factory=list)
    plan: object = None
    header: np.ndarray | None = None
    shaped: dict = field(default_factory=dict)

    def for_shape(self, shape: tuple, dtype, make) -> tuple:
        """``(buffer, plan)`` of step shape ``shape``: made on its first use (a buffer of
        ``dtype``, ``make(self, buffer)`` its plan), then reused."""
        found = self.shaped.get(shape)
        if found is None:
            if len(self.shaped) >= SHAPES_KEPT:       # forget the oldest shape's plan
                self.shaped.pop(next(iter(self.shaped)))[1].free()
            buffer = np.empty(shape, dtype)
            found = self.shaped[shape] = (buffer, make(self, buffer))
        return found

    def all_plans(self) -> list:
        return ([] if self.plan is None else [self.plan]) + \
            [plan for _, plan in self.shaped.values()]

    def all_buffers(self) -> list:
        return self.buffers + [buffer for buffer, _ in self.shaped.values()]


class _Context:
    """What transfer kernels get: ``ctx.placement``."""

    def __init__(self, runtime: PlacedRun) -> None:
        self.placement = runtime
        self.comm = runtime.comm


class PlacedRun:
    """One placed program on this rank (see the module docstring)."""

    def __init__(self, program: Program, comm=None, gradient_scale: str = "coeff_num_device"):
        cluster = getattr(program, "cluster", None)
        if cluster is None:
            raise ProgramError("program: not placed; call ex.place(program, strategy, "
                               "cluster) first")
        comm = comm if comm is not None else cluster.comm
        if comm is None:
            raise ProgramError("comm: a placed program needs the job's communicator (give "
                               "the Cluster one, or the executor comm=)")
        if comm.size != cluster.size:
            raise ProgramError(f"comm: expected {cluster.size} ranks (the cluster's), got "
                               f"{comm.size}")
        self.comm, self.rank, self.cluster = comm, comm.rank, cluster
        self.placed = PlacedProgram(program, cluster, gradient_scale)
        check_ranks_agree(program, cluster, gradient_scale, comm)
        self.program = self.placed.for_rank(self.rank)
        self.context = _Context(self)
        self._groups: dict[tuple, object] = {}
        self._channels: dict[int, Channel] = {}
        for group in self.placed.groups:      # collective: the same order on every rank
            if len(group) == comm.size:
                self._groups[group] = comm
                continue
            part = comm.split(0 if self.rank in group else None, key=self.rank)
            if part is not None:
                self._groups[group] = part
        self._sliced = [(piece.name, var, rows)
                        for var in self.program.global_block().vars
                        for piece, rows in zip(slices_of(self.placed.block, var),
                                               slice_rows(self.placed.block, var))
                        if self.rank in cluster.ranks(piece.place, piece.name)]

    def channel(self, attrs: dict) -> Channel | None:
        """The channel of the transfer op whose attributes are ``attrs``, or None before
        ``open_channel`` made it."""
        return self._channels.get(id(attrs))

    def open_channel(self, attrs: dict, count: int = 0, make=None) -> Channel:
        """Make the channel of the transfer op with ``attrs``: its communicator (the
        job's for send/recv, else the group's) and root there, and ``count`` private
        buffers of the transfer's shape and dtype with ``make(channel)`` their plan.
        (Private memory: the placement transfers' algorithms gain nothing from
        ``al.shared_empty``.)  With a batch dimension: its ``header`` instead, and no
        buffers (``Channel.for_shape`` makes them per step shape)."""
        group = tuple(attrs["group"])
        if "peer" in attrs:      # send/recv: the job's communicator
            channel = Channel(self.comm, attrs["peer"])
        else:
            channel = Channel(self._groups[group], group.index(attrs["root"]))
        shape = tuple(attrs["shape"])     # the receiver's (the slice's, if rows)
        if -1 in shape:
            channel.header = np.empty(len(shape), np.int64)
        else:
            channel.buffers = [np.empty(shape, attrs["dtype"]) for _ in range(count)]
        if make is not None:
            channel.plan = make(channel)
        self._channels[id(attrs)] = channel
        return channel

    def release(self, scope) -> None:
        """Free the channels' plans and the sub-communicators; values of ``scope`` in the
        channels' buffers become copies (a later run's plan would overwrite them).
        Collective: every rank of the job releases."""
        self._release_channels(scope)     # (its locals, buffers among them, gone on return)
        groups, self._groups = self._groups, {}
        for part in groups.values():
            if part is not self.comm:
                part.free()

    def _release_channels(self, scope) -> None:
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            for plan in channel.all_plans():
                plan.free()
            buffers = channel.all_buffers()
            for name, value in list(scope.items()):
                if isinstance(value, np.ndarray) and any(
                        np.may_share_memory(value, buffer) for buffer in buffers):
                    scope[name] = value.copy()

    def name_peers(self, ranks) -> str:
        return ", ".join(f"{self.cluster.role_of(r)} rank {r} ({self.cluster.endpoints[r]})"
                         for r in ranks)

    def prepare(self, scope) -> None:
        """Cut this rank's slices from the whole values the startup program made."""
        for piece, whole, (start, stop) in self._sliced:
            if piece not in scope and whole in scope:
                scope[piece] = np.array(scope[whole][start:stop])

    def local_fetches(self, names: list[str]) -> list[str]:
        """The fetched names this rank has a value of (the others come back as None)."""
        block = self.program.global_block()
        made = {n for op in block.ops for n in op.output_names()}
        read = {n for op in block.ops for n in op.input_names()}
        return [n for n in names if n in made or n in read]

    def run(self, run_local, names: list[str]) -> list:
        """``run_local(local_names)`` with the names this rank has; None for the others;
        a transfer's timeout re-raised as the ``al.TimeoutError`` naming the peer."""
        local = self.local_fetches(names)
        try:
            values = run_local(local)
        except ExecutionError as exc:
            cause = exc.__cause__
            while cause is not None and not isinstance(cause, al.TimeoutError):
                cause = cause.__cause__
            if cause is not None:
                raise cause from exc
            raise
        found = dict(zip(local, values))
        return [found.get(name) for name in names]


def run_placed(executor, program: Program, feed, fetch_list, scope) -> list:
    """``Executor.run`` of a placed program: only this rank's ops, in order.  The
    ``PlacedRun`` is made on the first run and kept with the program (its sub-communicators
    too: one set per program, whichever executor runs it)."""
    runtime = program.__dict__.get("_placed_run")
    if runtime is None:
        runtime = program.__dict__["_placed_run"] = PlacedRun(program)
    mine = runtime.program
    feed = dict(feed or {})
    names = fetch_names(fetch_list)
    check_feed(mine, feed)
    check_fetch(mine, names)
    runtime.prepare(scope)
    check_readable(mine, feed, scope)

    place = f"{executor.place}@rank{runtime.rank}"
    checking = getattr(executor, "check_nan_inf", False)
    if checking:
        from ..nan_inf import check_feed_finite, check_outputs_finite
        check_feed_finite(feed)

    def run_local(local: list[str]) -> list:
        store_feed(scope, feed)
        for op in mine.global_block().ops:
            run_op(op, scope, place, context=runtime.context)
            if checking:
                check_outputs_finite(op, scope, place)
        return [fetch_value(name, scope, executor.place) for name in local]
    return runtime.run(run_local, names)


def check_ranks_agree(program: Program, cluster: Cluster, gradient_scale: str, comm) -> None:
    """``ProgramError`` on every rank unless every rank placed the same program (ops,
    variables, places) over the same cluster; collective (one 32-byte allgather when they
    agree): the data-parallel check (``gather_if_ranks_differ``) over the placed program."""
    lines = [f"cluster {cluster.describe()} {list(cluster.endpoints)}",
             f"gradient_scale {gradient_scale}"]
    block = program.global_block()
    lines += [f"var {v.name} {list(v.shape)} {v.dtype} {v.place}" for v in block.vars.values()]
    lines += [f"op #{i} {op}" for i, op in enumerate(block.ops)]
    texts = gather_if_ranks_differ(lines, comm)
    if texts is None:
        return
    for rank, text in enumerate(texts[1:], start=1):
        for index in range(max(len(texts[0]), len(text))):
            ours = texts[0][index] if index < len(texts[0]) else "nothing"
            theirs = text[index] if index < len(text) else "nothing"
            if ours != theirs:
                raise ProgramError(f"program: the ranks' placed programs disagree: rank 0 has "
                                   f"{ours!r}, rank {rank} has {theirs!r}; every rank must "
                                   "place the same program over the same cluster")
    raise ProgramError("program: the ranks' placed programs disagree")
