"""The string enums of aluminum/core/names.py: a member is its string everywhere the library
takes or prints a name."""
import json

import numpy as np
import pytest

import aluminum as al
from aluminum.tuning import selector


def test_members_are_their_strings():
    assert al.Algorithm.RING == "ring" and hash(al.Algorithm.RING) == hash("ring")
    assert {"ring": 1}[al.Algorithm.RING] == 1
    assert f"{al.Algorithm.SHARED_MEMORY}" == "shared_memory"
    assert json.dumps([al.Placement.INPLACE, al.Mode.NONBLOCKING]) == '["inplace", "nonblocking"]'
    assert al.Device.HOST == "cpu"


def test_algorithms_lists_members():
    names = al.algorithms("allreduce", "mpi")
    assert all(isinstance(name, al.Algorithm) for name in names)
    assert {al.Algorithm.MPI_PASSTHROUGH, al.Algorithm.RING} <= set(names)


@pytest.mark.parametrize("algo", [al.Algorithm.RING, "ring", al.Algorithm.AUTOMATIC])
def test_a_member_or_its_string_selects_the_same_algorithm(algo):
    with al.MPICommunicator() as comm:
        buf = np.arange(5, dtype=np.float64)
        al.allreduce(buf, comm, algo=algo)
        np.testing.assert_array_equal(buf, np.arange(5.0) * comm.size)


def test_a_table_with_an_unknown_placement_names_the_choices():
    rule = {"backend": "mpi", "op": "allreduce", "comm_size": 2, "by_bytes": [[0, "ring"]],
            "placement": "sideways"}
    with pytest.raises(selector.TuningTableError,
                       match=r"placement: expected one of \['inplace', 'outofplace'\]"):
        selector.parse_table({"format": "aluminum-tuning/1", "rules": [rule]})


def test_parsed_rules_hold_members():
    rule = {"backend": "mpi", "op": "allreduce", "comm_size": 2, "by_bytes": [[0, "ring"]],
            "placement": "inplace", "mode": "blocking"}
    parsed = selector.parse_table({"format": "aluminum-tuning/1", "rules": [rule]}).rules[0]
    assert parsed.placement is al.Placement.INPLACE and parsed.mode is al.Mode.BLOCKING
