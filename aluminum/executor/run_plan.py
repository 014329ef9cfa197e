"""``RunPlan``: what every run of one fetch list needs, worked out on its first run."""
from __future__ import annotations

from .executor import PreparedOp
from .ops.registry import ANYWHERE
from .ssa_graph import FETCH, SSAGraph

LARGE_OP_S = 200e-6
TIMING_EVERY = 8    # runs between two timings of every op (the first two runs are timed)


class RunPlan:
    """The graph with its fetch ops and, per op: its stream and prepared kernel, the
    producers on other streams it waits for, whether it records an event for consumers on
    other streams, whether it is on the fast path (none of that), how many producers it
    waits for when more than one (a countdown per run), and how long it took when last
    timed (``seconds``: which ops the pool takes)."""

    def __init__(self, graph: SSAGraph, streams: dict, scope, context,
                 destinations: dict | None = None) -> None:
        """``destinations``: the ``Destinations`` of some ops' outputs, by op index."""
        ops = graph.ops
        destinations = destinations or {}
        self.graph, self.scope = graph, scope
        self.streams = [streams[handle.stream] for handle in ops]
        self.prepared = [None if handle.kind == FETCH else
                         PreparedOp(handle.op, scope, handle.place, streams[handle.stream].name,
                                    context, destinations.get(handle.index, ANYWHERE))
                         for handle in ops]
        self.waits: list[tuple[int, ...]] = []
        self.records = [False] * len(ops)
        for handle in ops:
            mine = self.streams[handle.index]
            producers = sorted({v.generated_op.index for v in handle.inputs
                                if v.generated_op is not None})
            crossing = tuple(p for p in producers
                             if self.streams[p] is not mine and not self.streams[p].inline)
            self.waits.append(crossing)
            for producer in crossing:
                self.records[producer] = True
        self.plain = [self.streams[i].inline and not self.waits[i] and not self.records[i]
                      for i in range(len(ops))]
        self.joins = [(i, count) for i, count in enumerate(graph.dependency_counts)
                      if count > 1]
        self.starts = [handle for handle in ops if not graph.dependency_counts[handle.index]]
        self.fetches = sum(handle.kind == FETCH for handle in ops)
        self.queued_streams = list({id(s): s for s in self.streams if not s.inline}.values())
        self.seconds = [LARGE_OP_S] * len(ops)
        self.runs = 0

    def next_run_is_timed(self) -> bool:
        """Count a run; True if it should time every op."""
        self.runs += 1
        return self.runs <= 2 or self.runs % TIMING_EVERY == 0
