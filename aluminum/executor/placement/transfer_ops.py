"""The op kinds of the transfers placement inserts (transfers.py): ``send_var``,
``recv_var``, ``bcast_var``, ``reduce_var``.  A rank that sends has the transfer with input
``X`` (rows ``rows`` of it), a rank that receives with output ``Out``.  They run on the
executor's ``placement`` context (runtime.py): the job's communicator for send/recv, the
sub-communicator of the transfer's ``group`` (made once, with ``comm.split``) for bcast and
reduce.

What each moves, with the fewest passes over the data (as raw MPI would):

- a sender hands the producer's array itself to the call (``al.send``, ``al.bcast`` at the
  root: no copy into a buffer of the transfer's; a row slice is a view);
- a receiver of a fixed shape runs a persistent plan (``al.recv_init``, ``bcast_init``,
  ``reduce_init``) bound once to private buffers made on its first run; its output is that
  buffer, valid until the same transfer runs in the next step;
- ``reduce_var`` is ``al.reduce(..., algo="direct")`` over the group: each replica's call
  sends its value to the owner (one ``MPI_Send`` of the producer's array), whose persistent
  plan receives them all at once (``MPI_Recv_init`` requests bound to its buffers once,
  started each step) and sums them in rank order into its buffer (adding its own operand,
  a constant zero, at its rank's place), which the owner then scales in place: one fixed
  order of the sum on every run, and no scaling pass on the replicas.  The replicas'
  blocking calls and the owner's plan exchange the same messages (the algorithm's, under
  its one tag, matched in the one order every rank of the group calls in).

Each counts what it moves for ``ex.count_traffic`` as the planner's step does (the payload:
a bcast's root sends its buffer to each other rank of the group, a reduce's root receives
one summand from each; not a batch dimension's header).  A variable whose declared shape
has a batch dimension (-1) travels after a small header with its shape; a receiver keeps a
buffer and plan per step shape (the last few).  A peer that never arrives raises
``al.TimeoutError`` (under ``AL_TIMEOUT``) naming the peer's role, rank and endpoint.
"""
from __future__ import annotations

import numpy as np

import aluminum as al

from ..errors import ExecutionError
from ..layouts.traffic import active as counting
from ..layouts.traffic import record
from ..ops.registry import OpKind, register


class _Transfer(OpKind):
    differentiable = False
    communicates = True

    def infer(self, block, op):
        pass

    def compute(self, ins, attrs, ctx, out):
        runtime = getattr(ctx, "placement", None)
        if runtime is None:
            raise ExecutionError(f"op {self.type}: runs only in a placed program's executor "
                                 "(ex.place, then Executor or ParallelExecutor)")
        sending = "X" in ins
        values = {"X": ins["X"][0]} if sending else {}
        start = al.trace.now_us() if al.trace.ENABLED else None
        try:
            self.runner(runtime, attrs, values, "X" if sending else None,
                        None if sending else "Out")()
        except al.TimeoutError as exc:
            raise self.unanswered(runtime, attrs, exc) from exc
        if start is not None:   # the timeline names the variable, next to the op's span
            al.trace.span(f"{self.type} {attrs['var']}", "placement", start,
                          al.trace.now_us(), {"group": list(attrs["group"]),
                                              "root": attrs["root"], "rank": runtime.rank})
        return {"Out": [values["Out"]]} if "Out" in values else {}

    def bind(self, op, scope, ctx):
        """The transfer bound to ``scope`` (``OpKind.bind``): its ``runner``, made on the
        first run (which opens the channel) and called on every run after; None under
        AL_TRACE (``compute`` records its span) or outside a placed program (``compute``
        says so)."""
        runtime = getattr(ctx, "placement", None)
        if runtime is None or al.trace.ENABLED:
            return None
        attrs = op.attrs
        source = op.inputs["X"][0] if op.inputs.get("X") else None
        target = op.outputs["Out"][0] if op.outputs.get("Out") else None
        run = None

        def bound() -> None:
            nonlocal run
            try:
                if run is None:
                    run = self.runner(runtime, attrs, scope, source, target)
                run()
            except al.TimeoutError as exc:
                raise self.unanswered(runtime, attrs, exc) from exc
        return bound

    def unanswered(self, runtime, attrs, exc) -> al.TimeoutError:
        """The timeout of this transfer, naming the peers it waited for."""
        return al.TimeoutError(f"{self.type} of {attrs['var']!r}: "
                               f"{runtime.name_peers(self.peers(attrs, runtime))} did not "
                               f"respond: {exc}")

    def peers(self, attrs, runtime) -> list[int]:
        """Whom this rank waits for: the root, or (at the root) everyone else."""
        if attrs["root"] != runtime.rank:
            return [attrs["root"]]
        return [r for r in attrs["group"] if r != runtime.rank]

    def runner(self, runtime, attrs, values, source, target):
        """A no-argument callable making this rank's part of the transfer once: reading
        ``values[source]`` (a sender: ``source`` given), storing ``values[target]`` (a
        receiver), with everything else looked up here.  The transfer's channel is opened
        here on first use (a receiver's plan may be collective: ranks make their runners
        in the one order of the transfers, as they run them)."""
        raise NotImplementedError


