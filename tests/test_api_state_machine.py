"""No sequence of public API calls crashes, hangs or computes wrong (issue 20).

A hypothesis ``RuleBasedStateMachine`` models the public API on ``NPROCS`` ranks:
communicators (create, copy, split, free), blocking and nonblocking allreduce with every
algorithm, persistent plans (``allreduce_init``, ``start``, ``wait``, ``free``), misuse
included (a plan started while in flight, anything used after ``free()``), and what each
call must do: succeed, or raise which ``al.AluminumError``.  Each example's steps become one
program; all programs go to one MPI job (``tests/api_program.py``), which runs them on every
rank in the same order, checks every result against numpy over the communicator's members
(the model's membership), and ends with ``al.finalize()`` and use after it.  Drawing the
programs here and shipping them as JSON is what keeps the ranks in step: they run the same
steps by construction.  The job runs three times: plain, with ``AL_TIMEOUT`` (every call
through the engine), and with ``AL_DEBUG`` too (the cross-rank checks).  A segfault, a hang
(the launch's timeout), a wrong result or a wrong error fails the test and prints the
failing program.

Generation is derandomized, so CI draws the same programs every run; by hand, set
``AL_FUZZ_EXAMPLES`` for more and ``AL_FUZZ_RANDOM=1`` for new ones each run (a failure
prints the failing program, which is its reproducer: the JSON list of steps that
``api_program.py`` runs).
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import (RuleBasedStateMachine, initialize, precondition, rule,
                                 run_state_machine_as_test)

from aluminum.launch import launch

NPROCS = 2
EXAMPLES = int(os.environ.get("AL_FUZZ_EXAMPLES", "40"))
RANDOM = os.environ.get("AL_FUZZ_RANDOM", "") not in ("", "0")
JOB_LIMIT_S = 30 + 1.5 * EXAMPLES   # (on this loaded 2-core machine: ~15 s for 40 examples)
PROGRAM = Path(__file__).parent / "api_program.py"
ALGOS = ["automatic", "mpi_passthrough", "ring", "recursive_doubling", "rabenseifner",
         "shared_memory"]
SLOTS = [0, 1, 2]           # buffers per communicator (sizes and dtypes: api_program.SLOTS)
SPLIT_MODES = ["same_reversed", "parity", "drop_last"]
MAX_COMMS = 10              # per program
MAX_LIVE_COMMS = 4
MAX_PLANS = 4


def split_members(parent: dict, mode: str) -> dict:
    """Each world rank's member list of ``parent.split`` in ``mode`` (None: not a member),
    as ``MPI_Comm_split`` orders them: by key, then by rank in the parent."""
    from api_program import split_args

    members = {rank: None for rank in parent}
    for rank, group in parent.items():
        if group is None:
            continue
        args = {peer: split_args(mode, group.index(peer), len(group)) for peer in group}
        color = args[rank][0]
        if color is not None:
            same = [peer for peer in group if args[peer][0] == color]
            members[rank] = sorted(same, key=lambda peer: (args[peer][1], group.index(peer)))
    return members


class ApiModel(RuleBasedStateMachine):
    """What every call on the public API must do, and the steps that make one program."""

    programs: list = []

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[dict] = []
        self.comms: dict[int, dict] = {}     # handle -> {members: {rank: list|None}, freed}
        self.plans: dict[int, dict] = {}     # id -> {comm, busy, freed}
        self.requests: dict[int, tuple] = {}  # id -> (comm, slot), not yet waited for
        self.plan_inits = 0
        self.ids = iter(range(1, 1 << 30))

    def add(self, kind: str, expect: str = "ok", **fields) -> None:
        self.steps.append({"kind": kind, "expect": expect, **fields})

    def live(self) -> list[int]:
        """Communicators not freed that some rank is a member of."""
        return [handle for handle, comm in self.comms.items() if not comm["freed"] and
                any(group is not None for group in comm["members"].values())]

    def room(self) -> bool:
        return len(self.live()) < MAX_LIVE_COMMS and len(self.comms) < MAX_COMMS

    def usable(self, handle: int) -> str:
        return "CommunicatorError" if self.comms[handle]["freed"] else "ok"

    def new_comm(self, kind: str, members: dict, **fields) -> None:
        handle = next(self.ids)
        self.add(kind, new=handle, members={str(r): m for r, m in members.items()}, **fields)
        self.comms[handle] = {"members": members, "freed": False}

    def draw_comm(self, data) -> int:
        """A communicator some rank is a member of (split can leave one with none); a live
        one three times in four when there is one (using a freed one is one case)."""
        live = self.live()
        if live and data.draw(st.integers(0, 3), label="live") > 0:
            return data.draw(st.sampled_from(live), label="comm")
        handles = [handle for handle, comm in self.comms.items()
                   if any(group is not None for group in comm["members"].values())]
        return data.draw(st.sampled_from(handles), label="comm")

    # -- communicators ----------------------------------------------------------------------

    @initialize()
    def world(self) -> None:
        self.new_comm("create", {rank: list(range(NPROCS)) for rank in range(NPROCS)})

    @precondition(lambda self: self.room())
    @rule()
    def create(self) -> None:
        self.world()

    @precondition(lambda self: self.room())
    @rule(data=st.data())
    def copy(self, data) -> None:
        handle = self.draw_comm(data)
        if self.comms[handle]["freed"]:
            self.add("copy", "CommunicatorError", comm=handle, new=next(self.ids),
                     members={})
            return
        self.new_comm("copy", self.comms[handle]["members"], comm=handle)

    @precondition(lambda self: self.room())
    @rule(data=st.data(), mode=st.sampled_from(SPLIT_MODES))
    def split(self, data, mode) -> None:
        handle = self.draw_comm(data)
        if self.comms[handle]["freed"]:
            self.add("split", "CommunicatorError", comm=handle, mode=mode,
                     new=next(self.ids), members={})
            return
        self.new_comm("split", split_members(self.comms[handle]["members"], mode),
                      comm=handle, mode=mode)

    @precondition(lambda self: self.live())
    @rule(data=st.data())
    def free(self, data) -> None:
        """Operations in flight on it are waited for and complete.  (Freeing again, a
        no-op, is what every such step does next in the program.)"""
        handle = data.draw(st.sampled_from(self.live()), label="comm")
        self.add("free", comm=handle)
        self.comms[handle]["freed"] = True

    # -- operations -------------------------------------------------------------------------

    def free_slots(self, handle: int) -> list[int]:
        busy = {slot for comm, slot in self.requests.values() if comm == handle}
        return [slot for slot in SLOTS if slot not in busy]

    @rule(data=st.data(), algo=st.sampled_from(ALGOS), op=st.sampled_from(["sum", "max"]),
          blocking=st.booleans())
    def allreduce(self, data, algo, op, blocking) -> None:
        handle = self.draw_comm(data)
        slots = self.free_slots(handle)
        if not slots:               # (a buffer in flight must not be touched: the caller's
            return                  # error, whose result nobody can check)
        slot = data.draw(st.sampled_from(slots), label="slot")
        expect = self.usable(handle)
        request = None
        if not blocking and expect == "ok":
            request = next(self.ids)
            self.requests[request] = (handle, slot)
        self.add("allreduce", expect, comm=handle, slot=slot, algo=algo, op=op,
                 blocking=blocking, request=request)

    @precondition(lambda self: self.requests)
    @rule(data=st.data())
    def wait(self, data) -> None:
        request = data.draw(st.sampled_from(sorted(self.requests)), label="request")
        handle, _ = self.requests.pop(request)
        self.add("wait", comm=handle, request=request)

    @precondition(lambda self: self.plan_inits < MAX_PLANS)
    @rule(data=st.data(), algo=st.sampled_from(ALGOS), op=st.sampled_from(["sum", "max"]),
          slot=st.sampled_from(SLOTS))
    def plan_init(self, data, algo, op, slot) -> None:
        handle = self.draw_comm(data)
        plan = next(self.ids)
        expect = self.usable(handle)
        self.add("plan_init", expect, comm=handle, plan=plan, slot=slot, algo=algo, op=op)
        self.plan_inits += 1
        if expect == "ok":
            self.plans[plan] = {"comm": handle, "busy": False, "freed": False,
                                "started": False}

    def draw_plan(self, data) -> int:
        return data.draw(st.sampled_from(sorted(self.plans)), label="plan")

    def startable(self, shared: bool = False) -> list[int]:
        """Plans not in flight (a start on one in flight may or may not raise, depending on
        whether it completed meanwhile: see ``plan_start_twice``); ``shared``: only those
        started before (a first start may wait for the other ranks: shared_memory makes
        its window then), on a live communicator of two ranks or more."""
        return sorted(plan for plan, state in self.plans.items() if not state["busy"] and (
            not shared or (state["started"] and not state["freed"]
                           and state["comm"] in self.live() and all(
                group is None or len(group) > 1
                for group in self.comms[state["comm"]]["members"].values()))))

    @precondition(lambda self: self.startable())
    @rule(data=st.data())
    def plan_start(self, data) -> None:
        """A freed plan or communicator: CommunicatorError."""
        plan = data.draw(st.sampled_from(self.startable()), label="plan")
        state = self.plans[plan]
        if state["freed"] or self.comms[state["comm"]]["freed"]:
            expect = "CommunicatorError"
        else:
            expect, state["busy"], state["started"] = "ok", True, True
        self.add("plan_start", expect, comm=state["comm"], plan=plan)

    @precondition(lambda self: self.startable(shared=True))
    @rule(data=st.data())
    def plan_start_twice(self, data) -> None:
        """Misuse: a plan runs one instance at a time.  The communicator's rank 0 starts,
        then starts again, which must raise ArgumentError, before the other ranks start
        (so the first cannot have completed); then they start."""
        plan = data.draw(st.sampled_from(self.startable(shared=True)), label="plan")
        self.plans[plan]["busy"] = True
        self.add("plan_start_twice", comm=self.plans[plan]["comm"], plan=plan)

    @precondition(lambda self: any(p["busy"] for p in self.plans.values()))
    @rule(data=st.data())
    def plan_wait(self, data) -> None:
        plan = data.draw(st.sampled_from(sorted(p for p, s in self.plans.items()
                                                if s["busy"])), label="plan")
        self.plans[plan]["busy"] = False
        self.add("plan_wait", comm=self.plans[plan]["comm"], plan=plan)

    @precondition(lambda self: self.plans)
    @rule(data=st.data())
    def plan_free(self, data) -> None:
        """Waits for a start in flight (whose result is then checked); idempotent."""
        plan = self.draw_plan(data)
        state = self.plans[plan]
        self.add("plan_free", comm=state["comm"], plan=plan, check=state["busy"])
        state["busy"], state["freed"] = False, True

    def teardown(self) -> None:
        """Wait for what is still in flight; communicators and plans are left to be
        dropped (released at garbage collection) or to meet finalize."""
        for request, (handle, _) in list(self.requests.items()):
            self.add("wait", comm=handle, request=request)
        for plan, state in self.plans.items():
            if state["busy"]:
                self.add("plan_wait", comm=state["comm"], plan=plan)
        ApiModel.programs.append(self.steps)


def draw_programs(examples: int) -> list[list[dict]]:
    ApiModel.programs = []
    config = settings(max_examples=examples, stateful_step_count=25, deadline=None,
                      database=None, derandomize=not RANDOM, phases=[Phase.generate],
                      suppress_health_check=list(HealthCheck))
    run_state_machine_as_test(ApiModel, settings=config)
    return ApiModel.programs


@pytest.mark.parametrize("env", [{}, {"AL_TIMEOUT": "20"},
                                 {"AL_TIMEOUT": "20", "AL_DEBUG": "1"}],
                         ids=["plain", "timeout", "timeout-debug"])
def test_random_api_programs_run_correctly_on_every_rank(env, tmp_path):
    programs = draw_programs(EXAMPLES)
    assert len(programs) >= EXAMPLES // 2, "hypothesis drew too few programs"
    path = tmp_path / "programs.json"
    path.write_text(json.dumps(programs))
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(PROGRAM.parent), os.environ.get("PYTHONPATH", "")]), **env}
    for name in ("AL_TIMEOUT", "AL_DEBUG", "AL_STALL_WARN_S"):
        if name not in env:
            environment.pop(name, None)
    try:
        result = launch(NPROCS, [sys.executable, str(PROGRAM), str(path)],
                        timeout=JOB_LIMIT_S, env=environment, capture=True)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the job hung (killed after {JOB_LIMIT_S} s); programs in {path}:\n"
                    f"{(exc.output or '')[-4000:]}")
    out = result.stdout
    failure = re.search(r"FAIL rank=\d+ program (\d+) .*", out)
    shown = json.dumps(programs[int(failure.group(1))], indent=None) if failure else ""
    assert result.returncode == 0, f"{out[-6000:]}\nthe failing program:\n{shown}"
    assert out.count(f"PROGRAMS_OK") == NPROCS, out[-6000:]
    assert "Traceback" not in out, out[-6000:]


SPLIT_WITH_OPS_IN_FLIGHT = '''
import numpy as np
import aluminum as al

comm = al.MPICommunicator()
for round in range(30):
    bufs = [np.full(8 + i, comm.rank + 1.0) for i in range(6)]
    requests = [al.nonblocking_allreduce(buf, comm, algo=algo) for buf, algo in
                zip(bufs, ["ring", "mpi_passthrough", "automatic"] * 2)]
    half = comm.split(comm.rank % 2, -comm.rank)
    twin = comm.copy()
    al.wait_all(requests)
    expected = comm.size * (comm.size + 1) / 2
    assert all(np.all(buf == expected) for buf in bufs), (round, bufs)
    for sub, members in ((half, range(comm.rank % 2, comm.size, 2)), (twin, range(comm.size))):
        value = np.full(4, comm.rank + 1.0)
        al.allreduce(value, sub)
        assert np.all(value == sum(r + 1 for r in members)), (round, value)
        sub.free()
print("SPLIT_OK", flush=True)
'''


@pytest.mark.parametrize("nprocs", [2, 3])
def test_split_and_copy_while_operations_are_in_flight(nprocs):
    """split() and copy() are collectives: made on the communicator whose nonblocking
    collectives the engine starts (at times that differ between ranks), they were matched
    out of order (a raw MPI_ERR_TRUNCATE and corrupted operations)."""
    try:
        result = launch(nprocs, [sys.executable, "-c", SPLIT_WITH_OPS_IN_FLIGHT],
                        timeout=JOB_LIMIT_S, capture=True)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the job hung:\n{(exc.output or '')[-4000:]}")
    assert result.returncode == 0 and result.stdout.count("SPLIT_OK") == nprocs, \
        result.stdout[-4000:]
