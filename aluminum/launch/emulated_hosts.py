"""Emulated hosts: a cluster of H "hosts" on this machine, one Linux network namespace each.

``python -m aluminum.run --hosts 2 -n 4 [--link-mbit 1000] script.py`` runs 4 ranks, two on
each of two emulated hosts.  What ``emulated_hosts`` builds, and removes again on exit, on an
error, on Ctrl-C and on SIGTERM:

- one network namespace per host, named ``al-<token>-h<i>`` (the token is random, so two
  launches at once never collide), whose ``eth0`` is a veth pair's end; the other end is on a
  bridge ``al<token>br`` in this (the root) namespace;
- addresses from a /24 of ``10.231.0.0/16`` that no interface here uses yet: hosts get
  ``.1 .. .H``, the bridge ``.254`` (mpiexec's daemons call mpiexec back there).  No traffic
  goes anywhere else;
- with ``link_mbit``, a token-bucket filter (``tc tbf``) on both directions of every host's
  link, so each host sends and receives at most that rate (``netem`` is not available here).

Open MPI decides which ranks share a node from its daemons, so one ``mpiexec`` whose ranks
merely entered namespaces would still be one node (and use shared memory between them).  Here
every host gets a daemon of its own: the hostfile names the hosts, and the launch agent (the
``ssh`` PRRTE would use) is a script that enters the host's network namespace with
``nsenter --net`` (``ip netns exec`` would remount /sys) and a UTS namespace named after the
host.  Ranks on one host then share memory, ranks on different hosts talk TCP over the bridge.

It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN); without it ``EmulatedHostsError`` says so
before anything is made.  A launcher killed outright (SIGKILL: no handler runs) leaves its
hosts behind; the next launch removes those of every launcher that is no longer alive (each
launch's work folder names its launcher's pid).
"""
from __future__ import annotations

import fcntl
import ipaddress
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import AluminumError

ADDRESS_POOL = ipaddress.ip_network("10.231.0.0/16")
BRIDGE_HOST = 254
TOOLS = ("ip", "nsenter", "unshare")
LOCK_FILE = Path(tempfile.gettempdir()) / "aluminum-emulated-hosts.lock"
LAUNCHER_PID = "launcher.pid"   # in a launch's work folder: whose hosts they are

# PRRTE calls its ssh agent as ``agent <host> <command line>``.
LAUNCH_AGENT = """#!/bin/sh
# Launch agent for aluminum's emulated hosts: run the command inside the host's network
# namespace, in a UTS namespace of its own named after the host, as ssh would on that host.
host="$1"; shift
exec nsenter --net=/run/netns/"$host" unshare --uts sh -c "hostname $host; $*"
"""


class EmulatedHostsError(AluminumError):
    """The emulated hosts could not be made (no privilege, a tool missing, no free subnet)."""


@dataclass
class EmulatedHosts:
    """A running emulated cluster: its hosts' names and addresses, and the mpiexec options
    that make Open MPI start one daemon on each."""
    names: list[str]
    addresses: list[str]
    subnet: str
    bridge: str
    link_mbit: float | None
    slots: int
    workdir: Path
    _undo: list[list[str]] = field(default_factory=list, repr=False)

    def mpiexec_args(self) -> list[str]:
        hostfile = self.workdir / "hostfile"
        hostfile.write_text("".join(f"{name} slots={self.slots}\n" for name in self.names))
        agent = self.workdir / "launch_agent.sh"
        agent.write_text(LAUNCH_AGENT)
        agent.chmod(0o755)
        # Explicit mapping: the default policy this launcher sets (oversubscribe) would
        # put every rank on the first host.
        return ["--hostfile", str(hostfile),
                "--map-by", f"ppr:{self.slots}:node:oversubscribe",
                "--prtemca", "plm_ssh_agent", str(agent),
                "--prtemca", "oob_tcp_if_include", self.subnet,
                "--mca", "pml", "ob1", "--mca", "btl", "tcp,sm,self",
                "--mca", "btl_tcp_if_include", self.subnet]


    def stop_processes(self) -> None:
        """Kill every process running on the hosts now (ranks and daemons)."""
        _stop_processes(self.names)

    def rank_pids(self) -> list[int]:
        """The job's ranks running now: the processes on the hosts that a host's Open MPI
        daemon (``prted``, which forks itself once) started."""
        running = []
        for name in self.names:
            for pid in _processes(name):
                state, parent = _state_and_parent(pid)
                if (state not in (None, "Z") and _name(pid) != "prted"
                        and _name(parent) == "prted"):
                    running.append(pid)
        return running


