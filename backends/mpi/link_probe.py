"""The link between nodes, measured once at ``al.init()`` where no tuning table says what it is.

The selector's two-level model, the hierarchical allreduce's chunks and the pieces messages
between nodes are cut into all depend on the link's α and β, which no fixed default fits on
every network.  So the first ranks of the first two nodes (MPI's ``COMM_TYPE_SHARED`` split
of the default group) ping-pong on the library's private copy of it, and every rank
receives their result:

- α: half the median round trip of 8 bytes (``ALPHA_TRIPS``), after one untimed trip that
  sets up the connection;
- β: messages from ``FIRST_BYTES``, doubling until half a round trip takes ``LONG_S`` or the
  size reaches ``MOST_BYTES`` (median of ``BYTES_TRIPS`` each), β from the difference of the
  last two sizes: a token bucket (``tc tbf``) lets every message's first bytes pass at once,
  and the difference cancels that burst (a smaller size, inside the burst, would not).

Both are then rounded to 1, 2 or 5 times a power of ten (the rate in bits per second, as
networks are sold, and α in seconds): what they decide (the algorithm, the chunks, hence
the order in which a float sum's terms meet) should not change between two jobs on the same
cluster because one measured the link a few percent faster.

Bounded like every wait at ``al.init()``: a leader that never answers makes the other raise
``al.TimeoutError`` within ``AL_TIMEOUT``.

What surprises people: it takes a fraction of a second at init, once per job, and only where
the job spans nodes; it measures one pair of nodes and assumes the others alike, on an idle
network; and a link right between two rounded values (about 1.4, 3.2 or 7.1 times a power of
ten) may still round either way from one job to the next.
"""
from __future__ import annotations

import math
import time

import numpy as np
from mpi4py import MPI

from . import rendezvous
from ...core.errors import TimeoutError

PROBE_TAG = 32766          # on the private copy of the default group; below the roll call's
ALPHA_TRIPS, BYTES_TRIPS = 5, 5
FIRST_BYTES, MOST_BYTES = 64 << 10, 16 << 20
LONG_S = 4e-3
MIN_ALPHA_S = 1e-6

WHAT = "al.init() (measuring the link between nodes)"


def measure_link(world, wanted: bool) -> tuple[float, float] | None:
    """``(α seconds, β seconds per byte)`` of one message between the first ranks of
    ``world``'s first two nodes, the same on every rank (collective); None where ``world``
    is on one node or some rank did not want it measured (``wanted`` False)."""
    rendezvous.enter(world, WHAT)
    local = world.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        row = np.array([local.Get_rank() == 0, wanted], np.uint8)
    finally:
        local.Free()
    rows = np.zeros((world.Get_size(), 2), np.uint8)
    rendezvous.wait(world, world.Iallgather(row, rows), WHAT)
    leaders = np.flatnonzero(rows[:, 0])
    if len(leaders) < 2 or not rows[:, 1].all():
        return None
    first, second = int(leaders[0]), int(leaders[1])
    result = np.zeros(2)
    deadline = _deadline()
    if world.Get_rank() == first:
        result[:] = _ping(world, second, deadline)
    elif world.Get_rank() == second:
        _pong(world, first, deadline)
    rendezvous.wait(world, world.Ibcast(result, root=first), WHAT)
    return one_two_five(float(result[0])), 8 / one_two_five(8 / float(result[1]))


def one_two_five(value: float) -> float:
    """``value`` (> 0) rounded to 1, 2 or 5 times a power of ten, the nearest by ratio:
    the float nearest that number (``10 * 1e-06`` would be 9.999999999999999e-06), so
    that equal links give equal floats."""
    exponent = math.floor(math.log10(value))
    return min((float(f"{step}e{exponent + shift}")
                for step, shift in ((1, 0), (2, 0), (5, 0), (1, 1))),
               key=lambda candidate: abs(math.log(candidate / value)))


def _ping(world, peer: int, deadline: float | None) -> tuple[float, float]:
    """Lead the round trips with ``peer``; α and β from them; a message of no bytes ends
    ``peer``'s ``_pong``."""
    buffer = np.zeros(MOST_BYTES, np.uint8)
    _round_trip(world, peer, buffer[:8], deadline)        # (sets up the connection)
    alpha = _half_trip(world, peer, buffer[:8], ALPHA_TRIPS, deadline)
    sizes, halves = [], []
    size = FIRST_BYTES
    while True:
        sizes.append(size)
        halves.append(_half_trip(world, peer, buffer[:size], BYTES_TRIPS, deadline))
        if halves[-1] >= LONG_S or size >= MOST_BYTES:
            break
        size *= 2
    world.Send([buffer, 0, MPI.BYTE], peer, PROBE_TAG)
    beta = halves[-1] / sizes[-1]
    if len(sizes) > 1 and halves[-1] > halves[-2]:
        beta = (halves[-1] - halves[-2]) / (sizes[-1] - sizes[-2])
    return max(alpha, MIN_ALPHA_S), beta


def _half_trip(world, peer: int, message, trips: int, deadline: float | None) -> float:
    """Half the median of ``trips`` round trips of ``message``."""
    return float(np.median([_round_trip(world, peer, message, deadline)
                            for _ in range(trips)])) / 2


def _round_trip(world, peer: int, message, deadline: float | None) -> float:
    """Seconds to send ``message`` to ``peer`` and receive it back."""
    start = time.perf_counter()
    receive = world.Irecv([message, MPI.BYTE], peer, PROBE_TAG)
    world.Send([message, MPI.BYTE], peer, PROBE_TAG)
    _spin(receive.Test, peer, deadline)
    return time.perf_counter() - start


def _pong(world, peer: int, deadline: float | None) -> None:
    """Send back every message ``peer`` sends, until one of no bytes."""
    buffer = np.zeros(MOST_BYTES, np.uint8)
    status = MPI.Status()
    while True:
        _spin(lambda: world.Iprobe(peer, PROBE_TAG, status), peer, deadline)
        count = status.Get_count(MPI.BYTE)
        world.Recv([buffer, count, MPI.BYTE], peer, PROBE_TAG)
        if count == 0:
            return
        world.Send([buffer, count, MPI.BYTE], peer, PROBE_TAG)


def _spin(done, peer: int, deadline: float | None) -> None:
    """Call ``done()`` until it is true (no sleeping: the round trips are timed), or raise
    ``al.TimeoutError`` once ``deadline`` passed."""
    while not done():
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"{WHAT}: rank {peer} did not answer within AL_TIMEOUT")


def _deadline() -> float | None:
    limit = rendezvous.limits()[0]
    return None if limit is None else time.monotonic() + limit
