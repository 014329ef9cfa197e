"""One buffer module turns every supported kind of object into the same Buffer record."""
import subprocess
import sys

import numpy as np
import pytest

import aluminum as al
from aluminum.core.buffers import CUDA, HOST, as_buffer
from providers import PROVIDERS, FakeCudaArray

DTYPES = [np.int8, np.uint16, np.int32, np.int64, np.float16, np.float32, np.float64, np.bool_]


def provider(name):
    if name == "torch":
        pytest.importorskip("torch", reason="torch is not installed")
    return PROVIDERS[name]


@pytest.mark.parametrize("name", PROVIDERS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_provider_gives_the_same_record(name, dtype):
    array = np.arange(12).astype(dtype).reshape(3, 4)
    buf = as_buffer(provider(name)(array), "buf")
    assert (buf.dtype, buf.count, buf.device) == (np.dtype(dtype), 12, HOST)
    assert buf.ptr == array.__array_interface__["data"][0]
    assert buf.writable
    buf.array[0] = 1
    assert array.reshape(-1)[0] == 1, "the record must share memory with the user's object"


@pytest.mark.parametrize("name", PROVIDERS)
def test_allreduce_accepts_every_provider(name):
    array = np.arange(10, dtype=np.float32)
    with al.MPICommunicator() as comm:
        al.allreduce(provider(name)(array), comm, op=al.MAX)
        out = np.zeros(10, np.float32)
        al.allreduce(provider(name)(array), comm, recvbuf=provider(name)(out))
    np.testing.assert_array_equal(out, np.arange(10, dtype=np.float32))


def test_torch_bfloat16_tensor_is_bfloat16():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    tensor = torch.arange(6, dtype=torch.bfloat16)
    buf = as_buffer(tensor, "buf")
    assert buf.dtype == al.bfloat16 and buf.count == 6
    assert buf.array.astype(np.float32).tolist() == tensor.float().tolist()


def test_import_leaves_ml_dtypes_alone_yet_a_users_bfloat16_array_is_accepted():
    """Every rank of every job imports aluminum, and ml_dtypes 0.7's import alone takes
    most of a second: aluminum imports it only when asked for ``al.bfloat16``.  A bfloat16
    array made through the user's own import of ml_dtypes is still a buffer aluminum
    takes (as bfloat16: its reductions are tested with the other dtypes), and a raw
    2-byte void is not."""
    script = (
        "import sys, numpy as np, aluminum as al\n"
        "from aluminum.core.buffers import as_buffer\n"
        "assert 'ml_dtypes' not in sys.modules, 'import aluminum imported ml_dtypes'\n"
        "try:\n"
        "    as_buffer(np.zeros(3, 'V2'), 'buf')\n"
        "except al.BufferError as exc:\n"
        "    print('refused:', exc)\n"
        "import ml_dtypes\n"
        "buf = as_buffer(np.array([1.5, -2.0, 3.0], ml_dtypes.bfloat16), 'buf')\n"
        "print(buf.dtype, buf.count, buf.array.astype(np.float32).tolist())\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    refused, accepted = result.stdout.strip().splitlines()
    assert refused.startswith("refused: buf") and "unsupported dtype" in refused
    assert accepted == "bfloat16 3 [1.5, -2.0, 3.0]"
    assert al.bfloat16 == np.dtype(__import__("ml_dtypes").bfloat16)


def test_bytes_is_read_only_and_bytearray_is_writable():
    assert not as_buffer(b"abcd").writable
    assert as_buffer(bytearray(b"abcd")).writable


def test_zero_dimensional_and_empty_arrays():
    assert as_buffer(np.float32(3.0).reshape(())).count == 1
    assert as_buffer(np.empty(0, np.int64)).count == 0


def test_cuda_array_interface_gives_a_device_record():
    array = np.arange(8, dtype=np.float32)
    buf = as_buffer(FakeCudaArray(array), "buf")
    assert (buf.device, buf.count, buf.dtype, buf.array) == (CUDA, 8, np.dtype(np.float32), None)
    assert buf.ptr == array.__array_interface__["data"][0]
    assert not as_buffer(FakeCudaArray(array, readonly=True)).writable


def test_cuda_array_interface_with_contiguous_strides_is_accepted():
    array = np.zeros((2, 3), np.int32)
    assert as_buffer(FakeCudaArray(array, strides=array.strides)).count == 6


def test_cuda_array_interface_non_contiguous_is_rejected():
    array = np.zeros((4, 4), np.float32)
    with pytest.raises(al.BufferError, match="buf: expected a C-contiguous device buffer"):
        as_buffer(FakeCudaArray(array, strides=(4, 16)), "buf")


@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 0, 5), (3, 4, 5)])
def test_cuda_array_interface_counts_every_shape(shape):
    assert as_buffer(FakeCudaArray(np.zeros(shape, np.float64))).count == int(np.prod(shape))


@pytest.mark.parametrize("typestr", ["<x9", ["<f4"], None])
def test_cuda_array_interface_bad_typestr_names_the_argument(typestr):
    fake = FakeCudaArray(np.zeros(4, np.float32))
    fake.__cuda_array_interface__["typestr"] = typestr
    with pytest.raises(al.BufferError, match="recvbuf: unsupported"):
        as_buffer(fake, "recvbuf")
