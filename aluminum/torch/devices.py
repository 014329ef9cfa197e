"""Where a CUDA tensor's collective runs: its GPU communicator and torch's current stream.

The process group and ``DistributedDataParallel`` hold a host communicator
(``al.MPICommunicator``).  The first call on a CUDA tensor makes that communicator's GPU twin
for the tensor's device, once, collectively (every rank of the group is in that call, as
torch requires of collectives):

- ``al.NCCLCommunicator`` when every rank of the group has a GPU of its own;
- ``al.HostTransferCommunicator`` when ranks share a GPU (NCCL refuses two ranks on one
  device): the data is staged through host memory and reduced by MPI, every step ordered on
  the stream.  Its synchronous calls wait on the host, as gloo's CUDA path does
  (``blocking_mode="host"``: the thread waits for the stream to reach the call and for MPI,
  then enqueues the copy back), unless ``AL_HT_BLOCKING`` says otherwise; a stream parked
  on a host flag costs far more than that wait where ranks time-slice one GPU.

``AL_TORCH_CUDA_BACKEND=nccl`` or ``=ht`` forces one (``auto``, the default, chooses as
above; ranks agree, since they decide from the same gathered device list).

Every CUDA call is ordered on torch's *current* stream of the tensor's device, as torch's
``nccl`` backend orders its work after that stream: a synchronous call is enqueued on it
(on NCCL the host never waits; on host transfer see above); an asynchronous one runs on the
communicator's internal stream after an event of the current stream, and ``Work.wait()``
makes the then-current stream wait for it.
"""
from __future__ import annotations

import os
import threading
import uuid
import weakref

import numpy as np
import torch

import aluminum as al

from .errors import TensorError

BACKENDS = ("auto", "nccl", "ht")
_twins: "weakref.WeakKeyDictionary[al.Communicator, dict[int, al.Communicator]]" = \
    weakref.WeakKeyDictionary()
_streams: dict[tuple[int, int], object] = {}     # (device, cudaStream_t) -> cupy stream
_lock = threading.Lock()


def chosen_backend() -> str:
    """``AL_TORCH_CUDA_BACKEND`` checked: ``auto`` (default), ``nccl`` or ``ht``."""
    choice = os.environ.get("AL_TORCH_CUDA_BACKEND", "auto").strip().lower() or "auto"
    if choice not in BACKENDS:
        raise al.ArgumentError(f"AL_TORCH_CUDA_BACKEND: expected one of {', '.join(BACKENDS)}, "
                               f"got {choice!r}")
    return choice


def backend_for(gpus: list[tuple[int, int]], choice: str = "auto") -> str:
    """``nccl`` or ``ht`` for a group whose rank ``r`` is on node ``gpus[r][0]`` and GPU
    ``gpus[r][1]`` (a device identity, unique per GPU): NCCL unless two ranks share a GPU,
    or whatever ``choice`` forces."""
    if choice != "auto":
        return choice
    return "nccl" if len(set(gpus)) == len(gpus) else "ht"


def communicator_for(host: al.Communicator, device: torch.device) -> al.Communicator:
    """``host``'s GPU twin on ``device`` (made on first use; collective then)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    found = _twins.get(host, {}).get(index)
    if found is not None and not found.freed:
        return found
    with _lock:
        twins = _twins.setdefault(host, {})
        found = twins.get(index)
        if found is None or found.freed:
            found = twins[index] = _make_twin(host, index)
    return found


def _make_twin(host: al.Communicator, index: int) -> al.Communicator:
    import cupy

    identity = np.array([_node_of(host), _gpu_identity(index)], np.int64)
    gathered = np.empty(2 * host.size, np.int64)
    al.allgather(identity, host, recvbuf=gathered)
    gpus = [tuple(pair) for pair in gathered.reshape(-1, 2).tolist()]
    kind = {"nccl": al.NCCLCommunicator,
            "ht": al.HostTransferCommunicator}[backend_for(gpus, chosen_backend())]
    with cupy.cuda.Device(index):
        twin = host.copy(stream=current_stream(torch.device("cuda", index)), kind=kind)
    if kind is al.HostTransferCommunicator and "AL_HT_BLOCKING" not in os.environ:
        twin.blocking_mode = "host"
    return twin


def _node_of(comm: al.Communicator) -> int:
    return next(i for i, ranks in enumerate(comm.nodes) if comm.rank in ranks)


def _gpu_identity(index: int) -> int:
    """The GPU's UUID folded to 63 bits (the same GPU seen from two processes agrees)."""
    text = str(getattr(torch.cuda.get_device_properties(index), "uuid", "") or "")
    try:
        return uuid.UUID(text.removeprefix("GPU-")).int & (2 ** 63 - 1)
    except ValueError:
        return index      # no UUID from this torch: the device index stands in


def current_stream(device: torch.device):
    """torch's current stream on ``device`` as a cupy stream (wrappers kept per stream)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    key = (index, _raw_current_stream(index))
    found = _streams.get(key)
    if found is None:
        import cupy

        found = _streams[key] = cupy.cuda.ExternalStream(key[1], index)
    return found


def _raw_current_stream(index: int) -> int:
    """The ``cudaStream_t`` torch's current stream on device ``index`` is (torch's raw getter
    where it has one: a ``torch.cuda.Stream`` object costs microseconds to make)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(index)
    return torch.cuda.current_stream(index).cuda_stream


def placement(host: al.Communicator, tensor: torch.Tensor) -> tuple[al.Communicator, dict]:
    """The communicator and the keyword arguments (``stream=``) a call on ``tensor`` takes."""
    if tensor.is_cuda:
        device = tensor.device
        return communicator_for(host, device), {"stream": current_stream(device)}
    return host, {}


def same_device(tensor: torch.Tensor, reference: torch.Tensor, name: str) -> None:
    if tensor.device != reference.device:
        raise TensorError(f"{name}: expected a tensor on {reference.device} (as the others), "
                          f"got one on {tensor.device}")
