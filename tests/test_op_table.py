"""The op table (aluminum/core/ops.py) is what the API, the backends and the checks obey:
each row has its three public calls with the arguments the row declares, validation checks
what the row declares, every host backend implements every row, a backend cannot register
an operation the table lacks, and the API wrappers, tracing and the torch backend name an
operation only as a key of the table."""
import ast
import inspect
import pydoc
import sys
from pathlib import Path

import numpy as np
import pytest

import aluminum as al
from aluminum.backends import Backend, register_backend

ROWS = sorted(al.OPS.values(), key=lambda row: row.name)
ROOT = Path(__file__).resolve().parent.parent
P = inspect.Parameter


def _forms(name):
    return [getattr(al, name), getattr(al, f"nonblocking_{name}"), getattr(al, f"{name}_init")]


def _expected_parameters(row):
    """The public calls' parameters as the row declares them: (name, kind, default)."""
    positional = [(name, P.POSITIONAL_OR_KEYWORD, P.empty) for name in row.arguments]
    positional += [("comm", P.POSITIONAL_OR_KEYWORD, P.empty),
                   ("stream", P.POSITIONAL_OR_KEYWORD, None)]
    keywords = [("root", 0)] * row.rooted + [("op", al.SUM)] * row.reduction
    keywords += [("recvbuf", None)] * (row.in_place is al.core.ops.InPlace.OMITTED_RECVBUF)
    keywords += [("algo", "automatic")]
    return positional + [(name, P.KEYWORD_ONLY, default) for name, default in keywords]


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.name)
def test_each_operation_has_its_three_calls_with_the_declared_arguments(row):
    expected = _expected_parameters(row)
    for form, name in zip(_forms(row.name),
                          (row.name, f"nonblocking_{row.name}", f"{row.name}_init")):
        parameters = inspect.signature(form).parameters.values()
        assert [(p.name, p.kind, p.default) for p in parameters] == expected, name
        assert form.__name__ == form.__qualname__ == name
        assert getattr(sys.modules[form.__module__], name) is form   # importable, picklable
        assert form.__doc__.strip()
        if form is not _forms(row.name)[0]:
            assert f"``{row.name}``" in form.__doc__      # "Start ``allreduce`` ..."
        text = pydoc.render_doc(form, renderer=pydoc.plaintext)     # what help() shows
        assert f"{name}{inspect.signature(form)}" in text and form.__doc__.split()[0] in text
    assert set(row.buffers) <= {name for name, _, _ in expected}
    assert any("counts" in name for name in row.arguments) == row.vector
    assert tuple(al.calls_of(row.name)) == tuple(_forms(row.name))


def test_the_public_calls_are_written_from_the_op_table():
    """aluminum/calls.py is generated: it must be what the op table gives today
    (``python -m aluminum.forms`` writes it again)."""
    from aluminum import forms

    written = (ROOT / "aluminum" / "calls.py").read_text()
    assert written == forms.calls_source(), "run `python -m aluminum.forms`"


def _bad_arguments(row):
    """(argument, value) pairs the row's checks must refuse on a 1-rank communicator."""
    bad = [("root", 1)] * row.rooted + [("op", "no such op")] * row.reduction
    bad += [(name, 1) for name in row.peers]
    bad += [(name, [1, 1]) for name in row.layouts]     # two entries for one rank
    return bad


def _call_values(row, comm):
    values = {name: (np.zeros(1) if name in row.buffers else 0) for name in row.arguments}
    values.update({name: [] for name in ("sends", "recvs") if name in row.arguments})
    values.update({name: [1] for name in row.layouts})
    return values


@pytest.mark.parametrize("row", [row for row in ROWS if _bad_arguments(row)],
                         ids=lambda row: row.name)
def test_every_form_checks_the_arguments_the_row_declares(row, comm):
    """Each declared argument (root, op, peers, layouts) is checked by all three calls,
    before anything runs, with an error naming it."""
    for name, value in _bad_arguments(row):
        for form in _forms(row.name):
            values = {**_call_values(row, comm), name: value}
            keywords = {key: values.pop(key) for key in ("root", "op") if key in values}
            with pytest.raises(al.ArgumentError, match=f"^{name}: "):
                form(*values.values(), comm, **keywords)


@pytest.fixture(scope="module")
def comm():
    with al.MPICommunicator() as communicator:
        yield communicator


# -- only the table names operations --------------------------------------------------------

TABLE_READERS = sorted(
    [ROOT / "aluminum" / f"{module}.py" for module in (
        "allgather", "allreduce", "alltoall", "barrier", "bcast", "gather", "pt2pt", "reduce",
        "reduce_scatter", "scatter", "forms", "validate")]
    + [ROOT / "aluminum" / "core" / "trace.py"]
    + list((ROOT / "aluminum" / "torch").glob("*.py")))


def _names_outside_the_table(source: str) -> list[str]:
    """Operation names written as strings other than as keys of ``OPS[...]`` (or as the
    names a module exports, in ``__all__``)."""
    tree = ast.parse(source)
    allowed = {id(node.slice) for node in ast.walk(tree) if isinstance(node, ast.Subscript)
               and getattr(node.value, "id", getattr(node.value, "attr", None)) == "OPS"}
    allowed |= {id(item) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                and [getattr(target, "id", None) for target in node.targets] == ["__all__"]
                for item in ast.walk(node.value)}
    return [f"line {node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in al.OPS
            and id(node) not in allowed]


@pytest.mark.parametrize("path", TABLE_READERS, ids=lambda path: path.name)
def test_wrappers_tracing_and_torch_name_operations_only_through_the_table(path):
    assert _names_outside_the_table(path.read_text()) == []


def test_the_name_check_catches_a_bare_name():
    assert _names_outside_the_table('call("bcast")\nx = al.OPS["bcast"]\n'
                                    '__all__ = ["bcast"]\n') == ["line 1: 'bcast'"]


def test_each_vector_operation_generalizes_an_operation_of_the_table():
    """A "v" row takes per-rank layouts where its base takes equal blocks, and is otherwise
    the same operation (no list of names to extend when an operation is added)."""
    for row in ROWS:
        base = al.OPS[row.base]
        assert bool(row.layouts) == row.vector == (base is not row), row.name
        assert (base.family, base.reduction, base.rooted, base.buffers, base.vector) == \
            (row.family, row.reduction, row.rooted, row.buffers, False), row.name
        assert base.arguments == row.arguments[:len(base.arguments)], row.name


@pytest.mark.parametrize("backend", ["mpi", "ht"])
@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.name)
def test_every_host_backend_implements_every_operation(backend, row):
    assert al.algorithms(row.name, backend)


def test_a_backend_registering_an_unknown_operation_is_refused():
    with pytest.raises(al.ArgumentError, match="allreduse"):
        register_backend(Backend(name="typo", ops={"allreduse": {"ring": object}}))
    with pytest.raises(al.UnsupportedError, match="backend: expected one of"):
        al.algorithms("allreduse", "typo")      # nothing was registered
