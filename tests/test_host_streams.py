"""Host stream runtime: ordering, events, cross-stream waits, flags, errors and lifetime."""
from __future__ import annotations

import gc
import os
import random
import sys
import threading
import time

import numpy as np
import pytest

from aluminum.backends import runtime
from aluminum.backends.runtime import host

# Generous bound for "this should finish"; a hang fails the test instead of stalling it.
DONE = 10.0
# How long to watch a blocked stream to check it really stays blocked.
HOLD = 0.05


@pytest.fixture
def stream():
    s = host.HostStream()
    yield s
    s.close(timeout=DONE)


def _threads_named(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name and t.is_alive()]


def test_work_runs_in_fifo_order(stream):
    out = []
    items = list(range(500))
    for i in items:
        stream.enqueue(out.append, i)
    stream.synchronize(timeout=DONE)
    assert out == items


def test_enqueue_returns_before_the_work_runs(stream):
    ran = []
    stream.enqueue_sleep(HOLD)
    start = time.perf_counter()
    stream.enqueue(ran.append, "late")
    assert time.perf_counter() - start < HOLD
    assert ran == []
    stream.synchronize(timeout=DONE)
    assert ran == ["late"]


def test_slow_stream_keeps_order_across_sleeps(stream):
    out = []
    for i in range(6):
        stream.enqueue_sleep(0.005 * (i % 3))
        stream.enqueue(out.append, i)
    stream.synchronize(timeout=DONE)
    assert out == sorted(out) and len(out) == 6


def test_event_completes_after_earlier_work(stream):
    flag = host.HostStreamFlag()
    stream.wait_flag(flag)
    event = stream.record_event()
    time.sleep(HOLD)
    assert not event.query()
    with pytest.raises(TimeoutError):
        event.synchronize(timeout=HOLD)
    flag.set()
    event.synchronize(timeout=DONE)
    assert event.query()


def test_polling_query_does_not_starve_the_worker_of_the_gil(stream):
    # A poller that never released the GIL would wait a switch interval per event.
    rounds = 40
    starved = rounds * sys.getswitchinterval()
    stream.synchronize(timeout=DONE)
    start = time.perf_counter()
    for _ in range(rounds):
        event = stream.record_event()
        while not event.query():
            pass
    assert time.perf_counter() - start < starved / 2


def test_event_of_idle_stream_completes(stream):
    event = stream.record_event()
    event.synchronize(timeout=DONE)
    assert event.query()


def test_wait_event_orders_a_second_stream_after_the_first(stream):
    other = host.HostStream()
    try:
        out = []
        flag = host.HostStreamFlag()
        stream.wait_flag(flag)
        stream.enqueue(out.append, "first")
        other.wait_event(stream.record_event())
        other.enqueue(out.append, "second")
        time.sleep(HOLD)
        assert out == []
        flag.set()
        other.synchronize(timeout=DONE)
        assert out == ["first", "second"]
    finally:
        other.close(timeout=DONE)


def test_wait_event_accepts_any_event_with_synchronize(stream):
    class ForeignEvent:
        def __init__(self):
            self.released = threading.Event()

        def query(self):
            return self.released.is_set()

        def synchronize(self):
            self.released.wait()

    foreign = ForeignEvent()
    out = []
    stream.wait_event(foreign)
    stream.enqueue(out.append, "after")
    time.sleep(HOLD)
    assert out == []
    foreign.released.set()
    stream.synchronize(timeout=DONE)
    assert out == ["after"]


def test_flag_blocks_the_stream_until_set_from_another_thread(stream):
    out = []
    flag = host.HostStreamFlag()
    stream.enqueue(out.append, "before")
    reached = stream.record_event()
    stream.wait_flag(flag)
    stream.enqueue(out.append, "after")
    reached.synchronize(timeout=DONE)
    time.sleep(HOLD)
    assert out == ["before"] and not flag.is_set()
    setter = threading.Thread(target=flag.set)
    setter.start()
    setter.join()
    stream.synchronize(timeout=DONE)
    assert flag.is_set() and out == ["before", "after"]


def test_wait_flag_rejects_other_objects(stream):
    with pytest.raises(TypeError, match="flag: expected a HostStreamFlag"):
        stream.wait_flag(threading.Event())


