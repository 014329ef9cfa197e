"""Chrome-trace recording of API calls and engine events (``AL_TRACE=<path>``), and the flight
recorder: the last operations of each rank, dumped when something hangs.

With ``AL_TRACE=/tmp/al.json`` each rank streams its events to ``/tmp/al.rank<N>.json`` as
they happen (memory stays bounded however long the run), created with mode 0600: a Chrome
trace (``chrome://tracing``, Perfetto) in the JSON array format, ``[{...},\\n{...}, ...]``,
closed with ``]`` when aluminum is finalized (``al.finalize()`` or interpreter exit).  A
process that dies first leaves the array unterminated, which both viewers accept; ``read``
does too.  Timestamps are CLOCK_MONOTONIC microseconds, so ranks of one node line up.  Events:

- Metadata first: ``process_name`` (``"rank N"``) and ``aluminum_trace``
  (``args = {rank, format: "aluminum-trace/2"}``).
- API calls: instant ``"ph": "i"``, ``"cat": "api"``, named after the operation
  (``"allreduce"``), ``args = {bytes, algo, blocking, comm_size, family}``, on the caller's
  thread; ``family`` is the op table's (``"collective"`` or ``"point_to_point"``).
- Engine events: instant, ``"cat": "engine"``, named ``submit``, ``admit``, ``start``,
  ``complete`` or ``fail``, ``args = {op, seq, stream}``, on the thread that drove the engine
  (the engine thread, or a caller progressing it inside ``Request.wait``).
- Operation lifetimes: async slices ``"ph": "b"``/``"e"``, ``"cat": "op"``, ``id = seq``, from
  submission to completion, named after the state (``"allreduce/mpi_passthrough"``).
- Spans: complete events ``"ph": "X"`` recorded with ``span``; the executor layer records
  one per op it runs, ``"cat": "executor"``, ``args = {place, stream, thread}``.

A trace file that cannot be created (a missing directory, no permission) is a warning, once,
never an exception; the flight recorder keeps working.

Flight recorder (after torch's NCCL flight recorder): the last ``AL_FLIGHT_RECORDER``
operations (default 1000 when ``AL_TRACE`` is set, else off) are kept in a ring, each as
``{op, family, algo, bytes, blocking, comm_size, seq, state, t_us}`` where ``state`` is the last
thing seen: ``called`` (a blocking call run directly, never seen by the engine: it returned
if a later call follows), ``submit``, ``admit``, ``start``, ``complete`` or ``fail``.  Each
rank writes them to ``<AL_TRACE root>.flight.rank<N>.json`` (without ``AL_TRACE``:
``$TMPDIR/aluminum-flight.rank<N>.json``) when an ``al.TimeoutError`` is raised and on
``SIGUSR1`` (``kill -USR1 <pid>``, also while the rank is stuck inside MPI): compare the
ranks' files to see who stopped where (every rank calls the ``"collective"`` ones in one
order; ``family`` is None for an engine state that is no operation of the op table).

Recording costs nothing unless ``ENABLED``: callers test the flag before calling in.
"""
from __future__ import annotations

import collections
import itertools
import json
import os
import signal
import tempfile
import threading
import time
import warnings

from .ops import OPS

PATH: str | None = os.environ.get("AL_TRACE") or None
DEFAULT_FLIGHT_OPS = 1000


def _flight_ops() -> int:
    text = os.environ.get("AL_FLIGHT_RECORDER", "").strip()
    if not text:
        return DEFAULT_FLIGHT_OPS if PATH is not None else 0
    if text.isdigit():
        return int(text)
    warnings.warn(f"aluminum: AL_FLIGHT_RECORDER: expected a number of operations, got "
                  f"{text!r}; the flight recorder is off", RuntimeWarning, stacklevel=2)
    return 0


FLIGHT_OPS: int = _flight_ops()
ENABLED: bool = PATH is not None or FLIGHT_OPS > 0

_rank: int | None = None
_lock = threading.Lock()        # the stream and the ring
_out = None                     # the open trace file, once the first event came
_stream_state = "closed" if PATH is None else "unopened"   # -> "open" -> "closed"
_ring: collections.OrderedDict = collections.OrderedDict()   # key -> operation record
_by_seq: dict[int, dict] = {}
_calls = itertools.count(1)
_caller = threading.local()     # the API call a thread just made, until the engine sees it


def _now_us() -> float:
    return time.monotonic_ns() / 1000.0


def _family(op: str) -> str | None:
    """The op table's family of operation ``op``; None for a name the table lacks."""
    row = OPS.get(op)
    return None if row is None else row.family.value


