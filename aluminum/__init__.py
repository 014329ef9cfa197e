"""aluminum: collective communication for deep learning.

``import aluminum as al``; see README.md for the API in brief and ../shared/DESIGN.md §3.
"""
from . import dtypes
from .allreduce import allreduce, nonblocking_allreduce
from .communicator import Communicator, MPICommunicator
from .dtypes import bfloat16
from .errors import (AluminumError, ArgumentError, BufferError, CommunicatorError,
                     OperationError, TimeoutError, UnsupportedError)
from .reduction import ReductionOp
from .runtime import finalize, init, initialized

SUM, PROD, MIN, MAX = ReductionOp.SUM, ReductionOp.PROD, ReductionOp.MIN, ReductionOp.MAX
LOR, LAND, LXOR = ReductionOp.LOR, ReductionOp.LAND, ReductionOp.LXOR
BOR, BAND, BXOR = ReductionOp.BOR, ReductionOp.BAND, ReductionOp.BXOR
AVG = ReductionOp.AVG


def algorithms(op: str, backend: str = "mpi") -> list[str]:
    """The algorithm names ``algo=`` accepts for ``op`` on ``backend``."""
    from .backends import get_backend

    return get_backend(backend).algorithms(op)
