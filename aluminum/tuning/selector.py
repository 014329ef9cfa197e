"""Choose a collective algorithm from a measured tuning table (the paper's "minimal").

Table format ``aluminum-tuning/1`` (shared/DESIGN.md §4)::

    {"format": "aluminum-tuning/1", "created": ..., "host": ..., "mpi": ...,
     "ranks_per_node": 2, "note": ...,                      # metadata, all optional
     "model": {"alpha": 2e-6, "beta": 1.5e-10},             # optional, cost-model fallback
     "rules": [{"backend": "mpi", "op": "allreduce", "comm_size": 2,
                "by_bytes": [[0, "recursive_doubling"], [65536, "shared_memory"]]}]}

A rule may carry ``"placement": "inplace"`` or ``"outofplace"`` (our extension of the format:
tables without it read as before): it then applies to calls of that kind only, and takes
precedence over a rule without placement for the same (backend, op, comm_size).  Libraries
differ by placement (Open MPI's allreduce of 64-512 KiB on 2 ranks here is up to 2x faster in
place than out of place), so the fastest algorithm may too.  Likewise ``"mode":
"nonblocking"`` (or ``"blocking"``) limits a rule to the nonblocking (blocking) form of the
operation and takes precedence over placement: a nonblocking call runs another code path
(Open MPI's libnbc ``MPI_Iallreduce`` reduces and broadcasts whole vectors on fewer than 4
ranks, 1.9-2.9x slower than its blocking ``MPI_Allreduce`` at 1-16 MiB here), so its
fastest algorithm may differ.  And ``"buffers": "shared"`` (or ``"private"``) limits a rule to
calls on communicators where ``al.shared_empty`` allocated buffers (or none): ``shared_memory``
reduces such buffers without copies, far faster than anything else from about 64 KiB, while
on private buffers it stages them and may lose to MPI's own allreduce well beyond that.  The
selector cannot see whether a call's own buffers are shared: every rank must choose alike,
and one rank's buffers may be shared while another's are not.  Whether the communicator has
shared buffers, every rank knows alike (``shared_empty`` is collective; it drops every rank's
remembered plans of that communicator, so that later calls choose again).  A buffers key
outranks a placement and is outranked by a mode.

Where the table comes from, first usable wins: ``$AL_TUNING_FILE``, then ``user_table_path()``
(``$XDG_CACHE_HOME/aluminum/tuning.json`` or ``~/.cache/aluminum/tuning.json``; silently
skipped when absent), then the table shipped in ``aluminum/data/default_tuning.json``. A table
that cannot be used (unreadable, not a regular file, over 16 MiB, bad JSON, wrong format
version, malformed rule, thresholds not strictly ascending, an algorithm its backend does not
know) is rejected as a whole with a ``TuningTableWarning`` naming the file, the problem and the
fallback; selection never raises because of a table. Rules for a backend
this machine cannot load (a GPU table on a CPU host) are kept, unchecked and never used.

Selection for (backend, op, comm_size, nbytes):

- the rule of that comm size for the call's mode, buffers and placement (the most specific:
  a mode beats buffers, which beat a placement, which beats neither), or of the nearest
  measured comm size (ties go to the smaller);
  the entry with the nearest threshold <= nbytes wins; below the first threshold the table
  says nothing and the caller's ``default`` is returned (Open MPI's rule-file semantics);
- no rule at all for (backend, op): the α-β model (``aluminum.tuning.costmodel``) picks among the
  algorithms the backend reports through ``set_known_algorithms`` that the model knows, with
  the table's ``model`` parameters (else ``DEFAULT_ALPHA``/``DEFAULT_BETA``);
- otherwise ``default``.

Decisions are cached per (backend, op, comm_size, nbytes, default, placement, mode, nodes,
buffers); a hit is one dict lookup.
"""

from __future__ import annotations

import json
import re
import operator
import os
import stat
import threading
import warnings
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection

from . import costmodel, two_level_model
from ..backends import select_algorithms_with
from ..core.errors import AluminumError, ArgumentError
from ..core.names import Algorithm, Buffers, Mode, Placement
from ..core.ops import OPS
from ..core.pieces import read_inter_node_beta

