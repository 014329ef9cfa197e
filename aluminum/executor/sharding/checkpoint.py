"""Strategy checkpoints: the strategies AUTO_PARALLEL chose, saved to a file and loaded
back (MindSpore's ``strategy_ckpt_save_file`` and ``strategy_ckpt_load_file``).

``set_parallel_context(parallel_mode=AUTO_PARALLEL, strategy_ckpt_save_file="s.json")``
writes every fc layer's strategy once the search has chosen; ``strategy_ckpt_load_file=``
gives the layers the file names their saved strategies, as if set by hand (``shard=``),
and the search chooses only the others.  What it is for: running again with the same
strategies.  The search's choice between strategies predicted within a few per cent of
each other follows this machine's calibration, which moves between runs on a busy
machine (docs/auto_parallel.md); a checkpoint pins it, and needs no search of the layers
it names.

The file (JSON; layers matched by their weight's name, so a file may be written or edited
by hand, and one naming only some layers pins only those)::

    {"format": "aluminum strategy checkpoint", "version": 1, "ranks": 4,
     "layers": [{"weight": "l0.w", "shape": [128, 128], "strategy": [[4, 1], [1, 1]]},
                ...],
     "estimate": {"step_seconds": 0.0071, "memory_bytes": 3901440}}

(``estimate`` is the search's, for the reader; loading ignores it.)

What surprises people: a loaded file is checked against the program before anything
runs, and a mismatch is the same ``ProgramError`` on every rank (rank 0 reads the file and
broadcasts it, so a path only rank 0 sees is enough): a file saved for another number of
ranks, a weight the program's fc chain does not have (its weights are listed), a weight
of another shape (the network changed), a strategy set by hand that differs from the
file's, a strategy not of the form ((m, k), (k, n)) with parts dividing the ranks.  Rank 0
writes a saved file whole or not at all (a temporary file renamed over it).
"""
from __future__ import annotations

import json
import os

import numpy as np

import aluminum as al

from ..errors import ProgramError
from .search import MATMUL
from .strategy import from_strategy, normalize_strategy

FORMAT = "aluminum strategy checkpoint"
VERSION = 1


def checkpoint_text(weights: list[str], shapes: list, strategies: list, nranks: int,
                    estimate=None) -> str:
    """The file's text for fc layers with these ``weights`` (names), weight ``shapes``
    and ``strategies``, searched for ``nranks`` ranks."""
    layers = [{"weight": weight, "shape": list(shape),
               "strategy": [list(parts) for parts in strategy]}
              for weight, shape, strategy in zip(weights, shapes, strategies)]
    content = {"format": FORMAT, "version": VERSION, "ranks": nranks, "layers": layers}
    if estimate is not None:
        content["estimate"] = {"step_seconds": estimate.time, "memory_bytes": estimate.memory}
    return json.dumps(content, indent=1) + "\n"


def pinned_strategies(text: str, path: str, weights: list[str], shapes: list,
                      fixed: list, nranks: int) -> dict[str, tuple]:
    """weight name -> strategy, for the fc layers the checkpoint ``text`` (read from
    ``path``) names; the chain's layers have these ``weights``, weight ``shapes`` and
    strategies set by hand (``fixed``, None where not).  ``ProgramError`` naming ``path``
    and what does not match (module docstring)."""
    where = f"strategy checkpoint {path}"
    try:
        content = json.loads(text)
    except ValueError as exc:
        raise ProgramError(f"{where}: not JSON ({exc})") from None
    if not isinstance(content, dict) or content.get("format") != FORMAT or \
            content.get("version") != VERSION or not isinstance(content.get("layers"), list):
        raise ProgramError(f"{where}: expected {{\"format\": \"{FORMAT}\", \"version\": "
                           f"{VERSION}, \"ranks\": ..., \"layers\": [...]}}, got "
                           f"{text[:120]!r}")
    if content.get("ranks") != nranks:
        raise ProgramError(f"{where}: saved for {content.get('ranks')!r} ranks; this "
                           f"communicator has {nranks}")
    shape_of, hand_set = dict(zip(weights, shapes)), dict(zip(weights, fixed))
    pinned = {}
    for entry in content["layers"]:
        if not isinstance(entry, dict) or not {"weight", "strategy"} <= set(entry):
            raise ProgramError(f"{where}: expected each layer as {{\"weight\": ..., "
                               f"\"shape\": ..., \"strategy\": ...}}, got {entry!r}")
        weight = entry["weight"]
        if weight not in shape_of:
            raise ProgramError(f"{where}: layer {weight!r} is not a weight of this "
                               f"program's fc chain, whose weights are {weights}")
        if weight in pinned:
            raise ProgramError(f"{where}: layer {weight!r} appears twice")
        if "shape" in entry and entry["shape"] != list(shape_of[weight]):
            raise ProgramError(f"{where}: layer {weight!r} was saved with shape "
                               f"{entry['shape']}; it is {list(shape_of[weight])} in this "
                               f"program")
        label = f"{where}: layer {weight!r}"
        from_strategy(label, MATMUL, entry["strategy"], nranks)   # (raises where it cannot)
        strategy = normalize_strategy(entry["strategy"], label)
        if hand_set[weight] is not None and tuple(map(tuple, hand_set[weight])) != strategy:
            raise ProgramError(f"{where}: layer {weight!r} has strategy {strategy} in the "
                               f"file and {hand_set[weight]} set by hand (shard=)")
        pinned[weight] = strategy
    return pinned


def read_on_rank0(path: str, comm) -> str:
    """The file's text, read by rank 0 and broadcast; a file rank 0 cannot read is the
    same ``ProgramError`` on every rank.  Collective over ``comm``."""
    def read():
        with open(path, encoding="utf-8") as file:
            return file.read()
    return _from_rank0(comm, read, f"strategy checkpoint {path}: cannot read it")


def write_on_rank0(path: str, text: str, comm) -> None:
    """Rank 0 writes ``text`` to ``path`` whole (a temporary file renamed over it); a
    failure is the same ``ProgramError`` on every rank.  Collective over ``comm``."""
    def write():
        temporary = f"{path}.{os.getpid()}.tmp"
        try:
            with open(temporary, "w", encoding="utf-8") as file:
                file.write(text)
            os.replace(temporary, path)
        finally:
            if os.path.exists(temporary):
                os.remove(temporary)
        return ""
    _from_rank0(comm, write, f"strategy checkpoint {path}: cannot write it")


def _from_rank0(comm, produce, failing: str) -> str:
    """``produce()``'s text on rank 0, broadcast to every rank; its ``OSError`` raised
    as a ``ProgramError`` (``failing``: the error's text) on every rank."""
    text, failed = "", 0
    if comm.rank == 0:
        try:
            text = produce()
        except OSError as exc:
            text, failed = f"{failing} ({exc})", 1
    if comm.size > 1:
        data = np.frombuffer(text.encode(), np.uint8)
        head = np.array([data.size, failed], np.int64)
        al.bcast(head, comm, root=0)
        received = data.copy() if comm.rank == 0 else np.empty(int(head[0]), np.uint8)
        if head[0]:
            al.bcast(received, comm, root=0)
        text, failed = received.tobytes().decode(), int(head[1])
    if failed:
        raise ProgramError(text)
    return text
