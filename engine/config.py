"""Engine settings from the environment (``AL_PE_*``, ``AL_TIMEOUT``) and core pinning."""
from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass

__all__ = ["EngineConfig", "default_core", "node_local_rank", "pin_thread"]

DEFAULT_CONCURRENT_OPS = 4
DEFAULT_SPIN_US = 100.0
DEFAULT_STALL_WARN_S = 60.0


@dataclass(frozen=True)
class EngineConfig:
    """Engine settings; ``from_env`` reads them from the environment (see docs/engine.md)."""

    max_concurrent: int = DEFAULT_CONCURRENT_OPS   # AL_PE_NUM_CONCURRENT_OPS
    spin_s: float = DEFAULT_SPIN_US * 1e-6         # AL_PE_SPIN_US
    pin: bool = True                               # AL_PE_CORE=none turns pinning off
    core: int | None = None                        # AL_PE_CORE=<n>; None: from local rank
    timeout_s: float | None = None                 # AL_TIMEOUT
    stall_warn_s: float = DEFAULT_STALL_WARN_S     # AL_STALL_WARN_S (without AL_TIMEOUT)

    @classmethod
    def from_env(cls, environ=None) -> EngineConfig:
        """Read ``AL_PE_*``, ``AL_TIMEOUT`` and ``AL_STALL_WARN_S``; a malformed value warns and keeps the default."""
        env = os.environ if environ is None else environ
        core_text = env.get("AL_PE_CORE", "").strip().lower()
        pin = core_text not in ("none", "off", "-1")
        core = None
        if pin and core_text:
            core = parse_setting(env, "AL_PE_CORE", int, 0, None)
        return cls(
            max_concurrent=parse_setting(env, "AL_PE_NUM_CONCURRENT_OPS", int, 1,
                                  DEFAULT_CONCURRENT_OPS),
            spin_s=parse_setting(env, "AL_PE_SPIN_US", float, 0.0, DEFAULT_SPIN_US) * 1e-6,
            pin=pin, core=core,
            timeout_s=parse_setting(env, "AL_TIMEOUT", float, 1e-9, None),
            stall_warn_s=parse_setting(env, "AL_STALL_WARN_S", float, 1e-3, DEFAULT_STALL_WARN_S))


def parse_setting(env, name: str, kind: type, minimum, default):
    """The setting ``name`` of ``env`` as ``kind``, at least ``minimum``; ``default`` when
    unset, and with a warning when malformed."""
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        warnings.warn(f"aluminum: {name}: expected {kind.__name__} >= {minimum}, got {text!r}; "
                      f"using {default}", RuntimeWarning, stacklevel=3)
        return default
    return value


# -- core pinning --------------------------------------------------------------------------

def node_local_rank(state=None) -> tuple[int, int]:
    """``(local_rank, local_size)`` of this process on its node.

    From the first state's communicator (``state.comm.local_rank``/``local_size``: every
    communicator knows its node-local group), else ``(0, 1)``.  The engine knows nothing of
    MPI launchers; whoever builds states gives them their communicator.
    """
    comm = getattr(state, "comm", None)
    rank, size = getattr(comm, "local_rank", None), getattr(comm, "local_size", None)
    if isinstance(rank, int) and isinstance(size, int):
        return rank, size
    return 0, 1


def default_core(local_rank: int, local_size: int, cores: list[int]) -> int | None:
    """The core the engine of ``local_rank`` pins to, or None (more local ranks than cores).

    Counted from the last allowed core down, so node-local ranks never share one and the
    engines keep away from core 0, where main threads and interrupts tend to sit.
    """
    if not cores or local_size > len(cores) or not 0 <= local_rank < len(cores):
        return None
    return cores[len(cores) - 1 - local_rank]


def pin_thread(thread: threading.Thread, config: EngineConfig, state=None) -> int | None:
    """Pin ``thread`` to ``config.core``, else to ``default_core`` of this process's
    node-local rank (see ``node_local_rank``; ``state``: the first operation's state); the
    core, or None (warns if pinning failed).
    """
    core = config.core
    if core is None:
        core = default_core(*node_local_rank(state), sorted(os.sched_getaffinity(0)))
        if core is None:
            return None
    try:
        os.sched_setaffinity(thread.native_id, {core})
    except (OSError, ValueError) as exc:
        warnings.warn(f"aluminum: could not pin the progress engine to core {core} "
                      f"(AL_PE_CORE): {exc}", RuntimeWarning, stacklevel=4)
        return None
    return core
