"""The one plan cache (aluminum/recall.py), from outside: a call found again, or made on
new arrays of a kind seen before, gives what a new call gives; anything validation depends
on that changed sends the call back through validation; what the cache holds stays bounded
and is let go."""
import gc
import weakref

import numpy as np
import pytest

import aluminum as al
from aluminum import recall


@pytest.fixture
def comm():
    with al.MPICommunicator() as communicator:
        yield communicator


def _alive(refs):
    gc.collect()
    return sum(ref() is not None for ref in refs)


def test_buffers_of_many_calls_are_let_go(comm):
    """Calls on new arrays keep a bounded number of them (the last calls' plans and the
    latest arrays of each kind), not one per call."""
    refs = []
    for count in (2, 2, 3):                    # two kinds, the first twice
        for _ in range(3 * recall.RECENT_PER_OP):
            array = np.zeros(count)
            refs.append(weakref.ref(array))
            al.bcast(array, comm)
            al.allreduce(np.ones(count), comm, recvbuf=array)
            del array
    assert _alive(refs) <= recall.RECENT_PER_OP + 2


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


def test_a_nonblocking_repeat_sees_what_changed_in_place(comm):
    """A nonblocking call repeated on the same arrays is validated again when one of them
    changed dtype or became read-only, and otherwise gives a new call's results."""
    send, out = np.arange(4.0), np.zeros(4)
    al.nonblocking_allreduce(send, comm, recvbuf=out).wait()
    out.flags.writeable = False
    with pytest.raises(al.BufferError, match="recvbuf"):
        al.nonblocking_allreduce(send, comm, recvbuf=out)
    out.flags.writeable = True
    out.dtype = np.int64                 # same memory, another dtype: must be rejected
    with pytest.raises(al.BufferError, match="recvbuf"):
        al.nonblocking_allreduce(send, comm, recvbuf=out)
    out.dtype = np.float64
    send[:] = [4.0, 3.0, 2.0, 1.0]
    al.nonblocking_allreduce(send, comm, recvbuf=out).wait()
    np.testing.assert_array_equal(out, [4.0 * comm.size, 3.0 * comm.size, 2.0 * comm.size,
                                        1.0 * comm.size])


def test_a_nonblocking_repeat_while_the_first_is_in_flight_runs_on_its_own(comm):
    """The same nonblocking call made again before the first was waited for starts a run of
    its own (the first's plan is busy), and each request completes its run."""
    send, first_out, second_out = np.full(3, 2.0), np.zeros(3), np.zeros(3)
    first = al.nonblocking_allreduce(send, comm, recvbuf=first_out)
    second = al.nonblocking_allreduce(send, comm, recvbuf=first_out)
    assert second is not first
    first.wait()
    second.wait()
    np.testing.assert_array_equal(first_out, np.full(3, 2.0 * comm.size))
    third = al.nonblocking_allreduce(send, comm, recvbuf=second_out)
    third.wait()
    np.testing.assert_array_equal(second_out, np.full(3, 2.0 * comm.size))


def test_repeated_nonblocking_calls_each_complete_with_their_own_results(comm):
    """A plan's nonblocking runs one after another (the engine may run each on the same
    State): each request completes once, stays complete while later runs go on, and each
    run reduces what the buffer held when it started."""
    send, out = np.zeros(5), np.zeros(5)
    done = []
    for step in range(6):
        send[:] = np.arange(5.0) + step
        request = al.nonblocking_allreduce(send, comm, recvbuf=out)
        request.wait()
        np.testing.assert_array_equal(out, (np.arange(5.0) + step) * comm.size)
        done.append(request)
    later = al.nonblocking_allreduce(send, comm, recvbuf=out)
    assert all(request.test() for request in done)     # earlier runs stay complete
    later.wait()
    np.testing.assert_array_equal(out, (np.arange(5.0) + 5) * comm.size)


def test_counts_changed_in_place_are_seen(comm):
    send, out = np.arange(3.0), np.zeros(5)
    counts = [3]
    al.allgatherv(send, counts, None, comm, recvbuf=out)
    counts[0] = 2                        # the same list object, now saying 2 elements
    with pytest.raises(al.BufferError, match="buf"):
        al.allgatherv(send, counts, None, comm, recvbuf=out)


def test_freeing_the_communicator_lets_its_buffers_go(comm):
    sub = comm.split(0)
    buf = np.ones(2)
    ref = weakref.ref(buf)
    al.allreduce(buf, sub)
    al.allreduce(buf, sub)
    al.allreduce(np.ones(2), sub)        # a new array of the same kind
    sub.free()
    with pytest.raises(al.CommunicatorError, match="freed"):
        al.allreduce(buf, sub)
    with pytest.raises(al.CommunicatorError, match="freed"):
        al.allreduce(np.ones(2), sub)
    del buf
    assert _alive([ref]) == 0


def test_objects_without_cheap_checks_are_not_held(comm):
    """A bytearray's buffer is not kept exported between calls (else it could not grow),
    and a call after it grew sees its new size."""
    data, out = bytearray(8), bytearray(8)
    al.allgather(data, comm, recvbuf=out)
    data.extend(bytes(8))                # raises BufferError while a view is exported
    data[8:] = bytes(range(1, 9))
    with pytest.raises(al.BufferError, match="recvbuf: expected 16 elements"):
        al.allgather(data, comm, recvbuf=out)
    out.extend(bytes(8))
    al.allgather(data, comm, recvbuf=out)
    assert out == data


