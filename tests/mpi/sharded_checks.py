"""Checks shared by the multi-rank tests of sharded programs.

``agree(check)``: an assertion that fails on some ranks only leaves the others waiting in
the next collective; gathering every rank's outcome first makes all of them fail together,
each with every rank's error.  ``gathered``: a sharded variable's whole value from every
rank's part, placed by numpy's own ``array_split`` (not the library's layouts).
"""
import numpy as np
from mpi4py import MPI


def agree(check) -> None:
    """Run ``check()`` here; fail on every rank with every rank's error if any rank failed."""
    try:
        check()
        error = None
    except Exception as exc:  # noqa: BLE001 - reported on every rank below
        error = f"{type(exc).__name__}: {exc}"
    errors = MPI.COMM_WORLD.allgather(error)
    failed = [f"rank {r}: {e}" for r, e in enumerate(errors) if e is not None]
    assert not failed, "\n".join(failed)


def box(placements, mesh_shape, rank, shape):
    """Rank's index arrays per dimension: nested numpy.array_split (row-major mesh)."""
    coord = np.unravel_index(rank, mesh_shape)
    idx = [np.arange(n) for n in shape]
    for i, p in enumerate(placements):
        if p.startswith("S("):
            d = int(p[2:-1])
            idx[d] = np.array_split(idx[d], mesh_shape[i])[coord[i]]
    return np.ix_(*idx)


def gathered(program, scope, name):
    """The whole variable ``name`` from every rank's part; replicas must be equal."""
    var = program.global_block().var(name)
    layout = var.layout.to_dict()
    parts = MPI.COMM_WORLD.allgather(np.asarray(scope[name]))
    full = np.full(var.shape, np.nan)
    for rank, part in enumerate(parts):
        where = box(layout["placements"], layout["mesh"]["shape"], rank, var.shape)
        if not np.all(np.isnan(full[where])):
            np.testing.assert_array_equal(full[where], part, err_msg=f"{name}: replicas")
        full[where] = part
    return full