def test_synchronize_times_out_while_blocked(stream):
    flag = host.HostStreamFlag()
    stream.wait_flag(flag)
    with pytest.raises(TimeoutError):
        stream.synchronize(timeout=HOLD)
    flag.set()
    stream.synchronize(timeout=DONE)


def test_error_surfaces_at_synchronize_and_later_work_still_runs(stream):
    out = []
    stream.enqueue(out.append, 1)
    stream.enqueue(lambda: 1 / 0)
    stream.enqueue(out.append, 2)
    with pytest.raises(ZeroDivisionError):
        stream.synchronize(timeout=DONE)
    assert out == [1, 2]
    stream.synchronize(timeout=DONE)  # reported once, then cleared
    stream.enqueue(out.append, 3)
    stream.synchronize(timeout=DONE)
    assert out == [1, 2, 3]


def test_first_error_wins(stream):
    def fail(exc):
        raise exc

    stream.enqueue(fail, KeyError("first"))
    stream.enqueue(fail, ValueError("second"))
    with pytest.raises(KeyError, match="first"):
        stream.synchronize(timeout=DONE)


def test_event_after_an_error_reraises_it_event_before_does_not(stream):
    before = stream.record_event()
    stream.enqueue(lambda: [][1])
    after = stream.record_event()
    before.synchronize(timeout=DONE)
    with pytest.raises(IndexError):
        after.synchronize(timeout=DONE)


def test_synchronize_from_own_work_is_an_error_not_a_deadlock(stream):
    stream.enqueue(stream.synchronize)
    with pytest.raises(RuntimeError, match="own work"):
        stream.synchronize(timeout=DONE)


def test_many_streams_each_keep_their_own_order():
    streams = [host.HostStream() for _ in range(64)]
    outs = [[] for _ in streams]
    try:
        for i in range(20):
            for s, out in zip(streams, outs):
                s.enqueue(out.append, i)
        for s in streams:
            s.synchronize(timeout=DONE)
        assert all(out == list(range(20)) for out in outs)
    finally:
        for s in streams:
            s.close(timeout=DONE)


def test_concurrent_producers_keep_per_producer_order(stream):
    out = []
    producers = 4
    per_producer = 300

    def produce(p):
        for i in range(per_producer):
            stream.enqueue(out.append, (p, i))

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stream.synchronize(timeout=DONE)
    assert len(out) == producers * per_producer
    for p in range(producers):
        assert [i for q, i in out if q == p] == list(range(per_producer))


def test_streams_start_no_thread_until_used():
    streams = [host.HostStream() for _ in range(200)]
    assert not any(_threads_named(s.name) for s in streams)
    streams[0].enqueue(int)
    streams[0].synchronize(timeout=DONE)
    assert len(_threads_named(streams[0].name)) == 1
    assert not any(_threads_named(s.name) for s in streams[1:])
    streams[0].close(timeout=DONE)


def test_close_drains_work_stops_thread_and_refuses_more():
    s = host.HostStream(name="al-test-close")
    out = []
    s.enqueue_sleep(0.01)
    for i in range(10):
        s.enqueue(out.append, i)
    s.close(timeout=DONE)
    assert out == list(range(10))
    assert _threads_named("al-test-close") == []
    assert s.closed
    with pytest.raises(RuntimeError, match="closed"):
        s.enqueue(out.append, 99)
    s.close()  # idempotent


def test_unreferenced_stream_stops_its_thread():
    s = host.HostStream(name="al-test-collected")
    s.enqueue(int)
    s.synchronize(timeout=DONE)
    assert len(_threads_named("al-test-collected")) == 1
    del s
    gc.collect()
    deadline = time.monotonic() + DONE
    while _threads_named("al-test-collected") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _threads_named("al-test-collected") == []


def test_default_stream_is_shared_and_replaced_after_close():
    first = host.default_stream()
    assert host.default_stream() is first
    first.close(timeout=DONE)
    second = host.default_stream()
    assert second is not first and not second.closed
    out = []
    second.enqueue(out.append, "ok")
    second.synchronize(timeout=DONE)
    assert out == ["ok"]


