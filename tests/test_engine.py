"""The progress engine and Request, with fake states (no MPI traffic).

Each test builds its own ``ProgressEngine`` (no pinning) and shuts it down afterwards; tests of
``al.finalize``, interpreter exit and ``AL_TRACE`` run in a subprocess, since finalize is
one-way per process.
"""
import collections
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import traceback

import pytest

import aluminum as al
from aluminum.core import trace
from aluminum.engine import Action, RunType, State
from aluminum.engine.progress import EngineConfig, ProgressEngine, default_core

WAIT = 10.0   # generous bound for anything that should be quick (the machine may be loaded)


class Fake(State):
    """A state that logs ``(event, label)`` and completes after ``steps`` steps, once
    ``gate`` (a threading.Event) is set; ``fail`` = "start" or "step" raises there."""

    def __init__(self, label, log=None, *, steps=1, gate=None, stream=None,
                 run_type=RunType.BOUNDED, fail=None):
        self.label, self.log, self.steps, self.gate, self.fail = label, log, steps, gate, fail
        self.compute_stream, self.run_type = stream, run_type
        self.name = f"fake/{label}"
        self.stepped = 0

    def record(self, event):
        if self.log is not None:
            self.log.append((event, self.label))

    def start(self):
        self.record("start")
        if self.fail == "start":
            raise ValueError(f"{self.label} cannot start")

    def step(self):
        self.stepped += 1
        if self.fail == "step":
            raise KeyError(f"{self.label} broke")
        if self.gate is not None and not self.gate.is_set():
            return Action.CONTINUE
        if self.stepped < self.steps:
            return Action.CONTINUE
        self.record("complete")
        return Action.COMPLETE


@pytest.fixture
def make_engine():
    engines = []

    def make(**settings):
        settings.setdefault("pin", False)
        engine = ProgressEngine(EngineConfig(**settings))
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.shutdown(2.0)


def started(log):
    return [label for event, label in log if event == "start"]


def running(log):
    """How many states had started but not completed after each log entry."""
    count, counts = 0, []
    for event, _ in log:
        count += 1 if event == "start" else -1
        counts.append(count)
    return counts


def idle(engine):
    """Run one op so the engine thread exists, then give it time to go to sleep (with
    ``spin_s=0`` it sleeps once its naps see no submissions for ``LAZY_S``)."""
    engine.submit(Fake("warm-up")).wait(timeout=WAIT)
    time.sleep(0.1)
    return engine


def assert_admits_exactly(engine, bound):
    """Gated ops on one stream: exactly ``bound`` start, so every op before them gave its
    admission slot back (a leaked slot would admit fewer, a lost count more)."""
    log, gate = [], threading.Event()
    requests = [engine.submit(Fake(f"probe{i}", log, gate=gate)) for i in range(bound + 1)]
    deadline = time.monotonic() + WAIT
    while len(started(log)) < bound and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(0.05)
    assert started(log) == [f"probe{i}" for i in range(bound)]
    gate.set()
    al.wait_all(requests, timeout=WAIT)
    assert started(log)[-1] == f"probe{bound}"


# -- admission ----------------------------------------------------------------------------

def test_one_stream_starts_in_submission_order(make_engine):
    engine = make_engine(max_concurrent=3)
    log = []
    requests = [engine.submit(Fake(i, log, steps=1 + (7 * i) % 5)) for i in range(200)]
    al.wait_all(requests, timeout=WAIT)
    assert started(log) == list(range(200))


def test_concurrency_bound(make_engine):
    engine = make_engine(max_concurrent=2)
    log, gate = [], threading.Event()
    requests = [engine.submit(Fake(i, log, gate=gate)) for i in range(6)]
    time.sleep(0.05)
    assert started(log) == [0, 1]
    gate.set()
    al.wait_all(requests, timeout=WAIT)
    assert max(running(log)) == 2


