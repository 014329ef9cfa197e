"""Persistent operations: ``Plan``, what every ``al.<op>_init`` returns and every call runs.

As MPI-4's persistent collectives (``MPI_Allreduce_init`` ... ``MPI_Start``): the arguments
are validated and the buffers bound once; ``start()`` runs the operation nonblocking and
``run()`` blocking, as many times as wanted.  The algorithm is chosen once per mode (the
selector's rules may differ for blocking and nonblocking calls).  States that can prepare
more (MPI's own persistent requests, views, scratch) do it in their ``persistent`` hook.

What surprises people: a collective's ``run()`` is the blocking call, as ``al.<op>`` is, and
matches ``al.<op>`` on other ranks; its ``start()`` uses MPI's persistent request, which
(as in MPI) matches only the other ranks' starts of the same plan.  Algorithms whose
persistent form sends the very messages of their calls (the direct reduce) run it in both,
and match every form.
"""
from __future__ import annotations

try:
    import cython
except ImportError:   # (running uncompiled without Cython)
    from .core import pure_cython as cython

from . import dispatch
from .tuning import selector
from .core.errors import ArgumentError, CommunicatorError
from .core.ops import POINT_TO_POINT
from .engine.direct import call_made
from .engine.progress import wait_started_on

__all__ = ["Plan"]