def test_copy_async_copies_bytes_in_stream_order(stream):
    rng = np.random.default_rng(7)
    src = rng.standard_normal(1000).astype(np.float32)
    dst = host.alloc_pinned(src.shape, src.dtype)
    dst[:] = 0
    flag = host.HostStreamFlag()
    stream.wait_flag(flag)
    host.copy_async(dst, src, stream)
    time.sleep(HOLD)
    assert not np.array_equal(dst, src)
    flag.set()
    stream.synchronize(timeout=DONE)
    np.testing.assert_array_equal(dst, src)


def test_copy_async_copies_raw_bytes_between_dtypes(stream):
    src = np.arange(12, dtype=np.int32).reshape(3, 4)
    dst = np.zeros(src.nbytes, dtype=np.uint8)
    host.copy_async(dst, src, stream)
    stream.synchronize(timeout=DONE)
    np.testing.assert_array_equal(dst.view(np.int32).reshape(3, 4), src)


def test_copy_async_sees_the_source_when_the_stream_gets_there(stream):
    src = np.zeros(8)
    dst = np.empty(8)
    stream.enqueue(src.fill, 3.0)
    host.copy_async(dst, src, stream)
    stream.synchronize(timeout=DONE)
    np.testing.assert_array_equal(dst, np.full(8, 3.0))


@pytest.mark.parametrize("dst, src, message", [
    (np.zeros(4, np.float32), np.zeros(5, np.float32), "dst: expected 20 bytes"),
    (np.zeros(4), np.zeros((4, 2))[:, 0], "src: expected a C-contiguous"),
    (np.zeros(8)[::2], np.zeros(4), "dst: expected a C-contiguous"),
])
def test_copy_async_rejects_bad_buffers_without_touching_them(stream, dst, src, message):
    before = dst.copy()
    with pytest.raises(ValueError, match=message):
        host.copy_async(dst, src, stream)
    stream.synchronize(timeout=DONE)
    np.testing.assert_array_equal(dst, before)


def test_copy_async_rejects_read_only_destination(stream):
    dst = np.zeros(4)
    dst.flags.writeable = False
    with pytest.raises(ValueError, match="dst: expected a writable"):
        host.copy_async(dst, np.ones(4), stream)


def test_host_runtime_implements_the_interface():
    rt = runtime.host_runtime()
    assert isinstance(rt, runtime.DeviceRuntime) and rt.is_available()
    assert rt.as_stream(None) is host.default_stream()
    s = rt.new_stream()
    try:
        assert rt.as_stream(s) is s
        assert runtime.runtime_for(s) is rt
        assert isinstance(s, runtime.Stream)
        assert isinstance(s.record_event(), runtime.Event)
        flag = rt.new_flag()
        assert isinstance(flag, runtime.StreamFlag) and not flag.is_set()
        pinned = rt.alloc_pinned((3, 5), np.float16)
        assert pinned.shape == (3, 5) and pinned.dtype == np.float16
        src = np.arange(15, dtype=np.float16).reshape(3, 5)
        rt.copy_async(pinned, src, s)
        s.synchronize(timeout=DONE)
        np.testing.assert_array_equal(pinned, src)
    finally:
        s.close(timeout=DONE)


def test_foreign_streams_are_rejected():
    with pytest.raises(TypeError, match="stream: expected a HostStream or None, got object"):
        runtime.host_runtime().as_stream(object())
    with pytest.raises(TypeError, match="stream: expected a HostStream or a CUDA stream"):
        runtime.runtime_for(object())


# -- quick items run on the thread that gets the stream there -------------------------------

def test_events_and_flags_need_no_worker_thread(stream):
    """An HT operation on host memory is events and a flag: no thread hand-off at all."""
    ready = stream.record_event()
    assert ready.query()                       # idle stream: completed by record_event itself
    flag = host.HostStreamFlag()
    stream.wait_flag(flag)
    ran_on = []
    stream.enqueue_instant(lambda: ran_on.append(threading.current_thread()))
    done = stream.record_event()
    time.sleep(HOLD)
    assert not done.query() and ran_on == []   # parked on the flag, nothing blocks
    flag.set()
    assert done.query() and ran_on == [threading.current_thread()]   # run by set() itself
    assert _threads_named(stream.name) == []


