"""Library lifetime: ``init``, ``finalize``, ``initialized``.

``init`` is idempotent and happens implicitly when the first communicator is built. The
default group's services (``aluminum.backends.get_services``; MPI's,
backends/mpi/services.py) start MPI: mpi4py initializes it with ``MPI_THREAD_MULTIPLE`` (the
progress engine calls MPI from its own thread), and without Open MPI's AVX op component
unless ``OMPI_MCA_op`` says otherwise (it saturates 8/16-bit integer sums; aluminum's rule
is wrap-around); it also loads the MPI backend's operations. ``init`` is collective over the
default group: the ranks agree on ``AL_DEBUG`` there (``debug.agree``), make the node's
arrival board (``watchdog``) and, on a job spanning nodes, measure the link between them
for the selector (``Services.measure_link``; not where the tuning table has it, nor with
``AL_LINK_PROBE=0``). ``finalize`` waits for in-flight operations (bounded by
``AL_TIMEOUT``), stops the engine and frees every communicator not yet freed (live ones and
those garbage-collected without ``free()`` alike, in creation order, which every rank shares:
closing shared windows is collective) and the board; it does not finalize MPI, which mpi4py
does at exit, so the user's own mpi4py code keeps working. It also runs at interpreter exit.

``finalize`` is collective too (freeing shared windows is).  With ``AL_TIMEOUT`` set, a rank
whose peers do not all reach finalize within ``AL_FINALIZE_TIMEOUT`` (default 4 x
``AL_TIMEOUT``; a peer frozen, or stuck elsewhere) warns and ends the process with exit status
1 (``os._exit``): MPI's own finalize would wait for that peer forever.  For peers that an
``al.TimeoutError`` of this rank already named, it waits one ``AL_TIMEOUT`` only (counted
from the start of finalize), once the arrival board shows they are all that is missing
and stopped (SIGSTOP, a debugger); merely late peers get the full wait.  When some rank
abandoned operations (a timeout, a ``comm.free()`` that failed them), no rank closes shared
windows: MPI may still be progressing those operations.
"""
from __future__ import annotations

import atexit
import itertools
import os
import sys
import threading
import time
import warnings
import weakref

from . import debug, watchdog
from .backends import DEFAULT_SERVICES, get_services
from .core import trace
from .core.errors import CommunicatorError, TimeoutError
from .tuning import selector

FINALIZE_PEERS_FACTOR = 4
_lock = threading.Lock()
_state = "uninitialized"            # -> "initialized" -> "finalized"
_services = None  # the default group's (aluminum.backends.Services), once initialized
_world = None   # the default group's handle (an mpi4py communicator), once initialized
_private = None  # aluminum's own duplicate of it: init's and finalize's agreements
# Creation order: freeing shared windows is collective, so every rank must free its
# communicators in the same (creation) order or finalize can deadlock.
_communicators: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()
_created = itertools.count()
# Creation index -> closer of the collective resources of a communicator garbage-collected
# without free(): run by finalize in creation order, with the live communicators.
_deferred: dict = {}


def init(mpi_comm=None) -> None:
    """Initialize aluminum (idempotent).  ``mpi_comm`` becomes the default communicator group
    (``COMM_WORLD`` if omitted).  Raises ``CommunicatorError`` after ``finalize``."""
    global _state, _world, _private, _services
    with _lock:
        if _state == "finalized":
            raise CommunicatorError("al.init: aluminum was finalized; it cannot be re-initialized")
        if _state == "initialized":
            return
        # The default group's services start the transport (MPI, with MPI_THREAD_MULTIPLE:
        # backends/mpi/services.py); ``import aluminum`` starts none.
        _services = get_services(DEFAULT_SERVICES)
        _world, _private = _services.start(mpi_comm)
        debug.agree(_services, _private)
        watchdog.open_board(_services, _private)
        selector.use_measured_link(_services.measure_link(_private,
                                                          selector.link_probe_wanted()))
        trace.install_signal_handler()
        _state = "initialized"
        atexit.register(_finalize_at_exit)


def _finalize_at_exit() -> None:
    """``finalize()`` at interpreter exit, unless the program ends on an uncaught exception
    while other processes run: this rank's peers would wait for it in their next collective
    and it for them in finalize's, so it ends the job instead (``MPI_Abort``, status 1; the
    traceback is printed by then), as ``python -m aluminum.run`` does for its programs."""
    uncaught = getattr(sys, "last_value", None)   # set only for an uncaught exception
    if uncaught is not None and _state == "initialized" and not hasattr(sys, "ps1"):
        sys.stdout.flush()
        sys.stderr.flush()
        _services.abort(1)
    finalize()


