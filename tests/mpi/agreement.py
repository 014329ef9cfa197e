"""``agree(check)``: run a check on every rank and fail on every rank if any rank failed.

An assertion that fails on some ranks only leaves the others waiting in the next
collective; gathering every rank's outcome first makes all of them fail together, each
with every rank's error."""
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
