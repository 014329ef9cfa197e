"""Faults across emulated hosts (issue 31): a host's link brought down in the middle of
collectives ends, on every rank, in ``al.TimeoutError`` under ``AL_TIMEOUT`` naming the
ranks on the other side of the cut with their host, and the launcher still removes every
namespace and link it made.

The ranks allreduce in a loop; once they have, the test sets the host-side veth of host 1
down (``ip link set al<token>v1 down``, in this namespace).  Ranks report through files, not
stdout: output of the ranks behind the cut never reaches mpiexec.  On the hosts that keep
their link, the error must name exactly the ranks of host 1 (and its name); on host 1, the
ranks of every other host (from there, they are the ones that cannot be reached).
"""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from aluminum.launch.emulated_hosts import EmulatedHostsError, check_privilege, leftovers

try:
    check_privilege()
    NO_HOSTS = None
except EmulatedHostsError as exc:
    NO_HOSTS = str(exc)

pytestmark = pytest.mark.skipif(NO_HOSTS is not None, reason=f"no emulated hosts: {NO_HOSTS}")

TIMEOUT_S = 4.0          # AL_TIMEOUT (its roll call across hosts listens 2 s)
SLACK_S = 15.0           # from the cut to every rank's report: AL_TIMEOUT + roll call + slack
JOB_LIMIT_S = 90.0       # the whole job, hung or not

RANKS = textwrap.dedent('''
    import json, os, socket, sys, time
    import numpy as np
    import aluminum as al

    out = sys.argv[1]
    comm = al.MPICommunicator()
    buf = np.ones(4096, np.float32)
    al.allreduce(buf, comm)                       # every connection made
    hosts = comm.mpi_comm.allgather(socket.gethostname())
    if comm.rank == 0:
        with open(os.path.join(out, "hosts.tmp"), "w") as f:
            json.dump(hosts, f)
        os.rename(os.path.join(out, "hosts.tmp"), os.path.join(out, "hosts.json"))
    report = {"rank": comm.rank, "host": hosts[comm.rank], "kind": "ok", "message": ""}
    try:
        for _ in range(100000):                   # until the link goes down
            al.allreduce(buf, comm)
    except Exception as exc:
        report.update(kind=type(exc).__name__, message=str(exc),
                      aluminum=isinstance(exc, al.AluminumError), at=time.time())
    with open(os.path.join(out, f"rank{comm.rank}.tmp"), "w") as f:
        json.dump(report, f)
    os.rename(os.path.join(out, f"rank{comm.rank}.tmp"),
              os.path.join(out, f"rank{comm.rank}.json"))
    # A rank that ends without MPI_Finalize makes mpiexec kill the others: stay until the
    # test has every report, some ranks may still be in their roll call.
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(out, "reported")) and time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(0)    # MPI_Finalize would wait for the hosts it cannot reach
''')


def _state(pid: str) -> str | None:
    """A process's state letter (``R``, ``S``, ``Z``...), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def wait_for(predicate, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.1)
    pytest.fail(f"{what}: not within {seconds:g} s")


@pytest.mark.parametrize("hosts, nprocs", [(2, 4), (3, 3)], ids=["2x2", "3x1"])
def test_a_host_link_down_times_out_naming_that_hosts_ranks(hosts, nprocs, tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "aluminum.run", "--hosts", str(hosts), "-n", str(nprocs),
         "--timeout", str(JOB_LIMIT_S), str(script), str(tmp_path)],
        env={**os.environ, "AL_TIMEOUT": str(TIMEOUT_S)}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    try:
        names = wait_for(lambda: launcher.poll() is not None and ["ended"] or
                         (tmp_path / "hosts.json").exists() and
                         json.loads((tmp_path / "hosts.json").read_text()),
                         JOB_LIMIT_S, "the ranks' first allreduce")
        assert names != ["ended"], f"the job ended first:\n{launcher.communicate()[0]}"
        token = re.fullmatch(r"al-([0-9a-f]+)-h\d+", names[0]).group(1)
        down = f"al-{token}-h1"
        on_it = subprocess.run(["ip", "netns", "pids", down], capture_output=True,
                               text=True, check=True).stdout.split()
        subprocess.run(["ip", "link", "set", f"al{token}v1", "down"], check=True)
        cut = time.time()
        reports = wait_for(lambda: len(list(tmp_path.glob("rank*.json"))) == nprocs and
                           [json.loads((tmp_path / f"rank{r}.json").read_text())
                            for r in range(nprocs)], SLACK_S + 20, "every rank's report")
        (tmp_path / "reported").touch()
        # mpiexec cannot end the job by itself (its daemon behind the cut never answers):
        # what a user or a scheduler does next is stop it, and nothing may stay behind.
        try:
            launcher.wait(3)
        except subprocess.TimeoutExpired:
            launcher.send_signal(signal.SIGTERM)
            launcher.wait(30)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    assert leftovers(token) == [], f"left behind: {leftovers(token)}"
    def alive():    # (a process killed a moment ago may still be a zombie)
        return [pid for pid in on_it if _state(pid) not in (None, "Z")]
    deadline = time.monotonic() + 5
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(), f"processes of {down} still running: {alive()}"

    behind = [rank for rank, name in enumerate(names) if name == down]
    for report in reports:
        rank = report["rank"]
        assert report["kind"] == "TimeoutError", report
        assert report["at"] - cut < SLACK_S, f"rank {rank}: the error came late: {report}"
        # from behind the cut, every other host is out of reach
        others = [r for r in range(nprocs) if (r in behind) != (rank in behind)]
        listed = re.search(r"no answer within \S+ s from ranks \[([\d, ]*)\]( \(hosts? [^)]*\))",
                           report["message"])
        assert listed, f"rank {rank} names no unreachable ranks: {report['message']}"
        assert [int(r) for r in listed.group(1).split(",")] == others, (rank, report)
        hosts_named = set(re.findall(r"al-[0-9a-f]+-h\d+", listed.group(2)))
        assert hosts_named == {names[r] for r in others}, (rank, report)