def _outgoing(value, rows):
    """The array a sender hands to the call: the producer's own (a view for ``rows``),
    copied only if it is not C-contiguous."""
    return np.ascontiguousarray(value if rows is None else value[rows[0]:rows[1]])


def _channel(runtime, attrs, count: int = 0, make=None):
    """The transfer's channel (``PlacedRun.channel``), opened on its first use with
    ``count`` buffers and ``make`` their plan, or, with a batch dimension, its header
    (its buffers and plans made per step shape)."""
    found = runtime.channel(attrs)
    if found is not None:
        return found
    if -1 in attrs["shape"]:
        return runtime.open_channel(attrs)
    return runtime.open_channel(attrs, count, make)


def _scale(attrs):
    """The factor a receiver scales what it received by, or None."""
    scale = attrs.get("scale")
    return None if scale in (None, 1.0) else scale


def _receiver(plan, buffer, attrs, values, target, counted=None):
    """A receiver's runner of a fixed shape: ``plan`` run into ``buffer``, which is
    scaled (``_scale``), stored as ``values[target]`` and handed to ``counted``."""
    run_plan, scale, multiply = plan.run, _scale(attrs), np.multiply

    def run() -> None:
        run_plan()
        if scale is not None:
            multiply(buffer, scale, out=buffer)
        values[target] = buffer
        if counting and counted is not None:
            counted(buffer)
    return run


def _shaped_receiver(channel, receive_header, make, attrs, values, target, counted=None):
    """A receiver's runner with a batch dimension: the step's shape received first
    (``receive_header()`` fills ``channel.header``), then the plan of that shape
    (``Channel.for_shape``, ``make`` making it) run, as ``_receiver``."""
    header, dtype, scale = channel.header, attrs["dtype"], _scale(attrs)

    def run() -> None:
        receive_header()
        buffer, plan = channel.for_shape(tuple(header.tolist()), dtype, make)
        plan.run()
        if scale is not None:
            np.multiply(buffer, scale, out=buffer)
        values[target] = buffer
        if counting and counted is not None:
            counted(buffer)
    return run


@register
class SendVar(_Transfer):
    """Send ``X`` (rows ``rows``) to rank ``peer``; its header first if its shape varies."""

    type = "send_var"

    def peers(self, attrs, runtime):
        return [attrs["peer"]]

    def runner(self, runtime, attrs, values, source, target):
        send, peer, comm, rows = al.send, attrs["peer"], runtime.comm, attrs.get("rows")
        header = _channel(runtime, attrs).header

        def run() -> None:
            value = _outgoing(values[source], rows)
            if header is not None:
                header[...] = value.shape
                send(header, peer, comm)
            send(value, peer, comm)
            if counting:
                record("send", 2, value.nbytes, 0)
        return run