@contextmanager
def emulated_hosts(hosts: int, nprocs: int, link_mbit: float | None = None):
    """Make ``hosts`` emulated hosts with room for ``nprocs`` ranks (filled host by host,
    ``ceil(nprocs / hosts)`` each), yield an ``EmulatedHosts``, and remove everything after,
    whatever happens in between."""
    if hosts < 1:
        raise EmulatedHostsError(f"--hosts: expected at least 1 host, got {hosts}")
    if nprocs < hosts:
        raise EmulatedHostsError(f"-n: expected at least one rank per host ({hosts}), "
                                 f"got {nprocs}")
    if link_mbit is not None and not link_mbit > 0:
        raise EmulatedHostsError(f"--link-mbit: expected a positive rate, got {link_mbit}")
    check_privilege(need_tc=link_mbit is not None)
    token = secrets.token_hex(3)
    cluster = EmulatedHosts(names=[f"al-{token}-h{i}" for i in range(hosts)], addresses=[],
                            subnet="", bridge=f"al{token}br", link_mbit=link_mbit,
                            slots=math.ceil(nprocs / hosts),
                            workdir=Path(tempfile.mkdtemp(prefix=f"al-hosts-{token}-")))
    (cluster.workdir / LAUNCHER_PID).write_text(str(os.getpid()))
    try:
        _build(cluster, token)
        yield cluster
    finally:
        _remove(cluster)


def check_privilege(need_tc: bool = False) -> None:
    """Raise ``EmulatedHostsError`` unless this process can make network namespaces."""
    missing = [tool for tool in TOOLS + (("tc",) if need_tc else ()) if shutil.which(tool) is None]
    if missing:
        raise EmulatedHostsError(f"emulated hosts: expected the tools {', '.join(TOOLS)}"
                                 f"{' and tc' if need_tc else ''} on PATH, missing "
                                 f"{', '.join(missing)}")
    if os.geteuid() != 0:
        raise EmulatedHostsError("emulated hosts: expected root (network namespaces need "
                                 f"CAP_NET_ADMIN and CAP_SYS_ADMIN), running as uid "
                                 f"{os.geteuid()}")


def _build(cluster: EmulatedHosts, token: str) -> None:
    with open(LOCK_FILE, "w") as lock:   # two launches must not pick the same subnet
        fcntl.flock(lock, fcntl.LOCK_EX)
        reap_orphans()
        subnet = _free_subnet()
        cluster.subnet = str(subnet)
        hosts = list(subnet.hosts())
        _run(cluster, ["ip", "link", "add", cluster.bridge, "type", "bridge"],
             undo=["ip", "link", "del", cluster.bridge])
        _run(cluster, ["ip", "addr", "add", f"{hosts[BRIDGE_HOST - 1]}/24",
                       "dev", cluster.bridge])
    _run(cluster, ["ip", "link", "set", cluster.bridge, "up"])
    for index, name in enumerate(cluster.names):
        veth = f"al{token}v{index}"
        address = str(hosts[index])
        _run(cluster, ["ip", "netns", "add", name], undo=["ip", "netns", "del", name])
        _run(cluster, ["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0",
                       "netns", name], undo=["ip", "link", "del", veth])
        _run(cluster, ["ip", "link", "set", veth, "master", cluster.bridge])
        _run(cluster, ["ip", "link", "set", veth, "up"])
        _run(cluster, ["ip", "-n", name, "addr", "add", f"{address}/24", "dev", "eth0"])
        _run(cluster, ["ip", "-n", name, "link", "set", "eth0", "up"])
        _run(cluster, ["ip", "-n", name, "link", "set", "lo", "up"])
        if cluster.link_mbit is not None:
            shape = _tbf(cluster.link_mbit)
            _run(cluster, ["tc", "qdisc", "add", "dev", veth, "root", *shape])   # to the host
            _run(cluster, ["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "eth0",
                           "root", *shape])                                      # from it
        cluster.addresses.append(address)


