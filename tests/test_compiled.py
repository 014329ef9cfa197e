"""The compiled hot path and its .py files (aluminum/core/compiled.py): ``al.compiled()``
says which runs, and both give the same results.

The suite runs on what the README's install built (compiled where a C compiler exists);
``test_uncompiled_runs_the_same`` runs a representative part again with ``AL_PURE_PYTHON=1``:
the plan cache's tests on one rank and the calls on new and repeated buffers of every kind
of operation on two ranks, each compared with its numpy reference.
"""
import importlib.machinery
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

import aluminum as al
from aluminum import recall
from aluminum.core import compiled as compiled_module

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))
from test_multirank import run_ranks  # noqa: E402  (tests/ is not a package)

PURE_PYTHON = os.environ.get("AL_PURE_PYTHON", "") not in ("", "0")


def _has_compiler() -> bool:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(compiler) is not None


def test_compiled_says_which_modules_run():
    """Compiled where the install could compile (never with AL_PURE_PYTHON=1), and then
    the modules are their extensions; the .py files otherwise."""
    if PURE_PYTHON:
        assert al.compiled() is False
        assert recall.__file__.endswith(".py")
    elif _has_compiler():
        assert al.compiled() is True, "a C compiler is here but the hot path is not " \
            "compiled: reinstall (pip install -e .) with Cython available to the build"
        assert not recall.__file__.endswith(".py")


def test_arrays_changed_in_place_are_seen():
    """A remembered call whose array changed in place (its shape, its writability: the
    compiled check reads them from the array itself) takes validation again."""
    with al.MPICommunicator() as comm:
        buf = np.arange(4, dtype=np.float32)
        for _ in range(2):
            al.allreduce(buf, comm)            # remembered
        buf.shape = (2, 2)
        al.allreduce(buf, comm)                # another shape, still valid: as a new call
        np.testing.assert_array_equal(buf.ravel(), np.arange(4) * comm.size ** 3)
        buf.setflags(write=False)
        with pytest.raises(al.BufferError, match="writable"):
            al.allreduce(buf, comm)


TOKEN_TEST = "test_the_driver_token_is_one_holder_at_a_time_and_bounded_waits_end"
DIRECT_TEST = "test_a_direct_call_runs_what_its_class_defines_and_any_callable_runs_too"


def test_uncompiled_runs_the_same(tmp_path, monkeypatch):
    """With AL_PURE_PYTHON=1: the tests above and the plan cache's in a new process, then
    the calls on new and repeated buffers on two ranks.  The new process cannot import
    Cython (a ``cython`` module first on its path raises ImportError), so the modules run on
    aluminum/core/pure_cython.py, as where Cython is not installed, whichever this
    environment has."""
    hidden = tmp_path / "no_cython"
    hidden.mkdir()
    (hidden / "cython.py").write_text("raise ImportError('Cython hidden by the test')\n")
    path = os.pathsep.join(p for p in (str(hidden), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, AL_PURE_PYTHON="1", PYTHONPATH=path)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
         f"{TESTS / 'test_compiled.py'}::test_compiled_says_which_modules_run",
         f"{TESTS / 'test_compiled.py'}::test_arrays_changed_in_place_are_seen",
         f"{TESTS / 'test_engine.py'}::{TOKEN_TEST}",
         f"{TESTS / 'test_engine.py'}::{DIRECT_TEST}",
         str(TESTS / "test_recall.py")],
        env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    monkeypatch.setenv("AL_PURE_PYTHON", "1")
    run_ranks("rank_ops_new_buffers.py", 2, tmp_path)


def test_a_source_newer_than_its_extension_runs_instead(tmp_path):
    """An edited (checked out, merged) .py or .pxd file is newer than the extension built
    from it: that .py file must run, with a warning, never the outdated extension."""
    source = tmp_path / "hot.py"
    source.write_text("x = 1\n")
    built = tmp_path / f"hot{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    built.write_bytes(b"")
    os.utime(source, (1000, 1000))
    os.utime(built, (2000, 2000))
    assert not compiled_module._stale(str(source))
    os.utime(source, (3000, 3000))
    with pytest.warns(al.PerformanceWarning, match="changed after its compiled extension"):
        assert compiled_module._stale(str(source))
    os.utime(source, (1000, 1000))
    (tmp_path / "hot.pxd").write_text("")
    os.utime(tmp_path / "hot.pxd", (3000, 3000))
    with pytest.warns(al.PerformanceWarning):
        assert compiled_module._stale(str(source))
