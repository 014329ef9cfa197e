"""PlaceGroups and the cluster they resolve against (Paddle issue 11771).

A ``PlaceGroup`` (ir.py) names roles, nodes and places; its string form is the design's
``role/node/device:[ids]``: ``trainer/*/cpu:[0]`` (any trainer), ``pserver/127.0.0.1:7164/
cpu:[1,2]`` (the pserver at that endpoint), ``trainer/[10.0.0.1:7164,10.0.0.2:7164]/cpu:[0]``
(two named nodes).  A role without nodes (``*``) is **replication**: the op runs, the
variable lives, on every rank of the role.  Named nodes are **placement**: exactly those
ranks.  Places (devices inside a rank) are carried and printed; a rank runs its ops on its
own device, so they do not change which ranks run what.

A ``Cluster`` maps roles and nodes to the ranks of a communicator: ``Cluster.from_spec(
"trainer:2,pserver:1", comm)`` gives ranks in order (trainers 0-1, pserver 2), each rank the
endpoint ``127.0.0.1:<7164 + rank>`` unless ``endpoints`` names one per rank.  The launcher's
``--roles`` sets ``AL_ROLES`` (and ``AL_ENDPOINTS``, comma separated, may name endpoints);
``Cluster.from_env(comm)`` reads them.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..errors import ProgramError
from ..ir import PlaceGroup

BASE_PORT = 7164
ROLES_ENV, ENDPOINTS_ENV = "AL_ROLES", "AL_ENDPOINTS"
_FORM = re.compile(r"^(?P<role>[^/]*)/(?P<nodes>[^/]*|\[[^\]]*\])/(?P<places>.*)$")
_PLACES = re.compile(r"^(?P<device>[a-z]+):\[(?P<ids>[0-9, ]*)\]$|^(?P<one>[a-z]+:[0-9]+)$")


def parse_place_group(text: str) -> PlaceGroup:
    """The PlaceGroup of ``role/node/device:[ids]`` (node ``*`` for any; several nodes in
    brackets, comma separated; roles joined by ``+``).  Raises ``ProgramError``."""
    match = _FORM.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ProgramError(f"place group: expected 'role/node/device:[ids]' (e.g. "
                           f"'trainer/*/cpu:[0]'), got {text!r}")
    roles = tuple(r for r in match["role"].split("+") if r)
    raw_nodes = match["nodes"].strip("[]")
    nodes = tuple(n.strip() for n in raw_nodes.split(",") if n.strip() and n.strip() != "*")
    places = _parse_places(match["places"].strip(), text)
    if not roles and not nodes:
        raise ProgramError(f"place group: expected a role or a node, got {text!r}")
    return PlaceGroup(roles, nodes, places)


def _parse_places(text: str, whole: str) -> tuple:
    if text in ("", "*"):
        return ()
    match = _PLACES.match(text)
    if match is None:
        raise ProgramError(f"place group {whole!r}: expected places as device:[ids] (e.g. "
                           f"cpu:[0,1]), got {text!r}")
    if match["one"]:
        return (match["one"],)
    return tuple(f"{match['device']}:{int(i)}" for i in match["ids"].split(",") if i.strip())


def format_place_group(group: PlaceGroup | None) -> str:
    """The string form ``parse_place_group`` reads (``-`` for no place group)."""
    if group is None:
        return "-"
    nodes = "*" if not group.nodes else group.nodes[0] if len(group.nodes) == 1 else \
        "[" + ",".join(group.nodes) + "]"
    devices: dict[str, list[str]] = {}
    for place in group.places:
        device, _, index = place.partition(":")
        devices.setdefault(device, []).append(index)
    places = "+".join(f"{d}:[{','.join(ids)}]" for d, ids in devices.items()) or "*"
    return f"{'+'.join(group.roles)}/{nodes}/{places}"


def as_place_group(value) -> PlaceGroup | None:
    """A PlaceGroup from a PlaceGroup, its string form or None."""
    if value is None or isinstance(value, PlaceGroup):
        return value
    return parse_place_group(value)


def replicated(group: PlaceGroup) -> bool:
    """A role without nodes: every rank of the role (replication), not named ranks."""
    return not group.nodes


@dataclass(frozen=True)
class Cluster:
    """Roles and endpoints of the ranks of ``comm`` (``comm`` may be None for planning and
    printing only).  ``roles``: role -> its ranks; ``endpoints``: one per rank."""

    roles: dict
    endpoints: tuple
    comm: object = None

    def __post_init__(self) -> None:
        size = len(self.endpoints)
        seen: dict[int, str] = {}
        for role, ranks in self.roles.items():
            if not ranks:
                raise ProgramError(f"cluster: role {role!r} has no ranks; expected at least "
                                   f"one (a {role} the program places work on would never "
                                   f"run it)")
            for rank in ranks:
                if not 0 <= rank < size:
                    raise ProgramError(f"cluster: role {role!r} names rank {rank}, expected "
                                       f"0 <= rank < {size}")
                if rank in seen:
                    raise ProgramError(f"cluster: rank {rank} is both {seen[rank]!r} and "
                                       f"{role!r}")
                seen[rank] = role
        if len(seen) != size:
            missing = sorted(set(range(size)) - set(seen))
            raise ProgramError(f"cluster: every rank needs a role; ranks {missing} have none")
        if len(set(self.endpoints)) != size:
            raise ProgramError(f"cluster: endpoints must differ, got {list(self.endpoints)}")
        if self.comm is not None and self.comm.size != size:
            raise ProgramError(f"cluster: expected a communicator of {size} ranks (the roles' "
                               f"total), got {self.comm.size}")

    @classmethod
    def from_spec(cls, spec: str, comm=None, endpoints=None, size: int | None = None) -> Cluster:
        """``"trainer:2,pserver:1"``: roles in order over the ranks of ``comm`` (or ``size``
        ranks when planning without one).  ``endpoints``: one ``host:port`` per rank."""
        roles: dict[str, tuple] = {}
        start = 0
        for part in [p.strip() for p in spec.split(",") if p.strip()]:
            name, _, count = part.partition(":")
            if not name or not count.strip().isdigit():
                raise ProgramError(f"roles: expected 'role:count,...' (e.g. "
                                   f"'trainer:2,pserver:1'), got {spec!r}")
            if name in roles:
                raise ProgramError(f"roles: role {name!r} given twice in {spec!r}")
            roles[name] = tuple(range(start, start + int(count)))
            start += int(count)
        if not roles:
            raise ProgramError(f"roles: expected at least one role, got {spec!r}")
        total = comm.size if comm is not None else size if size is not None else start
        if start != total:
            raise ProgramError(f"roles: {spec!r} names {start} ranks, expected {total} (the "
                               f"communicator's size)")
        if endpoints is None:
            endpoints = [f"127.0.0.1:{BASE_PORT + rank}" for rank in range(total)]
        elif isinstance(endpoints, str):
            endpoints = [e.strip() for e in endpoints.split(",") if e.strip()]
        if len(endpoints) != total:
            raise ProgramError(f"endpoints: expected one per rank ({total}), got "
                               f"{len(endpoints)}")
        return cls(roles, tuple(endpoints), comm)

    @classmethod
    def from_env(cls, comm) -> Cluster:
        """The cluster ``python -m aluminum.run --roles ...`` gave this job."""
        spec = os.environ.get(ROLES_ENV)
        if not spec:
            raise ProgramError(f"{ROLES_ENV}: not set; start the job with python -m "
                               "aluminum.run --roles trainer:2,pserver:1, or make a Cluster "
                               "in code (Cluster.from_spec)")
        return cls.from_spec(spec, comm, os.environ.get(ENDPOINTS_ENV) or None)

    @property
    def size(self) -> int:
        return len(self.endpoints)

    def role_of(self, rank: int) -> str:
        return next(role for role, ranks in self.roles.items() if rank in ranks)

    def rank_of(self, endpoint: str) -> int:
        try:
            return self.endpoints.index(endpoint)
        except ValueError:
            raise ProgramError(f"node {endpoint!r}: not in the cluster (endpoints: "
                               f"{', '.join(self.endpoints)})") from None

    def ranks(self, group: PlaceGroup, what: str = "place group") -> tuple:
        """The ranks ``group`` resolves to, ascending; ``ProgramError`` for an unknown role
        or node, or a node of another role than the group names."""
        for role in group.roles:
            if role not in self.roles:
                raise ProgramError(f"{what}: role {role!r} has no ranks in this cluster "
                                   f"(roles: {', '.join(f'{r}:{len(v)}' for r, v in self.roles.items())})")
        if replicated(group):
            return tuple(sorted(r for role in group.roles for r in self.roles[role]))
        ranks = []
        for node in group.nodes:
            rank = self.rank_of(node)
            if group.roles and self.role_of(rank) not in group.roles:
                raise ProgramError(f"{what}: node {node!r} is a {self.role_of(rank)} "
                                   f"(rank {rank}), expected a {'/'.join(group.roles)}")
            ranks.append(rank)
        return tuple(sorted(set(ranks)))

    def group(self, role: str, rank: int | None = None, places=("cpu:0",)) -> PlaceGroup:
        """The PlaceGroup of ``role`` replicated, or of one of its ranks (placement)."""
        nodes = () if rank is None else (self.endpoints[rank],)
        return PlaceGroup((role,), nodes, tuple(places))

    def describe(self) -> str:
        return ", ".join(f"{role}:{list(ranks)}" for role, ranks in self.roles.items())
