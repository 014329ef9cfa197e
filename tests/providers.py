"""Array providers the buffer tests run over (mpi4py's test suite does the same).

Each provider wraps a numpy array in a different kind of object that shares its memory.
"""
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
    import torch

    return torch.from_numpy(array)


PROVIDERS = {
    "numpy": lambda a: a,
    "memoryview": lambda a: memoryview(a),
    "array_interface": ArrayInterfaceObject,
    "dlpack": DLPackObject,
    "torch": _torch,
}