FORMAT = "aluminum-tuning/1"
# Fitted to an mpi4py ping-pong between two ranks on the 2-core development machine.
DEFAULT_ALPHA = 2e-6
DEFAULT_BETA = 1.5e-10
SHIPPED_TABLE_PATH = Path(__file__).resolve().parent.parent / "data" / "default_tuning.json"
_CACHE_LIMIT = 1 << 16

KnownAlgorithms = Callable[[str, str], Collection[str]]
_reload_hooks: list[Callable[[], None]] = []


class TuningTableError(AluminumError, ValueError):
    """A tuning table that cannot be used; the message says where in it and why."""


class TuningTableWarning(UserWarning):
    """A tuning table was rejected and the selector fell back to the next source."""


@dataclass(frozen=True)
class Rule:
    """Algorithms by ascending byte threshold for one (backend, op, comm_size)."""

    backend: str
    op: str
    comm_size: int
    by_bytes: tuple[tuple[int, str], ...]
    placement: Placement | None = None   # None: both
    mode: Mode | None = None             # None: both
    nodes: int | None = None             # None: measured on one node (only used there)
    buffers: Buffers | None = None       # None: both

    def choose(self, nbytes: int) -> str | None:
        """Return the algorithm of the nearest threshold <= nbytes; None below the first."""
        i = bisect_right(self.by_bytes, nbytes, key=operator.itemgetter(0))
        return self.by_bytes[i - 1][1] if i else None


