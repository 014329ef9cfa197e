"""Run on every rank: execute the API programs drawn by tests/test_api_state_machine.py.

``python api_program.py programs.json``.  Each program is a list of steps (create, copy,
split, free, allreduce, wait, plan_init, plan_start, plan_start_twice, plan_wait,
plan_free); every rank runs
the same steps, skipping those on communicators it is not a member of.  A step either
succeeds, and its result equals the numpy reference over the communicator's members, or
raises the ``al.AluminumError`` subclass the model expects.  After the last program comes
``al.finalize()`` and every handle still held must refuse use with ``CommunicatorError``.

Any deviation prints ``FAIL ...`` and aborts the whole job at once, so a rank out of step
never leaves its peers waiting.
"""
import json
import os
import sys
import time

import numpy as np

import aluminum as al

VERBOSE = bool(os.environ.get("AL_PROGRAM_VERBOSE"))   # print each step before it runs
WORLD_RANK = -1   # set by main() (importing this module starts no MPI: the model uses it)
SLOTS = {0: (16, np.float64), 1: (1000, np.float32), 2: (70_000, np.int32)}
OPS = {"sum": (al.SUM, np.sum), "max": (al.MAX, np.max)}


def data(world_rank: int, step: int, slot: int) -> np.ndarray:
    """What ``world_rank`` contributes at ``step``: small integers, so every sum is exact."""
    count, dtype = SLOTS[slot]
    return ((world_rank + 1) * (1 + step % 5) + np.arange(count) % 7).astype(dtype)


def reference(members: list[int], step: int, slot: int, op: str) -> np.ndarray:
    """The allreduce of what ``members`` contribute at ``step``, by numpy."""
    return OPS[op][1]([data(rank, step, slot) for rank in members], axis=0)


class Failure(Exception):
    """The library did something the model did not expect: the job is aborted."""


class Program:
    """One program's handles on this rank: communicators (None where not a member), their
    members (world ranks, in rank order), plans, requests."""

    def __init__(self) -> None:
        self.comms: dict[int, object] = {}
        self.members: dict[int, list[int] | None] = {}
        self.buffers: dict[tuple[int, int], np.ndarray] = {}
        self.requests: dict[int, tuple] = {}     # id -> (request, buffer, expected)
        self.plans: dict[int, PlanEntry] = {}

    def adopt(self, handle: int, comm, members: dict) -> None:
        mine = members.get(str(WORLD_RANK))    # (none at all: a step meant to fail)
        if (comm is None) != (mine is None):
            raise Failure(f"membership: got {comm!r}, the model says {mine}")
        if comm is not None and (comm.size, comm.rank) != (len(mine), mine.index(WORLD_RANK)):
            raise Failure(f"rank {comm.rank} of {comm.size}, the model says {mine}")
        self.comms[handle], self.members[handle] = comm, mine

    def run(self, index: int, step: dict) -> None:
        kind, handle = step["kind"], step.get("comm")
        if handle is not None and self.comms[handle] is None:
            if "new" in step:                         # not a member of the parent either
                self.adopt(step["new"], None, step["members"])
            return                                    # not a member: nothing to do
        expect = step["expect"]
        try:
            getattr(self, "do_" + kind)(index, step)
        except al.AluminumError as exc:
            if type(exc).__name__ != expect:
                raise Failure(f"raised {type(exc).__name__}: {exc}; expected {expect}")
            return
        if expect != "ok":
            raise Failure(f"succeeded; expected {expect}")

    # -- communicators --------------------------------------------------------------------

    def do_create(self, index, step):
        self.adopt(step["new"], al.MPICommunicator(), step["members"])

    def do_copy(self, index, step):
        self.adopt(step["new"], self.comms[step["comm"]].copy(), step["members"])

    def do_split(self, index, step):
        comm = self.comms[step["comm"]]
        color, key = split_args(step["mode"], comm.rank, comm.size)
        self.adopt(step["new"], comm.split(color, key), step["members"])

    def do_free(self, index, step):
        self.comms[step["comm"]].free()
        self.comms[step["comm"]].free()     # idempotent

    # -- operations -------------------------------------------------------------------------

    def do_allreduce(self, index, step):
        handle, slot, op = step["comm"], step["slot"], step["op"]
        comm = self.comms[handle]
        buf = self.buffers.get((handle, slot))
        if buf is None:
            buf = self.buffers[(handle, slot)] = data(WORLD_RANK, 0, slot)
        if step["expect"] == "ok":      # (a call expected to fail must not touch it)
            buf[:] = data(WORLD_RANK, index, slot)
        expected = reference(self.members[handle], index, slot, op)
        if step["blocking"]:
            al.allreduce(buf, comm, op=OPS[op][0], algo=step["algo"])
            check(buf, expected)
        else:
            request = al.nonblocking_allreduce(buf, comm, op=OPS[op][0], algo=step["algo"])
            self.requests[step["request"]] = (request, buf, expected)

    def do_wait(self, index, step):
        request, buf, expected = self.requests.pop(step["request"])
        request.wait()
        request.wait()                  # again: a done request returns at once
        check(buf, expected)

    def do_plan_init(self, index, step):
        handle, slot, op = step["comm"], step["slot"], step["op"]
        entry = PlanEntry(data(WORLD_RANK, index, slot),
                          reference(self.members[handle], index, slot, op))
        entry.plan = al.allreduce_init(entry.buf, self.comms[handle], op=OPS[op][0],
                                       algo=step["algo"])
        self.plans[step["plan"]] = entry   # (the model knows no plan whose init failed)

    def do_plan_start(self, index, step):
        entry = self.plans[step["plan"]]
        if step["expect"] == "ok":      # (never while a start is in flight)
            entry.buf[:] = entry.input
        entry.request = entry.plan.start()

    def do_plan_start_twice(self, index, step):
        """Rank 0 of the plan's communicator starts it twice before the others start once:
        the second start must raise ArgumentError.  (With AL_DEBUG every start waits for
        the other ranks' fingerprints, so there everyone just starts.)"""
        from mpi4py import MPI

        from aluminum import debug

        entry, members = self.plans[step["plan"]], self.members[step["comm"]]
        entry.buf[:] = entry.input
        if debug.ENABLED:
            entry.request = entry.plan.start()
        elif WORLD_RANK == members[0]:
            entry.request = entry.plan.start()
            try:
                entry.plan.start()
            except al.ArgumentError:
                pass
            else:
                raise Failure("start() while the plan's start was in flight succeeded")
            for peer in members[1:]:
                MPI.COMM_WORLD.send(index, dest=peer, tag=77)
        else:
            MPI.COMM_WORLD.recv(source=members[0], tag=77)
            entry.request = entry.plan.start()

    def do_plan_wait(self, index, step):
        entry = self.plans[step["plan"]]
        entry.request.wait()
        check(entry.buf, entry.expected)

    def do_plan_free(self, index, step):
        entry = self.plans[step["plan"]]
        entry.plan.free()               # waits for a start in flight
        entry.plan.free()               # idempotent
        if step["check"]:
            check(entry.buf, entry.expected)