@register
class RecvVar(_Transfer):
    """Receive ``Out`` from rank ``peer``."""

    type = "recv_var"

    def peers(self, attrs, runtime):
        return [attrs["peer"]]

    def runner(self, runtime, attrs, values, source, target):
        channel = _channel(runtime, attrs, 1, self.plan)
        if channel.header is None:
            return _receiver(channel.plan, channel.buffers[0], attrs, values, target)
        recv, header, peer, comm = al.recv, channel.header, attrs["peer"], runtime.comm
        return _shaped_receiver(channel, lambda: recv(header, peer, comm), self.plan, attrs,
                                values, target)

    @staticmethod
    def plan(channel, buffer=None):
        buffer = channel.buffers[0] if buffer is None else buffer
        return al.recv_init(buffer, channel.root, channel.comm)


@register
class BcastVar(_Transfer):
    """``root``'s ``X`` (rows ``rows``) to every other rank of ``group`` as ``Out``."""

    type = "bcast_var"

    def runner(self, runtime, attrs, values, source, target):
        if source is not None:
            channel = _channel(runtime, attrs)
            bcast, comm, root = al.bcast, channel.comm, channel.root
            header, rows, others = channel.header, attrs.get("rows"), comm.size - 1

            def run() -> None:
                value = _outgoing(values[source], rows)
                if header is not None:
                    header[...] = value.shape
                    bcast(header, comm, root=root)
                bcast(value, comm, root=root)
                if counting:
                    record("bcast", others + 1, value.nbytes * others, 0)
            return run
        channel = _channel(runtime, attrs, 1, self.plan)
        bcast, header, comm, root, size = (al.bcast, channel.header, channel.comm,
                                           channel.root, channel.comm.size)

        def counted(buffer) -> None:
            record("bcast", size, 0, buffer.nbytes)
        if header is None:
            return _receiver(channel.plan, channel.buffers[0], attrs, values, target, counted)
        return _shaped_receiver(channel, lambda: bcast(header, comm, root=root), self.plan,
                                attrs, values, target, counted)

    @staticmethod
    def plan(channel, buffer=None):
        buffer = channel.buffers[0] if buffer is None else buffer
        return al.bcast_init(buffer, channel.comm, root=channel.root)


@register
class ReduceVar(_Transfer):
    """The sum of the senders' ``X`` (rows ``rows``) at ``root`` as ``Out``, times
    ``scale``: ``al.reduce`` with ``algo="direct"`` over ``group``, in rank order (see the
    module docstring)."""

    type = "reduce_var"

    def runner(self, runtime, attrs, values, source, target):
        if source is not None:
            channel = _channel(runtime, attrs)
            reduce, comm, root, rows = al.reduce, channel.comm, channel.root, attrs.get("rows")
            size, direct = comm.size, al.Algorithm.DIRECT

            def run() -> None:
                value = _outgoing(values[source], rows)
                if value.ndim != 1:     # flat: repeated calls take the fast path
                    value = value.reshape(-1)
                reduce(value, comm, root=root, algo=direct)
                if counting:
                    record("reduce", size, value.nbytes, 0)
            return run
        channel = _channel(runtime, attrs, 2, self.plan)
        size = channel.comm.size
        return _receiver(channel.plan, channel.buffers[1], attrs, values, target,
                         lambda total: record("reduce", size, 0, total.nbytes * (size - 1)))

    @staticmethod
    def plan(channel):
        """At the root: the reduce of a zero operand (``buffers[0]``, never written) into
        ``buffers[1]``.  The zero is ``np.zeros``'s: a large one is untouched pages the
        kernel maps to its one zero page, so reading it costs no memory traffic."""
        total = channel.buffers[1]
        zero = channel.buffers[0] = np.zeros_like(total)
        return al.reduce_init(zero, channel.comm, root=channel.root, recvbuf=total,
                              algo=al.Algorithm.DIRECT)
