"""What the progress engine runs, and in which order: admission queues and pipeline stages.

The rules (../shared/DESIGN.md §2, after Aluminum's ``progress.cpp``):

- Admission is FIFO per compute stream (``state.compute_stream``): only the head of a
  stream's queue is considered, so operations on one stream start in submission order.
  Host-only states (``compute_stream`` None) are queued per communicator (``state.comm``;
  None without one): each communicator is its own "host stream".  One queue for all host
  operations would deadlock threads that use different communicators: rank 0 could fill
  the bound with comm A's operations while rank 1 fills it with comm B's, each waiting for
  operations the other rank has queued behind them.
- A BOUNDED state is admitted while fewer than ``AL_PE_NUM_CONCURRENT_OPS`` bounded states
  run, or whenever its stream has nothing running; an UNBOUNDED state is always admitted (a
  send posted before its receive must not block it).
- Each stream has pipeline stages; an admitted state is started and enters stage 0, and each
  pass steps every running state once.  ``ADVANCE`` moves a state to the next stage only from
  the head of its stage; a state behind the head is parked (not stepped) until it is the head.
- A state whose ``start``/``step`` raises fails only its own request.
- An operation submitted while nothing else is in flight is started by ``submit`` itself
  (``ProgressEngine.submit``, like ``MPI_Iallreduce`` posting at the call) and polled alone
  by its waiter (``_step_alone``): the queues are only walked once two operations overlap.

Everything here except ``_inbox`` (appended to by any thread) is touched only by the thread
holding the engine's driver token (``progress.py`` says who that is).
"""
from __future__ import annotations

import collections
import itertools
from typing import Callable

try:
    import cython
except ImportError:   # (running uncompiled without Cython)
    from ..core import pure_cython as cython

from ..core import trace
from .config import EngineConfig
from .request import Request
from .state import Action, RunType, State

__all__ = ["Scheduler", "check_hashable", "describe"]

_MAX_IDLE_QUEUES = 64  # prune empty stream queues beyond this many, even while busy
_POLLS = 16            # polls of a lone waited-for state between looks at the clock

_CONTINUE, _ADVANCE, _COMPLETE = Action.CONTINUE, Action.ADVANCE, Action.COMPLETE
_UNBOUNDED = RunType.UNBOUNDED
TRACING = trace.ENABLED   # (fixed at import, as trace's is; one lookup fewer per call)


class _StreamQueue:
    """One compute stream's admission queue and pipeline stages."""

    __slots__ = ("waiting", "stages", "running")

    def __init__(self) -> None:
        self.waiting: collections.deque[Request] = collections.deque()
        self.stages: list[list[Request]] = [[]]
        self.running = 0


