"""AL_DEBUG=1: mismatched collectives raise on every rank instead of hanging."""
import numpy as np
import pytest

import aluminum as al
from aluminum import debug


@pytest.fixture
def debug_on(monkeypatch):
    monkeypatch.setattr(debug, "ENABLED", True)


def test_matching_calls_pass(comm, debug_on):
    buf = np.ones(5, np.float32)
    al.allreduce(buf, comm)
    al.allreduce(buf, comm)
    assert np.all(buf == comm.size ** 2)


def test_mismatched_counts_raise_on_every_rank(comm, debug_on):
    if comm.size == 1:
        pytest.skip("a mismatch needs two ranks")
    buf = np.ones(4 + comm.rank, np.float32)
    before = buf.copy()
    with pytest.raises(al.ArgumentError, match="ranks issued different collectives") as exc:
        al.allreduce(buf, comm)
    assert "rank 1: allreduce" in str(exc.value)
    np.testing.assert_array_equal(buf, before)


def test_mismatched_ops_raise_on_every_rank(comm, debug_on):
    if comm.size == 1:
        pytest.skip("a mismatch needs two ranks")
    op = al.MAX if comm.rank == 0 else al.SUM
    with pytest.raises(al.ArgumentError, match="MAX"):
        al.allreduce(np.ones(3, np.int32), comm, op=op)
    buf = np.ones(3, np.int32)
    al.allreduce(buf, comm)
    assert np.all(buf == comm.size), "communicator unusable after a debug mismatch"
