"""Turn anything a user may pass as a buffer into one small ``Buffer`` record.

This is the only place that knows what a buffer is.  Accepted, in this order: numpy arrays
(fast path), cupy arrays and torch tensors (CPU or CUDA, read from their attributes), other
objects exposing ``__cuda_array_interface__`` (device buffers: fakes in tests),
``__array_interface__`` providers, ``__dlpack__`` providers and anything with the buffer
protocol.  Buffers must be C-contiguous; they are
flattened to one dimension (collectives count elements, not shapes).
"""
from __future__ import annotations

import builtins
import math
import sys
from dataclasses import dataclass

import numpy as np

from . import dtypes
from .errors import BufferError
from .names import Device

HOST = Device.HOST
CUDA = Device.CUDA


@dataclass(slots=True)
class Buffer:
    """One contiguous run of ``count`` elements of ``dtype``.

    ``array`` is a flat numpy view for host memory (``None`` for device memory); ``address``
    is the first element's address for device memory (host buffers compute ``ptr`` on
    demand, keeping it off the hot path); ``obj`` is what the user passed (kept alive).
    """

    obj: object
    array: np.ndarray | None
    address: int | None
    dtype: np.dtype
    count: int
    device: Device
    writable: bool

    @property
    def ptr(self) -> int:
        """Address of the first element."""
        if self.address is None:
            self.address = self.array.__array_interface__["data"][0]
        return self.address

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize

    @property
    def is_host(self) -> bool:
        return self.device == HOST

    def describe(self) -> str:
        """``"1024 elements of float32"`` — the phrase error messages use."""
        return f"{self.count} elements of {dtypes.describe(self.dtype)}"


def as_buffer(obj: object, name: str = "buf") -> Buffer:
    """Describe ``obj`` as a ``Buffer``; raise ``BufferError`` naming ``name`` if it is not one."""
    if type(obj) is np.ndarray:
        return _from_ndarray(obj, obj, name)
    cupy = sys.modules.get("cupy")
    if cupy is not None and type(obj) is cupy.ndarray:
        return _from_cupy(obj, name)
    if _is_torch_tensor(obj):
        if obj.is_cuda:
            return _from_torch_cuda(obj, name)
        return _from_ndarray(obj, _torch_to_numpy(obj, name), name)
    iface = getattr(obj, "__cuda_array_interface__", None)
    if iface is not None:
        return _from_cuda_interface(obj, iface, name)
    if isinstance(obj, np.ndarray):
        return _from_ndarray(obj, obj, name)
    if hasattr(obj, "__array_interface__"):
        return _from_ndarray(obj, np.asarray(obj), name)
    if hasattr(obj, "__dlpack__"):
        try:
            array = np.from_dlpack(obj)
        except (TypeError, RuntimeError, builtins.BufferError, ValueError) as exc:
            raise BufferError(f"{name}: could not import the DLPack buffer ({exc})") from exc
        return _from_ndarray(obj, array, name)
    try:
        view = memoryview(obj)
    except TypeError:
        raise BufferError(
            f"{name}: expected a buffer (numpy array, torch tensor, buffer-protocol, "
            f"__array_interface__, __dlpack__ or __cuda_array_interface__ object), "
            f"got {type(obj).__name__}") from None
    if not view.c_contiguous:
        raise BufferError(f"{name}: expected a C-contiguous buffer, got a non-contiguous "
                          f"{type(obj).__name__}")
    return _from_ndarray(obj, np.asarray(view), name)


def _from_ndarray(obj: object, array: np.ndarray, name: str) -> Buffer:
    if not array.flags.c_contiguous:
        raise BufferError(f"{name}: expected a C-contiguous buffer, got a non-contiguous view "
                          f"with shape {array.shape} and strides {array.strides}")
    dtype = array.dtype
    if dtype not in dtypes.NATIVE_DTYPES and not dtypes.is_bfloat16(dtype):
        raise BufferError(f"{name}: unsupported dtype {dtype}; expected a numpy integer or "
                          f"float type, bool, float16 or bfloat16")
    return contiguous_host_buffer(obj, array, array.flags.writeable)


def contiguous_host_buffer(obj: object, array: np.ndarray, writable: bool) -> Buffer:
    """The Buffer of the C-contiguous numpy ``array`` (``obj``: what the user passed)."""
    flat = array if array.ndim == 1 else array.reshape(-1)
    return Buffer(obj, flat, None, array.dtype, flat.size, HOST, writable)


def checked_array_buffer(array: np.ndarray, dtype: np.dtype, count: int,
                         writable: bool) -> Buffer:
    """The Buffer of the numpy ``array`` whose dtype, shape and flags were already found
    equal to those of an array ``as_buffer`` accepted (``dtype``, ``count`` and
    ``writable`` are what it found then): what a call on new arrays of an already
    validated kind uses instead of parsing them again."""
    return Buffer(array, array if array.ndim == 1 else array.reshape(-1), None, dtype, count,
                  HOST, writable)


# typestr -> numpy dtype: parsing one costs more than the rest of a small GPU call's checks.
_TYPESTR_DTYPES: dict[str, np.dtype] = {}


