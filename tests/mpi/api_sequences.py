"""Run sequences of public API calls on every rank and check each outcome; a model of the
communicators and plans says what each call must do (tests/test_api_sequences.py draws the
sequences with hypothesis and launches this program).

    python -m aluminum.run -n 2 tests/mpi/api_sequences.py '<json list of sequences>'

Every rank runs the same steps.  A step on a freed communicator or plan must raise
``al.CommunicatorError``; every allreduce result is checked against numpy (a plan's start
is waited for before its next one: whether a start is still in flight when the next comes
is up to thread timing, so that misuse is tested where it can be made certain).  The job ends with
``al.finalize()`` while some plans and communicators may still be open: exit status 0 means
no step crashed, hung or answered wrongly.
"""
import json
import sys

import numpy as np

import aluminum as al


def values(comm, count: int) -> np.ndarray:
    return (comm.rank + 1.0) * np.arange(1, count + 1)


def expected(comm, count: int) -> np.ndarray:
    return comm.size * (comm.size + 1) / 2 * np.arange(1, count + 1)


class Model:
    """The live objects of one sequence and what every step must do to them."""

    def __init__(self) -> None:
        self.comms = [al.MPICommunicator()]
        self.plans = []     # [comm, buffer, plan, request or None, freed]

    def step(self, kind: str, *args) -> None:
        getattr(self, "do_" + kind)(*args)

    def comm(self, index: int):
        return self.comms[index % len(self.comms)]

    def do_copy(self, index: int) -> None:
        comm = self.comm(index)
        if comm.freed:
            expect_error(al.CommunicatorError, comm.copy)
        else:
            self.comms.append(comm.copy())

    def do_split(self, index: int, by_parity: bool) -> None:
        comm = self.comm(index)
        if comm.freed:
            expect_error(al.CommunicatorError, comm.split, 0)
            return
        sub = comm.split(comm.rank % 2 if by_parity else 0, key=-comm.rank)
        assert sub is not None and sub.size == (len(range(comm.rank % 2, comm.size, 2))
                                                if by_parity else comm.size)
        self.comms.append(sub)

    def do_free(self, index: int) -> None:
        self.comm(index).free()          # idempotent; waits for plans in flight on it

    def do_allreduce(self, index: int, count: int, nonblocking: bool) -> None:
        comm = self.comm(index)
        buf = values(comm, count) if not comm.freed else np.zeros(count)
        if comm.freed:
            expect_error(al.CommunicatorError, al.allreduce, buf, comm)
            return
        if nonblocking:
            al.nonblocking_allreduce(buf, comm).wait()
        else:
            al.allreduce(buf, comm)
        np.testing.assert_array_equal(buf, expected(comm, count))

    def do_plan(self, index: int, count: int) -> None:
        comm = self.comm(index)
        buf = np.zeros(count)
        if comm.freed:
            expect_error(al.CommunicatorError, al.allreduce_init, buf, comm)
            return
        self.plans.append([comm, buf, al.allreduce_init(buf, comm), None, False])

    def do_start(self, index: int) -> None:
        if not self.plans:
            return
        entry = self.plans[index % len(self.plans)]
        comm, buf, plan, request, freed = entry
        if freed or comm.freed:
            expect_error(al.CommunicatorError, plan.start)
        else:
            self.check(entry)
            buf[:] = values(comm, buf.size)
            entry[3] = plan.start()

    def do_wait(self, index: int) -> None:
        if self.plans:
            self.check(self.plans[index % len(self.plans)])

    def do_plan_free(self, index: int) -> None:
        if self.plans:
            entry = self.plans[index % len(self.plans)]
            self.check(entry)
            entry[2].free()
            entry[4] = True

    @staticmethod
    def check(entry) -> None:
        """Wait for the plan's last start, if any, and check its result once."""
        comm, buf, _, request, _ = entry
        if request is not None:
            request.wait()
            np.testing.assert_array_equal(buf, expected(comm, buf.size))
            entry[3] = None


def expect_error(kind: type, call, *args) -> None:
    try:
        call(*args)
    except kind:
        return
    raise AssertionError(f"{call.__name__}{args!r}: expected {kind.__name__}")


def main(sequences: list) -> None:
    for steps in sequences:
        model = Model()
        for kind, *args in steps:
            model.step(kind, *args)
        for entry in model.plans:
            if not entry[4] and not entry[0].freed:
                model.check(entry)
    al.finalize()
    print(f"ok: {len(sequences)} sequences")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