@dataclass(frozen=True)
class Table:
    """A validated tuning table: rules, cost-model parameters, metadata and where it came from."""

    rules: tuple[Rule, ...] = ()
    model: costmodel.AlphaBeta | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    source: str = "<none>"
    inter_model: costmodel.AlphaBeta | None = None   # between nodes (two_level_model)

    def rules_for(self, backend: str, op: str, placement: str | None = None,
                  mode: str | None = None, nodes: int = 1,
                  buffers: str | None = None) -> dict[int, Rule]:
        """Return the rules of (backend, op) keyed by comm size: per size the most specific
        rule that applies to calls of ``placement``, ``mode`` and ``buffers`` (None:
        unknown, only rules without that key apply); a matching mode outranks matching
        buffers, which outrank a matching placement.  On one node only rules without
        ``nodes`` apply; on several, those of the nearest node count."""
        measured = {rule.nodes for rule in self.rules
                    if rule.backend == backend and rule.op == op and rule.nodes is not None}
        wanted = None if nodes == 1 else _nearest(measured, nodes) if measured else -1
        chosen: dict[int, tuple[tuple[bool, bool, bool], Rule]] = {}
        for rule in self.rules:
            if rule.backend == backend and rule.op == op and rule.nodes == wanted \
                    and rule.placement in (None, placement) and rule.mode in (None, mode) \
                    and rule.buffers in (None, buffers):
                rank = (rule.mode is not None, rule.buffers is not None,
                        rule.placement is not None)
                if rule.comm_size not in chosen or rank > chosen[rule.comm_size][0]:
                    chosen[rule.comm_size] = (rank, rule)
        return {size: rule for size, (_, rule) in chosen.items()}

    def to_json(self) -> dict[str, Any]:
        """Return the table as an ``aluminum-tuning/1`` JSON object."""
        data: dict[str, Any] = {"format": FORMAT, **self.metadata}
        if self.model is not None:
            data["model"] = {"alpha": self.model.alpha, "beta": self.model.beta}
        if self.inter_model is not None:
            data["inter_model"] = {"alpha": self.inter_model.alpha,
                                   "beta": self.inter_model.beta}
        data["rules"] = [{"backend": r.backend, "op": r.op, "comm_size": r.comm_size,
                          **({"nodes": r.nodes} if r.nodes else {}),
                          **({"placement": r.placement} if r.placement else {}),
                          **({"mode": r.mode} if r.mode else {}),
                          **({"buffers": r.buffers} if r.buffers else {}),
                          "by_bytes": [list(e) for e in r.by_bytes]} for r in self.rules]
        return data


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean",
             int: "integer", float: "number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _require(data: dict[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in data:
        raise TuningTableError(f"{where}: missing key {key!r}")
    value = data[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise TuningTableError(f"{where}.{key}: expected {kind.__name__}, "
                               f"got {_json_type(value)} {value!r}")
    return value


def _parse_model(raw: Any, where: str = "model") -> costmodel.AlphaBeta:
    if not isinstance(raw, dict):
        raise TuningTableError(f"{where}: expected an object, got {_json_type(raw)}")
    values = []
    for key in ("alpha", "beta"):
        if key not in raw:
            raise TuningTableError(f"{where}: missing key {key!r}")
        value = raw[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise TuningTableError(f"{where}.{key}: expected a number >= 0, got {value!r}")
        values.append(float(value))
    return costmodel.AlphaBeta(*values)


def _parse_rule(where: str, raw: Any, known: KnownAlgorithms | None) -> Rule:
    if not isinstance(raw, dict):
        raise TuningTableError(f"{where}: expected an object, got {_json_type(raw)}")
    backend = _require(raw, "backend", str, where)
    op = _require(raw, "op", str, where)
    if op not in OPS:
        raise TuningTableError(f"{where}.op: expected an operation of the op table "
                               f"({', '.join(OPS)}), got {op!r}")
    comm_size = _require(raw, "comm_size", int, where)
    if comm_size < 1:
        raise TuningTableError(f"{where}.comm_size: expected an integer >= 1, got {comm_size}")
    placement = _member(Placement, raw, "placement", where)
    mode = _member(Mode, raw, "mode", where)
    buffers = _member(Buffers, raw, "buffers", where)
    nodes = raw.get("nodes")
    if nodes is not None and (type(nodes) is not int or nodes < 2):
        raise TuningTableError(f"{where}.nodes: expected an integer >= 2 (a rule measured "
                               f"across that many nodes) or no key, got {nodes!r}")
    entries = _require(raw, "by_bytes", list, where)
    if not entries:
        raise TuningTableError(f"{where}.by_bytes: expected at least one [bytes, algorithm]")
    by_bytes: list[tuple[int, str]] = []
    for j, entry in enumerate(entries):
        here = f"{where}.by_bytes[{j}]"
        if (not isinstance(entry, list) or len(entry) != 2 or isinstance(entry[0], bool)
                or not isinstance(entry[0], int) or not isinstance(entry[1], str)):
            raise TuningTableError(f"{here}: expected [bytes (integer), algorithm (string)], "
                                   f"got {entry!r}")
        if entry[0] < 0:
            raise TuningTableError(f"{here}: expected a threshold >= 0, got {entry[0]}")
        if by_bytes and entry[0] <= by_bytes[-1][0]:
            raise TuningTableError(f"{here}: thresholds must strictly ascend, got {entry[0]} "
                                   f"after {by_bytes[-1][0]}")
        by_bytes.append((entry[0], entry[1]))
    if known is not None:
        try:
            names: set[str] | None = set(known(backend, op))
        except Exception:  # noqa: BLE001 - registries reject unknown backends their own way
            # The table may come from a machine with more backends (NCCL); a rule for one
            # that cannot be loaded here is never consulted, so it is kept unchecked.
            names = None
        unknown = [] if names is None else sorted({algo for _, algo in by_bytes} - names)
        if unknown:
            raise TuningTableError(f"{where}: unknown {op} algorithm(s) {unknown} for backend "
                                   f"{backend!r}; expected one of {sorted(names)}")
    return Rule(backend, op, comm_size, tuple(by_bytes), placement, mode, nodes, buffers)


def parse_table(data: Any, source: str = "<memory>",
                known_algorithms: KnownAlgorithms | None = None) -> Table:
    """Validate a decoded JSON table and return it; raise TuningTableError saying what is wrong.

    Algorithm names are checked when `known_algorithms(backend, op)` is given and answers;
    a rule whose (backend, op) it raises for is kept unchecked."""
    if not isinstance(data, dict):
        raise TuningTableError(f"expected a JSON object at top level, got {_json_type(data)}")
    if "format" not in data:
        raise TuningTableError(f"missing key 'format' (expected {FORMAT!r})")
    if data["format"] != FORMAT:
        raise TuningTableError(f"format: expected {FORMAT!r}, got {data['format']!r}")
    raw_rules = _require(data, "rules", list, "table")
    rules: list[Rule] = []
    seen: dict[tuple, int] = {}
    for i, raw in enumerate(raw_rules):
        rule = _parse_rule(f"rules[{i}]", raw, known_algorithms)
        key = (rule.backend, rule.op, rule.comm_size, rule.placement, rule.mode, rule.nodes,
               rule.buffers)
        if key in seen:
            placement = "" if key[3] is None else f", placement {key[3]!r}"
            mode = "" if key[4] is None else f", mode {key[4]!r}"
            nodes = "" if key[5] is None else f", nodes {key[5]}"
            buffers = "" if key[6] is None else f", buffers {key[6]!r}"
            raise TuningTableError(f"rules[{i}]: duplicates rules[{seen[key]}] for backend "
                                   f"{key[0]!r}, op {key[1]!r}, comm_size {key[2]}{placement}"
                                   f"{mode}{nodes}{buffers}")
        seen[key] = i
        rules.append(rule)
    model = _parse_model(data["model"]) if "model" in data else None
    inter = _parse_model(data["inter_model"], "inter_model") if "inter_model" in data else None
    metadata = {k: v for k, v in data.items()
                if k not in ("format", "rules", "model", "inter_model")}
    return Table(tuple(rules), model, metadata, source, inter)


def read_table(path: str | os.PathLike[str],
               known_algorithms: KnownAlgorithms | None = None) -> Table:
    """Read and validate the table at `path`; raise TuningTableError on any problem.

    Only a regular file of at most ``MAX_TABLE_BYTES`` is read, and never more than that:
    ``/dev/zero``, a FIFO or a directory would otherwise be read without bound."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would wait for a writer.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise TuningTableError(f"expected a regular file, got {_file_kind(mode)}")
            with os.fdopen(fd, "rb") as file:
                fd = None
                raw = file.read(MAX_TABLE_BYTES + 1)
        finally:
            if fd is not None:
                os.close(fd)
        if len(raw) > MAX_TABLE_BYTES:
            raise TuningTableError(f"expected at most {MAX_TABLE_BYTES} bytes, got more")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TuningTableError(f"cannot read it ({type(exc).__name__}: {exc})") from exc
    _check_shape(text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TuningTableError(f"not valid JSON ({exc})") from exc
    return parse_table(data, str(path), known_algorithms)


MAX_TABLE_CHARS = 4 << 20     # tables the tuner writes are a few KiB
MAX_TABLE_BYTES = 4 * MAX_TABLE_CHARS   # (UTF-8: at most 4 bytes a character)
MAX_TABLE_DEPTH = 16          # the format nests 5 deep
_JSON_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_BRACKET = re.compile(r"[\[\]{}]")


def _file_kind(mode: int) -> str:
    """What a path that is not a regular file is, for the warning."""
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def _check_shape(text: str) -> None:
    """Refuse a table too large or nested too deep before parsing it: ``json.loads`` on a
    few KiB of brackets raises RecursionError, which would crash the caller."""
    if len(text) > MAX_TABLE_CHARS:
        raise TuningTableError(f"expected at most {MAX_TABLE_CHARS} characters, got "
                               f"{len(text)}")
    depth = deepest = 0
    for bracket in _BRACKET.findall(_JSON_STRING.sub('""', text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    if deepest > MAX_TABLE_DEPTH:
        raise TuningTableError(f"expected JSON nested at most {MAX_TABLE_DEPTH} deep, got "
                               f"{deepest}")


def write_table(table: Table, path: str | os.PathLike[str]) -> Path:
    """Write `table` as JSON to `path` atomically (creating its directory); return the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(table.to_json(), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, target)
    return target


def user_table_path() -> Path:
    """Return the per-user table location the tuner writes and the selector reads."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "aluminum" / "tuning.json"


_cache: dict[tuple, str] = {}
_table: Table | None = None
_measured_inter: costmodel.AlphaBeta | None = None   # the link al.init() measured


def _backend_algorithms(backend: str, op: str) -> list[str]:
    from ..backends import get_backend

    return get_backend(backend).algorithms(op)


_known: KnownAlgorithms | None = _backend_algorithms
_lock = threading.RLock()


def _sources() -> list[tuple[Path, str]]:
    """Return the table locations to try, in order, each with where it came from."""
    sources: list[tuple[Path, str]] = []
    env = os.environ.get("AL_TUNING_FILE")
    if env:
        sources.append((Path(env), "AL_TUNING_FILE"))
    user = user_table_path()
    if user.exists():
        sources.append((user, "user cache"))
    sources.append((SHIPPED_TABLE_PATH, "shipped default"))
    return sources


def _load() -> Table:
    sources = _sources()
    for i, (path, origin) in enumerate(sources):
        try:
            return read_table(path, _known)
        except TuningTableError as exc:
            if i + 1 < len(sources):
                fallback = f"the {sources[i + 1][1]} table {sources[i + 1][0]}"
            else:
                fallback = "no table (the α-β cost model where it applies, else each default)"
            warnings.warn(f"aluminum: ignoring tuning table {path} (from {origin}): {exc}; "
                          f"falling back to {fallback}", TuningTableWarning)
    return Table()


def current_table() -> Table:
    """Return the table in use, loading it on first call (never raises for a bad table)."""
    global _table
    with _lock:
        if _table is None:
            _table = _load()
        return _table


def inter_node_model() -> tuple[costmodel.AlphaBeta, str]:
    """The α, β of the link between nodes that selection, the hierarchical allreduce's
    chunks and the pieces of messages between nodes go by, and where they come from: the
    table's ``inter_model`` (``"tuning table"``), else what ``al.init()`` measured on a job
    spanning nodes (``"measured"``; ``AL_LINK_PROBE=0`` turns that off), else the two-level
    model's 1 Gbit/s (``"default"``)."""
    return _inter_of(current_table())


def _inter_of(table: Table) -> tuple[costmodel.AlphaBeta, str]:
    if table.inter_model is not None:
        return table.inter_model, "tuning table"
    if _measured_inter is not None:
        return _measured_inter, "measured"
    return two_level_model.DEFAULT_INTER, "default"


def inter_node_beta() -> float:
    """Seconds per byte between nodes (``inter_node_model``)."""
    return inter_node_model()[0].beta


def link_probe_wanted() -> bool:
    """Whether ``al.init()`` should measure the link between nodes: no table says what it is
    and ``AL_LINK_PROBE`` is not ``0`` (or ``false``, ``off``, ``no``)."""
    setting = os.environ.get("AL_LINK_PROBE", "").strip().lower()
    return setting not in ("0", "false", "off", "no") and current_table().inter_model is None


def use_measured_link(alpha_beta: tuple[float, float] | None) -> None:
    """Go by ``(α, β)`` between nodes where no table says (what ``al.init()`` measured; the
    same on every rank); None forgets it.  Drops the table and cached decisions, as
    ``reload()``."""
    global _measured_inter
    with _lock:
        _measured_inter = None if alpha_beta is None else costmodel.AlphaBeta(*alpha_beta)
        reload()


read_inter_node_beta(inter_node_beta)


def reload() -> None:
    """Forget the table and every cached decision; the next selection rereads the environment."""
    global _table
    with _lock:
        _table = None
        _cache.clear()
        for hook in _reload_hooks:
            hook()


def on_reload(hook: Callable[[], None]) -> None:
    """Call ``hook()`` whenever cached decisions are dropped (callers caching choices)."""
    _reload_hooks.append(hook)


def set_known_algorithms(known: KnownAlgorithms | None) -> KnownAlgorithms | None:
    """Register `known(backend, op) -> names` for validation and the model; return the old one.

    Drops the loaded table and cache, so the table is revalidated against it."""
    global _known
    with _lock:
        previous, _known = _known, known
        reload()
    return previous


def _member(names: type, raw: dict, key: str, where: str):
    """``raw[key]`` as a member of the string enum ``names``; None when absent."""
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or value not in names._value2member_map_:
        raise TuningTableError(f"{where}.{key}: expected one of {[str(n) for n in names]} or "
                               f"no key, got {value!r}")
    return names(value)


def _nearest(sizes: Collection[int], comm_size: int) -> int:
    return min(sizes, key=lambda s: (abs(s - comm_size), s))


def placement_of(inplace: bool | None) -> Placement | None:
    """The rule placement of a call in place or not; None when unknown."""
    return None if inplace is None else Placement.INPLACE if inplace else Placement.OUTOFPLACE


def mode_of(nonblocking: bool | None) -> Mode | None:
    """The rule mode of a blocking or nonblocking call; None when unknown."""
    return None if nonblocking is None else Mode.NONBLOCKING if nonblocking else Mode.BLOCKING


def buffers_of(shared: bool | None) -> Buffers | None:
    """The rule buffers of a call on a communicator with shared buffers or not; None when
    unknown."""
    return None if shared is None else Buffers.SHARED if shared else Buffers.PRIVATE


def _decide(table: Table, backend: str, op: str, comm_size: int, nbytes: int,
            default: str, inplace: bool | None, nonblocking: bool | None,
            nodes: tuple[int, int] | None = None, shared: bool | None = None) -> str:
    rules = table.rules_for(backend, op, placement_of(inplace), mode_of(nonblocking),
                            1 if nodes is None else nodes[0], buffers_of(shared))
    if rules:
        return rules[_nearest(rules, comm_size)].choose(nbytes) or default
    if nodes is not None:
        return _decide_across_nodes(table, backend, op, comm_size, nbytes, default, nodes)
    if _known is None:
        return default
    try:
        known = set(_known(backend, op))
    except Exception:  # noqa: BLE001 - the backend or op is not registered: nothing to model
        return default
    candidates = [a for a in costmodel.algorithms(op) if a in known]
    if not candidates:
        return default
    model = table.model or costmodel.AlphaBeta(DEFAULT_ALPHA, DEFAULT_BETA)
    return costmodel.best(op, comm_size, nbytes, model.alpha, model.beta, candidates)


def _decide_across_nodes(table: Table, backend: str, op: str, comm_size: int, nbytes: int,
                         default: str, nodes: tuple[int, int]) -> str:
    """No rule measured across nodes: the two-level model picks an algorithm for the ops
    it models (allreduce, reduce, bcast, allgather; with the table's ``model`` inside nodes
    and ``inter_model`` between them), among those that run on nodes of ``nodes[1]`` ranks
    (0: nodes of different sizes)."""
    if op not in two_level_model.ALGORITHMS or _known is None:
        return default
    try:
        known = set(_known(backend, op))
    except Exception:  # noqa: BLE001 - the backend or op is not registered: nothing to model
        return default
    count, local = nodes
    candidates = [a for a in two_level_model.ALGORITHMS[op] if a in known
                  and (local or a != "hierarchical")]
    if not candidates:
        return default
    intra = table.model or costmodel.AlphaBeta(DEFAULT_ALPHA, DEFAULT_BETA)
    inter = _inter_of(table)[0]
    # Nodes of different sizes: modelled as nodes of the largest size (what the busiest
    # node's link carries).
    local = local or -(-comm_size // count)
    return two_level_model.best(op, two_level_model.Nodes(count, local), nbytes, intra,
                                inter, candidates)


def _select_uncached(backend: str, op: str, comm_size: int, nbytes: int,
                     default: str, inplace: bool | None, nonblocking: bool | None,
                     nodes: tuple[int, int] | None = None, shared: bool | None = None) -> str:
    comm_size, nbytes = operator.index(comm_size), operator.index(nbytes)
    if comm_size < 1:
        raise ArgumentError(f"comm_size: expected an integer >= 1, got {comm_size}")
    if nbytes < 0:
        raise ArgumentError(f"nbytes: expected an integer >= 0, got {nbytes}")
    with _lock:
        algo = _decide(current_table(), backend, op, comm_size, nbytes, default, inplace,
                       nonblocking, nodes, shared)
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        _cache[(backend, op, comm_size, nbytes, default, inplace, nonblocking, nodes,
                shared)] = algo
    return algo


def select_algorithm(backend: str, op: str, comm_size: int, nbytes: int, default: str,
                     inplace: bool | None = None, nonblocking: bool | None = None,
                     nodes: tuple[int, int] | None = None, shared: bool | None = None) -> str:
    """Return the algorithm to run `op` on `backend` for comm_size ranks and nbytes bytes.

    `inplace`, `nonblocking`, `shared`: the call's placement and mode, and whether its
    communicator has shared buffers, for rules that depend on them (None: unknown, only
    rules without that key apply).  `nodes`: (node count, ranks per node, 0 if nodes
    differ) of a communicator spanning several nodes, None on one node: then only rules
    measured across nodes apply, else the two-level model.  `default` is
    returned where neither the table nor a cost model decides. Loads the table on first
    use; a bad table warns once per load and never raises here."""
    try:
        return _cache[(backend, op, comm_size, nbytes, default, inplace, nonblocking, nodes,
                       shared)]
    except KeyError:
        return _select_uncached(backend, op, comm_size, nbytes, default, inplace, nonblocking,
                                nodes, shared)


def choose(comm, op: str, algo: str, nbytes: int, inplace: bool | None = None,
           nonblocking: bool | None = None, backend=None) -> type:
    """The State class that runs ``op`` on ``backend`` (default ``comm``'s) with ``algo``;
    "automatic" asks ``select_algorithm`` with the call's placement and mode when known,
    and whether ``comm`` has shared buffers (``comm.shares_buffers``; False where it
    has no such attribute).

    An automatic choice of an algorithm that cannot run on ``comm``'s nodes (``runs_on``)
    falls back to the default: a table measured on one node must not break a multi-node
    job."""
    if backend is None:
        backend = comm.backend
    if algo != Algorithm.AUTOMATIC:
        return backend.state_class(op, algo)
    default = backend.default_for(op)
    chosen = select_algorithm(backend.name, op, comm.size, nbytes, default, inplace,
                              nonblocking, node_layout(comm),
                              getattr(comm, "shares_buffers", False))
    cls = backend.state_class(op, chosen)
    return cls if runs_on(comm, cls) else backend.state_class(op, default)


def _select_for_backends(comm, backend, op: str, nbytes: int, inplace: bool) -> type:
    """What a nonblocking call of ``op`` on ``backend`` over ``comm`` would run (for a
    backend running another's operations: the host-transfer one's staged MPI steps)."""
    return choose(comm, op, Algorithm.AUTOMATIC, nbytes, inplace, True, backend)


select_algorithms_with(_select_for_backends)


def node_layout(comm) -> tuple[int, int] | None:
    """(node count, ranks per node or 0 where nodes differ) of a communicator spanning
    nodes; None on one node."""
    nodes = getattr(comm, "nodes", ())
    if len(nodes) < 2:
        return None
    sizes = {len(node) for node in nodes}
    return len(nodes), sizes.pop() if len(sizes) == 1 else 0


def runs_on(comm, cls: type) -> bool:
    """Whether the algorithm ``cls`` can run on ``comm``'s nodes: ``single_node`` classes
    need every rank on one node, ``multi_node`` ones ranks on several nodes,
    ``uniform_nodes`` ones as many ranks on every node; ``needs_arrivals`` ones the
    communicator's arrival counters (``comm.arrivals``: alike on every rank)."""
    if getattr(cls, "single_node", False) and comm.local_size != comm.size:
        return False
    if getattr(cls, "needs_arrivals", False) and getattr(comm, "arrivals", None) is None:
        return False
    nodes = getattr(comm, "nodes", None)
    if getattr(cls, "multi_node", False) and len(nodes or ()) < 2:
        return False
    if getattr(cls, "uniform_nodes", False) and nodes is not None:
        return len({len(node) for node in nodes}) == 1
    return True
