"""Who has not arrived: per-rank counts of the collectives each rank entered, read by the
timeouts and stall warnings that name the ranks holding everyone up.

Every rank keeps, per communicator, the number of collectives it has entered, in shared
memory its peers on the node can read without any MPI call (so a stuck peer cannot block
the diagnosis): ranks whose count is below an operation's own number never arrived at it.
The counts live on the *arrival board*, one small node-wide shared window (MPI-3's: the
backend's services make it, backends/mpi/services.py) made at ``al.init()`` (``SLOTS``
counters per process); each communicator takes a slot, the lowest free on all its ranks,
agreed with one allreduce when it is made, and gives it back when freed or garbage-collected
(no collective needed: a slot is only reused once free on every rank of the new
communicator). A communicator made when a rank has no free slot left has no counters:
messages say the late ranks are unknown.

Across nodes the board shows only this node's peers.  For the ranks on other nodes a
timeout holds a *roll call*: this rank sends its count to each of them and listens for
theirs (``roll_call_seconds()``: half of AL_TIMEOUT within 1 to 5 s), which they send when
their own wait ends the same way.  A rank that answers with a lower count never arrived;
one that does not answer never arrived or cannot be reached (its host, or the link to it,
is down) - both named with their host, ``[2, 3] (host node7)``.  The messages go over the
communicator's administrative MPI communicator (never the one operations run on) under a
tag of their own.

Counting is on always: a plan bumps its counter before each run (a store into shared
memory).  Who reads it:

- ``AL_TIMEOUT``: an operation that times out, blocking ones included (they go through the
  engine, see ``ENABLED``), names the ranks that never arrived.
- ``al.finalize()``: each rank marks on the board that it reached finalize (in its last
  slot, never given to a communicator; the one before holds the process id).  A rank that
  already raised ``al.TimeoutError`` naming some peers (``given_up_on``) waits for those at
  finalize for one ``AL_TIMEOUT``, not the full ``AL_FINALIZE_TIMEOUT``, once the board shows that
  they are the only ranks of the job that have not reached it (``late_for_finalize``) and
  each of them is stopped (SIGSTOP, a debugger: ``stopped``).  A peer that is merely late
  (asleep, busy, still running into its own timeouts) gets the full wait: nothing else
  tells it from a dead one.
- Without ``AL_TIMEOUT``, Horovod's stall inspector: a nonblocking ``wait()`` warns once
  after ``AL_STALL_WARN_S`` (60 s), and so does a blocking call stuck that long - watched by
  a monitor thread, since the caller is inside MPI - naming the operation and the ranks that
  never arrived, once per operation.
"""
from __future__ import annotations

import os
import threading
import time
import warnings
import weakref

import numpy as np

from .arrivals import Arrivals
from .core.board_cells import count_of, generation_of, given_back

__all__ = ["ENABLED", "ArrivalCounters", "open_board", "close_board", "attach"]

# AL_TIMEOUT set: blocking calls go through the engine, so that a stuck one can be ended.
ENABLED = bool(os.environ.get("AL_TIMEOUT", "").strip())

SLOTS = 1024               # communicators per process the board counts for at once
_board: _Board | None = None
# Board indices of the peers an al.TimeoutError of this process named as never arrived.
_given_up: set[int] = set()


class _Board:
    """The node's shared counters (``SLOTS`` int64 per process of the default group, in the
    ``NodeBoard`` the services made) and which slots are free on this process."""

    def __init__(self, shared) -> None:
        self.shared = shared
        self.counters, self.mine, self.whole_job = shared.counters, shared.mine, shared.whole_job
        for slot in range(SLOTS):
            self.mine[slot] = 0
        self.free = np.ones(SLOTS, np.uint8)     # 1: the slot is free on this process
        # The last two slots, never agreed on (alike on every rank): 1 once this process
        # has reached al.finalize(), and its process id (for ``stopped``).
        self.finalize_slot, self.pid_slot = SLOTS - 1, SLOTS - 2
        self.free[self.finalize_slot] = self.free[self.pid_slot] = 0
        self.mine[self.pid_slot] = os.getpid()

    def peers_of(self, comm) -> tuple[list[int | None], list[str]]:
        """Board indices of ``comm``'s ranks in rank order (None for a rank on another
        node), and each rank's host name."""
        return self.shared.locate(comm.mpi_comm, comm.size)

    def give_back(self, slot: int) -> None:
        # (count 0 before the slot can be agreed on again; the next generation, so that a
        # peer still waiting on the old count sees the slot was let go: core/board_cells.py)
        self.mine[slot] = given_back(self.mine[slot])
        self.free[slot] = 1

    def close(self) -> None:
        self.counters = []
        self.mine = None
        self.shared.close()