def api_call(op: str, comm, nbytes: int, algo: str, blocking: bool) -> None:
    """Record one API call of operation ``op`` (only called when ``ENABLED``)."""
    ts = _now_us()
    size = getattr(comm, "size", None)
    family = _family(op)
    if FLIGHT_OPS:
        record = {"op": op, "family": family, "algo": algo, "bytes": nbytes,
                  "blocking": blocking, "comm_size": size, "seq": None, "state": "called",
                  "t_us": ts}
        with _lock:
            _remember(("call", next(_calls)), record)
        _caller.record = record
    if _stream_state != "closed":
        _emit({"name": op, "cat": "api", "ph": "i", "s": "t", "ts": ts, "pid": _pid(),
               "tid": threading.get_native_id(),
               "args": {"bytes": nbytes, "algo": algo, "blocking": blocking,
                        "comm_size": size, "family": family}})


def engine_event(event: str, op: str, seq: int, stream: object) -> None:
    """Record an engine event on one request: submit, admit, start, complete or fail."""
    ts = _now_us()
    if FLIGHT_OPS:
        _engine_record(event, op, seq, ts)
    if _stream_state == "closed":
        return
    label = stream_label(stream)
    common = {"pid": _pid(), "tid": threading.get_native_id(), "ts": ts}
    _emit({"name": event, "cat": "engine", "ph": "i", "s": "t", **common,
           "args": {"op": op, "seq": seq, "stream": label}})
    if event == "submit":
        _emit({"name": op, "cat": "op", "ph": "b", "id": seq, **common,
               "args": {"seq": seq, "stream": label}})
    elif event in ("complete", "fail"):
        _emit({"name": op, "cat": "op", "ph": "e", "id": seq, **common,
               "args": {"status": event}})


def _engine_record(event: str, op: str, seq: int, ts: float) -> None:
    with _lock:
        record = _by_seq.get(seq)
        if record is None and event == "submit":
            # The API call this thread just made, if it is this operation's.
            record = getattr(_caller, "record", None)
            _caller.record = None
            if record is None or record["seq"] is not None or record["algo"] != op:
                name = op.split("/")[0]   # a State's name: "<operation>/<algorithm>"
                record = {"op": name, "family": _family(name), "algo": op, "bytes": None,
                          "blocking": None, "comm_size": None, "seq": None, "t_us": ts}
                _remember(("op", seq), record)
            record["seq"] = seq
            _by_seq[seq] = record
        if record is not None:
            record["state"] = event


def _remember(key, record: dict) -> None:
    """Keep ``record`` in the ring, dropping the oldest beyond ``FLIGHT_OPS`` (lock held)."""
    _ring[key] = record
    while len(_ring) > FLIGHT_OPS:
        _, old = _ring.popitem(last=False)
        _by_seq.pop(old["seq"], None)


def span(name: str, category: str, start_us: float, end_us: float, args: dict) -> None:
    """Record a complete span (``"ph": "X"``) on the calling thread (only called when
    ``ENABLED``); the executor records each op's run this way.  Times from ``now_us()``."""
    if _stream_state != "closed":
        _emit({"name": name, "cat": category, "ph": "X", "ts": start_us,
               "dur": end_us - start_us, "pid": _pid(), "tid": threading.get_native_id(),
               "args": args})


def now_us() -> float:
    """The trace clock (CLOCK_MONOTONIC, µs)."""
    return time.monotonic_ns() / 1000.0


def stream_label(stream: object) -> str:
    """A short printable name for a compute stream (``"host"`` for None)."""
    if stream is None:
        return "host"
    return str(getattr(stream, "name", None) or f"{type(stream).__name__}@{id(stream):#x}")


def output_path(path: str, rank: int) -> str:
    """Where ``rank`` writes its trace: ``a/b.json`` -> ``a/b.rank3.json``."""
    root, ext = os.path.splitext(path)
    return f"{root}.rank{rank}{ext or '.json'}"


def flight_path(rank: int) -> str:
    """Where ``rank`` dumps its flight record: next to the trace, else in the temp dir."""
    if PATH is not None:
        root, ext = os.path.splitext(PATH)
        return f"{root}.flight.rank{rank}{ext or '.json'}"
    return os.path.join(tempfile.gettempdir(), f"aluminum-flight.rank{rank}.json")


def _open_private(path: str):
    """``path`` opened for writing, created with mode 0600 whatever the umask."""
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)   # an existing file keeps its mode otherwise
    return os.fdopen(fd, "w", buffering=1 << 16)


def _emit(event: dict) -> None:
    """Append one event to the trace file, opening it on the first (a process that records
    nothing, such as the launcher, which only imports aluminum, writes no file)."""
    global _out, _stream_state
    line = json.dumps(event)
    with _lock:
        if _stream_state == "unopened":
            _stream_state = "closed"      # unless opening works
            rank = _pid()
            target = output_path(PATH, rank)
            try:
                _out = _open_private(target)
                _out.write("[" + json.dumps(
                    {"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
                     "args": {"name": f"rank {rank}"}}))
                _out.write(",\n" + json.dumps(
                    {"name": "aluminum_trace", "ph": "M", "pid": rank, "tid": 0,
                     "args": {"rank": rank, "format": "aluminum-trace/2"}}))
            except OSError as exc:
                _out = None
                warnings.warn(f"aluminum: AL_TRACE: cannot write {target} "
                              f"({type(exc).__name__}: {exc}); no trace is recorded",
                              RuntimeWarning, stacklevel=4)
                return
            _stream_state = "open"
        if _out is not None:
            try:
                _out.write(",\n" + line)
            except (OSError, ValueError) as exc:   # disk full, closed meanwhile
                _give_up(exc)