def test_new_arrays_of_a_seen_kind_get_their_own_results(comm):
    """Out of place on new arrays of one kind: each call writes its own receive buffer,
    never an earlier call's."""
    outs = []
    for value in range(1, 6):
        out = np.full(3, -1.0)
        al.allreduce(np.full(3, float(value)), comm, recvbuf=out)
        outs.append(out)
    for value, out in enumerate(outs, 1):
        np.testing.assert_array_equal(out, np.full(3, value * comm.size))


def test_the_same_arrays_again_after_new_ones_still_work(comm):
    """Arrays seen twice in a row become a remembered call; results stay each call's."""
    a, out = np.full(2, 2.0), np.zeros(2)
    for repeat in range(4):
        al.allreduce(np.full(2, 9.0), comm, recvbuf=np.zeros(2))
        a[:] = repeat
        al.allreduce(a, comm, recvbuf=out)
        al.allreduce(a, comm, recvbuf=out)
        np.testing.assert_array_equal(out, np.full(2, repeat * comm.size))


def test_overlapping_new_arrays_of_a_seen_kind_are_rejected(comm):
    """Views that do not own their memory are checked for overlap on every call: a kind
    first seen with disjoint views does not let overlapping ones through."""
    base = np.zeros(8)
    al.allreduce(base[:4], comm, recvbuf=base[4:])          # disjoint views
    other = np.arange(8.0)
    before = other.copy()
    with pytest.raises(al.BufferError, match="overlaps"):
        al.allreduce(other[:4], comm, recvbuf=other[2:6])   # same kind, overlapping
    np.testing.assert_array_equal(other, before)
    al.allreduce(other[:4], comm, recvbuf=other[4:])        # still usable
    np.testing.assert_array_equal(other[4:], before[:4] * comm.size)


def test_another_size_dtype_or_layout_gets_its_own_decision(comm):
    """New arrays differing from a seen kind in count, dtype, writability or contiguity
    are validated as a first call is: right answers or the right error, nothing run."""
    al.allreduce(np.ones(4), comm, recvbuf=np.zeros(4))
    out = np.zeros(6)
    al.allreduce(np.ones(6), comm, recvbuf=out)                      # another count
    np.testing.assert_array_equal(out, np.full(6, comm.size))
    out32 = np.zeros(4, np.float32)
    al.allreduce(np.ones(4, np.float32), comm, recvbuf=out32)        # another dtype
    np.testing.assert_array_equal(out32, np.full(4, comm.size, np.float32))
    with pytest.raises(al.BufferError, match="recvbuf: expected 4 elements"):
        al.allreduce(np.ones(4), comm, recvbuf=np.zeros(5))
    with pytest.raises(al.BufferError, match="recvbuf: expected elements of float64|"
                                             "recvbuf: expected 4 elements of float64"):
        al.allreduce(np.ones(4), comm, recvbuf=np.zeros(4, np.float32))
    frozen = np.zeros(4)
    frozen.flags.writeable = False
    with pytest.raises(al.BufferError, match="recvbuf: expected a writable"):
        al.allreduce(np.ones(4), comm, recvbuf=frozen)
    strided = np.zeros(8)[::2]
    with pytest.raises(al.BufferError, match="recvbuf: expected a C-contiguous"):
        al.allreduce(np.ones(4), comm, recvbuf=strided)
    np.testing.assert_array_equal(strided, np.zeros(4))


def test_overlap_is_checked_among_any_number_of_new_arrays(comm):
    """multisendrecv's receive buffers must not overlap its send buffers: a kind first
    seen with disjoint views still rejects overlapping ones."""
    def blocks(array, *starts):
        return [(array[start:start + 1], 0) for start in starts]

    disjoint = np.zeros(4)
    al.multisendrecv(blocks(disjoint, 0, 1), blocks(disjoint, 2, 3), comm)
    other = np.arange(4.0)
    with pytest.raises(al.BufferError, match="overlaps"):
        al.multisendrecv(blocks(other, 0, 1), blocks(other, 1, 3), comm)
    np.testing.assert_array_equal(other, np.arange(4.0))


def test_new_cpu_tensors_of_a_seen_kind_get_their_own_results(comm):
    """New CPU tensors every call (what torch code passes) reuse the kind's decisions as
    numpy arrays do: each call reads and writes its own tensors; one that cannot be viewed
    as an array (not contiguous) is still rejected, and the same tensor twice still works."""
    torch = pytest.importorskip("torch")
    for step in range(6):
        values = np.arange(5, dtype=np.float32) + step
        tensor = torch.tensor(values)
        out = torch.zeros(5)
        al.allreduce(tensor, comm, recvbuf=out, op=al.MAX)
        np.testing.assert_array_equal(out.numpy(), values)
        np.testing.assert_array_equal(tensor.numpy(), values)      # only read
        in_place = torch.tensor(values * 2)
        al.allreduce(in_place, comm)
        np.testing.assert_array_equal(in_place.numpy(), values * 2 * comm.size)
    graded = torch.ones(5, requires_grad=True)
    out = torch.zeros(5)
    al.allreduce(graded, comm, recvbuf=out)
    np.testing.assert_array_equal(out.numpy(), np.full(5, comm.size, np.float32))
    with pytest.raises(al.BufferError, match="recvbuf"):
        al.allreduce(torch.ones(5), comm, recvbuf=torch.zeros(10)[::2])
    again = torch.ones(5)
    for _ in range(3):
        before = again.clone().numpy()
        al.allreduce(again, comm)
        np.testing.assert_array_equal(again.numpy(), before * comm.size)
