"""The unit of work the progress engine drives: a small state machine per operation.

Every operation of every backend is one ``State`` subclass.  A blocking call builds the state
and drives it to completion on the calling thread (``State.run_blocking``); a nonblocking call
hands the same state to the engine (``aluminum.engine.progress.submit``), which returns a
``Request``.  An algorithm is therefore written exactly once.
"""
from __future__ import annotations

import enum
import functools


class Action(enum.Enum):
    """What ``State.step`` reports back to whoever drives it."""

    CONTINUE = 0   # not done; poll again later
    ADVANCE = 1    # move to the next pipeline stage (engine keeps per-stream order there)
    COMPLETE = 2   # finished; its request is satisfied


class RunType(enum.Enum):
    """How the engine admits a state."""

    BOUNDED = 0    # collectives: at most AL_PE_NUM_CONCURRENT_OPS in flight
    UNBOUNDED = 1  # point-to-point: always admitted so posted sends never starve receives


class State:
    """Base class of every operation's state machine.

    ``start`` posts the first non-blocking work (called once, on admission); ``step`` must
    never block and returns an ``Action``.  ``compute_stream`` is the stream the op is ordered
    on (``None`` for host-only operations).  ``name`` labels the operation in traces and
    error messages (``"allreduce/ring"``).
    """

    run_type: RunType = RunType.BOUNDED
    compute_stream = None
    name: str = "state"
    # True for states whose work proceeds without being stepped (it was all enqueued on a
    # device stream when the state was made) and whose ``step`` only observes completion:
    # submitting one does not wake a sleeping engine, since waking it would only make it
    # take the GIL from the caller; whoever asks (``wait``, ``test``, ``done``) polls it.
    progresses_alone: bool = False

    def start(self) -> None:
        """Post the first sends/copies.  Default: nothing to post."""

    def step(self) -> Action:
        """Make whatever progress is possible without blocking and say where the op stands.

        ``ADVANCE`` means "done with this pipeline stage": the engine moves the state to the
        next stage once it is the head of its current one (so later stages see a stream's ops
        in submission order) and does not step it again until then.  When driven on the
        caller's thread (``drive``) ADVANCE is just another CONTINUE.
        """
        raise NotImplementedError

    def completion_event(self):
        """An event on ``compute_stream`` that completes once this operation's result is
        visible to work enqueued on that stream after it, or None for host-only operations.

        ``Request.wait_on_stream`` makes a stream wait on it instead of blocking the host, so
        stream-bound states should record it on the caller's thread (in ``__init__``, when
        they enqueue their stream work) and it must be safe to call from any thread.
        """
        return None

    def abandon(self, error: BaseException) -> None:
        """The engine gave up on this operation (``al.finalize()`` timed out with it in
        flight): release whatever streams or threads wait on it, e.g. a stream parked on a
        flag only this operation would set.  Must not block.  Default: nothing to release."""

    def drive(self) -> None:
        """Run this state to completion on the calling thread."""
        self.start()
        step = self.step
        complete = Action.COMPLETE
        while step() is not complete:
            pass

    # The forms of the operation besides the nonblocking one (the State itself).  Each takes
    # the State's constructor arguments; passthrough States derive them from one spec of
    # their library call (backends/mpi/passthrough/mpi_call.py).

    @classmethod
    def run_blocking(cls, *args, **kwargs) -> None:
        """Blocking form of the operation.  Default: build the state and drive it here;
        passthrough states call their library directly."""
        cls(*args, **kwargs).drive()

    @classmethod
    def blocking_call(cls, *args):
        """Bound form: ``run_blocking`` bound to ``args``, a no-argument callable that a
        plan calls for each repeated blocking run of the same arguments.  Default:
        ``run_blocking`` with the arguments bound; a state whose call has parts fixed by its
        arguments (an MPI datatype, a buffer spec) returns one with them made once.  The
        callable may raise its library's own exceptions: the caller raises ``call_error``'s
        instead (a frame fewer than a wrapper, on every call)."""
        return functools.partial(cls.run_blocking, *args)

    @classmethod
    def array_call(cls, *args):
        """New-array form: ``run_blocking`` with everything but the buffers decided for
        ``args`` (the State's constructor arguments): a callable taking the flat host arrays
        of the distinct buffers among ``args``, in argument order (those in lists of
        ``args`` in their place in them; an in-place operation's one buffer once), and
        running the blocking call on them; what a call on new arrays of the kind ``args``
        were checked to be runs (aluminum/recall.py).  None (the default, also where a run
        must read more than its arrays): such calls take ``run_blocking`` on new
        arguments.  Raises as ``blocking_call``'s callable."""
        return None

    @classmethod
    def array_fresh(cls, *args):
        """New-array nonblocking form: a callable taking the arrays ``array_call``'s takes
        and returning a new State for a run on them (the engine may hold several at once),
        with everything but the arrays decided for ``args``.  None (the default): such
        calls build the State on new arguments."""
        return None

    @classmethod
    def fresh(cls, *args):
        """Nonblocking form made once: a no-argument callable returning a State for a run
        of ``args`` (the State's constructor arguments), what a plan's repeated starts
        submit.  A plan starts again only once its last start completed, so the callable
        may return the State it returned before, where a State keeps nothing of a run
        that its ``start`` does not make afresh.  Default: the constructor bound to
        ``args`` (a new State each time); a state whose call has parts fixed by its
        arguments makes them once here."""
        return functools.partial(cls, *args)

    # Persistent form: None (no such form), or a class method taking the State's
    # constructor arguments and returning None or an object made once for them (an MPI-4
    # persistent request) with ``run()`` (a blocking run; raises as ``blocking_call``'s
    # callable), ``state()`` (a State making one nonblocking run) and ``free()``.
    persistent = None
    # True where the persistent form exchanges exactly the messages of the blocking and
    # nonblocking forms (point-to-point messages under a fixed tag, not an MPI-4 persistent
    # collective), so that it matches any form on the other ranks: a plan's blocking runs
    # then use it too, as a message's do.
    persistent_matches_calls = False

    @classmethod
    def call_error(cls, exc: Exception) -> Exception | None:
        """The error to raise for ``exc``, raised by the callable of a ``blocking_call``,
        an ``array_call`` or a persistent form's ``run``; None: ``exc`` itself (the
        default)."""
        return None
