"""Backend registry: each backend registers by name the operations and algorithms it offers.

A backend's table maps an operation name (``"allreduce"``, one of the op table's,
aluminum/core/ops.py) to its algorithms, each one
``State`` class (engine/state.py) serving both the blocking and the nonblocking call.  Backend
modules are imported on first use, so a machine without cupy never imports the NCCL backend.

Besides operations a backend provides services (backends/services.py: process groups, the
library's own small collectives, node-shared counters); the API layer reaches backends only
through this package (``get_backend``, ``get_services``), never a backend's modules.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from ..core.errors import UnsupportedError
from ..core.names import Algorithm, Device
from ..core.ops import check_registry
from .runtime.host import HostStream   # (re-exported: al.HostStream)
from .services import Group, NodeBoard, Services

_MODULES = {"mpi": ".mpi.backend", "ht": ".ht", "nccl": ".nccl"}
_REGISTRY: dict[str, "Backend"] = {}
_SERVICE_MODULES = {"mpi": ".mpi.services"}
_SERVICES: dict[str, Services] = {}
DEFAULT_SERVICES = "mpi"   # what al.init makes the default group with

# How blocking calls of a stream-ordered backend that offers the choice (host transfer) wait:
# "stream" (return at once, the stream waits) or "host" (the caller waits); comm.scratch key.
BLOCKING_MODE_KEY = "blocking_mode"
BLOCKING_MODES = ("stream", "host")

# select(comm, backend, op, nbytes, inplace) -> the State class the API's selector picks for
# ``op`` on ``backend`` (a Backend) over ``comm``'s ranks, nonblocking: for backends that run
# another backend's operations (the host-transfer one runs MPI's on staged buffers).
# Installed by the API layer, which this layer may not import.
_select = None


def select_algorithms_with(select) -> None:
    """Install the API's algorithm selector (see ``_select``); None: backends' defaults."""
    global _select
    _select = select


def selected_state(comm, backend_name: str, op: str, nbytes: int, inplace: bool) -> type:
    """The State class that runs ``op`` on backend ``backend_name`` for ``comm``, as the
    installed selector picks it for ``nbytes`` and the placement; the backend's default
    algorithm where none is installed."""
    backend = get_backend(backend_name)
    if _select is None:
        return backend.default_state(op)
    return _select(comm, backend, op, nbytes, inplace)


@dataclass(eq=False)
class Backend:
    """A named set of operations.

    ``ops[op][algo]`` is the ``State`` class implementing ``op`` with ``algo``;
    ``default_algorithm`` is what the API's selector falls back to where its table says
    nothing; ``uses_streams`` says whether operations are ordered on a stream; ``devices``
    lists the buffer locations it accepts (``Device`` members).  ``default_stream()`` gives the
    stream a communicator binds when built with ``stream=None``; ``setup(comm)`` runs once
    per new communicator (e.g. the NCCL unique-id bootstrap) and may keep resources with
    ``comm.scratch``; ``allocate_shared(comm, nbytes)`` returns a uint8 array in memory the
    node's ranks share (``al.shared_empty``), None where the backend has no such memory.
    ``services`` names the services (``get_services``) its communicators' groups are made
    with: MPI's for every backend today (host-transfer and NCCL bootstrap over MPI).
    """

    name: str
    ops: dict[str, dict[Algorithm, type]] = field(default_factory=dict)
    default_algorithm: Algorithm | None = None
    uses_streams: bool = False
    devices: frozenset[Device] = frozenset({Device.HOST})
    default_stream: Callable[[], Any] | None = None
    setup: Callable[[Any], None] | None = None
    allocate_shared: Callable[[Any, int], Any] | None = None
    services: str = "mpi"

    def algorithms(self, op: str) -> list[Algorithm]:
        """Names accepted by ``algo=`` for ``op`` (besides ``"automatic"``)."""
        return list(self._table(op))

    def state_class(self, op: str, algo: str) -> type:
        """The State class that runs ``op`` with the algorithm named ``algo`` (never
        "automatic": the API asks its selector first, see ``aluminum.tuning.selector.choose``)."""
        table = self._table(op)
        cls = table.get(algo)
        if cls is None:
            raise UnsupportedError(f"algo: {op} on the {self.name} backend offers "
                                   f"{', '.join(table)} or automatic, got {algo!r}")
        return cls

    def default_for(self, op: str) -> Algorithm:
        """The name of ``op``'s default algorithm (the first listed where
        ``default_algorithm`` does not implement it)."""
        table = self._table(op)
        return self.default_algorithm if self.default_algorithm in table else next(iter(table))

    def default_state(self, op: str) -> type:
        """The State class of ``op``'s default algorithm."""
        return self.state_class(op, self.default_for(op))

    def _table(self, op: str) -> dict[Algorithm, type]:
        table = self.ops.get(op)
        if not table:
            raise UnsupportedError(f"the {self.name} backend does not implement {op}")
        return table


def register_backend(backend: Backend) -> None:
    """Make ``backend`` available to communicators under ``backend.name``; its operations
    must be the op table's (``al.ArgumentError`` otherwise)."""
    check_registry(backend.name, backend.ops)
    _REGISTRY[backend.name] = backend


def get_backend(name: str) -> Backend:
    """The registered backend ``name``, importing its module on first use."""
    backend = _REGISTRY.get(name)
    if backend is None:
        module = _MODULES.get(name)
        if module is None:
            raise UnsupportedError(f"backend: expected one of {', '.join(_MODULES)}, got {name!r}")
        importlib.import_module(module, __name__)
        backend = _REGISTRY.get(name)
        if backend is None:
            raise UnsupportedError(f"backend: module for {name!r} registered nothing")
    return backend


def register_services(services: Services) -> None:
    """Make ``services`` available under ``services.name``."""
    _SERVICES[services.name] = services


def get_services(name: str) -> Services:
    """The registered services ``name``, importing their module on first use (which starts
    no transport: ``Services.start`` does)."""
    services = _SERVICES.get(name)
    if services is None:
        module = _SERVICE_MODULES.get(name)
        if module is None:
            raise UnsupportedError(f"services: expected one of {', '.join(_SERVICE_MODULES)}, "
                                   f"got {name!r}")
        importlib.import_module(module, __name__)
        services = _SERVICES[name]
    return services


def backend_names() -> list[str]:
    return list(_MODULES)