def _tbf(mbit: float) -> list[str]:
    """A token bucket at ``mbit``: a burst of 1 ms at that rate (at least 64 KiB, so one
    segment always fits) and a queue of 50 ms."""
    rate_bytes = mbit * 1e6 / 8
    burst = max(64 * 1024, int(rate_bytes / 1000))
    return ["tbf", "rate", f"{mbit}mbit", "burst", str(burst), "limit",
            str(max(burst, int(rate_bytes * 0.05)))]


def _free_subnet() -> ipaddress.IPv4Network:
    """The first /24 of the pool that no interface in this namespace has an address in."""
    listing = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True,
                             text=True, check=True).stdout
    used = {ipaddress.ip_address(found) for found in re.findall(r"inet (\S+?)/", listing)}
    for subnet in ADDRESS_POOL.subnets(new_prefix=24):
        if subnet.network_address == ADDRESS_POOL.network_address:
            continue
        if not any(address in subnet for address in used):
            return subnet
    raise EmulatedHostsError(f"emulated hosts: expected a free /24 in {ADDRESS_POOL}, "
                             "every one is in use")


def _run(cluster: EmulatedHosts, argv: list[str], undo: list[str] | None = None) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise EmulatedHostsError(f"emulated hosts: `{' '.join(argv)}` failed: "
                                 f"{done.stderr.strip() or done.returncode}")
    if undo is not None:
        cluster._undo.append(undo)


def _remove(cluster: EmulatedHosts) -> None:
    """Stop what still runs on the hosts, then undo every step that succeeded, newest
    first; keep going past failures."""
    _stop_processes(cluster.names)
    while cluster._undo:
        subprocess.run(cluster._undo.pop(), capture_output=True)
    shutil.rmtree(cluster.workdir, ignore_errors=True)


def _stop_processes(names: list[str]) -> None:
    """Kill every process left in the hosts' namespaces.  A host cut off (its link down)
    keeps its Open MPI daemon: mpiexec's order to end never reaches it, and it is not in
    mpiexec's session, so the launcher's kill misses it; it would keep the namespace
    alive after ``ip netns del``."""
    for name in names:
        for pid in _processes(name):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _processes(name: str) -> list[int]:
    """The processes in namespace ``name`` now."""
    listing = subprocess.run(["ip", "netns", "pids", name], capture_output=True,
                             text=True).stdout
    return [int(pid) for pid in listing.split() if pid.isdigit()]


def _state_and_parent(pid: int) -> tuple[str | None, int | None]:
    """A process's state letter (``Z``: ended, not yet reaped) and its parent's pid."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1])
    except (OSError, ValueError, IndexError):
        return None, None


def _name(pid: int | None) -> str | None:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except (OSError, TypeError):
        return None


def reap_orphans() -> list[str]:
    """Remove the hosts of launches whose launcher is no longer alive (killed outright, so
    its own clean-up never ran): their processes, namespaces, links and work folder.
    Returns the tokens removed.  Launches still running, and folders without a pid, are
    left alone."""
    reaped = []
    for workdir in Path(tempfile.gettempdir()).glob("al-hosts-*-*"):
        match = re.fullmatch(r"al-hosts-([0-9a-f]{6})-.*", workdir.name)
        try:
            pid = int((workdir / LAUNCHER_PID).read_text())
        except (OSError, ValueError):
            continue
        if match is None or _alive(pid):
            continue
        token = match.group(1)
        names = leftovers(token)
        _stop_processes([name for name in names if name.startswith("al-")])
        for name in names:
            if name.startswith("al-"):
                subprocess.run(["ip", "netns", "del", name], capture_output=True)
            else:
                subprocess.run(["ip", "link", "del", name], capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)
        reaped.append(token)
    return reaped


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def leftovers(token: str = "[0-9a-f]{6}") -> list[str]:
    """Namespaces and links of emulated hosts that exist now (every launch's, or the one
    with ``token``): what a clean exit leaves is none."""
    pattern = rf"al-{token}-h\d+|al{token}(?:br|v\d+)"
    listing = "\n".join(subprocess.run(argv, capture_output=True, text=True).stdout
                        for argv in (["ip", "netns", "list"], ["ip", "-o", "link", "show"]))
    return sorted({found.group(0) for found in re.finditer(rf"\b(?:{pattern})\b", listing)})
