"""The one plan cache (aluminum/recall.py): a repeated call finds its plan, anything
validation depends on that changed sends the call back through validation."""
import numpy as np
import pytest

import aluminum as al
from aluminum import recall


@pytest.fixture
def comm():
    with al.MPICommunicator() as communicator:
        yield communicator


def _plans(op):
    return [entry.plan for entry in recall._recent.get(op, [])]


def test_a_repeated_call_reuses_its_plan_without_making_persistent_requests(comm):
    """Whether a call is found here depends on this rank's buffer reuse alone, so a found
    plan must run the form a new call would (MPI never matches a persistent start with a
    blocking or nonblocking call on another rank)."""
    buf = np.arange(3.0)
    for _ in range(3):
        al.bcast(buf, comm)
        al.nonblocking_bcast(buf, comm).wait()
    first = _plans("bcast")[0]
    al.bcast(buf, comm)
    assert _plans("bcast")[0] is first and not first._prepare and not first._persistent
    np.testing.assert_array_equal(buf, np.arange(3.0))


def test_new_buffers_make_new_plans_and_the_cache_stays_bounded(comm):
    arrays = [np.zeros(2) for _ in range(recall.RECENT_PER_OP + 3)]
    for array in arrays:
        al.bcast(array, comm)
    assert len(_plans("bcast")) == recall.RECENT_PER_OP
    assert _plans("bcast")[0].args[1].obj is arrays[-1]


def test_a_buffer_made_read_only_is_validated_again(comm):
    send, out = np.ones(4), np.zeros(4)
    al.allgather(send, comm, recvbuf=out)
    out.flags.writeable = False
    with pytest.raises(al.BufferError, match="recvbuf"):
        al.allgather(send, comm, recvbuf=out)


def test_a_reassigned_dtype_or_shape_is_validated_again(comm):
    buf = np.zeros(4, np.float32)
    out = np.zeros(4, np.float32)
    al.reduce(buf, comm, recvbuf=out)
    out.dtype = np.int32                # same memory, another dtype: must be rejected
    with pytest.raises(al.BufferError, match="recvbuf"):
        al.reduce(buf, comm, recvbuf=out)
    out.dtype = np.float32
    out.shape = (2, 2)                  # same count: accepted, written through the new shape
    buf[:] = 5
    al.reduce(buf, comm, recvbuf=out)
    np.testing.assert_array_equal(out, np.full((2, 2), 5.0 * comm.size))


def test_counts_changed_in_place_are_seen(comm):
    send, out = np.arange(3.0), np.zeros(5)
    counts = [3]
    al.allgatherv(send, counts, None, comm, recvbuf=out)
    counts[0] = 2                        # the same list object, now saying 2 elements
    with pytest.raises(al.BufferError, match="buf"):
        al.allgatherv(send, counts, None, comm, recvbuf=out)


def test_freeing_the_communicator_forgets_its_plans(comm):
    sub = comm.split(0)
    buf = np.ones(2)
    al.allreduce(buf, sub)
    al.allreduce(buf, sub)
    assert any(entry.comm is sub for entry in recall._recent["allreduce"])
    sub.free()
    assert not any(entry.comm is sub for entry in recall._recent["allreduce"])
    with pytest.raises(al.CommunicatorError, match="freed"):
        al.allreduce(buf, sub)


def test_objects_without_cheap_checks_are_not_remembered(comm):
    recall.forget()
    al.bcast(bytearray(8), comm)
    assert _plans("bcast") == []
    al.bcast(np.zeros(1), comm)
    assert len(_plans("bcast")) == 1
