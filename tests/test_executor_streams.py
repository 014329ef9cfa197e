"""The ParallelExecutor's streams: fetches on their own stream, cross-stream waits by event
or on the host (``ExecutionStrategy.sync``), a communicator's stream for its ops, and cupy
streams for cupy arrays; every result equals the sequential Executor's bit for bit."""
import importlib.util
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aluminum as al
import aluminum.executor as ex
import aluminum.executor.parallel_executor as parallel_executor
import aluminum.executor.scheduler as scheduler
from aluminum.executor import streams

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SYNC_MODES = ["event", "wait"]


def _mnist_mlp():
    spec = importlib.util.spec_from_file_location("mnist_mlp", EXAMPLES / "mnist_mlp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mnist_mlp = _mnist_mlp()


def _train(steps, make_runner, dtype="float32", to_device=lambda a: a, extra_fetch=()):
    """Parameters and fetched values (loss, then ``extra_fetch``) after ``steps`` runs;
    ``make_runner(main, loss, scope)`` returns run(fetch_list, feed)."""
    main, startup, loss, *_ = mnist_mlp.build(dtype)
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    for name in list(scope):
        scope[name] = to_device(scope[name])
    images, labels = mnist_mlp.dataset(64, dtype)
    feed = {"image": to_device(images), "label": to_device(labels)}
    run = make_runner(main, loss, scope)
    values = [run([loss.name, *extra_fetch], feed) for _ in range(steps)]
    params = {name: np.asarray(getattr(scope[name], "get", lambda: scope[name])())
              for name, var in main.global_block().vars.items() if var.persistable}
    return params, values


def _sequential(main, loss, scope):
    return lambda fetch, feed: ex.Executor().run(main, feed, fetch, scope)


def _parallel(threads, sync, before_op=None, **options):
    def make(main, loss, scope):
        runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope,
                                     exec_strategy=ex.ExecutionStrategy(
                                         threads, sync=sync, before_op=before_op), **options)
        return lambda fetch, feed: runner.run(fetch, feed)
    return make


def _assert_identical(a, b):
    (params_a, values_a), (params_b, values_b) = a, b
    assert params_a.keys() == params_b.keys()
    for name in params_a:
        np.testing.assert_array_equal(params_a[name], params_b[name], err_msg=name)
    assert len(values_a) == len(values_b)
    for x, y in zip(values_a, values_b):
        for u, v in zip(x, y, strict=True):
            np.testing.assert_array_equal(u, v)


def test_sync_is_event_or_wait():
    assert ex.ExecutionStrategy().sync == "event"
    with pytest.raises(ex.ProgramError, match="sync: expected one of event, wait, got 'fence'"):
        ex.ExecutionStrategy(2, sync="fence")
    with pytest.raises(ex.ProgramError, match="num_threads: expected at least 1, got 0"):
        ex.ExecutionStrategy(0)


def test_every_op_has_a_stream_and_fetches_are_ops_on_the_fetch_stream():
    seen = []
    reference = _train(2, _sequential)
    result = _train(2, _parallel(2, "event", lambda h: seen.append((h.kind, h.stream))))
    _assert_identical(reference, result)
    fetches = [stream for kind, stream in seen if kind == "fetch"]
    assert fetches == ["fetch", "fetch"]                  # one fetch op per run
    assert {stream for kind, stream in seen if kind == "compute"} == {"compute"}


def _queued_compute(made: list):
    """``make_streams`` giving streams as a device does, on the host: compute runs on a host
    stream of its own, so an op has only been enqueued when the scheduler moves on.  Each
    executor's streams are appended to ``made``."""
    def make_streams(comm, on_gpu):
        made.append(streams.make_streams(comm, on_gpu))
        made[-1]["compute"] = streams.HostQueueStream("compute")
        return made[-1]
    return make_streams


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("sync", SYNC_MODES)
def test_a_compute_stream_that_runs_late_changes_nothing(monkeypatch, threads, sync):
    """Compute on a host stream that sleeps before each op, so a fetch that did not wait
    for its producer's event would read a value not computed yet."""
    made = []
    monkeypatch.setattr(parallel_executor, "make_streams", _queued_compute(made))
    delays = iter(np.random.default_rng(threads).exponential(3e-4, 100000))

    def late(handle):
        if handle.kind == "compute":
            made[-1]["compute"].stream.enqueue_sleep(next(delays))
    names = ["relu_2", "fc3.w@GRAD"]
    _assert_identical(_train(3, _sequential, extra_fetch=names),
                      _train(3, _parallel(threads, sync, late), extra_fetch=names))


