"""Array providers the buffer and rank tests run over (mpi4py's test suite does the same).

Each provider wraps a numpy array in a different kind of object that shares its memory, so a
test calls the library on the wrapper and checks the numpy array it keeps.  ``carries`` says,
from the provider and numpy alone (never from aluminum), whether a provider can stand for an
array of a given dtype and writability.

Which backends take which: every provider here is host memory, taken by the MPI and the
host-transfer backends alike.  ``FakeCudaArray`` (host memory claiming to be a GPU buffer)
is for neither on a CPU-only machine: MPI takes host memory only, and the host-transfer
backend needs a CUDA stream for device buffers (tests/mpi/rank_ops_reduce.py checks both
refusals).
"""
import warnings

import numpy as np


class ArrayInterfaceObject:
    """Exposes only ``__array_interface__``."""

    def __init__(self, array):
        self._array = array
        self.__array_interface__ = array.__array_interface__


class DLPackObject:
    """Exposes only ``__dlpack__`` / ``__dlpack_device__``."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


class FakeCudaArray:
    """Host memory that claims to be a GPU buffer through ``__cuda_array_interface__``."""

    def __init__(self, array, readonly=False, strides=None):
        self._array = array
        self.__cuda_array_interface__ = {
            "shape": array.shape, "typestr": array.dtype.str, "strides": strides,
            "data": (array.__array_interface__["data"][0], readonly), "version": 3}


def _torch(array):
    """A CPU tensor sharing ``array``'s memory; bfloat16 (which numpy lacks) through its bits."""
    import torch

    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def _torch_export(tensor):
    import torch

    if tensor.dtype is torch.bfloat16:
        return tensor.view(torch.int16).numpy()   # compared by bits below
    return tensor.numpy()


PROVIDERS = {
    "numpy": lambda a: a,
    "memoryview": lambda a: memoryview(a),
    "array_interface": ArrayInterfaceObject,
    "dlpack": DLPackObject,
    "torch": _torch,
}


# How each provider's object is read back into numpy by the provider's own protocol.
EXPORTS = {
    "numpy": lambda obj: obj,
    "memoryview": np.asarray,
    "array_interface": np.asarray,
    "dlpack": lambda obj: np.from_dlpack(obj),
    "torch": _torch_export,
}


def carries(name, dtype, writable=True):
    """True when provider ``name`` can stand for an array of ``dtype`` (writable or not):
    wrapping works, and reading it back through the provider's own protocol gives the same
    memory with the same dtype and writability.  bfloat16 is compared by bits (numpy knows
    it only through ml_dtypes)."""
    array = np.zeros(2, dtype)
    array.flags.writeable = writable
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")       # torch warns on read-only arrays
            back = EXPORTS[name](PROVIDERS[name](array))
    except Exception:   # noqa: BLE001 - any refusal means "cannot carry it"
        return False
    if back.dtype != array.dtype and not (array.dtype.name == "bfloat16"
                                          and back.dtype == np.int16):
        return False
    return np.shares_memory(back, array) and back.flags.writeable == writable