def _give_up(exc: BaseException) -> None:
    global _out, _stream_state
    _stream_state = "closed"
    out, _out = _out, None
    warnings.warn(f"aluminum: AL_TRACE: writing the trace failed ({type(exc).__name__}: "
                  f"{exc}); tracing stopped", RuntimeWarning, stacklevel=4)
    try:
        out.close()
    except (OSError, ValueError):
        pass


def write(path: str | None = None) -> str | None:
    """Close this rank's trace file (the JSON array's ``]``) and return its path; None when
    nothing was recorded or it was closed already.  Never raises: a failure is a warning.

    ``path`` is accepted for compatibility and ignored: the file was chosen when the first
    event was streamed.  ``al.finalize()`` stops the progress engine before it calls this, so
    that completion events of in-flight operations are in the file.
    """
    global _out, _stream_state
    with _lock:
        out, _out = _out, None
        _stream_state = "closed"
        if out is None:
            return None
        name = out.name
        try:
            out.write("\n]\n")
            out.close()
        except (OSError, ValueError) as exc:
            warnings.warn(f"aluminum: AL_TRACE: closing {name} failed "
                          f"({type(exc).__name__}: {exc})", RuntimeWarning, stacklevel=2)
            return None
    return output_path(PATH, _pid()) if PATH is not None else None


def read(path: str) -> list[dict]:
    """The events of a trace file, also from one left unterminated by a crash."""
    with open(path) as source:
        text = source.read().rstrip()
    if not text.endswith("]"):
        text = text.rstrip(",") + "]"
    return json.loads(text)


def flight_record() -> list[dict]:
    """The flight recorder's operations, oldest first (copies)."""
    with _lock:
        return [dict(record) for record in _ring.values()]


def dump_flight_record(reason: str) -> str | None:
    """Write this rank's flight record (``flight_path``, mode 0600) and return the path;
    None when the recorder is off or the file cannot be written (a warning)."""
    if not FLIGHT_OPS:
        return None
    rank = _pid()
    target = flight_path(rank)
    document = {"format": "aluminum-flight/1", "rank": rank, "pid": os.getpid(),
                "reason": reason, "t_us": _now_us(), "operations": flight_record()}
    try:
        with _open_private(target) as out:
            json.dump(document, out, indent=0)
    except OSError as exc:
        warnings.warn(f"aluminum: flight recorder: cannot write {target} "
                      f"({type(exc).__name__}: {exc})", RuntimeWarning, stacklevel=2)
        return None
    return target


def install_signal_handler() -> bool:
    """Dump the flight record on ``SIGUSR1`` (called by ``al.init()``); True if installed.

    Only with the recorder on, from the main thread, and when nobody else handles SIGUSR1.
    The dump runs on a thread of its own, woken through ``signal.set_wakeup_fd``, so it
    happens even while the main thread is stuck inside an MPI call (where a Python signal
    handler would never run).  A program that sets its own wakeup fd (asyncio) loses this.
    """
    if not FLIGHT_OPS or threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL:
        return False
    reader, writer = os.pipe()
    os.set_blocking(writer, False)
    try:
        previous = signal.set_wakeup_fd(writer)
    except ValueError:
        os.close(reader)
        os.close(writer)
        return False
    if previous != -1:       # someone else's: leave it
        signal.set_wakeup_fd(previous)
        os.close(reader)
        os.close(writer)
        return False
    signal.signal(signal.SIGUSR1, lambda *_: None)   # the C-level handler feeds the pipe
    threading.Thread(target=_dump_on_signal, args=(reader,), name="AlFlightRecorder",
                     daemon=True).start()
    return True


def _dump_on_signal(reader: int) -> None:
    while True:
        received = os.read(reader, 64)
        if not received:
            return
        if signal.SIGUSR1 in received:
            dump_flight_record("SIGUSR1")


def _pid() -> int:
    """This process's rank in MPI_COMM_WORLD (the trace's pid), from the launcher if known."""
    global _rank
    if _rank is None:
        for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
            value = os.environ.get(name, "")
            if value.isdigit():
                _rank = int(value)
                return _rank
        try:
            from mpi4py import MPI
        except ImportError:   # the engine's own tests run without mpi4py
            return 0
        if not MPI.Is_initialized() or MPI.Is_finalized():
            return 0
        _rank = MPI.COMM_WORLD.Get_rank()
    return _rank


if PATH is not None:
    import atexit

    atexit.register(write)   # processes that never called al.init still close their file
