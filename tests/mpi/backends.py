"""The backends the rank_ops_* tests run every operation on, and how a test calls one.

- ``mpi``: ``al.MPICommunicator``.
- ``ht``: ``al.HostTransferCommunicator`` on a host stream, staging host buffers as device
  buffers (``AL_HT_STAGE_HOST=1``), so every copy of the GPU path runs on a CPU-only
  machine: partial copies of in-place and v-variant buffers included.  (Unstaged host
  buffers are MPI's own operations on the user's memory; rank_ht_streams.py runs all 18
  operations that way too.)

A blocking call on ``ht`` is only stream-ordered, so ``call`` synchronizes the stream before
a test looks at the result; a nonblocking call's ``wait()`` alone must make it visible.
"""
import os

import pytest

import aluminum as al
from aluminum.backends.runtime import host_runtime

BACKENDS = ["mpi", "ht"]
MODES = ["blocking", "nonblocking", "persistent"]
# How a test calls the operation: blocking, nonblocking (waiting on its request), or as a
# persistent plan (``al.<op>_init``) started and waited for, then, where running it again
# must give the same result, run a second time.
EVERY_MODE = pytest.mark.parametrize("mode", MODES)
# How long a test waits for one operation: far above any operation here, short enough that
# a hang fails its test before test_multirank's launch timeout ends the whole file.
WAIT_S = 20


def staging_communicator(stream):
    """An HT communicator on ``stream`` that stages host buffers (``AL_HT_STAGE_HOST=1``)."""
    previous = os.environ.get("AL_HT_STAGE_HOST")
    os.environ["AL_HT_STAGE_HOST"] = "1"
    try:
        return al.HostTransferCommunicator(stream=stream)
    finally:
        if previous is None:
            del os.environ["AL_HT_STAGE_HOST"]
        else:
            os.environ["AL_HT_STAGE_HOST"] = previous


def open_communicator(backend):
    """A new communicator over all ranks on ``backend`` (collective: same order everywhere)."""
    if backend == "mpi":
        return al.MPICommunicator()
    if backend == "ht":
        return staging_communicator(host_runtime().new_stream())
    raise ValueError(f"unknown backend {backend!r}")


def is_stream_ordered(comm):
    """True for communicators whose blocking calls only enqueue work on a stream."""
    return comm.stream is not None


def settle(comm):
    """Wait until everything enqueued on ``comm``'s stream ran (nothing to do on MPI)."""
    if is_stream_ordered(comm):
        comm.stream.synchronize(timeout=WAIT_S)


def call(comm, mode, name, *args, **kwargs):
    """Run ``al.<name>(*args, **kwargs)`` in ``mode`` on ``comm`` (also one of ``args``) and
    return once its results are visible to the host."""
    if mode == "blocking":
        assert getattr(al, name)(*args, **kwargs) is None
        settle(comm)
    elif mode == "nonblocking":
        request = getattr(al, "nonblocking_" + name)(*args, **kwargs)
        request.wait(timeout=WAIT_S)
        assert request.test()
    elif mode == "persistent":
        with getattr(al, name + "_init")(*args, **kwargs) as plan:
            plan.start().wait(timeout=WAIT_S)
            if _rerun_is_idempotent(name, kwargs):
                plan.run()
                settle(comm)
    else:
        raise ValueError(f"unknown mode {mode!r}")


def _rerun_is_idempotent(name, kwargs):
    """Out-of-place unrooted collectives read only what they do not write (and every rank
    passes a recvbuf or none, so all ranks decide alike); rooted ones may get a recvbuf on
    the root only, point-to-point messages would need a matching second send, and in-place
    results feed the next run."""
    return name in _UNROOTED and kwargs.get("recvbuf") is not None


_UNROOTED = frozenset({"allreduce", "reduce_scatter", "reduce_scatterv", "allgather",
                       "allgatherv", "alltoall", "alltoallv"})
