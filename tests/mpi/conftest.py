"""Fixtures for tests that run on every rank of an MPI job (see tests/test_multirank.py).

Hypothesis is derandomized and never shrinks here: every rank must draw the same examples in
the same order, or the ranks would issue different collectives and hang.
"""
import contextlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, settings

import aluminum as al
from aluminum.tuning import selector
from backends import BACKENDS, open_communicator, settle

settings.register_profile(
    "mpi", derandomize=True, database=None, deadline=None, print_blob=False,
    phases=[Phase.explicit, Phase.generate], max_examples=25,
    suppress_health_check=list(HealthCheck))
settings.load_profile("mpi")


@pytest.fixture(scope="session")
def comm():
    with al.MPICommunicator() as communicator:
        yield communicator


@pytest.fixture(scope="module", params=BACKENDS)
def backend_comm(request):
    """A communicator on each backend of backends.BACKENDS in turn (one per module)."""
    with open_communicator(request.param) as communicator:
        yield communicator
        settle(communicator)


def rank_data(shape_count: int, dtype, rank: int, seed: int = 0) -> np.ndarray:
    """Deterministic per-rank data small enough that sums and products stay exact."""
    rng = np.random.default_rng(seed * 1009 + rank)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape_count).astype(bool)
    values = rng.integers(-3 if dtype.kind != "u" else 0, 4, shape_count)
    return values.astype(dtype)


@contextlib.contextmanager
def tuning_table(name: str, rank: int, rules: list):
    """The selector reads ``rules`` inside the block (from this rank's ``<name>.rank<N>.json``
    in ``$AL_TEST_LOGDIR``), and the table it read before after it."""
    path = Path(os.environ["AL_TEST_LOGDIR"]) / f"{name}.rank{rank}.json"
    path.write_text(json.dumps({"format": "aluminum-tuning/1", "rules": rules}))
    previous = os.environ.get("AL_TUNING_FILE")
    os.environ["AL_TUNING_FILE"] = str(path)
    selector.reload()
    try:
        yield
    finally:
        if previous is None:
            del os.environ["AL_TUNING_FILE"]
        else:
            os.environ["AL_TUNING_FILE"] = previous
        selector.reload()