def test_idle_stream_admits_one_beyond_the_bound(make_engine):
    engine = make_engine(max_concurrent=1)
    log, gate = [], threading.Event()
    busy = [engine.submit(Fake(f"a{i}", log, gate=gate, stream="A")) for i in range(3)]
    other = engine.submit(Fake("b0", log, stream="B"))
    later = engine.submit(Fake("b1", log, stream="B", gate=gate))
    other.wait(timeout=WAIT)        # B had nothing running: admitted despite the bound
    assert started(log) == ["a0", "b0"]
    assert not later.done           # ...but only one: B's next op waits for a free slot
    gate.set()
    al.wait_all(busy + [later], timeout=WAIT)


def test_host_states_queue_per_communicator(make_engine):
    engine = make_engine(max_concurrent=1)
    log, gate = [], threading.Event()
    states = [Fake(f"{comm}{i}", log, gate=gate if comm == "A" else None)
              for comm in "AB" for i in range(2)]
    for state in states:
        state.comm = state.label[0]      # any hashable stands in for a communicator here
    requests = [engine.submit(state) for state in states]
    al.wait_all(requests[2:], timeout=WAIT)   # comm B is not stuck behind comm A's ops
    assert started(log) == ["A0", "B0", "B1"]
    gate.set()
    al.wait_all(requests, timeout=WAIT)


def test_wait_started_returns_once_this_keys_queue_has_started(make_engine):
    """What a blocking call waits for before it starts its collective on the caller's
    thread: every op submitted before it on its communicator started, not finished; ops of
    other communicators stuck behind the bound are not waited for."""
    engine = make_engine(max_concurrent=1)
    log, first_done, stuck = [], threading.Event(), threading.Event()
    mine = [Fake("A0", log, gate=first_done), Fake("A1", log), Fake("A2", log, steps=20)]
    other = Fake("B", log, gate=stuck)
    for state, comm in zip(mine + [other], "AAAB"):
        state.comm = comm
    requests = [engine.submit(state) for state in [other] + mine]
    # A1 can only start once A0 completed, and A0 waits for this timer.
    threading.Timer(0.2, first_done.set).start()
    began = time.monotonic()
    engine.wait_started("A")
    assert time.monotonic() - began >= 0.15
    assert {"A0", "A1", "A2"} <= set(started(log))
    engine.wait_started("C")        # nothing queued on this one: at once
    assert not requests[0].done     # B, on another communicator, was never waited for
    stuck.set()
    al.wait_all(requests, timeout=WAIT)


def test_unbounded_sends_posted_before_receives_never_deadlock(make_engine):
    engine = make_engine(max_concurrent=1)
    mailbox = collections.Counter()

    class Recv(State):
        run_type = RunType.UNBOUNDED
        name = "recv"

        def __init__(self, tag):
            self.tag = tag

        def step(self):
            if mailbox[self.tag] == 0:
                return Action.CONTINUE
            mailbox[self.tag] -= 1
            return Action.COMPLETE

    class Send(Recv):
        name = "send"

        def start(self):
            mailbox[self.tag] += 1

        def step(self):
            return Action.COMPLETE

    receives = [engine.submit(Recv(tag)) for tag in range(50)]   # all posted first, one stream
    sends = [engine.submit(Send(tag)) for tag in reversed(range(50))]
    al.wait_all(receives + sends, timeout=WAIT)


def test_advance_moves_only_the_head_of_a_stage(make_engine):
    engine = make_engine(max_concurrent=4)
    log, gate = [], threading.Event()

    class Staged(State):
        """Stage 0: wait for ``gate`` (first op only); ADVANCE; stage 1: log and complete."""

        name = "staged"

        def __init__(self, label, wait_for):
            self.label, self.wait_for, self.stage = label, wait_for, 0

        def step(self):
            if self.stage == 0:
                if self.wait_for is not None and not self.wait_for.is_set():
                    return Action.CONTINUE
                self.stage = 1
                log.append(("advance", self.label))
                return Action.ADVANCE
            log.append(("stage1", self.label))
            return Action.COMPLETE

    first = engine.submit(Staged("first", gate))
    second = engine.submit(Staged("second", None))   # ready at once, but behind the head
    time.sleep(0.05)
    assert log == [("advance", "second")]             # parked: never stepped in stage 1
    gate.set()
    al.wait_all([first, second], timeout=WAIT)
    assert log.index(("advance", "first")) < log.index(("stage1", "second"))
    assert log.count(("advance", "second")) == 1       # a parked state is not stepped again


