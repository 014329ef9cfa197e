"""The op table (aluminum/core/ops.py) is what the API, the backends and the checks obey:
each row has its three public calls with the arguments the row declares, every host backend
implements every row, and a backend cannot register an operation the table lacks."""
import inspect

import pytest

import aluminum as al
from aluminum.backends import Backend, register_backend

ROWS = sorted(al.OPS.values(), key=lambda row: row.name)


def _forms(name):
    return [getattr(al, name), getattr(al, f"nonblocking_{name}"), getattr(al, f"{name}_init")]


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.name)
def test_each_operation_has_its_three_calls_with_the_declared_arguments(row):
    blocking, nonblocking, init = _forms(row.name)
    parameters = inspect.signature(blocking).parameters
    assert inspect.signature(nonblocking).parameters.keys() == parameters.keys()
    assert inspect.signature(init).parameters.keys() == parameters.keys()
    assert set(row.buffers) <= set(parameters)
    assert ("root" in parameters) == row.rooted
    assert ("op" in parameters) == row.reduction
    assert any("counts" in name for name in parameters) == row.vector
    assert "comm" in parameters and "algo" in parameters


def test_the_table_has_the_eighteen_operations_of_aluminum():
    collectives = {"allreduce", "reduce", "reduce_scatter", "reduce_scatterv", "allgather",
                   "allgatherv", "alltoall", "alltoallv", "bcast", "gather", "gatherv",
                   "scatter", "scatterv", "barrier"}
    messages = {"send", "recv", "sendrecv", "multisendrecv"}
    assert al.OPS.keys() == collectives | messages
    assert {name for name, row in al.OPS.items() if row.collective} == collectives
    assert {row.base for row in ROWS if row.vector} == {"reduce_scatter", "allgather",
                                                          "alltoall", "gather", "scatter"}


@pytest.mark.parametrize("backend", ["mpi", "ht"])
@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.name)
def test_every_host_backend_implements_every_operation(backend, row):
    assert al.algorithms(row.name, backend)


def test_a_backend_registering_an_unknown_operation_is_refused():
    with pytest.raises(al.ArgumentError, match="allreduse"):
        register_backend(Backend(name="typo", ops={"allreduse": {"ring": object}}))
    with pytest.raises(al.UnsupportedError, match="backend: expected one of"):
        al.algorithms("allreduse", "typo")      # nothing was registered
