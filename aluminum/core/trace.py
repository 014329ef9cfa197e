"""Chrome-trace recording of API calls and engine events (``AL_TRACE=<path>``).

With ``AL_TRACE=/tmp/al.json`` each rank writes ``/tmp/al.rank<N>.json`` when aluminum is
finalized (``al.finalize()`` or interpreter exit): a Chrome trace (``chrome://tracing``,
Perfetto) in the JSON object format, ``{"traceEvents": [...], "otherData": {...}}``.
Timestamps are CLOCK_MONOTONIC microseconds, so ranks of one node line up.  Events:

- API calls: instant ``"ph": "i"``, ``"cat": "api"``, named after the operation
  (``"allreduce"``), ``args = {bytes, algo, blocking, comm_size}``, on the caller's thread.
- Engine events: instant, ``"cat": "engine"``, named ``submit``, ``admit``, ``start``,
  ``complete`` or ``fail``, ``args = {op, seq, stream}``, on the thread that drove the engine
  (the engine thread, or a caller progressing it inside ``Request.wait``).
- Operation lifetimes: async slices ``"ph": "b"``/``"e"``, ``"cat": "op"``, ``id = seq``, from
  submission to completion, named after the state (``"allreduce/mpi_passthrough"``).
- Spans: complete events ``"ph": "X"`` recorded with ``span``; the executor layer records
  one per op it runs, ``"cat": "executor"``, ``args = {place, stream, thread}``.

Recording costs nothing unless ``ENABLED``: callers test the flag before calling in.
"""
from __future__ import annotations

import atexit
import json
import os
import threading
import time

PATH: str | None = os.environ.get("AL_TRACE") or None
ENABLED: bool = PATH is not None

_events: list[dict] = []
_rank: int | None = None
_written = False
_write_lock = threading.Lock()


def _now_us() -> float:
    return time.monotonic_ns() / 1000.0


def api_call(op: str, comm, nbytes: int, algo: str, blocking: bool) -> None:
    """Record one API call (only called when ``ENABLED``)."""
    _events.append({"name": op, "cat": "api", "ph": "i", "s": "t", "ts": _now_us(),
                    "pid": _pid(), "tid": threading.get_native_id(),
                    "args": {"bytes": nbytes, "algo": algo, "blocking": blocking,
                             "comm_size": getattr(comm, "size", None)}})


def engine_event(event: str, op: str, seq: int, stream: object) -> None:
    """Record an engine event on one request: submit, admit, start, complete or fail."""
    ts = _now_us()
    label = stream_label(stream)
    common = {"pid": _pid(), "tid": threading.get_native_id(), "ts": ts}
    _events.append({"name": event, "cat": "engine", "ph": "i", "s": "t", **common,
                    "args": {"op": op, "seq": seq, "stream": label}})
    if event == "submit":
        _events.append({"name": op, "cat": "op", "ph": "b", "id": seq, **common,
                        "args": {"seq": seq, "stream": label}})
    elif event in ("complete", "fail"):
        _events.append({"name": op, "cat": "op", "ph": "e", "id": seq, **common,
                        "args": {"status": event}})


def span(name: str, category: str, start_us: float, end_us: float, args: dict) -> None:
    """Record a complete span (``"ph": "X"``) on the calling thread (only called when
    ``ENABLED``); the executor records each op's run this way.  Times from ``now_us()``."""
    _events.append({"name": name, "cat": category, "ph": "X", "ts": start_us,
                    "dur": end_us - start_us, "pid": _pid(),
                    "tid": threading.get_native_id(), "args": args})


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


def write(path: str | None = None) -> str | None:
    """Write this rank's trace file now (once; later calls do nothing); return its path.

    A process that recorded nothing writes nothing (``python -m aluminum.run`` imports
    aluminum too, and would otherwise overwrite rank 0's file with an empty one).

    ``al.finalize()`` stops the progress engine before it calls this, so that completion
    events of in-flight operations are in the file.
    """
    global _written
    path = path or PATH
    if path is None or not _events:   # e.g. the launcher process, which only imports us
        return None
    with _write_lock:
        if _written:
            return None
        _written = True
    rank = _pid()
    target = output_path(path, rank)
    meta = [{"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
             "args": {"name": f"rank {rank}"}}]
    document = {"traceEvents": meta + list(_events), "displayTimeUnit": "ms",
                "otherData": {"rank": rank, "format": "aluminum-trace/1"}}
    directory = os.path.dirname(target)
    if directory:
        os.makedirs(directory, exist_ok=True)
    with open(target, "w") as out:
        json.dump(document, out)
    return target


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


if ENABLED:
    atexit.register(write)   # processes that never called al.init still get their file