def _from_cupy(obj, name: str) -> Buffer:
    """A cupy array, read from its attributes (what ``__cuda_array_interface__`` would say,
    at a fraction of the cost of building and parsing that dict); dtypes cupy stores as raw
    2-byte voids (bfloat16) go through the interface, which carries their name."""
    dtype = obj.dtype
    if dtype not in dtypes.NATIVE_DTYPES and not dtypes.is_bfloat16(dtype):
        return _from_cuda_interface(obj, obj.__cuda_array_interface__, name)
    if not obj.flags.c_contiguous:
        raise BufferError(f"{name}: expected a C-contiguous device buffer, got strides "
                          f"{obj.strides} for shape {obj.shape}")
    return Buffer(obj, None, obj.data.ptr, dtype, obj.size, CUDA, True)


def _from_cuda_interface(obj: object, iface: dict, name: str) -> Buffer:
    shape = tuple(iface["shape"])
    typestr = iface["typestr"]
    if not isinstance(typestr, str):           # np.dtype(None) would be float64
        raise BufferError(f"{name}: unsupported typestr {typestr!r}")
    dtype = _TYPESTR_DTYPES.get(typestr)
    if dtype is None:
        try:
            dtype = _TYPESTR_DTYPES[typestr] = np.dtype(typestr)
        except TypeError as exc:
            raise BufferError(f"{name}: unsupported typestr {typestr!r}") from exc
    if iface.get("descr") and iface["descr"][0][0] == "bf16":
        dtype = dtypes.bfloat16
    if dtype not in dtypes.NATIVE_DTYPES and dtype.kind == "V" and dtype.itemsize == 2:
        dtype = dtypes.bfloat16
    if not dtypes.is_supported(dtype):
        raise BufferError(f"{name}: unsupported dtype {dtype} in __cuda_array_interface__")
    count = math.prod(shape)
    strides = iface.get("strides")
    if strides is not None and count > 1:
        expected = _c_strides(shape, dtype.itemsize)
        if tuple(s for s, n in zip(strides, shape) if n > 1) != tuple(
                s for s, n in zip(expected, shape) if n > 1):
            raise BufferError(f"{name}: expected a C-contiguous device buffer, got strides "
                              f"{tuple(strides)} for shape {shape}")
    ptr, readonly = iface["data"]
    return Buffer(obj, None, int(ptr), dtype, count, CUDA, not readonly)


def _c_strides(shape: tuple, itemsize: int) -> tuple:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _is_torch_tensor(obj: object) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "is_cuda")


_TORCH_DTYPES: dict = {}     # torch dtype -> numpy dtype, filled on first use


def _from_torch_cuda(tensor, name: str) -> Buffer:
    """A CUDA tensor, read from its attributes (torch builds ``__cuda_array_interface__`` in
    Python, which costs several times the rest of a small call's checks, and refuses it for
    tensors that require grad)."""
    if not _TORCH_DTYPES:
        _TORCH_DTYPES.update(_torch_dtypes(sys.modules["torch"]))
    dtype = _TORCH_DTYPES.get(tensor.dtype)
    if dtype is None:
        raise BufferError(f"{name}: unsupported tensor dtype {tensor.dtype}")
    if not tensor.is_contiguous():
        raise BufferError(f"{name}: expected a contiguous tensor, got strides {tensor.stride()} "
                          f"for shape {tuple(tensor.shape)}")
    return Buffer(tensor, None, tensor.data_ptr(), dtype, tensor.numel(), CUDA, True)


def _torch_dtypes(torch) -> dict:
    names = ["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32",
             "float64", "uint16", "uint32", "uint64"]
    found = {getattr(torch, n): np.dtype(n) for n in names if hasattr(torch, n)}
    found[torch.bfloat16] = dtypes.bfloat16
    return {k: v for k, v in found.items() if dtypes.is_supported(v)}


def _torch_to_numpy(tensor, name: str) -> np.ndarray:
    import torch

    view = _tensor_view(tensor, torch)
    if view is not None:
        return view
    if not tensor.is_contiguous():
        raise BufferError(f"{name}: expected a contiguous tensor, got strides {tensor.stride()} "
                          f"for shape {tuple(tensor.shape)}")
    if tensor.device.type != HOST:
        raise BufferError(f"{name}: tensor on device {tensor.device} has no "
                          f"__cuda_array_interface__; expected a CPU or CUDA tensor")
    raise BufferError(f"{name}: unsupported tensor dtype {tensor.dtype}")


def cpu_tensor_array(obj) -> np.ndarray | None:
    """The numpy array a CPU torch tensor is validated and run as (``as_buffer`` of the
    tensor describes exactly this array), else None: not a tensor, or one with no numpy
    view (on a GPU, not contiguous, a dtype numpy lacks)."""
    if not _is_torch_tensor(obj):
        return None
    return _tensor_view(obj, sys.modules["torch"])


def _tensor_view(tensor, torch) -> np.ndarray | None:
    """The numpy view of a contiguous CPU ``tensor`` (of its data: a tensor that requires
    grad is detached), bfloat16 included, else None.  The cheap checks come first: a failing
    ``numpy()`` costs ~10 µs to raise."""
    if not (tensor.is_cpu and tensor.is_contiguous()):
        return None
    if tensor.requires_grad:
        tensor = tensor.detach()
    try:
        if tensor.dtype is torch.bfloat16:    # numpy has no bfloat16: view the bits
            return tensor.view(torch.int16).numpy().view(dtypes.bfloat16)
        return tensor.numpy()
    except (TypeError, RuntimeError):   # a dtype numpy lacks, conjugate or negative bits
        return None
