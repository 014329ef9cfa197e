"""MPI-4 persistent operations: the requests are made once (``MPI_Allreduce_init``,
``MPI_Send_init`` ...) and every run only starts them again (``MPI_Start``), so nothing is
looked up, converted or allocated per run.  What ``al.<op>_init`` plans use on the MPI
backend where the MPI library has the persistent form."""
from __future__ import annotations

from typing import Callable

from mpi4py import MPI

from ....engine.state import Action, State
from .native_calls import native_persistent

_CONTINUE, _COMPLETE = Action.CONTINUE, Action.COMPLETE


class PersistentRequest:
    """One persistent MPI request; ``run()`` blocks, ``state()`` gives the engine a State
    that starts and polls it (``start()``, ``test()``); ``finish()`` post-processes each
    result (AVG, logical 0/1).  ``start`` is MPI's own ``MPI_Start``, ``run``'s wait
    ``MPI_Wait``, and so is ``test``'s ``MPI_Test`` where no finish follows a run: C calls
    on mpi4py's handle where they can be made (``native_persistent``; ``native``: made
    already, a receive's checking the received count), else mpi4py's methods."""

    def __init__(self, comm, name: str, request, finish: Callable[[], None] | None,
                 native=None) -> None:
        self.comm, self.name, self.request, self.finish = comm, name, request, finish
        if request is not None:   # (None: PersistentRequests, which starts several)
            calls = native or native_persistent(request) or request
            self.start, self._wait = calls.Start, calls.Wait
            if finish is None:
                self.test = calls.Test

    def run(self) -> None:
        self.start()
        self._wait()
        if self.finish is not None:
            self.finish()

    def state(self) -> State:
        """A State running this request on the engine; it holds nothing of its own, so a
        plan may keep one for every start (this object must not keep it: the cycle would
        keep the MPI request, and with it the buffers, alive until a garbage collection)."""
        return PersistentStart(self)

    def test(self) -> bool:
        """Whether the started run completed (then finished)."""
        if not self.request.Test():
            return False
        if self.finish is not None:
            self.finish()
        return True

    def free(self) -> None:
        """Free the MPI request; the plan waited for its last run first.  Runs still in
        flight keep this object alive, so a dropped plan frees it when they end."""
        request, self.request = self.request, None
        if request is not None and MPI is not None and MPI.Is_initialized() \
                and not MPI.Is_finalized():   # (MPI is None when the interpreter exits)
            request.Free()

    __del__ = free


class PersistentRequests(PersistentRequest):
    """Several persistent requests run together (receives and sends of point-to-point
    operations), each with its status: ``finish(statuses)`` checks what was received;
    ``error(exc)`` is the aluminum error an MPI receive error becomes."""

    def __init__(self, comm, name: str, requests: list, finish: Callable[[list], None],
                 error: Callable[[Exception], Exception]) -> None:
        super().__init__(comm, name, None, None)
        self.requests, self.check, self.error = requests, finish, error
        self.statuses = [MPI.Status() for _ in requests]
        self._pairs = list(zip(requests, self.statuses))

    def run(self) -> None:
        """Start every request, then wait for each with its own status: for a few
        requests cheaper than ``Startall``/``Waitall``, which convert their lists on every
        call, and a failed receive reports MPI's own error (``MPI_ERR_TRUNCATE``, where
        ``Waitall`` says ``MPI_ERR_IN_STATUS``)."""
        for request in self.requests:
            request.Start()
        try:
            for request, status in self._pairs:
                request.Wait(status)
        except MPI.Exception as exc:
            raise self.error(exc) from exc
        self.check(self.statuses)

    def start(self) -> None:
        MPI.Prequest.Startall(self.requests)

    def test(self) -> bool:
        # Testall, not a Test per request: a completed persistent request turns inactive,
        # and testing it again would report an empty status.
        try:
            done = MPI.Request.Testall(self.requests, self.statuses)
        except MPI.Exception as exc:
            raise self.error(exc) from exc
        if not done:
            return False
        self.check(self.statuses)
        return True

    def free(self) -> None:
        free_requests(self)

    __del__ = free


def free_requests(owner) -> None:
    """Free ``owner.requests`` (MPI persistent requests) once; nothing once MPI is gone."""
    requests, owner.requests = getattr(owner, "requests", None), None
    if requests and MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized():
        for request in requests:
            request.Free()


class PersistentStart(State):
    """One run of a persistent object (``start()``, ``test() -> bool``) on the engine.  Its
    ``start`` and test are the object's own, bound once (on a plan's every start a frame
    fewer); holding the object keeps it alive while a run is in flight."""

    __slots__ = ("comm", "name", "persistent", "start", "_test")

    def __init__(self, persistent: PersistentRequest) -> None:
        self.comm, self.name, self.persistent = persistent.comm, persistent.name, persistent
        self.start, self._test = persistent.start, persistent.test

    def step(self) -> Action:
        return _COMPLETE if self._test() else _CONTINUE
