"""``AL_DEBUG=1``: check before every collective that all ranks are calling the same thing.

Like ``TORCH_DISTRIBUTED_DEBUG=DETAIL``: each rank allgathers a fingerprint of the call (op,
algorithm, dtypes, counts, reduction op, root) over a private duplicate of the communicator,
and every rank raises ``al.ArgumentError`` naming the ranks whose call differs, instead of
hanging or silently reducing mismatched buffers.  Point-to-point operations are not checked
(their peers legitimately differ).

The ranks agree on ``AL_DEBUG`` at ``al.init()`` (``agree``): a rank checking alone would
wait in the fingerprint exchange while its peers run the real collective.  When they
disagree, checks are turned *on* everywhere, with a warning: some rank asked for them, and
they cost only time, whereas turning them off would silently drop a check someone relied on.
The exchange itself is bounded by ``AL_TIMEOUT`` (a rank that skipped the collective makes
the others raise ``al.TimeoutError``).
"""
from __future__ import annotations

import os
import warnings

import numpy as np

from .core.buffers import Buffer
from .core.errors import ArgumentError
from .core.ops import POINT_TO_POINT, UNIFORM

ENABLED = os.environ.get("AL_DEBUG", "0") not in ("", "0", "false", "False")

_FINGERPRINT_BYTES = 256      # exchanged per rank; longer fingerprints are cut


def fingerprint(op: str, algo: str, args: tuple) -> str:
    """A printable summary of one call: what every rank must agree on."""
    parts = [op, algo]
    first_buffer = next((arg for arg in args if isinstance(arg, Buffer)), None)
    if op in UNIFORM and first_buffer is not None:
        parts.append(first_buffer.describe())
    for arg in args:
        if type(arg) is int:                                  # root
            parts.append(f"root={arg}")
        elif hasattr(arg, "is_logical"):                      # ReductionOp
            parts.append(arg.name)
    return " ".join(parts)


def agree(services, world) -> None:
    """Make ``ENABLED`` the same on every rank of ``world`` (a group of ``services``;
    collective, at ``al.init()``): on everywhere if any rank has it on, with a warning
    naming how many had it."""
    global ENABLED
    mine = int(ENABLED)
    on_everywhere = services.agree(world, "al.init() (agreeing on AL_DEBUG)", mine)
    on_somewhere = -services.agree(world, "al.init() (agreeing on AL_DEBUG)", -mine)
    if on_somewhere and not on_everywhere:
        warnings.warn(f"aluminum: AL_DEBUG is set on some ranks only (this rank: "
                      f"{'on' if mine else 'off'}); turning the checks on everywhere: a rank "
                      f"checking alone would deadlock its first collective",
                      RuntimeWarning, stacklevel=3)
    ENABLED = bool(on_somewhere)


def check(comm, op: str, algo: str, args: tuple) -> None:
    """Raise on every rank if the ranks' fingerprints for this collective differ; bounded
    by ``AL_TIMEOUT`` (``al.TimeoutError`` when a rank never comes)."""
    if op in POINT_TO_POINT:
        return
    services = comm.services
    mine = fingerprint(op, algo, args)
    debug_comm = comm.scratch("debug_comm", lambda: _FreeOnClose(
        services, services.private_copy(comm.mpi_comm, "AL_DEBUG set-up")))
    send = np.frombuffer(mine.encode()[:_FINGERPRINT_BYTES].ljust(_FINGERPRINT_BYTES), np.uint8)
    gathered = services.allgather(debug_comm.group, f"AL_DEBUG's check of {op} "
                                  f"(fingerprint {mine!r})", send)
    everyone = [bytes(row).decode(errors="replace").rstrip() for row in gathered]
    if any(print_ != everyone[0] for print_ in everyone):
        rows = "; ".join(f"rank {r}: {p}" for r, p in enumerate(everyone))
        raise ArgumentError(f"AL_DEBUG: ranks issued different collectives: {rows}")


class _FreeOnClose:
    """The private group the fingerprints go over, freed with its communicator."""

    def __init__(self, services, group):
        self.services, self.group = services, group

    def close(self):
        if not self.services.stranded(self.group):   # (else a pending exchange: keep it)
            self.services.free(self.group)