@cython.cclass
class Scheduler:
    """The engine's queues of requests and the passes over them (see the module docstring)."""

    __slots__ = ("config", "_inbox", "_streams", "_queued", "_bounded", "_solo",
                 "_completions", "_seq", "_last_seq", "_abandoned_owners")

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self._inbox: collections.deque[Request] = collections.deque()
        # Per-stream queues (empty ones are pruned when the engine goes idle or they pile
        # up), requests in them, bounded states running.
        self._streams: dict[object, _StreamQueue] = {}
        self._queued = 0
        self._bounded = 0
        # The one operation ``submit`` started itself while nothing else was in flight: not
        # yet in a stream queue; the next pass puts it there (``_attach``).
        self._solo: Request | None = None
        self._completions = 0      # requests retired so far (the idle engine watches it)
        self._seq = itertools.count(1)
        self._last_seq = 0         # seq of the latest submission
        # id -> owner (state.comm) of every abandoned operation, kept alive: its MPI requests
        # may still be pending, so it must never be freed, not even by garbage collection.
        self._abandoned_owners: dict[int, object] = {}

    def _has_work(self) -> bool:
        return bool(self._inbox) or self._queued > 0

    @cython.locals(polls=cython.int)
    def _step_alone(self, request: Request) -> bool:
        """Step the only request in flight, as a pass would, up to ``_POLLS`` times while it
        returns CONTINUE and nothing new is submitted; True once it did anything else.

        A state that polls (waiting on a peer) steps tens of times per operation, so the walk
        over queues and the clock reads a pass loop makes would add up.
        """
        state, inbox = request.state, self._inbox
        for polls in range(_POLLS):
            try:
                action = state.step()   # (no bound method made per call)
            except BaseException as exc:  # noqa: BLE001 - fails only this request
                self._settle_alone(request, None, exc)
                return True
            if action is _CONTINUE:
                if inbox:
                    break
                continue
            if action is _COMPLETE and request is self._solo and not TRACING:
                # ``_settle_alone`` + ``_retire`` for the commonest case, inlined: a
                # solo request never entered a queue and is never bounded.
                self._solo = None
                self._queued -= 1
                self._completions += 1
                request._finish()
            else:
                self._settle_alone(request, action)
            return True
        return False

    def _settle_alone(self, request: Request, action, error: BaseException | None = None):
        """``_settle`` for the only request in flight, which may still be the solo one."""
        if request is self._solo:
            if action is _COMPLETE:   # never entered a stream queue: nothing to take it out of
                self._solo = None
                self._retire(request, None)
                return
            self._attach(request)
        self._settle(request.queue, request, 0, action, error)

    # -- one pass: admission, then one step of every running state ---------------------------

    def _pass(self) -> bool:
        """Admit, then step each running state once; True if anything changed.

        Only the holder of the driver token may call this.
        """
        inbox, streams = self._inbox, self._streams
        if self._solo is not None:
            self._attach(self._solo)
        while inbox:
            request = inbox.popleft()
            queue = streams.get(request.key)
            if queue is None:
                queue = streams[request.key] = _StreamQueue()
            queue.waiting.append(request)
            self._queued += 1
        changed = False
        for queue in streams.values():
            if queue.waiting and self._admit(queue):
                changed = True
            if queue.running and self._step(queue):
                changed = True
        if len(streams) > _MAX_IDLE_QUEUES:
            self._prune()
        return changed

    def _prune(self) -> None:
        """Drop empty stream queues, and with them the references to their streams."""
        streams = self._streams
        for key in [key for key, queue in streams.items()
                    if not queue.running and not queue.waiting]:
            del streams[key]

    def _attach(self, request: Request) -> None:
        """Put the solo request, started by ``submit``, in its stream queue."""
        self._solo = None
        queue = self._streams.get(request.key)
        if queue is None:
            queue = self._streams[request.key] = _StreamQueue()
        self._enter(queue, request)

    def _admit(self, queue: _StreamQueue) -> bool:
        waiting, limit = queue.waiting, self.config.max_concurrent
        admitted = False
        while waiting:
            request = waiting[0]
            state = request.state
            if state.run_type is not _UNBOUNDED and self._bounded >= limit and queue.running:
                break
            waiting.popleft()
            admitted = True
            if TRACING:
                trace.engine_event("admit", state.name, request.seq, state.compute_stream)
            try:
                state.start()
            except BaseException as exc:  # noqa: BLE001 - fails only this request
                self._retire(request, exc)
                continue
            if TRACING:
                trace.engine_event("start", state.name, request.seq, state.compute_stream)
            self._enter(queue, request)
        return admitted

    def _enter(self, queue: _StreamQueue, request: Request) -> None:
        """A started request (counted in ``_queued``) runs in stage 0 of ``queue``."""
        if request.state.run_type is not _UNBOUNDED:
            self._bounded += 1
            request.bounded = True
        request.queue = queue
        queue.stages[0].append(request)
        queue.running += 1

    def _step(self, queue: _StreamQueue) -> bool:
        """Step each running state of ``queue`` once, stage by stage; True if any changed."""
        changed = False
        for stage in queue.stages:          # a list: stages appended meanwhile are visited
            i = 0
            while i < len(stage):
                request = stage[i]
                if request.parked:
                    if i == 0:              # the head left: move on to the next stage
                        request.parked = False
                        self._advance(queue, request)
                        changed = True
                    else:
                        i += 1
                    continue
                try:
                    action = request.state.step()
                except BaseException as exc:  # noqa: BLE001 - fails only this request
                    self._settle(queue, request, i, None, exc)
                    changed = True
                    continue
                if action is _CONTINUE:
                    i += 1
                    continue
                changed = True
                if self._settle(queue, request, i, action):
                    i += 1
        return changed

    def _settle(self, queue: _StreamQueue, request: Request, position: int, action,
                error: BaseException | None = None) -> bool:
        """Apply a step's outcome other than CONTINUE to the request at ``position`` of its
        stage; True if it stays there (ADVANCE behind the head parks it)."""
        if error is None and action is _ADVANCE:
            if position:
                request.parked = True
                return True
            self._advance(queue, request)
            return False
        if error is None and action is not _COMPLETE:
            error = TypeError(f"step() returned {action!r}, expected an Action")
        del queue.stages[request.stage][position]
        queue.running -= 1
        self._retire(request, error)
        return False

    @staticmethod
    def _advance(queue: _StreamQueue, request: Request) -> None:
        """Move the head of a stage to the end of the next stage."""
        stages = queue.stages
        stages[request.stage].pop(0)
        request.stage += 1
        if request.stage == len(stages):
            stages.append([])
        stages[request.stage].append(request)

    def _retire(self, request: Request, error: BaseException | None) -> None:
        self._queued -= 1
        self._completions += 1
        if request.bounded:
            self._bounded -= 1
        if TRACING:
            state = request.state
            trace.engine_event("complete" if error is None else "fail", state.name,
                               request.seq, state.compute_stream)
        if error is None:
            request._finish()
        else:
            request._fail(error)

    def _pending_where(self, match: Callable[[State], bool]) -> list[Request]:
        """Requests not yet complete whose state satisfies ``match`` (token holder only)."""
        requests = list(self._inbox)
        if self._solo is not None:
            requests.append(self._solo)
        for queue in self._streams.values():
            requests += queue.waiting
            requests += [request for stage in queue.stages for request in stage]
        return [request for request in requests if not request._done and match(request.state)]

    def _fail_where(self, match: Callable[[State], bool],
                    make_error: Callable[[Request], BaseException]) -> int:
        """Take every pending request whose state satisfies ``match`` out of the queues and
        fail it with ``make_error(request)``; return how many.  The rest keep running."""
        doomed = []
        for request in [r for r in self._inbox if match(r.state)]:
            try:
                self._inbox.remove(request)     # (atomic against a concurrent append)
            except ValueError:
                continue
            doomed.append(request)
        if self._solo is not None and match(self._solo.state):
            doomed.append(self._solo)
            self._solo = None
            self._queued -= 1
        for queue in self._streams.values():
            for request in [r for r in queue.waiting if match(r.state)]:
                queue.waiting.remove(request)
                self._queued -= 1
                doomed.append(request)
            for stage in queue.stages:
                for request in [r for r in stage if match(r.state)]:
                    stage.remove(request)
                    queue.running -= 1
                    self._queued -= 1
                    if request.bounded:
                        self._bounded -= 1
                    doomed.append(request)
        return self._abandon_all(doomed, make_error)

    def _abandon_all(self, requests: list[Request],
                     make_error: Callable[[Request], BaseException]) -> int:
        """Fail ``requests`` (already out of the queues) and remember whose they were: their
        MPI requests may still be pending, so ``abandoned_owner`` tells a communicator not
        to free the MPI objects under them (Open MPI's libnbc would progress a freed
        communicator and crash)."""
        failed = 0
        for request in requests:
            error = make_error(request)
            owner = getattr(request.state, "comm", None)
            if owner is not None:
                self._abandoned_owners[id(owner)] = owner
            try:
                request.state.abandon(error)
            except BaseException:  # noqa: BLE001 - failing it regardless is what matters
                pass
            if TRACING:
                trace.engine_event("fail", request.state.name, request.seq,
                                   request.state.compute_stream)
            failed += request._finish(error)
        return failed

    def abandoned_owner(self, owner) -> bool:
        """True if an operation whose state's ``comm`` is ``owner`` was ever abandoned."""
        return self._abandoned_owners.get(id(owner)) is owner

    def _fail_leftovers(self, make_error: Callable[[Request], BaseException]) -> int:
        """Fail every request not yet complete; return how many there were."""
        requests = list(self._inbox)
        self._inbox.clear()
        if self._solo is not None:
            requests.append(self._solo)
            self._solo = None
        for queue in list(self._streams.values()):
            requests += queue.waiting
            requests += [request for stage in queue.stages for request in stage]
        self._streams = {}
        self._queued = 0
        return self._abandon_all(requests, make_error)


def check_hashable(key, state: State):
    """``key`` if it can key the stream queues; else a TypeError naming the state."""
    try:
        hash(key)
    except TypeError:
        raise TypeError(f"{state.name}: compute_stream (or comm) must be hashable to "
                        f"order operations on it, got {type(key).__name__}") from None
    return key


def describe(request: Request) -> str:
    """``"allreduce/ring (request #12, rank 1 of 4)"``: the op, its sequence number, where."""
    comm = getattr(request.state, "comm", None)
    where = ""
    if comm is not None and hasattr(comm, "rank") and hasattr(comm, "size"):
        where = f", rank {comm.rank} of {comm.size}"
    return f"{request.state.name} (request #{request.seq}{where})"
