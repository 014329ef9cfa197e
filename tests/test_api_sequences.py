"""Hypothesis draws sequences of public API calls - communicators made, copied, split and
freed, blocking and nonblocking allreduces, plans made, started, waited for and freed, in
any order, with finalize at the end - and tests/mpi/api_sequences.py runs them on 2 ranks,
checking every result and every error against a model.  No sequence may crash a rank, hang
(each launch has a timeout) or answer wrongly."""
import json
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aluminum.launcher import launch

PROGRAM = Path(__file__).parent / "mpi" / "api_sequences.py"
TIMEOUT = 120

index = st.integers(0, 5)
count = st.sampled_from([0, 1, 3, 1000])
step = st.one_of(
    st.tuples(st.just("copy"), index),
    st.tuples(st.just("split"), index, st.booleans()),
    st.tuples(st.just("free"), index),
    st.tuples(st.just("allreduce"), index, count, st.booleans()),
    st.tuples(st.just("plan"), index, count),
    st.tuples(st.just("start"), index),
    st.tuples(st.just("wait"), index),
    st.tuples(st.just("plan_free"), index),
)
sequences = st.lists(st.lists(step, min_size=1, max_size=12), min_size=1, max_size=4)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequences)
def test_no_sequence_of_api_calls_crashes_hangs_or_answers_wrongly(drawn):
    argv = [sys.executable, str(PROGRAM), json.dumps(drawn)]
    try:
        result = launch(2, argv, timeout=TIMEOUT, capture=True)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"hung for {TIMEOUT} s on {drawn}:\n{exc.output}") from None
    assert result.returncode == 0, f"{drawn}:\n{result.stdout}"
    assert result.stdout.count(f"ok: {len(drawn)} sequences") == 2, result.stdout