# -- failures -----------------------------------------------------------------------------

def test_failing_state_fails_only_its_own_request(make_engine):
    engine = make_engine()
    log = []
    good = [engine.submit(Fake(i, log, steps=3)) for i in range(5)]
    bad_start = engine.submit(Fake("s", fail="start"))
    bad_step = engine.submit(Fake("t", fail="step"))
    more = [engine.submit(Fake(i, log, steps=2)) for i in range(5, 10)]
    with pytest.raises(al.OperationError, match="fake/t") as caught:
        bad_step.wait(timeout=WAIT)
    cause = caught.value.__cause__
    assert isinstance(cause, KeyError)
    frames = [frame.name for frame in traceback.extract_tb(cause.__traceback__)]
    assert "step" in frames                      # the engine-side traceback is kept
    with pytest.raises(al.OperationError) as caught:
        bad_start.test()
    assert isinstance(caught.value.__cause__, ValueError)
    al.wait_all(good + more, timeout=WAIT)
    with pytest.raises(al.OperationError):
        al.wait_all([bad_step] + good, timeout=WAIT)   # waits for all, then raises


def test_a_lone_waited_state_is_stepped_like_any_other(make_engine):
    """On an idle engine a lone op is started by submit and driven by its waiter (the
    engine thread may step it too); either way it follows its script, and neither a
    completed nor a failed lone op keeps an admission slot."""
    engine = idle(make_engine(max_concurrent=2, spin_s=0.0))

    class TwoStage(State):
        name = "two-stage"
        script = [Action.CONTINUE, Action.ADVANCE, Action.CONTINUE, Action.COMPLETE]

        def __init__(self):
            self.steps = 0

        def step(self):
            self.steps += 1
            return self.script[self.steps - 1]

    request = engine.submit(TwoStage())
    request.wait(timeout=WAIT)
    assert request.state.steps == 4 and request.stage == 1
    with pytest.raises(al.OperationError):
        engine.submit(Fake("x", fail="step")).wait(timeout=WAIT)
    with pytest.raises(al.OperationError):
        engine.submit(Fake("y", fail="start")).wait(timeout=WAIT)
    assert_admits_exactly(engine, 2)


def test_idle_engine_starts_a_submission_before_submit_returns(make_engine):
    """Like MPI_Iallreduce, an op submitted to an idle engine is posted by the call itself;
    ops submitted behind it still start in order once it is running."""
    engine = idle(make_engine(max_concurrent=2, spin_s=0.0))
    log, gate = [], threading.Event()
    first = engine.submit(Fake("first", log, gate=gate))
    assert started(log) == ["first"]
    later = [engine.submit(Fake(i, log)) for i in range(3)]
    gate.set()
    al.wait_all([first] + later, timeout=WAIT)
    assert started(log) == ["first", 0, 1, 2]
    assert_admits_exactly(engine, 2)


def test_bad_action_fails_the_request(make_engine):
    engine = make_engine()

    class Confused(State):
        name = "confused"

        def step(self):
            return True

    with pytest.raises(al.OperationError) as caught:
        engine.submit(Confused()).wait(timeout=WAIT)
    assert isinstance(caught.value.__cause__, TypeError)


def test_unhashable_stream_is_refused_at_submission(make_engine):
    engine = make_engine()
    with pytest.raises(TypeError, match="hashable"):
        engine.submit(Fake("bad", stream=[]))
    engine.submit(Fake("good")).wait(timeout=WAIT)


# -- threads ------------------------------------------------------------------------------

def test_eight_threads_submit_a_thousand_each(make_engine):
    engine = make_engine()
    log, errors = [], []

    def work(thread):
        try:
            stream = f"stream{thread % 4}"
            requests = [engine.submit(Fake((thread, i), log, steps=1 + i % 3, stream=stream))
                        for i in range(1000)]
            for index, request in enumerate(requests):
                if index % 7 == 0:
                    while not request.test():
                        pass
                else:
                    request.wait(timeout=WAIT * 3)
        except BaseException as exc:   # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    order = started(log)
    assert len(order) == 8000
    for thread in range(8):                  # each thread's ops started in its order
        mine = [i for t, i in order if t == thread]
        assert mine == list(range(1000))