class PlanEntry:
    """A plan reduces its own buffer in place: ``input`` is restored before each start."""

    def __init__(self, input: np.ndarray, expected: np.ndarray) -> None:
        self.plan = self.request = None
        self.input, self.buf, self.expected = input, input.copy(), expected


def split_args(mode: str, rank: int, size: int) -> tuple[int | None, int]:
    """``comm.split``'s color and key for a rank of ``size`` in ``mode`` (the model's too)."""
    if mode == "same_reversed":
        return 0, -rank
    if mode == "parity":
        return rank % 2, 0
    if mode == "drop_last":
        return (None if rank == size - 1 else 0), 0
    raise ValueError(mode)


def check(got: np.ndarray, expected: np.ndarray) -> None:
    if not np.array_equal(got, expected):
        wrong = np.flatnonzero(got != expected)
        raise Failure(f"wrong result at {wrong[:5]} of {got.size}: got {got[wrong[:5]]}, "
                      f"expected {expected[wrong[:5]]}")


def after_finalize(program: Program) -> None:
    """Every handle still held refuses use with CommunicatorError; free() stays a no-op."""
    for comm in (c for c in program.comms.values() if c is not None):
        expect_refused(lambda: al.allreduce(np.ones(4), comm), "allreduce after finalize")
        comm.free()
    for entry in program.plans.values():
        expect_refused(entry.plan.start, "plan.start() after finalize")
    expect_refused(al.MPICommunicator, "MPICommunicator() after finalize")
    expect_refused(al.init, "al.init() after finalize")


def expect_refused(call, what: str) -> None:
    try:
        call()
    except al.CommunicatorError:
        return
    except Exception as exc:
        raise Failure(f"{what}: raised {type(exc).__name__}: {exc}")
    raise Failure(f"{what}: succeeded")


def main(path: str) -> None:
    global WORLD_RANK
    al.init()
    from mpi4py import MPI   # (after al.init: it chooses the thread level)

    WORLD_RANK = MPI.COMM_WORLD.Get_rank()
    programs = json.loads(open(path).read())
    program = None
    for number, steps in enumerate(programs):
        program = Program()
        for index, step in enumerate(steps):
            if VERBOSE:
                print(f"{time.monotonic():.3f} rank {WORLD_RANK} program {number} step {index}: "
                      f"{json.dumps(step)}",
                      flush=True)
            try:
                program.run(index, step)
            except Exception as exc:
                fail(f"program {number} step {index} {json.dumps(step)}: "
                     f"{type(exc).__name__}: {exc}")
    try:
        al.finalize()
        after_finalize(program)
    except Exception as exc:
        fail(f"finalize: {type(exc).__name__}: {exc}")
    print(f"PROGRAMS_OK rank={WORLD_RANK} programs={len(programs)}", flush=True)


def fail(message: str) -> None:
    from mpi4py import MPI

    print(f"FAIL rank={WORLD_RANK} {message}", flush=True)
    MPI.COMM_WORLD.Abort(1)


if __name__ == "__main__":
    main(sys.argv[1])