def initialized() -> bool:
    """True between ``init`` and ``finalize``."""
    return _state == "initialized"


def finalized() -> bool:
    return _state == "finalized"


def ensure_initialized():
    """The default group's handle (an mpi4py communicator), initializing on first use;
    raises after ``finalize``."""
    if _state != "initialized":
        init()
    return _world


def register_communicator(comm) -> int:
    """Track ``comm`` for finalize; returns its creation index."""
    index = next(_created)
    _communicators[index] = comm
    return index


def defer_close(index: int, close) -> None:
    """Run ``close()`` at finalize, in the place of communicator ``index`` (see
    ``communicator._release_dropped``)."""
    _deferred[index] = close


def finalize_peers_timeout() -> float | None:
    """How long finalize waits for every rank to arrive: ``AL_FINALIZE_TIMEOUT``, else
    ``FINALIZE_PEERS_FACTOR`` times ``AL_TIMEOUT``, else forever.  Longer than
    ``AL_TIMEOUT`` because a peer that is merely late (still running into its own timeouts,
    each up to ``AL_TIMEOUT``) must not be cut off."""
    from .engine.config import parse_setting

    explicit = parse_setting(os.environ, "AL_FINALIZE_TIMEOUT", float, 1e-9, None)
    if explicit is not None:
        return explicit
    from .engine.progress import get_engine

    timeout = get_engine().config.timeout_s
    return None if timeout is None else FINALIZE_PEERS_FACTOR * timeout


def _given_up_peers_still_away(since: float):
    """The bounded wait's ``give_up`` (``Services.agree``) for finalize: a rank that already raised
    ``al.TimeoutError`` naming some peers waits one ``AL_TIMEOUT`` for them from ``since``
    (when finalize began: stopping the engine counts), not the full finalize timeout, once
    they are the only ranks that have not reached finalize and all of them are stopped
    (the arrival board shows both; None where it cannot: no AL_TIMEOUT, nobody given up
    on, or a job spanning nodes).  Merely late peers keep the full wait."""
    from .engine.progress import get_engine

    grace = get_engine().config.timeout_s
    if grace is None or not watchdog.given_up_on():
        return None

    def give_up(waited: float) -> str | None:
        if time.monotonic() - since < grace:
            return None
        away = watchdog.late_for_finalize()
        given_up = watchdog.given_up_on()
        if not away or not away <= given_up or not all(map(watchdog.stopped, away)):
            return None
        return (f"ranks {sorted(away)} of this node, which an earlier al.TimeoutError of "
                f"this rank named as never arrived, are stopped (SIGSTOP or a debugger) and "
                f"have not reached it within AL_TIMEOUT={grace:g} s either (not waiting the "
                f"full {finalize_peers_timeout():g} s for them)")
    return give_up


def finalize() -> None:
    """Complete or fail in-flight operations, stop the engine and free all communicators.

    Collective.  With ``AL_TIMEOUT`` set, a rank whose peers do not all arrive within it
    warns and exits the process (status 1) instead of hanging; see the module docstring."""
    global _state
    with _lock:
        was_initialized = _state == "initialized"
        # Strong references from here on: a communicator that only the engine's last
        # states or requests kept alive would otherwise be collected while the engine
        # stops, after ``_release_dropped`` stops deferring, leaving its shared window to
        # MPI_Finalize, which frees windows in a per-rank order and hangs.
        live = list(_communicators.items())
        _state = "finalized"
    if not was_initialized:
        return
    from .engine import progress

    began = time.monotonic()
    watchdog.mark_finalizing()
    progress.finalize_engine()
    trace.write()
    healthy = not (progress.abandoned_any() or _services.stranded_any())
    try:
        everyone = _services.agree(_private, "al.finalize()", int(healthy),
                                    timeout=finalize_peers_timeout(),
                                    give_up=_given_up_peers_still_away(began))
    except TimeoutError as exc:
        warnings.warn(f"aluminum: {exc}; exiting now (status 1): MPI's own finalize would "
                      f"wait for those ranks forever", RuntimeWarning, stacklevel=2)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    collective = everyone == 1
    closers = {index: (lambda comm=comm: comm._release(
        collective=collective, keep=progress.abandoned_owner(comm)))
        for index, comm in live}
    if collective:
        closers.update(_deferred)
    _deferred.clear()
    del live
    for index in sorted(closers):   # creation order: the same on every rank
        closers[index]()
    watchdog.close_board(collective)
