"""PyTorch embedding: an "aluminum" torch.distributed backend and a DataParallel wrapper.

``import aluminum.torch`` registers the backend for CPU and CUDA tensors, so the one-line
switch is::

    dist.init_process_group("aluminum")      # instead of "gloo"/"nccl"; under python -m aluminum.run

CUDA tensors go over NCCL (a GPU per rank) or the host-transfer backend (ranks sharing a
GPU), ordered on torch's current stream (``devices``).

Under an MPI launcher the import also sets ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/
``WORLD_SIZE`` from MPI where unset (see ``rendezvous``).  ``DistributedDataParallel`` is
aluminum's own data-parallel wrapper (gradients in shared-memory buckets, persistent
allreduces); docs/torch.md compares it with torch's DDP over gloo and over "aluminum".
"""
from __future__ import annotations

import torch.distributed as dist

from . import comm_hooks
from .ddp import DistributedDataParallel
from .errors import GroupError, ReductionIncompleteError, TensorError
from .process_group import ProcessGroupAluminum, create_process_group
from .rendezvous import fill_env_from_mpi
from .work import AluminumWork

__all__ = ["AluminumWork", "DistributedDataParallel", "GroupError", "ProcessGroupAluminum",
           "ReductionIncompleteError", "TensorError", "comm_hooks"]

BACKEND = "aluminum"

if BACKEND not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND, create_process_group, extended_api=True,
                                  devices=["cpu", "cuda"])
fill_env_from_mpi()