def open_board(services, world) -> None:
    """Make the node's arrival board (collective over ``world``, a group of ``services``,
    at ``al.init()``); none for a single process, which has no peer to wait for."""
    global _board
    shared = services.open_board(world, SLOTS)
    if shared is not None:
        _board = _Board(shared)


def close_board(collective: bool) -> None:
    """Free the board at ``al.finalize()`` (collective), or leave it when not ``collective``."""
    global _board
    board, _board = _board, None
    if board is not None and collective:
        board.close()


def mark_finalizing() -> None:
    """Tell the node's other ranks that this one has reached ``al.finalize()``."""
    board = _board
    if board is not None and board.mine is not None:
        board.mine[board.finalize_slot] = 1


def given_up_on() -> set[int]:
    """Board indices of the peers that an ``al.TimeoutError`` of this process named as
    never arrived (under ``AL_TIMEOUT``)."""
    return set(_given_up)


def late_for_finalize() -> set[int] | None:
    """Board indices of the ranks that have not reached ``al.finalize()`` yet; None when
    the board cannot tell (no board, or the job spans nodes)."""
    board = _board
    if board is None or not board.whole_job or board.mine is None:
        return None
    return {peer for peer, counters in enumerate(board.counters)
            if counters[board.finalize_slot] == 0}