# -- Request ------------------------------------------------------------------------------

def test_test_is_true_on_the_call_that_completes(make_engine):
    """The test() call whose step completes the op says so: it returns True, never False
    with a later call finding it done.  (An OnDevice op does not wake the sleeping engine,
    so test() calls drive it; should the engine step it anyway, the answers must still be
    False until done, then True.)"""
    engine = idle(make_engine(spin_s=0.0))
    calls, completed_in = [0], []
    caller = threading.current_thread()

    class Counted(OnDevice):
        def step(self):
            action = super().step()
            if action is Action.COMPLETE and threading.current_thread() is caller:
                completed_in.append(calls[0])
            return action

    request = engine.submit(Counted("x", steps=3))
    answers = []
    while not answers or not answers[-1]:
        calls[0] += 1
        answers.append(request.test())
        assert calls[0] < 10_000
    assert answers == [False] * (len(answers) - 1) + [True]
    assert completed_in in ([], [len(answers)])
    assert request.test() and request.done


def test_test_never_lags_behind_completion(make_engine):
    engine = make_engine()
    gate = threading.Event()
    request = engine.submit(Fake("x", gate=gate))
    assert not request.test()
    gate.set()
    deadline = time.monotonic() + WAIT
    while not request.done and time.monotonic() < deadline:
        time.sleep(0.001)
    assert request.test()


def test_wait_timeout_leaves_the_request_pending(make_engine):
    engine = make_engine()
    gate = threading.Event()
    request = engine.submit(Fake("slow", gate=gate))
    start = time.monotonic()
    with pytest.raises(al.TimeoutError, match=r"fake/slow \(request #1\)"):
        request.wait(timeout=0.1)
    assert time.monotonic() - start < 2
    gate.set()
    request.wait(timeout=WAIT)


def test_al_timeout_bounds_a_plain_wait(make_engine):
    engine = make_engine(timeout_s=0.1)
    gate = threading.Event()
    request = engine.submit(Fake("stuck", gate=gate))
    with pytest.raises(al.TimeoutError, match="AL_TIMEOUT"):
        request.wait()
    gate.set()


def test_wait_all_and_test_all(make_engine):
    engine = make_engine()
    gate = threading.Event()
    requests = [engine.submit(Fake(i, gate=gate if i == 3 else None)) for i in range(6)]
    assert not al.test_all(requests)
    with pytest.raises(al.TimeoutError):
        al.wait_all(requests, timeout=0.05)
    gate.set()
    al.wait_all(requests, timeout=WAIT)
    assert al.test_all(requests)


def test_wait_on_stream_enqueues_a_wait_on_the_completion_event(make_engine):
    engine = make_engine()

    class Stream:
        name = "s"

        def __init__(self):
            self.waited = []

        def wait_event(self, event):
            self.waited.append(event)

    stream, other, marker, gate = Stream(), Stream(), object(), threading.Event()

    class OnStream(Fake):
        def completion_event(self):
            return marker

    request = engine.submit(OnStream("x", gate=gate, stream=stream))
    request.wait_on_stream()           # returns at once: the host is not blocked
    request.wait_on_stream(other)
    assert stream.waited == [marker] and other.waited == [marker] and not request.done
    gate.set()
    host_only = engine.submit(Fake("h", steps=2))
    host_only.wait_on_stream(other)    # no completion event: waits on the host
    assert host_only.done and other.waited == [marker]
    request.wait(timeout=WAIT)


# -- lifetime -----------------------------------------------------------------------------

def test_shutdown_completes_what_can_complete_and_fails_the_rest(make_engine):
    engine = make_engine()
    soon = threading.Timer(0.1, (gate := threading.Event()).set)
    soon.start()
    finishing = engine.submit(Fake("finishing", gate=gate))
    stuck = engine.submit(Fake("stuck", gate=threading.Event(), stream="S"))
    start = time.monotonic()
    assert engine.shutdown(timeout=0.5) is False
    assert time.monotonic() - start < 2
    finishing.wait(timeout=0)
    with pytest.raises(al.TimeoutError, match="fake/stuck.*still pending"):
        stuck.wait(timeout=0)
    with pytest.raises(al.CommunicatorError):
        engine.submit(Fake("late"))
    assert not engine.thread.is_alive()


