"""The NCCL unique-id exchange over MPI, with fake ids (no GPU needed), on every rank."""
import pytest
from mpi4py import MPI

import aluminum as al
from aluminum.backends.nccl import bootstrap
from aluminum.backends.nccl.context import NCCLContext


@pytest.fixture
def world():
    comm = MPI.COMM_WORLD.Dup()
    yield comm
    comm.Free()


def counting_maker(value):
    calls = []

    def make_id():
        calls.append(MPI.COMM_WORLD.Get_rank())
        return value

    return make_id, calls


@pytest.mark.parametrize("unique_id", [bytes(range(128)), ("tuple-id", 42, b"\x00\xff")],
                         ids=["bytes", "tuple"])
def test_every_rank_gets_rank_zeros_id(world, unique_id):
    make_id, calls = counting_maker(unique_id if world.Get_rank() == 0 else b"wrong")
    assert bootstrap.agree_on_unique_id(world, make_id) == unique_id
    assert calls == ([0] if world.Get_rank() == 0 else [])


def test_a_rank_without_nccl_makes_every_rank_raise(world):
    last = world.Get_size() - 1
    problem = "cupy.is_available() is False: no usable GPU" if world.Get_rank() == last else None
    make_id, calls = counting_maker(b"id")
    with pytest.raises(al.UnsupportedError, match=rf"rank {last}: cupy.is_available\(\) is "
                                                  rf"False"):
        bootstrap.agree_on_unique_id(world, make_id, problem)
    assert calls == []
    world.Barrier()   # still usable: no message was left behind


def test_rank_zero_failing_to_make_the_id_makes_every_rank_raise(world):
    def make_id():
        raise RuntimeError("NCCL library missing")

    with pytest.raises(al.CommunicatorError, match="rank 0 could not create the NCCL unique "
                                                   "id .RuntimeError: NCCL library missing"):
        bootstrap.agree_on_unique_id(world, make_id)
    world.Barrier()


def test_communicator_setup_hands_the_shared_id_to_nccl(monkeypatch):
    made = []
    rank = MPI.COMM_WORLD.Get_rank()

    class RecordingNccl:
        def destroy(self):
            made.append("destroyed")

    def create_context(size, unique_id, rank):
        made.append((size, unique_id, rank))
        return NCCLContext(RecordingNccl(), None, None)

    monkeypatch.setattr(bootstrap, "nccl_problem", lambda: None)
    monkeypatch.setattr(bootstrap, "get_unique_id", lambda: f"id-from-rank-{rank}")
    monkeypatch.setattr(bootstrap, "create_context", create_context)
    comm = al.NCCLCommunicator(stream=object())
    assert made == [(comm.size, "id-from-rank-0", comm.rank)]
    comm.free()
    assert made[-1] == "destroyed"


def test_without_a_gpu_every_rank_raises_unsupported():
    try:
        import cupy
        if cupy.is_available():
            pytest.skip("this machine has a GPU")
    except ImportError:
        pass
    with pytest.raises(al.UnsupportedError, match="the nccl backend needs a GPU with NCCL on "
                                                  "every rank"):
        al.NCCLCommunicator()
    MPI.COMM_WORLD.Barrier()


def test_nccl_init_failure_is_a_communicator_error(monkeypatch):
    def create_context(size, unique_id, rank):
        raise RuntimeError("NCCL error: Duplicate GPU detected")

    monkeypatch.setattr(bootstrap, "nccl_problem", lambda: None)
    monkeypatch.setattr(bootstrap, "get_unique_id", lambda: b"id")
    monkeypatch.setattr(bootstrap, "create_context", create_context)
    with pytest.raises(al.CommunicatorError, match=r"ncclCommInitRank failed on rank \d+ "
                                                   r"\(RuntimeError: NCCL error: Duplicate GPU"):
        al.NCCLCommunicator(stream=object())
    MPI.COMM_WORLD.Barrier()