def stopped(peer: int) -> bool:
    """Whether the process at board index ``peer`` is stopped (SIGSTOP, or a debugger's
    trace stop: state T or t in /proc); False when it cannot be told."""
    board = _board
    if board is None or board.mine is None:
        return False
    try:
        with open(f"/proc/{int(board.counters[peer][board.pid_slot])}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError, ValueError):
        return False
    return bool(fields) and fields[0] in (b"T", b"t")


class ArrivalCounters(Arrivals):
    """The collectives entered on one communicator: this rank's count (``Arrivals``: a plan
    calls ``enter`` before each blocking run and ``leave`` after it, ``arrive`` before a
    start) and its peers', read by the timeouts and the monitor thread's stall warning."""

    __slots__ = ("_peers", "_peer_ids", "_generations", "_warned", "describe", "_hosts",
                 "_admin", "_services")

    def __init__(self, board: _Board, slot: int, peers: list[int | None], describe: str,
                 hosts: list[str] | None = None, admin=None, services=None) -> None:
        super().__init__(board.mine, slot)
        # (None: a rank on another node, asked by roll call over ``admin``)
        self._peers = [None if peer is None else board.counters[peer] for peer in peers]
        self._peer_ids = peers
        # Each node peer's generation of the slot, read after the agreement on it (made
        # after every peer gave the slot back), so it is the one it keeps for this
        # communicator.
        self._generations = [None if counters is None else generation_of(counters[slot])
                             for counters in self._peers]
        self._hosts, self._admin, self._services = hosts, admin, services
        self._warned = None
        self.describe = describe  # "rank R of N", for the monitor's message

    def missing(self, number: int) -> str:
        """Which ranks had not entered collective ``number`` yet, in words."""
        if self._mine is None:
            return "the ranks that never arrived are unknown: the communicator was freed"
        slot = self._slot
        late = [rank for rank, counters in enumerate(self._peers)
                if counters is not None and count_of(counters[slot]) < number]
        elsewhere = [rank for rank, counters in enumerate(self._peers) if counters is None]
        silent = []
        if elsewhere:
            heard = self._services.roll_call(self._admin, self.count, number, elsewhere,
                                             roll_call_seconds())
            late = sorted(late + [rank for rank, count in heard.items() if count < number])
            silent = [rank for rank in elsewhere if rank not in heard]
        words = []
        if late:
            words.append(f"ranks that never arrived at collective #{number} on this "
                         f"communicator: {late}{self._where(late)}")
        if silent:
            words.append(f"no answer within {roll_call_seconds():g} s from ranks {silent}"
                         f"{self._where(silent)}: they never arrived at collective #{number} "
                         f"on this communicator or cannot be reached (host or link down?)")
        if not words:
            return (f"every rank entered it (collective #{number} on this communicator): "
                    f"they are all inside it, e.g. with mismatched arguments")
        if ENABLED:   # (only AL_TIMEOUT's errors ask; stall warnings come without it)
            _given_up.update(self._peer_ids[rank] for rank in late
                             if self._peer_ids[rank] is not None)
        return "; ".join(words)

    def node_cells(self) -> tuple[list, list] | None:
        """Every rank's cell of this communicator's slot, in rank order (this rank's own
        included), each a one-element int64 memoryview into the node's board, and the
        slot's generation on each rank while it is this communicator's
        (core/board_cells.py); None where a rank is on another node or the slot was given
        back.  A barrier through shared memory waits on them
        (backends/mpi/algorithms/shared_memory_barrier.py)."""
        if self._mine is None or not self._peers \
                or any(counters is None for counters in self._peers):
            return None
        slot = self._slot
        return [counters[slot:slot + 1] for counters in self._peers], self._generations

    def _where(self, ranks: list[int]) -> str:
        """`` (host a)`` or `` (hosts a: 1, 2; b: 5)`` for ``ranks``; "" on one node."""
        if not any(counters is None for counters in self._peers):
            return ""
        by_host: dict[str, list[int]] = {}
        for rank in ranks:
            by_host.setdefault(self._hosts[rank], []).append(rank)
        if len(by_host) == 1:
            return f" (host {next(iter(by_host))})"
        return " (hosts " + "; ".join(f"{host}: {', '.join(map(str, members))}"
                                      for host, members in by_host.items()) + ")"

    def release(self) -> None:
        """Give the slot back (idempotent; no MPI call, so also at garbage collection)."""
        _live.discard(self)
        self._give_back()

    def _give_back(self) -> None:
        mine = self.detach()
        self._peers = []
        if mine is not None and _board is not None and _board.mine is mine:
            _board.give_back(self._slot)

    __del__ = _give_back   # a communicator dropped without free() gives its slot back too


def attach(comm) -> ArrivalCounters | None:
    """Give a new communicator its counters (collective over ``comm``: one allreduce
    agreeing on a slot free on every rank); None where its ranks cannot be watched."""
    board = _board
    peers, hosts = (None, None) if board is None or comm.backend.uses_streams else \
        board.peers_of(comm)
    slots = SLOTS if board is None else len(board.free)   # (alike on every rank)
    mine = board.free if peers is not None else np.zeros(slots, np.uint8)
    what = f"{type(comm).__name__}() (agreeing on an arrival-board slot)"
    common = comm.services.all_set(comm.mpi_comm, what, mine)
    free_everywhere = np.flatnonzero(common)
    if peers is None or not len(free_everywhere):
        return None
    slot = int(free_everywhere[0])
    board.free[slot] = 0
    counters = ArrivalCounters(board, slot, peers, f"rank {comm.rank} of {comm.size}",
                               hosts, comm._admin if comm.node_count > 1 else None,
                               comm.services)
    _watch(counters)
    return counters


# -- the roll call: ranks on other nodes ---------------------------------------------------

def roll_call_seconds() -> float:
    """How long a roll call listens: half of ``AL_TIMEOUT``, within 1 to 5 s (5 without)."""
    from .engine.progress import get_engine

    timeout = get_engine().config.timeout_s
    return 5.0 if timeout is None else min(5.0, max(1.0, timeout / 2))


# -- the stall monitor: blocking calls stuck in MPI -------------------------------------------

_live: weakref.WeakSet = weakref.WeakSet()
_monitor: threading.Thread | None = None
_monitor_lock = threading.Lock()


def _watch(counters: ArrivalCounters) -> None:
    global _monitor
    from .engine.progress import get_engine

    config = get_engine().config
    if config.timeout_s is not None:   # AL_TIMEOUT ends stuck calls itself
        return
    _live.add(counters)
    with _monitor_lock:
        if _monitor is None:
            _monitor = threading.Thread(target=_monitor_loop, args=(config.stall_warn_s,),
                                        name="aluminum-stall-monitor", daemon=True)
            _monitor.start()


def _monitor_loop(stall_s: float) -> None:
    """Every quarter of ``stall_s`` (at most 1 s), look at each communicator's blocking run
    in progress; one seen in progress for ``stall_s`` is warned of, once."""
    period = min(1.0, stall_s / 4)
    first_seen: dict = {}
    while True:
        time.sleep(period)
        first_seen = _look(first_seen, stall_s)


def _look(first_seen: dict, stall_s: float) -> dict:
    """One look: warn of the runs in progress since ``first_seen`` says for ``stall_s``;
    returns when each run in progress was first seen (``id(counters) -> (number, time)``:
    numbers, never the run, which holds its communicator)."""
    now = time.monotonic()
    seen = {}
    for counters in list(_live):
        inside = counters.inside
        if inside is None or counters._warned == inside[0]:
            continue
        since = first_seen.get(id(counters))
        if since is None or since[0] != inside[0]:
            since = (inside[0], now)
        seen[id(counters)] = since
        if now - since[1] >= stall_s:
            counters._warned = inside[0]
            _warn_blocking(counters, inside, stall_s)
    return seen


def _warn_blocking(counters: ArrivalCounters, inside: tuple, stall_s: float) -> None:
    number, plan = inside
    try:
        name = plan.algorithm
    except Exception:   # noqa: BLE001 - a warning must never fail
        name = plan.op
    warnings.warn_explicit(
        f"aluminum: {name} (blocking call, {counters.describe}) has been waited for "
        f"{stall_s:g} s (AL_STALL_WARN_S) without completing; {counters.missing(number)}; "
        f"set AL_TIMEOUT to make this an error", RuntimeWarning,
        filename="<aluminum stall monitor>", lineno=0)