def test_idle_engine_sleeps(make_engine):
    engine = make_engine(spin_s=100e-6)
    al.wait_all([engine.submit(Fake(i, steps=5)) for i in range(100)], timeout=WAIT)
    time.sleep(0.1)
    stat = f"/proc/self/task/{engine.thread.native_id}/schedstat"
    if not os.path.exists(stat):
        pytest.skip("needs /proc/<pid>/task/<tid>/schedstat")
    before = int(open(stat).read().split()[0])
    time.sleep(1.0)
    busy_ns = int(open(stat).read().split()[0]) - before
    assert busy_ns < 10e6, f"idle engine used {busy_ns / 1e6:.1f} ms of CPU in 1 s"
    request = engine.submit(Fake("after-sleep", steps=2))   # the submission wakes it up:
    deadline = time.monotonic() + WAIT                      # (.done does not drive)
    while not request.done and time.monotonic() < deadline:
        time.sleep(0.001)
    assert request.done


def test_background_progress_after_callers_drove(make_engine):
    """Callers that wait drive their own ops, and the engine learns to nap instead of being
    woken by each submission; an op nobody waits for must still run in the background."""
    engine = make_engine()
    for i in range(200):
        engine.submit(Fake(i, steps=3)).wait(timeout=WAIT)
    for _ in range(3):
        request = engine.submit(Fake("unattended", steps=3))
        deadline = time.monotonic() + WAIT
        while not request.done and time.monotonic() < deadline:
            time.sleep(0.0005)               # .done does not drive: only the engine can
        assert request.done


def test_background_submission_wakes_an_engine_napping_for_callers(make_engine):
    """A request nobody will wait for (a blocking HT call on a CUDA stream) must not wait for
    the napping engine to notice it: submit(background=True) wakes it."""
    engine = make_engine()
    for i in range(200):                # the engine concludes callers drive, and naps
        engine.submit(Fake(i, steps=3)).wait(timeout=WAIT)
    request = engine.submit(Fake("background", steps=3), background=True)
    deadline = time.monotonic() + WAIT
    while not request.done and time.monotonic() < deadline:
        time.sleep(0.0005)
    assert request.done


class OnDevice(Fake):
    """A state whose work runs elsewhere (a GPU stream): stepping only observes it."""
    progresses_alone = True


@pytest.mark.parametrize("alone", [True, False])
def test_only_states_that_need_stepping_wake_a_sleeping_engine(make_engine, alone):
    engine = make_engine(spin_s=0.0)
    idle(engine)                        # the engine thread exists and sleeps
    gate = threading.Event()
    state = (OnDevice if alone else Fake)("op", gate=gate)
    request = engine.submit(state)
    time.sleep(0.05)
    # Only a woken engine steps a gated op again and again; nobody else drives here.
    assert (state.stepped <= 1) == alone, state.stepped
    assert not request.done
    gate.set()
    deadline = time.monotonic() + WAIT
    while not request.done and time.monotonic() < deadline:   # polls only an OnDevice op
        time.sleep(0.001)
    assert request.done


# -- configuration ------------------------------------------------------------------------

def test_config_from_env():
    config = EngineConfig.from_env({"AL_PE_NUM_CONCURRENT_OPS": "7", "AL_PE_SPIN_US": "50",
                                    "AL_PE_CORE": "1", "AL_TIMEOUT": "2.5"})
    assert (config.max_concurrent, config.core, config.timeout_s) == (7, 1, 2.5)
    assert config.spin_s == pytest.approx(50e-6)
    assert EngineConfig.from_env({}) == EngineConfig()
    assert EngineConfig.from_env({"AL_PE_CORE": "none"}).pin is False
    with pytest.warns(RuntimeWarning, match="AL_PE_NUM_CONCURRENT_OPS"):
        assert EngineConfig.from_env({"AL_PE_NUM_CONCURRENT_OPS": "0"}).max_concurrent == 4