def test_without_the_waits_a_fetch_reads_too_early(monkeypatch):
    """The check above has teeth: with cross-stream waits switched off, the fetch stream
    copies the loss before the late compute stream has computed it."""
    made = []
    monkeypatch.setattr(parallel_executor, "make_streams", _queued_compute(made))
    monkeypatch.setattr(scheduler, "wait_for", lambda event, consumer, sync: None)
    main, startup, loss, *_ = mnist_mlp.build("float32")
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    images, labels = mnist_mlp.dataset(8, "float32")
    runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope,
                                 exec_strategy=ex.ExecutionStrategy(1))

    def late(handle):
        if handle.index == 0:
            made[-1]["compute"].stream.enqueue_sleep(0.05)
    runner.exec_strategy.before_op = late
    with pytest.raises(ex.ExecutionError, match=f"op fetch .*KeyError.*{loss.name}"):
        runner.run([loss], {"image": images, "label": labels})


@pytest.fixture(scope="module")
def host_transfer_comm():
    """A one-rank host-transfer communicator (its ops are ordered on its host stream),
    shared by the examples of the test below."""
    comm = al.HostTransferCommunicator(stream=al.HostStream("test-comm"))
    yield comm
    comm.free()


@settings(max_examples=6, deadline=None, derandomize=True, database=None)
@given(seed=st.integers(0, 2 ** 16), threads=st.sampled_from([1, 2, 4]),
       sync=st.sampled_from(SYNC_MODES), fuse=st.booleans())
def test_communication_on_the_communicators_stream_changes_nothing(host_transfer_comm, seed,
                                                                   threads, sync, fuse):
    """Data-parallel on one rank of a host-transfer communicator: allreduces are enqueued
    on its stream, which sleeps at random before each; consumers (the optimizer on the
    host, the fetch stream) must wait for them.  One rank: the result is the sequential
    one bit for bit (scale by 1/1, a sum of one)."""
    comm = host_transfer_comm
    delays = iter(np.random.default_rng(seed).exponential(5e-4, 100000))

    def late(handle):
        time.sleep(next(delays) / 4)
        if handle.kind == "communication":
            comm.stream.enqueue_sleep(next(delays))
    make = _parallel(threads, sync, late, comm=comm,
                     build_strategy=ex.BuildStrategy(fuse_all_reduce_ops=fuse))
    names = ["fc3.w@GRAD"]
    _assert_identical(_train(2, _sequential, "float64", extra_fetch=names),
                      _train(2, make, "float64", extra_fetch=names))


def _cupy():
    cupy = pytest.importorskip("cupy", reason="cupy is not installed: no cupy streams here")
    if not cupy.is_available():
        pytest.skip("cupy has no GPU here: no cupy streams to run on")
    return cupy


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("sync", SYNC_MODES)
def test_cupy_arrays_run_on_cupy_streams_and_change_nothing(monkeypatch, threads, sync):
    cupy = _cupy()
    made, seen = [], []

    def make_streams(comm, on_gpu):
        made.append(streams.make_streams(comm, on_gpu))
        return made[-1]
    monkeypatch.setattr(parallel_executor, "make_streams", make_streams)

    def record(handle):
        seen.append(type(made[-1][handle.stream]).__name__)
    names = ["fc3.w@GRAD"]
    reference = _train(3, _sequential, to_device=cupy.asarray, extra_fetch=names)
    _assert_identical(reference, _train(3, _parallel(threads, sync, record),
                                        to_device=cupy.asarray, extra_fetch=names))
    assert set(seen) == {"CupyStream"}