def test_worker_work_behind_a_flag_goes_to_the_worker(stream):
    flag = host.HostStreamFlag()
    stream.wait_flag(flag)
    ran_on = []
    stream.enqueue(lambda: ran_on.append(threading.current_thread().name))
    after = stream.record_event()
    flag.set()
    after.synchronize(timeout=DONE)
    assert ran_on == [stream.name]


def test_parked_stream_does_not_spin_its_worker(stream):
    stream.enqueue(int)                        # start the worker thread
    stream.synchronize(timeout=DONE)
    flag = host.HostStreamFlag()
    stream.enqueue_sleep(0.02)                 # the worker itself reaches the flag
    stream.wait_flag(flag)
    stream.enqueue(int)
    worker = _threads_named(stream.name)[0]
    before = _thread_cpu_s(worker)
    time.sleep(0.2)
    assert _thread_cpu_s(worker) - before < 0.05
    flag.set()
    stream.synchronize(timeout=DONE)


def test_synchronize_drives_the_installed_progress_hook(stream):
    """A thread synchronizing a stream parked on a flag lets the hook (the progress engine,
    installed by the HT backend) make the progress that sets it."""
    flag = host.HostStreamFlag()
    calls = []

    def drive(predicate, timeout):
        calls.append(predicate())
        flag.set()

    installed = runtime.waiting_driver()
    runtime.drive_while_waiting(drive)
    try:
        stream.wait_flag(flag)
        stream.synchronize(timeout=DONE)
    finally:
        runtime.drive_while_waiting(installed)
    assert calls == [False] and flag.is_set()


def _thread_cpu_s(thread: threading.Thread) -> float:
    with open(f"/proc/self/task/{thread.native_id}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- any mix of worker work, quick work, flags and events keeps FIFO order ------------------

from hypothesis import given, settings, strategies as st  # noqa: E402

_ITEM = st.sampled_from(["work", "instant", "flag", "event", "sleep"])


@settings(max_examples=40, deadline=None)
@given(plans=st.lists(st.lists(_ITEM, max_size=25), min_size=1, max_size=3),
       seed=st.integers(0, 2**32 - 1))
def test_any_mix_of_items_runs_in_order_and_completes(plans, seed):
    """Several producer threads each enqueue a random mix on one stream, while a releaser
    sets the flags in a random order: each producer's items run in its order, every event
    completes, and synchronize returns (the runner hand-offs between enqueuing, flag-setting
    and worker threads lose nothing and deadlock nowhere)."""
    release_order = random.Random(seed)   # used by a thread: not hypothesis's own Random
    stream = host.HostStream()
    ran: list[tuple[int, int]] = []
    flags: list[host.HostStreamFlag] = []
    events: list[host.HostEvent] = []
    lock = threading.Lock()

    def produce(producer, plan):
        for i, kind in enumerate(plan):
            if kind == "work":
                stream.enqueue(ran.append, (producer, i))
            elif kind == "instant":
                stream.enqueue_instant(ran.append, (producer, i))
            elif kind == "sleep":
                stream.enqueue_sleep(0.0005)
            elif kind == "flag":
                flag = host.HostStreamFlag()
                with lock:
                    flags.append(flag)
                stream.wait_flag(flag)
            else:
                event = stream.record_event()
                with lock:
                    events.append(event)

    producing = threading.Event()
    producing.set()

    def release():   # sets flags in a random order while the producers still enqueue
        while True:
            with lock:
                unset = [flag for flag in flags if not flag.is_set()]
            if unset:
                release_order.choice(unset).set()
            elif not producing.is_set():
                return
            time.sleep(0.0001)

    producers = [threading.Thread(target=produce, args=(p, plan))
                 for p, plan in enumerate(plans)]
    releaser = threading.Thread(target=release)
    for thread in [releaser, *producers]:
        thread.start()
    for thread in producers:
        thread.join(DONE)
    producing.clear()
    releaser.join(DONE)
    try:
        stream.synchronize(timeout=DONE)
        for event in events:
            event.synchronize(timeout=DONE)
        for p, plan in enumerate(plans):
            expected = [(p, i) for i, kind in enumerate(plan) if kind in ("work", "instant")]
            assert [item for item in ran if item[0] == p] == expected
    finally:
        stream.close(timeout=DONE)
