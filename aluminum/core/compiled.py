"""Which modules are compiled, and the switch that runs them uncompiled.

The small-call hot path (the plan cache's lookup, a plan's prepared run, MPI's C calls, and
the progress engine's requests, scheduler and solo path) is written in Cython's pure-Python
mode: each module below is one ``.py`` file that runs as it is and that
the install (setup.py) also compiles, where Cython and a C compiler are present, into an
extension module next to it (``recall.cpython-311-x86_64-linux-gnu.so`` beside
``recall.py``).  Python imports the extension where both exist; both behave the same.

``AL_PURE_PYTHON=1`` (read when aluminum is first imported) makes the ``.py`` files load
even where the extensions exist, through a finder placed before Python's own; tests run
both ways with it.  ``compiled()`` says which ones this process uses.

What surprises people: where the install found no compiler, aluminum runs uncompiled and
warns once at import (``PerformanceWarning``): every result is the same, small calls take
longer.  An editable install compiles in place: a ``.py`` (or ``.pxd``) file edited, checked
out or merged after its extension was built is newer than it, and then the ``.py`` file
runs, with a ``PerformanceWarning`` naming it, until ``pip install -e .`` builds it again
-- never the old extension's outdated code.

This module imports nothing of aluminum: setup.py reads ``MODULES`` from it.
"""
from __future__ import annotations

import importlib.machinery
import os
import sys
import warnings

# The compiled modules, by import name (setup.py maps them to their files).
MODULES = (
    "aluminum.arrivals",
    "aluminum.recall",
    "aluminum.calls",
    "aluminum.plan",
    "aluminum.backends.mpi.passthrough.native_calls",
    "aluminum.backends.mpi.passthrough.mpi_call",
    "aluminum.engine.token",
    "aluminum.engine.direct",
    "aluminum.engine.request",
    "aluminum.engine.scheduler",
    "aluminum.engine.progress",
    "aluminum.engine.completion",
    "aluminum.backends.mpi.passthrough.persistent",
    "aluminum.backends.mpi.algorithms.board_wait",
)

PURE_PYTHON = os.environ.get("AL_PURE_PYTHON", "") not in ("", "0")
_SOURCES = PURE_PYTHON     # load the .py files of MODULES imported from now on


class PerformanceWarning(UserWarning):
    """aluminum runs its hot path uncompiled (the install found no C compiler)."""


class _SourceFirst:
    """A meta-path finder loading the ``.py`` file of each of ``MODULES`` (none other)
    with ``AL_PURE_PYTHON=1``, or where that file is newer than its extension."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in MODULES or not path:
            return None
        finder_of = importlib.machinery.FileFinder
        source = (importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES)
        for folder in path:
            spec = finder_of(folder, source).find_spec(name)
            if spec is not None:
                global _SOURCES
                if _SOURCES or _any_stale(name, folder):
                    _SOURCES = True   # and for every later one: they cimport each other
                    return spec
                return None     # the extension is up to date: Python's finders load it
        return None


def _any_stale(name: str, folder: str) -> bool:
    """Whether ``name``'s extension, or that of a module of ``MODULES`` beside it in
    ``folder``, is older than its source: the extensions of one package cimport each other's
    types, so they load all or none (warns of each stale one)."""
    package = name.rpartition(".")[0]
    stale = [_stale(os.path.join(folder, other.rpartition(".")[2] + ".py"))
             for other in MODULES if other.rpartition(".")[0] == package]
    return any(stale)


def _stale(source: str) -> bool:
    """Whether the extension built from ``source`` (a .py file) is older than it or its
    .pxd; warns where it is."""
    stem = source[:-len(".py")]
    built = [stem + suffix for suffix in importlib.machinery.EXTENSION_SUFFIXES
             if os.path.exists(stem + suffix)]
    if not built:
        return False
    edited = max(os.path.getmtime(path) for path in (source, stem + ".pxd")
                 if os.path.exists(path))
    if edited <= min(os.path.getmtime(path) for path in built):
        return False
    warnings.warn(f"aluminum: {source} changed after its compiled extension was built: "
                  "running the .py file (same results, slower small calls); `pip install "
                  "-e .` compiles it again", PerformanceWarning, stacklevel=2)
    return True


def compiled() -> bool:
    """Whether this process runs the compiled hot path: every module of ``MODULES`` loaded
    (or, not imported yet, to be loaded) from its extension; False with
    ``AL_PURE_PYTHON=1`` or where none was built.  Imports nothing."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for name in MODULES:
        module = sys.modules.get(name)
        if module is not None:
            if not (getattr(module, "__file__", None) or "").endswith(suffixes):
                return False
        elif PURE_PYTHON or not _extension_exists(name, suffixes):
            return False
    return True


def _extension_exists(name: str, suffixes: tuple) -> bool:
    """Whether module ``name``'s extension file is in its package, found from the nearest
    imported package above it (importing the module's own package could load MPI)."""
    parts = name.split(".")
    for split in range(len(parts) - 1, 0, -1):
        package = sys.modules.get(".".join(parts[:split]))
        if package is not None and hasattr(package, "__path__"):
            return any(os.path.exists(os.path.join(folder, *parts[split:]) + suffix)
                       for folder in package.__path__ for suffix in suffixes)
    return False


def warn_if_uncompiled() -> None:
    """Warn (once) where the hot path runs uncompiled without ``AL_PURE_PYTHON`` asking."""
    if not PURE_PYTHON and not compiled():
        warnings.warn("aluminum runs uncompiled (no compiled extension of "
                      f"{', '.join(MODULES)} was found: the install had no C compiler or "
                      "no Cython): results are the same, small calls are slower; install "
                      "a C compiler and reinstall to compile them", PerformanceWarning,
                      stacklevel=3)


if _SourceFirst not in sys.meta_path:
    sys.meta_path.insert(0, _SourceFirst)