def test_default_core_from_local_rank():
    assert default_core(0, 2, [0, 1]) == 1
    assert default_core(1, 2, [0, 1]) == 0
    assert default_core(0, 4, [0, 1]) is None        # oversubscribed: no pinning
    assert default_core(2, 3, [4, 5, 6, 7]) == 5


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_pinning(make_engine):
    core = max(os.sched_getaffinity(0))
    engine = make_engine(pin=True, core=core)
    engine.submit(Fake("x")).wait(timeout=WAIT)
    assert engine.core == core
    assert os.sched_getaffinity(engine.thread.native_id) == {core}
    broken = make_engine(pin=True, core=100000)
    with pytest.warns(RuntimeWarning, match="could not pin"):
        broken.submit(Fake("y")).wait(timeout=WAIT)
    assert broken.core is None


# -- al.finalize, interpreter exit and AL_TRACE (one process each) ------------------------

PRELUDE = textwrap.dedent('''
    import threading, time
    import aluminum as al
    from aluminum.engine import Action, State
    from aluminum.engine.progress import submit

    class Fake(State):
        def __init__(self, name, gate=None, steps=2):
            self.name, self.gate, self.steps = name, gate, steps
        def step(self):
            self.steps -= 1
            if self.steps > 0 or (self.gate is not None and not self.gate.is_set()):
                return Action.CONTINUE
            return Action.COMPLETE
''')


def run_python(code, tmp_path, **env):
    script = tmp_path / "script.py"
    script.write_text(PRELUDE + textwrap.dedent(code))
    start = time.monotonic()
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=60, env={**os.environ, **env}, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout, time.monotonic() - start


def test_finalize_fails_stuck_ops_within_al_timeout(tmp_path):
    out, _ = run_python('''
        al.init()
        done = submit(Fake("quick"))
        stuck = submit(Fake("stuck", gate=threading.Event()))
        start = time.monotonic()
        al.finalize()
        print("finalize took", round(time.monotonic() - start, 2))
        done.wait(timeout=0)
        try:
            stuck.wait(timeout=0)
        except al.TimeoutError as exc:
            print("stuck:", exc)
        try:
            submit(Fake("late"))
        except al.CommunicatorError:
            print("refused after finalize")
    ''', tmp_path, AL_TIMEOUT="0.5")
    took = float(out.split("finalize took")[1].split()[0])
    assert 0.4 < took < 3, out
    assert "stuck: stuck (request #2)" in out and "refused after finalize" in out


def test_interpreter_exit_with_a_stuck_op_is_bounded(tmp_path):
    _, took = run_python('''
        al.init()
        submit(Fake("stuck", gate=threading.Event()))
        print("exiting")
    ''', tmp_path, AL_TIMEOUT="0.5")
    assert took < 20


def test_trace_file_has_api_calls_and_engine_events(tmp_path):
    run_python('''
        import numpy as np
        comm = al.MPICommunicator()
        buf = np.ones(4, np.float32)
        al.allreduce(buf, comm)
        al.nonblocking_allreduce(buf, comm).wait()
        requests = [submit(Fake(f"op{i}", steps=3)) for i in range(3)]
        al.wait_all(requests)
        al.finalize()
    ''', tmp_path, AL_TRACE=str(tmp_path / "trace.json"))
    path = tmp_path / "trace.rank0.json"
    assert path.stat().st_mode & 0o777 == 0o600
    events = json.loads(path.read_text())     # a complete JSON array once finalized
    api = [e for e in events if e.get("cat") == "api"]
    assert [(e["name"], e["args"]["blocking"], e["args"]["family"]) for e in api] == \
        [("allreduce", True, "collective"), ("allreduce", False, "collective")]
    engine = [e for e in events if e.get("cat") == "engine"]
    by_seq = collections.defaultdict(list)
    for event in engine:
        by_seq[event["args"]["seq"]].append(event["name"])
    assert len(by_seq) == 4
    for names in by_seq.values():
        assert names == ["submit", "admit", "start", "complete"]
    slices = [e for e in events if e.get("cat") == "op"]
    assert sorted(e["ph"] for e in slices) == ["b"] * 4 + ["e"] * 4
    assert all(isinstance(e["ts"], (int, float)) for e in events if "ts" in e)


