"""The op table: each of aluminum's 18 operations declared once.

Every layer that must know something about an operation reads it here instead of keeping
its own list of names: the API wrappers and validation (which arguments are buffers, the
in-place rule), AL_DEBUG's fingerprints (which collectives have the same buffer on every
rank), the plans and the watchdog (collectives count arrivals, messages do not), the
selector and tracing (the op's name and family), the torch backend, and the backends'
registration (``check_registry``: a backend offers only operations of this table, by these
names).

Adding an operation: a row here, a module in ``aluminum/`` with the operation's own checks of
its buffers and its blocking docstring (``forms.public_forms`` makes the three public calls
from the row), one State per backend (registered under the row's name), and the op's case
list in the tests; ``docs/architecture.md`` walks through it.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable

from .errors import ArgumentError

__all__ = ["Family", "InPlace", "OpSpec", "OPS", "COLLECTIVES", "POINT_TO_POINT", "spec",
           "check_registry"]


class Family(str, enum.Enum):
    """Who takes part: every rank of the communicator, or the peers a call names."""
    COLLECTIVE = "collective"
    POINT_TO_POINT = "point_to_point"


class InPlace(str, enum.Enum):
    """How a call says "in place".

    ``OMITTED_RECVBUF``: ``recvbuf=None`` means the result overwrites ``buf`` (allreduce);
    ``ALWAYS``: one buffer, read and written (bcast, recv); ``NEVER``: the send and receive
    buffers are different arguments and may not be the same memory (gather's root, sendrecv);
    ``NONE``: no buffer at all (barrier)."""
    OMITTED_RECVBUF = "recvbuf=None"
    ALWAYS = "always"
    NEVER = "never"
    NONE = "no buffers"


@dataclass(frozen=True)
class OpSpec:
    """One operation: ``name`` (``al.<name>``, ``al.nonblocking_<name>``, ``al.<name>_init``);
    ``family``; ``reduction`` (takes ``op=``); ``rooted`` (takes ``root=``); ``vector`` (per-rank
    counts and displacements, the "v" variants), ``base`` (the operation a vector variant
    generalizes, else its own name); ``uniform`` (the first buffer has one dtype and count on
    every rank: AL_DEBUG compares it); ``in_place``; ``buffers`` (the API arguments that are
    buffers, in the order the plan cache sees them); ``arguments`` (the positional arguments
    before ``comm``, in order; by default the buffers but for a keyword ``recvbuf``);
    ``paired`` (the buffer arguments are lists of ``(buffer, peer)`` pairs, handed to the plan
    cache by a call the operation's module gives: multisendrecv).

    The three public calls take ``(*arguments, comm, stream=None, *, root=0, op=SUM,
    recvbuf=None, algo="automatic")``, keeping ``root`` where rooted, ``op`` where a reduction
    and ``recvbuf`` where ``in_place`` is ``OMITTED_RECVBUF`` (aluminum/forms.py writes them).
    An argument that is not a buffer is a layout (``layouts``: a name ending in ``counts`` or
    ``displs``, one integer per rank) or else a peer rank (``peers``: ``dest``, ``src``)."""
    name: str
    family: Family
    buffers: tuple[str, ...]
    in_place: InPlace
    reduction: bool = False
    rooted: bool = False
    vector: bool = False
    uniform: bool = False
    base: str = ""
    arguments: tuple[str, ...] | None = None
    paired: bool = False

    def __post_init__(self) -> None:
        if not self.base:
            object.__setattr__(self, "base", self.name)
        if self.arguments is None:
            object.__setattr__(self, "arguments", tuple(
                name for name in self.buffers if not self.keyword_recvbuf or name != "recvbuf"))

    @property
    def collective(self) -> bool:
        """True for collectives: every rank calls them in one order, arrivals are counted."""
        return self.family is Family.COLLECTIVE

    @property
    def keyword_recvbuf(self) -> bool:
        """True where ``recvbuf=`` is a keyword whose omission means "in place"."""
        return self.in_place is InPlace.OMITTED_RECVBUF

    @cached_property
    def layouts(self) -> tuple[str, ...]:
        """The arguments giving one integer per rank (``counts``, ``send_displs``, ...)."""
        return tuple(name for name in self.arguments
                     if name.endswith(("counts", "displs")) and name not in self.buffers)

    @cached_property
    def peers(self) -> tuple[str, ...]:
        """The arguments naming one peer rank (``dest``, ``src``)."""
        return tuple(name for name in self.arguments
                     if name not in self.buffers and name not in self.layouts)


_C, _P = Family.COLLECTIVE, Family.POINT_TO_POINT
_OMIT, _ALWAYS, _NEVER = InPlace.OMITTED_RECVBUF, InPlace.ALWAYS, InPlace.NEVER

OPS: dict[str, OpSpec] = {spec_.name: spec_ for spec_ in (
    OpSpec("allreduce", _C, ("buf", "recvbuf"), _OMIT, reduction=True, uniform=True),
    OpSpec("reduce", _C, ("buf", "recvbuf"), _OMIT, reduction=True, rooted=True, uniform=True),
    OpSpec("reduce_scatter", _C, ("buf", "recvbuf"), _OMIT, reduction=True, uniform=True),
    OpSpec("reduce_scatterv", _C, ("buf", "recvbuf"), _OMIT, reduction=True, vector=True,
           base="reduce_scatter", arguments=("buf", "counts")),
    OpSpec("allgather", _C, ("buf", "recvbuf"), _OMIT, uniform=True),
    OpSpec("allgatherv", _C, ("buf", "recvbuf"), _OMIT, vector=True, base="allgather",
           arguments=("buf", "counts", "displs")),
    OpSpec("alltoall", _C, ("buf", "recvbuf"), _OMIT, uniform=True),
    OpSpec("alltoallv", _C, ("buf", "recvbuf"), _OMIT, vector=True, base="alltoall",
           arguments=("buf", "send_counts", "send_displs", "recv_counts", "recv_displs")),
    OpSpec("bcast", _C, ("buf",), _ALWAYS, rooted=True, uniform=True),
    OpSpec("gather", _C, ("buf", "recvbuf"), _OMIT, rooted=True),
    OpSpec("gatherv", _C, ("buf", "recvbuf"), _OMIT, rooted=True, vector=True, base="gather",
           arguments=("buf", "counts", "displs")),
    OpSpec("scatter", _C, ("buf", "recvbuf"), _OMIT, rooted=True),
    OpSpec("scatterv", _C, ("buf", "recvbuf"), _OMIT, rooted=True, vector=True,
           base="scatter", arguments=("buf", "counts", "displs")),
    OpSpec("barrier", _C, (), InPlace.NONE),
    OpSpec("send", _P, ("buf",), _ALWAYS, arguments=("buf", "dest")),
    OpSpec("recv", _P, ("buf",), _ALWAYS, arguments=("buf", "src")),
    OpSpec("sendrecv", _P, ("sendbuf", "recvbuf"), _NEVER,
           arguments=("sendbuf", "dest", "recvbuf", "src")),
    OpSpec("multisendrecv", _P, ("sends", "recvs"), _NEVER, paired=True),
)}

COLLECTIVES = frozenset(name for name, op in OPS.items() if op.collective)
POINT_TO_POINT = frozenset(OPS) - COLLECTIVES
REDUCTIONS = frozenset(name for name, op in OPS.items() if op.reduction)
UNIFORM = frozenset(name for name, op in OPS.items() if op.uniform)


def spec(name: str) -> OpSpec:
    """The row of operation ``name``; ``al.ArgumentError`` naming the known ones otherwise."""
    try:
        return OPS[name]
    except (KeyError, TypeError):
        raise ArgumentError(f"op: expected one of {', '.join(OPS)}, got {name!r}") from None


def check_registry(backend: str, names: Iterable[str]) -> None:
    """Raise ``al.ArgumentError`` unless every name a backend registers is an operation of
    this table (a typo there would otherwise surface as "unsupported" on first use)."""
    unknown = sorted(set(names) - set(OPS))
    if unknown:
        raise ArgumentError(f"backend {backend!r} registers operations the op table does not "
                            f"declare: {', '.join(unknown)} (aluminum/core/ops.py)")
