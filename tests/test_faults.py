"""Fault injection (issue 20): every fault ends, on every rank, within AL_TIMEOUT + 5 s with an
``al.AluminumError`` subclass, or with the job ending non-zero when a peer died; no misuse
crashes the process.

Each case is a small script run on 2 and 3 ranks by the launcher with a hard timeout (so a
hang fails the case instead of stalling the suite).  Scripts print one ``REPORT`` line per
rank and checkpoint: what was raised (or ``ok``), whether it derives from ``al.AluminumError``
and the seconds since the fault was injected.
"""
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from aluminum.launcher import launch

TIMEOUT_S = 2.0        # AL_TIMEOUT in the injected cases
SLACK_S = 5.0          # the bound: AL_TIMEOUT + 5 s from the fault to the error
JOB_LIMIT_S = 90       # a hung job is killed after this and fails its case

PRELUDE = textwrap.dedent('''
    import os, signal, sys, time
    import numpy as np
    import aluminum as al

    _t0 = [time.monotonic()]

    def fault():
        """Mark the moment the fault is injected: REPORT times count from here."""
        _t0[0] = time.monotonic()

    def report(rank, tag, exc=None):
        kind = "ok" if exc is None else type(exc).__name__
        derived = exc is None or isinstance(exc, al.AluminumError)
        text = "" if exc is None else " ".join(str(exc).split())[:400]
        print(f"REPORT rank={rank} tag={tag} kind={kind} aluminum={derived} "
              f"t={time.monotonic() - _t0[0]:.2f} msg={text}", flush=True)

    def attempt(rank, tag, call):
        try:
            call()
        except Exception as exc:   # the point: what does the library raise?
            report(rank, tag, exc)
            return exc
        report(rank, tag)
''')

_REPORT = re.compile(r"REPORT rank=(\d+) tag=(\S+) kind=(\S+) aluminum=(\S+) t=(\S+) msg=(.*)")


def run_case(nprocs, body, env=None, tmp_path=None):
    """Run ``PRELUDE + body`` on ``nprocs`` ranks; return (returncode, reports, output, wall
    seconds), ``reports[(rank, tag)] = (kind, derives from AluminumError, seconds, msg)``."""
    script = (tmp_path or "/tmp") / "case.py" if tmp_path else None
    code = PRELUDE + textwrap.dedent(body)
    environment = {**os.environ, "AL_TIMEOUT": str(TIMEOUT_S), **(env or {})}
    for name, value in list(environment.items()):
        if value is None:
            del environment[name]
    if script is not None:
        script.write_text(code)
        argv = [sys.executable, str(script)]
    else:
        argv = [sys.executable, "-c", code]
    start = time.monotonic()
    try:
        result = launch(nprocs, argv, timeout=JOB_LIMIT_S, env=environment, capture=True)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the job hung (killed after {JOB_LIMIT_S} s):\n{exc.output}")
    wall = time.monotonic() - start
    reports = {}
    for line in result.stdout.splitlines():
        found = _REPORT.search(line)
        if found:
            rank, tag, kind, derived, seconds, msg = found.groups()
            reports[(int(rank), tag)] = (kind, derived == "True", float(seconds), msg)
    return result.returncode, reports, result.stdout, wall


def expect(reports, output, ranks, tag, kind=None, within=TIMEOUT_S + SLACK_S, match=None):
    """Every rank in ``ranks`` reported ``tag`` with an AluminumError (``kind`` when given)
    within ``within`` seconds of the fault, its message matching ``match``."""
    for rank in ranks:
        assert (rank, tag) in reports, f"rank {rank} never reported {tag}:\n{output}"
        got, derived, seconds, msg = reports[(rank, tag)]
        assert got != "ok", f"rank {rank} {tag}: no error\n{output}"
        assert derived, f"rank {rank} {tag}: {got} is not an al.AluminumError: {msg}"
        if kind is not None:
            assert got == kind, f"rank {rank} {tag}: expected {kind}, got {got}: {msg}"
        assert seconds <= within, f"rank {rank} {tag}: {seconds} s > {within} s\n{output}"
        if match is not None:
            assert re.search(match, msg), f"rank {rank} {tag}: {msg!r} !~ {match!r}"


NPROCS = pytest.mark.parametrize("nprocs", [2, 3])


# -- 1. comm.free() with operations in flight (was: segmentation fault) --------------------

@NPROCS
def test_free_with_operations_in_flight_waits_for_them(nprocs, tmp_path):
    code, reports, out, _ = run_case(nprocs, '''
        comm = al.MPICommunicator()
        bufs = [np.ones(1 << 16, np.float32) for _ in range(8)]
        requests = [al.nonblocking_allreduce(b, comm, algo=algo)
                    for b, algo in zip(bufs, ["mpi_passthrough", "ring"] * 4)]
        if comm.rank == 0:
            time.sleep(0.3)
        attempt(comm.rank, "free", comm.free)
        al.wait_all(requests)
        assert all(np.all(b == comm.size) for b in bufs)
        attempt(comm.rank, "after", lambda: al.allreduce(bufs[0], comm))
    ''', tmp_path=tmp_path)
    assert code == 0, out
    for rank in range(nprocs):
        assert reports[(rank, "free")][0] == "ok", out
    expect(reports, out, range(nprocs), "after", "CommunicatorError", match="freed")


@NPROCS
def test_free_with_operations_a_peer_never_joins_fails_them(nprocs, tmp_path):
    code, reports, out, _ = run_case(nprocs, '''
        comm = al.MPICommunicator()
        bufs = [np.ones(1 << 16, np.float32) for _ in range(6)]
        if comm.rank == 0:
            requests = [al.nonblocking_allreduce(b, comm, algo=algo)
                        for b, algo in zip(bufs, ["mpi_passthrough", "ring"] * 3)]
        fault()
        attempt(comm.rank, "free", comm.free)
        if comm.rank == 0:
            for i, request in enumerate(requests):
                attempt(comm.rank, f"request{i}", request.wait)
        al.finalize()
        report(comm.rank, "exit")
    ''', tmp_path=tmp_path)
    assert code == 0, out
    expect(reports, out, [0], "free", "CommunicatorError", match=r"6 operation\(s\)")
    for i in range(6):
        expect(reports, out, [0], f"request{i}", "CommunicatorError", match="comm.free")
    for rank in range(nprocs):
        assert (rank, "exit") in reports, out