def test_a_state_cannot_wait_inside_the_engine(make_engine):
    engine = make_engine()
    inner = engine.submit(Fake("inner", gate=threading.Event(), stream="other"))

    class Waiter(State):
        name = "waiter"

        def step(self):
            inner.wait(timeout=WAIT)
            return Action.COMPLETE

    outer = engine.submit(Waiter())   # queued behind ``inner``: the engine thread steps it
    deadline = time.monotonic() + WAIT
    while not outer.done and time.monotonic() < deadline:
        time.sleep(0.001)
    with pytest.raises(al.OperationError) as caught:
        outer.wait(timeout=0)
    assert "cannot wait" in str(caught.value.__cause__)
    inner.state.gate.set()


def test_trace_writes_one_file_per_rank(tmp_path):
    from aluminum.launch import launch

    script = tmp_path / "ranks.py"
    script.write_text(textwrap.dedent('''
        import numpy as np
        import aluminum as al
        comm = al.MPICommunicator()
        al.nonblocking_allreduce(np.ones(8), comm).wait()
    '''))
    env = {**os.environ, "AL_TRACE": str(tmp_path / "t.json")}
    result = launch(2, [sys.executable, str(script)], timeout=120, env=env, capture=True)
    assert result.returncode == 0, result.stdout
    for rank in range(2):
        events = trace.read(str(tmp_path / f"t.rank{rank}.json"))
        meta = next(e for e in events if e["name"] == "aluminum_trace")
        assert meta["args"]["rank"] == rank
        names = [e["name"] for e in events if e.get("cat") == "engine"]
        assert names == ["submit", "admit", "start", "complete"]


def test_finalize_releases_a_stream_parked_on_an_abandoned_ht_operation(tmp_path):
    """A host-transfer receive that can never complete holds its stream on a flag; when
    finalize gives up on it, the stream must be released (with the error), not stay parked.
    On a host stream, which can carry the error (tests/test_ht_gpu.py: a CUDA stream)."""
    out, took = run_python('''
        import numpy as np
        from aluminum.backends.runtime.host import HostStream
        al.init()
        comm = al.HostTransferCommunicator(stream=HostStream())
        buf = np.zeros(4, np.float32)
        al.recv(buf, 0, comm)            # from itself, and no send: pending forever
        al.finalize()
        try:
            comm.stream.synchronize(timeout=5)
        except al.TimeoutError as exc:
            print("stream released with:", type(exc).__name__)
    ''', tmp_path, AL_TIMEOUT="0.5")
    assert "stream released with: TimeoutError" in out, out
    assert took < 20


def test_the_driver_token_is_one_holder_at_a_time_and_bounded_waits_end():
    """The engine's driver token (compiled: a C lock): one holder at a time, a bounded
    wait that gives up on time and one that gets it when the holder lets go, and giving
    back a token nobody holds is an error rather than a second holder later."""
    from aluminum.engine.token import DriverToken
    token = DriverToken()
    assert not token.held()
    assert token.take() and token.held()
    assert not token.take()                       # not reentrant
    start = time.monotonic()
    assert not token.take_within(0.2)             # held here: gives up after its timeout
    assert 0.15 <= time.monotonic() - start < WAIT
    releaser = threading.Timer(0.2, token.give)   # another thread lets go meanwhile
    releaser.start()
    assert token.take_within(WAIT)
    releaser.join()
    token.give()
    assert not token.held()
    with pytest.raises(RuntimeError, match="not held"):
        token.give()
    assert token.take()                           # still one holder at most
    assert not token.take()
    token.give()


def test_a_direct_call_runs_what_its_class_defines_and_any_callable_runs_too():
    """``call_made`` (what a plan's run calls) makes a ``DirectCall`` through its ``call``
    (a subclass's own, written in Python, included) and any other callable as a call."""
    from aluminum.engine.direct import DirectCall, call_made

    made = []

    class Recorded(DirectCall):
        def call(self):
            made.append("call")

    call_made(Recorded())
    Recorded()()
    call_made(lambda: made.append("plain"))
    assert made == ["call", "call", "plain"]
    with pytest.raises(NotImplementedError, match="DirectCall defines no call"):
        call_made(DirectCall())
