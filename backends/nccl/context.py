"""What an ``al.NCCLCommunicator`` keeps beside its NCCL communicator.

``NCCLContext`` bundles the three things every NCCL operation reaches for:

- ``nccl``: the NCCL communicator (``cupy.cuda.nccl.NcclCommunicator``: ``allReduce``,
  ``send``, ...; pointers and counts are plain ints);
- ``api``: the module with ``groupStart``/``groupEnd`` (``cupy.cuda.nccl``);
- ``device``: device memory and stream primitives (device.py: ``CupyDeviceOps``).

Tests substitute all three with host-memory stand-ins, so every operation's logic runs on a
machine without a GPU.  The context also owns the internal stream nonblocking operations run
on (made on first use) and a one-element scratch buffer for ``barrier``.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any

from ...core.errors import CommunicatorError


class NCCLContext:
    """One communicator's NCCL resources; ``close()`` destroys the NCCL communicator."""

    def __init__(self, nccl: Any, api: Any, device: Any) -> None:
        self.nccl, self.api, self.device = nccl, api, device
        self._internal = None
        self._barrier_word = None
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def group(self):
        """``ncclGroupStart`` ... ``ncclGroupEnd``: the calls inside run as one operation
        (how NCCL runs several sends and receives at once without deadlock)."""
        self.api.groupStart()
        try:
            yield
        finally:
            self.api.groupEnd()

    def internal_stream(self):
        """The stream nonblocking operations run on: high priority, made on first use."""
        if self._internal is None:
            with self._lock:
                if self._internal is None:
                    self._internal = self.device.new_internal_stream()
        return self._internal

    def barrier_word(self, stream) -> int:
        """Address of a one-int32 device buffer that ``barrier`` allreduces."""
        if self._barrier_word is None:
            with self._lock:
                if self._barrier_word is None:
                    self._barrier_word = self.device.empty(4, stream)
        return self.device.address(self._barrier_word)

    def close(self) -> None:
        """Destroy the NCCL communicator (called when the aluminum communicator is freed)."""
        nccl, self.nccl = self.nccl, None
        if nccl is not None:
            nccl.destroy()


def context_of(comm) -> NCCLContext:
    """The ``NCCLContext`` of an ``al.NCCLCommunicator`` (set up by bootstrap.setup)."""
    try:
        return comm._scratch["nccl"]
    except KeyError:
        raise CommunicatorError(f"comm: {comm!r} has no NCCL communicator; build it as "
                                f"al.NCCLCommunicator") from None
