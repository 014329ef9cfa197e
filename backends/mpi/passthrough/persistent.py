"""MPI-4 persistent operations: the request is made once (``MPI_Allreduce_init`` ...) and
every run only starts it again (``MPI_Start``), so nothing is looked up, converted or
allocated per run.  What ``al.<op>_init`` plans use on the MPI backend where the MPI library
has the persistent form."""
from __future__ import annotations

from typing import Callable

from mpi4py import MPI

from ....engine.state import Action, State

_CONTINUE, _COMPLETE = Action.CONTINUE, Action.COMPLETE


class PersistentRequest:
    """One persistent MPI request; ``run()`` blocks, ``state()`` gives the engine a State
    that starts and polls it; ``finish()`` post-processes each result (AVG, logical 0/1)."""

    def __init__(self, comm, name: str, request, finish: Callable[[], None] | None) -> None:
        self.comm, self.name, self.request, self.finish = comm, name, request, finish
        self._state = PersistentStart(self)

    def run(self) -> None:
        request = self.request
        request.Start()
        request.Wait()
        if self.finish is not None:
            self.finish()

    def state(self) -> State:
        """The State of a nonblocking run (one object for every run: it holds nothing of
        its own, and a plan runs one start at a time)."""
        return self._state

    def free(self) -> None:
        """Free the MPI request; the plan waited for its last run first.  Runs still in
        flight keep this object alive, so a dropped plan frees it when they end."""
        request, self.request = self.request, None
        if request is not None and MPI is not None and MPI.Is_initialized() \
                and not MPI.Is_finalized():   # (MPI is None when the interpreter exits)
            request.Free()

    __del__ = free


class PersistentStart(State):
    """One run of a ``PersistentRequest`` on the engine."""

    __slots__ = ("comm", "name", "persistent")

    def __init__(self, persistent: PersistentRequest) -> None:
        self.comm, self.name, self.persistent = persistent.comm, persistent.name, persistent

    def start(self) -> None:
        self.persistent.request.Start()

    def step(self) -> Action:
        persistent = self.persistent
        if not persistent.request.Test():
            return _CONTINUE
        if persistent.finish is not None:
            persistent.finish()
        return _COMPLETE
