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
        start = al.trace.now_us() if al.trace.ENABLED else None
        try:
            outs = self.move(runtime, ins, attrs)
        except al.TimeoutError as exc:
            raise self.unanswered(runtime, attrs, exc) from exc
        if start is not None:   # the timeline names the variable, next to the op's span
            al.trace.span(f"{self.type} {attrs['var']}", "placement", start,
                          al.trace.now_us(), {"group": list(attrs["group"]),
                                              "root": attrs["root"], "rank": runtime.rank})
        return outs

    def bind(self, op, scope, ctx):
        """The transfer bound to ``scope`` (``OpKind.bind``): ``move`` called on its input
        read from ``scope``, its output stored there, the context looked up once; None
        under AL_TRACE (``compute`` records its span) or outside a placed program
        (``compute`` says so)."""
        runtime = getattr(ctx, "placement", None)
        if runtime is None or al.trace.ENABLED:
            return None
        move, attrs = self.move, op.attrs
        source = op.inputs["X"][0] if op.inputs.get("X") else None
        target = op.outputs["Out"][0] if op.outputs.get("Out") else None

        def run() -> None:
            try:
                outs = move(runtime, {} if source is None else {"X": [scope[source]]}, attrs)
            except al.TimeoutError as exc:
                raise self.unanswered(runtime, attrs, exc) from exc
            if target is not None:
                scope[target] = outs["Out"][0]
        return run

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

    def move(self, runtime, ins, attrs) -> dict:
        raise NotImplementedError


def _outgoing(ins, attrs):
    """The array a sender hands to the call: the producer's own (a view for ``rows``),
    copied only if it is not C-contiguous."""
    value = ins["X"][0]
    rows = attrs.get("rows")
    return np.ascontiguousarray(value if rows is None else value[rows[0]:rows[1]])


def _dynamic(attrs) -> bool:
    return -1 in attrs["shape"]


def _received(buffer, attrs) -> dict:
    scale = attrs.get("scale")
    if scale not in (None, 1.0):
        np.multiply(buffer, scale, out=buffer)
    return {"Out": [buffer]}


@register
class SendVar(_Transfer):
    """Send ``X`` (rows ``rows``) to rank ``peer``; its header first if its shape varies."""

    type = "send_var"

    def peers(self, attrs, runtime):
        return [attrs["peer"]]

    def move(self, runtime, ins, attrs):
        value = _outgoing(ins, attrs)
        if _dynamic(attrs):
            channel = runtime.channel(attrs) or runtime.open_channel(attrs)
            channel.header[...] = value.shape
            al.send(channel.header, attrs["peer"], runtime.comm)
        al.send(value, attrs["peer"], runtime.comm)
        record("send", 2, value.nbytes, 0)
        return {}


@register
class RecvVar(_Transfer):
    """Receive ``Out`` from rank ``peer``."""

    type = "recv_var"

    def peers(self, attrs, runtime):
        return [attrs["peer"]]

    def move(self, runtime, ins, attrs):
        if _dynamic(attrs):
            channel = runtime.channel(attrs) or runtime.open_channel(attrs)
            al.recv(channel.header, attrs["peer"], runtime.comm)
            buffer, plan = channel.for_shape(tuple(channel.header.tolist()), attrs["dtype"],
                                             self.plan)
            plan.run()
            return _received(buffer, attrs)
        channel = runtime.channel(attrs) or runtime.open_channel(attrs, 1, self.plan)
        channel.plan.run()
        return _received(channel.buffers[0], attrs)

    @staticmethod
    def plan(channel, buffer=None):
        buffer = channel.buffers[0] if buffer is None else buffer
        return al.recv_init(buffer, channel.root, channel.comm)


@register
class BcastVar(_Transfer):
    """``root``'s ``X`` (rows ``rows``) to every other rank of ``group`` as ``Out``."""

    type = "bcast_var"

    def move(self, runtime, ins, attrs):
        if "X" in ins:
            channel = runtime.channel(attrs) or runtime.open_channel(attrs)
            value = _outgoing(ins, attrs)
            if _dynamic(attrs):
                channel.header[...] = value.shape
                al.bcast(channel.header, channel.comm, root=channel.root)
            al.bcast(value, channel.comm, root=channel.root)
            record("bcast", channel.comm.size, value.nbytes * (channel.comm.size - 1), 0)
            return {}
        if _dynamic(attrs):
            channel = runtime.channel(attrs) or runtime.open_channel(attrs)
            al.bcast(channel.header, channel.comm, root=channel.root)
            buffer, plan = channel.for_shape(tuple(channel.header.tolist()), attrs["dtype"],
                                             self.plan)
        else:
            channel = runtime.channel(attrs) or runtime.open_channel(attrs, 1, self.plan)
            buffer, plan = channel.buffers[0], channel.plan
        plan.run()
        record("bcast", channel.comm.size, 0, buffer.nbytes)
        return {"Out": [buffer]}

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

    def move(self, runtime, ins, attrs):
        if "X" in ins:
            channel = runtime.channel(attrs) or runtime.open_channel(attrs)
            value = _outgoing(ins, attrs)
            al.reduce(value.reshape(-1), channel.comm, root=channel.root,
                      algo=al.Algorithm.DIRECT)   # flat: repeated calls take the fast path
            record("reduce", channel.comm.size, value.nbytes, 0)
            return {}
        channel = runtime.channel(attrs) or runtime.open_channel(attrs, 2, self.plan)
        channel.plan.run()
        total = channel.buffers[1]
        record("reduce", channel.comm.size, 0, total.nbytes * (channel.comm.size - 1))
        return _received(total, attrs)

    @staticmethod
    def plan(channel):
        """At the root: the reduce of a zero operand (``buffers[0]``, never written) into
        ``buffers[1]``.  The zero is ``np.zeros``'s: a large one is untouched pages the
        kernel maps to its one zero page, so reading it costs no memory traffic."""
        total = channel.buffers[1]
        zero = channel.buffers[0] = np.zeros_like(total)
        return al.reduce_init(zero, channel.comm, root=channel.root, recvbuf=total,
                              algo=al.Algorithm.DIRECT)