@cython.cclass
class Plan:
    """One operation with its arguments bound: ``start()``, ``run()``, ``free()``.

    The buffers given at init are the ones every run reads and writes (as in MPI-4): change
    their contents between runs, not the objects.  A plan runs one instance at a time:
    ``start()`` while the previous start is still in flight raises ``al.ArgumentError``
    (wait for it first), and any use after ``free()`` or after the communicator was freed
    raises ``al.CommunicatorError``.  Plans are context managers (``free()`` on exit).

    Each run of a collective counts this rank's arrival on the communicator first (its
    ``watchdog.ArrivalCounters``), so a timeout or stall warning can name the ranks that
    never arrived.  A blocking run, and the making of MPI's persistent request (a
    collective itself), start on the calling thread after the nonblocking operations
    submitted before them on the communicator have started (``progress.wait_started_on``), so
    every rank starts its collectives in one order.
    """

    __slots__ = ("comm", "op", "algo", "nbytes", "args", "inplace", "_classes", "_prepare",
                 "_run", "_run_error", "_start", "_persistent", "_request", "_freed",
                 "_arrivals", "_missing", "__weakref__")

    def __init__(self, comm, op: str, algo: str, nbytes: int, args: tuple,
                 inplace: bool | None = None, classes: dict[bool, type] | None = None) -> None:
        self.comm, self.op, self.algo, self.nbytes, self.args = comm, op, algo, nbytes, args
        self.inplace = inplace
        # State classes by mode, chosen on first use; ``classes`` shares the choices of
        # plans of the same kind (recall.py), which differ only in their buffers.
        self._classes: dict[bool, type] = {} if classes is None else classes
        self._prepare = False
        # One prepared callable per mode, made by the first run or start that took the
        # checked path (None until then, and where every run must take it): ``_run()``
        # runs blocking (what it raises becomes ``_run_error``'s), ``_start()`` returns
        # the Request of a nonblocking run.
        self._run = self._run_error = self._start = None
        self._persistent: dict[type, object] = {}   # persistent forms made, by State class
        self._request = None
        self._freed = False
        self._arrivals = None if op in POINT_TO_POINT else comm.arrivals
        # Who has not arrived, for a timeout's message: bound once, not on every start.
        self._missing = None if self._arrivals is None else self._arrivals.missing
        comm.plans.add(self)

    def state_class(self, nonblocking: bool) -> type:
        """The State class runs in this mode use (chosen on first use, then kept)."""
        return self._classes.get(nonblocking) or chosen_class(self, self._classes, nonblocking)

    def prepare(self) -> Plan:
        """Let runs reuse what the algorithm can build once for these buffers (an MPI-4
        persistent request on the MPI backend: a collective's starts, a message's starts
        and runs), made on first use; what every ``al.<op>_init`` does, on every rank
        alike.  Returns the plan."""
        self._prepare = True
        return self

    def _persistent_form(self, state_class: type):
        """``state_class.persistent`` made for these arguments (on first use, after the
        operations before it started: making it is a collective), or None: not a prepared
        plan, or the class has no persistent form."""
        if not self._prepare or state_class.persistent is None:
            return None
        try:
            return self._persistent[state_class]
        except KeyError:
            wait_started_on(self.comm)
            made = self._persistent[state_class] = state_class.persistent(self.comm, *self.args)
            return made

    @property
    def busy(self) -> bool:
        """True while the last ``start()`` is still in flight."""
        request = self._request
        return request is not None and not request._done

    @property
    def algorithm(self) -> str:
        """The name of the algorithm a blocking run uses (``"allreduce/ring"``)."""
        return self.state_class(False).name

    @cython.locals(request="Request", arrivals="Arrivals", number="long long")
    def start(self):
        """Start one run and return its ``Request``; the buffers must not be touched until
        it completes."""
        start, request = self._start, self._request
        if start is None or not (request is None or request._done):
            return self._checked_start()
        arrivals = self._arrivals
        if arrivals is None:
            request = self._request = start()
            return request
        number = arrivals.arrive()   # (before the State is made: it may read its number)
        request = self._request = start()
        request.detail = (self._missing, number)
        return request

    def _checked_start(self):
        """A start on the checked path, which makes ``_start`` where it may."""
        self._check_usable("starting the plan again")
        arrivals = self._arrivals
        detail = None if arrivals is None else (arrivals.missing, arrivals.arrive())
        state_class = self.state_class(True)
        if not dispatch.direct(self.comm):
            request = self._request = dispatch.run(self.comm, self.op, state_class,
                                                   self.nbytes, False, self.args, detail)
            return request
        self._start = dispatch.starter(self.comm, state_class, self.args,
                                       self._persistent_form(state_class))
        request = self._request = self._start()
        request.detail = detail
        return request

    @cython.locals(arrivals="Arrivals")
    def run(self) -> None:
        """Run once and return when done (on stream-bound backends: once enqueued)."""
        run = self._run
        if run is None or self._request is not None:
            run = self._checked_run()
            if run is None:
                return          # (run on the checked path)
        arrivals = self._arrivals
        try:
            if arrivals is None:
                wait_started_on(self.comm)
                call_made(run)   # the common repeat: everything else was checked before
                return
            arrivals.enter(self)   # (counted, and marked for the stall monitor)
            try:
                wait_started_on(self.comm)
                call_made(run)
            finally:
                arrivals.leave()
        except Exception as exc:   # (free in Python 3.11 unless raised)
            error = self._run_error(exc)
            if error is None:
                raise
            raise error from exc

    def __call__(self) -> None:
        """``run()``."""
        self.run()

    @cython.locals(arrivals="Arrivals")
    def _checked_run(self):
        """Check the plan; return ``_run``, made where it may be, else run on
        ``dispatch.run``'s path and return None."""
        self._check_usable("running the plan")
        self._request = None
        if self._run is not None:
            return self._run
        state_class = self.state_class(False)
        if dispatch.direct(self.comm):
            # A collective's blocking run is the blocking call on every rank: MPI never
            # matches it with a persistent start elsewhere, and making the persistent
            # request (a collective, taking a tag in Open MPI) on some ranks only would
            # mismatch the nonblocking collectives after it.  Messages may run persistent,
            # and so may collectives whose persistent form is made of the same messages.
            persistent = self._persistent_form(state_class) \
                if self.op in POINT_TO_POINT or state_class.persistent_matches_calls \
                else None
            self._run_error = state_class.call_error
            self._run = dispatch.runner(self.comm, state_class, self.args, persistent)
            return self._run
        arrivals = self._arrivals
        detail = None
        if arrivals is not None:
            detail = (arrivals.missing, arrivals.enter(self))
        try:
            dispatch.run(self.comm, self.op, state_class, self.nbytes, True, self.args, detail)
        finally:
            if arrivals is not None:
                arrivals.leave()
        return None

    def free(self) -> None:
        """Release what the plan holds (idempotent); a run in flight is waited for first."""
        if self._freed:
            return
        request, self._request = self._request, None
        if request is not None and not request._done:
            request.wait()
        self._freed = True
        self.args = ()
        self._run = self._start = None
        prepared, self._persistent = self._persistent, {}
        for made in prepared.values():
            if made is not None:
                made.free()

    def communicator_freed(self) -> None:
        """Drop the prepared calls (``comm.free()`` calls this): the next run or start takes
        the checked path, which raises."""
        self._run = self._start = None

    def _check_usable(self, doing: str) -> None:
        """Raise unless the plan, its communicator and its last start are all done with.

        A last start handed to a stream (``request.wait_on_stream``) counts as done with:
        the plan's stream runs the next start after it, as torch's DDP with CUDA buckets
        relies on (the host never waits for them)."""
        if self._freed:
            raise CommunicatorError(f"plan: this {self.op} plan was freed")
        if self.comm.freed:
            raise CommunicatorError(f"plan: the communicator of this {self.op} plan was "
                                    "freed")
        request = self._request
        if request is not None and not request._done and not request.on_stream:
            raise ArgumentError(f"plan: this {self.op} plan's start() (request "
                                f"#{request.seq}) is still in flight; wait for it before "
                                f"{doing}")

    def __enter__(self) -> Plan:
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    def __repr__(self) -> str:
        status = "freed" if self._freed else f"{self.nbytes} B"
        return f"<Plan {self.op} on {self.comm!r}, {status}>"


def chosen_class(call, classes: dict[bool, type], nonblocking: bool) -> type:
    """The selector's State class for ``call`` (a Plan, or a kind of call sharing its
    plan's choices: ``comm``, ``op``, ``algo``, ``nbytes``, ``inplace``) in this mode, kept
    in ``classes``."""
    found = classes[nonblocking] = selector.choose(call.comm, call.op, call.algo, call.nbytes,
                                                   call.inplace, nonblocking)
    return found
