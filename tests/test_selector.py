"""Tests of the tuning-table selector: loading, validation fallbacks, selection and caching.

Every test writes the tables it selects from, the shipped default's stand-in included (the
autouse fixture points ``selector.SHIPPED_TABLE_PATH`` at ``SHIPPED``): retuning the table
shipped in aluminum/data changes no expectation here.  Only
``test_the_real_shipped_table_is_valid`` reads that file, and checks only that it loads."""

import json
import re
import warnings

import pytest

import aluminum as al
from aluminum.tuning import selector
from aluminum.core import errors

MPI_ALLREDUCE = {"mpi_passthrough", "recursive_doubling", "ring", "rabenseifner",
                 "shared_memory"}
KNOWN = {("mpi", "allreduce"): MPI_ALLREDUCE,
         ("mpi", "reduce_scatter"): {"mpi_passthrough", "ring", "recursive_halving"},
         ("nccl", "allreduce"): {"nccl_native"}}


def known(backend, op):
    return KNOWN[(backend, op)]  # KeyError for an unregistered pair, as a registry might


def rule(comm_size, by_bytes, backend="mpi", op="allreduce"):
    return {"backend": backend, "op": op, "comm_size": comm_size, "by_bytes": by_bytes}


TABLE = {"format": "aluminum-tuning/1", "host": "test", "rules": [
    rule(2, [[0, "recursive_doubling"], [16384, "mpi_passthrough"], [65536, "shared_memory"]]),
    rule(4, [[1024, "ring"], [65536, "rabenseifner"]]),
]}
# The stand-in for the shipped default: what the selector falls back to in these tests.
SHIPPED = {"format": "aluminum-tuning/1", "note": "shipped stand-in", "rules": [
    rule(2, [[0, "ring"], [4096, "rabenseifner"]]),
    rule(3, [[0, "mpi_passthrough"]]),
]}
REAL_SHIPPED_TABLE_PATH = selector.SHIPPED_TABLE_PATH


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """Keep the user's own table, the shipped one and the registry out of every test."""
    monkeypatch.delenv("AL_TUNING_FILE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(selector, "SHIPPED_TABLE_PATH", write(tmp_path / "shipped.json", SHIPPED))
    previous = selector.set_known_algorithms(None)
    yield
    selector.set_known_algorithms(previous)


@pytest.fixture
def table_file(tmp_path, monkeypatch):
    path = write(tmp_path / "tuning.json", TABLE)
    monkeypatch.setenv("AL_TUNING_FILE", str(path))
    return path


def select(comm_size, nbytes, backend="mpi", op="allreduce", default="DEFAULT"):
    return selector.select_algorithm(backend, op, comm_size, nbytes, default)


# --- loading -------------------------------------------------------------------------------

def test_valid_table_loads_without_warning(table_file):
    selector.set_known_algorithms(known)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert select(2, 0) == "recursive_doubling"
    table = selector.current_table()
    assert table.source == str(table_file)
    assert table.metadata == {"host": "test"}
    assert table.model is None


def test_shipped_default_is_used_without_any_table():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = selector.current_table()
    assert table.source == str(selector.SHIPPED_TABLE_PATH)
    assert table.metadata == {"note": "shipped stand-in"}
    assert sorted(table.rules_for("mpi", "allreduce")) == [2, 3]
    assert [select(2, n) for n in (4095, 4096)] == ["ring", "rabenseifner"]


def test_the_real_shipped_table_is_valid():
    """The table shipped in aluminum/data loads, names only algorithms its backends know,
    and carries model parameters (its choices are whatever the tuner measured)."""
    table = selector.read_table(REAL_SHIPPED_TABLE_PATH,
                                lambda backend, op: al.algorithms(op, backend))
    assert table.rules and table.model is not None


def test_user_cache_table_is_used_and_env_overrides_it(tmp_path, monkeypatch):
    write(tmp_path / "cache" / "aluminum" / "tuning.json",
          {"format": "aluminum-tuning/1", "rules": [rule(2, [[0, "ring"]])]})
    assert select(2, 0) == "ring"
    other = write(tmp_path / "other.json",
                  {"format": "aluminum-tuning/1", "rules": [rule(2, [[0, "rabenseifner"]])]})
    monkeypatch.setenv("AL_TUNING_FILE", str(other))
    selector.reload()
    assert select(2, 0) == "rabenseifner"


def test_user_table_path_defaults_to_home_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert selector.user_table_path() == tmp_path / "home" / ".cache" / "aluminum" / "tuning.json"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert selector.user_table_path().parent.parent == tmp_path / "home" / ".cache"


BAD_TABLES = {
    "corrupt JSON": ('{"format": "aluminum-tuning/1", "rules": [', "not valid JSON"),
    "wrong version": ({"format": "aluminum-tuning/2", "rules": []}, "aluminum-tuning/2"),
    "no format": ({"rules": []}, "missing key 'format'"),
    "no rules": ({"format": "aluminum-tuning/1"}, "missing key 'rules'"),
    "rules not a list": ({"format": "aluminum-tuning/1", "rules": {}}, "rules: expected list"),
    "top level array": ([], "top level"),
    "rule without by_bytes": ({"format": "aluminum-tuning/1", "rules": [
        {"backend": "mpi", "op": "allreduce", "comm_size": 2}]}, "missing key 'by_bytes'"),
    "empty by_bytes": ({"format": "aluminum-tuning/1", "rules": [rule(2, [])]},
                       "at least one"),
    "comm_size zero": ({"format": "aluminum-tuning/1", "rules": [rule(0, [[0, "ring"]])]},
                       "comm_size"),
    "comm_size string": ({"format": "aluminum-tuning/1", "rules": [rule("2", [[0, "ring"]])]},
                         "comm_size: expected int"),
    "bad entry": ({"format": "aluminum-tuning/1", "rules": [rule(2, [[0.5, "ring"]])]},
                  r"by_bytes\[0\]"),
    "negative threshold": ({"format": "aluminum-tuning/1", "rules": [rule(2, [[-1, "ring"]])]},
                           ">= 0"),
    "equal thresholds": ({"format": "aluminum-tuning/1", "rules": [
        rule(2, [[0, "ring"], [64, "ring"], [64, "rabenseifner"]])]},
        r"by_bytes\[2\]: thresholds must strictly ascend, got 64 after 64"),
    "descending thresholds": ({"format": "aluminum-tuning/1", "rules": [
        rule(2, [[0, "ring"], [4096, "ring"], [1024, "rabenseifner"]])]}, "strictly ascend"),
    "duplicate rule": ({"format": "aluminum-tuning/1", "rules": [
        rule(2, [[0, "ring"]]), rule(2, [[0, "ring"]])]}, r"duplicates rules\[0\]"),
    "unknown algorithm": ({"format": "aluminum-tuning/1", "rules": [
        rule(2, [[0, "ring"], [64, "biring"]])]}, "unknown allreduce algorithm.*'biring'"),
    "unknown operation": ({"format": "aluminum-tuning/1", "rules": [
        rule(2, [[0, "ring"]], op="allreduse")]}, r"rules\[0\]\.op: .*got 'allreduse'"),
    "bad model": ({"format": "aluminum-tuning/1", "model": {"alpha": -1, "beta": 0},
                   "rules": []}, "model.alpha"),
}


@pytest.mark.parametrize("content, problem", BAD_TABLES.values(), ids=BAD_TABLES.keys())
def test_bad_table_warns_and_falls_back(tmp_path, monkeypatch, content, problem):
    selector.set_known_algorithms(known)
    path = write(tmp_path / "bad.json", content)
    monkeypatch.setenv("AL_TUNING_FILE", str(path))
    with pytest.warns(selector.TuningTableWarning) as record:
        assert select(2, 1 << 20) == "rabenseifner"  # from the shipped default
    message = str(record[0].message)
    assert str(path) in message
    assert f"falling back to the shipped default table {selector.SHIPPED_TABLE_PATH}" in message
    assert pytest.raises(selector.TuningTableError, selector.read_table, path, known) \
        .match(problem)


def test_missing_tuning_file_warns_and_falls_back(tmp_path, monkeypatch):
    monkeypatch.setenv("AL_TUNING_FILE", str(tmp_path / "absent.json"))
    with pytest.warns(selector.TuningTableWarning, match="absent.json.*cannot read"):
        assert selector.current_table().source == str(selector.SHIPPED_TABLE_PATH)


def test_bad_env_table_falls_back_to_user_cache(tmp_path, monkeypatch):
    user = write(tmp_path / "cache" / "aluminum" / "tuning.json",
                 {"format": "aluminum-tuning/1", "rules": [rule(2, [[0, "ring"]])]})
    monkeypatch.setenv("AL_TUNING_FILE", str(write(tmp_path / "bad.json", "{")))
    with pytest.warns(selector.TuningTableWarning, match=f"user cache table {user}"):
        assert select(2, 0) == "ring"


def test_unknown_names_pass_without_a_registry(tmp_path, monkeypatch):
    path = write(tmp_path / "t.json",
                 {"format": "aluminum-tuning/1", "rules": [rule(2, [[0, "biring"]])]})
    monkeypatch.setenv("AL_TUNING_FILE", str(path))
    assert select(2, 0) == "biring"


def test_rules_for_backends_the_registry_rejects_are_kept(tmp_path, monkeypatch):
    path = write(tmp_path / "t.json", {"format": "aluminum-tuning/1", "rules": [
        rule(2, [[0, "nccl_ring"]], backend="gpu_only"), rule(2, [[0, "ring"]])]})
    monkeypatch.setenv("AL_TUNING_FILE", str(path))
    selector.set_known_algorithms(known)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert select(2, 0, backend="gpu_only") == "nccl_ring"
        assert select(2, 0) == "ring"


def test_registering_a_registry_revalidates_the_table(tmp_path, monkeypatch):
    path = write(tmp_path / "t.json",
                 {"format": "aluminum-tuning/1", "rules": [rule(2, [[0, "biring"]])]})
    monkeypatch.setenv("AL_TUNING_FILE", str(path))
    assert select(2, 0) == "biring"
    selector.set_known_algorithms(known)
    with pytest.warns(selector.TuningTableWarning, match="biring"):
        assert select(2, 0) == "ring"     # the shipped default's


def test_every_source_bad_leaves_an_empty_table(tmp_path, monkeypatch):
    monkeypatch.setenv("AL_TUNING_FILE", str(write(tmp_path / "bad.json", "[")))
    monkeypatch.setattr(selector, "SHIPPED_TABLE_PATH", write(tmp_path / "shipped.json", "{"))
    with pytest.warns(selector.TuningTableWarning) as record:
        assert select(2, 0) == "DEFAULT"
    assert len(record) == 2
    assert "falling back to no table" in str(record[1].message)
    assert selector.current_table().rules == ()


# --- selection -----------------------------------------------------------------------------

@pytest.mark.parametrize("nbytes, expected", [
    (0, "recursive_doubling"), (16383, "recursive_doubling"), (16384, "mpi_passthrough"),
    (65535, "mpi_passthrough"), (65536, "shared_memory"), (1 << 30, "shared_memory"),
])
def test_nearest_lower_threshold_wins(table_file, nbytes, expected):
    assert select(2, nbytes) == expected


def test_below_first_threshold_returns_default(table_file):
    assert select(4, 1023) == "DEFAULT"
    assert select(4, 1024) == "ring"


@pytest.mark.parametrize("comm_size, measured", [(1, 2), (3, 2), (5, 4), (64, 4)])
def test_missing_comm_size_uses_nearest_measured(table_file, comm_size, measured):
    for nbytes in (0, 2000, 20000, 100000):
        assert select(comm_size, nbytes) == select(measured, nbytes)


def test_model_fallback_when_op_has_no_rules(tmp_path, monkeypatch):
    """A table without allreduce rules (nor model parameters): the α-β model decides with
    the default α and β, among the algorithms the registry knows."""
    path = write(tmp_path / "t.json", {"format": "aluminum-tuning/1", "rules": [
        rule(4, [[0, "ring"]], op="reduce_scatter")]})
    monkeypatch.setenv("AL_TUNING_FILE", str(path))
    selector.set_known_algorithms(lambda backend, op: {"ring", "recursive_doubling"})
    # p = 4: recursive doubling 2(α + nβ), ring 6α + 1.5nβ; equal at n = 8α/β
    # (106667 bytes with α = 2 µs, β = 0.15 ns/B)
    crossover = 8 * selector.DEFAULT_ALPHA / selector.DEFAULT_BETA
    assert select(4, 0) == "recursive_doubling"
    assert select(4, int(crossover * 0.99)) == "recursive_doubling"
    assert select(4, int(crossover * 1.01)) == "ring"
    assert select(4, 1 << 30) == "ring"


def test_model_fallback_uses_table_parameters(tmp_path, monkeypatch):
    path = write(tmp_path / "t.json", {"format": "aluminum-tuning/1", "rules": [],
                                        "model": {"alpha": 1e-6, "beta": 1e-9}})
    monkeypatch.setenv("AL_TUNING_FILE", str(path))
    selector.set_known_algorithms(lambda backend, op: {"ring", "recursive_doubling"})
    # α = 1 µs, β = 1 ns/B, p = 4: recursive doubling 2(α + nβ), ring 6α + 1.5nβ;
    # equal at 4α = 0.5nβ, n = 8000 bytes
    assert select(4, 7000) == "recursive_doubling"
    assert select(4, 9000) == "ring"
    assert selector.current_table().model == (1e-6, 1e-9)


@pytest.mark.parametrize("backend, op", [("nccl", "allreduce"), ("mpi", "alltoall")])
def test_default_when_model_knows_no_candidate(table_file, backend, op):
    selector.set_known_algorithms(known)
    assert select(4, 100, backend=backend, op=op) == "DEFAULT"


def test_default_when_no_registry(table_file):
    assert select(4, 100, op="reduce_scatter") == "DEFAULT"


@pytest.mark.parametrize("comm_size, nbytes", [(0, 10), (2, -1), (2.5, 10)])
def test_bad_arguments_raise(table_file, comm_size, nbytes):
    with pytest.raises((errors.ArgumentError, TypeError)):
        select(comm_size, nbytes)


def test_table_error_is_an_aluminum_error():
    assert issubclass(selector.TuningTableError, errors.AluminumError)


def test_rule_choose():
    r = selector.Rule("mpi", "allreduce", 2, ((8, "a"), (64, "b")))
    assert [r.choose(n) for n in (0, 7, 8, 63, 64, 10**9)] == [None, None, "a", "a", "b", "b"]


# --- caching and reload --------------------------------------------------------------------

def test_decisions_are_cached(table_file):
    """A decision is made once per key: the model's, which asks the registry, asks it once
    for repeated selections, again for another default (part of the key) or after reload."""
    calls = []

    def registry(backend, op):
        calls.append(op)
        return MPI_ALLREDUCE if op == "allreduce" else {"ring"}
    selector.set_known_algorithms(registry)
    asked = lambda: calls.count("reduce_scatter")  # noqa: E731 - not the table's validation
    assert select(4, 100, op="reduce_scatter") == select(4, 100, op="reduce_scatter") == "ring"
    assert asked() == 1
    assert select(4, 100, op="reduce_scatter", default="other") == "ring"
    assert asked() == 2
    selector.reload()
    assert select(4, 100, op="reduce_scatter") == "ring"
    assert asked() == 3


def test_cache_survives_file_change_until_reload(table_file):
    assert select(2, 0) == "recursive_doubling"
    write(table_file, {"format": "aluminum-tuning/1", "rules": [rule(2, [[0, "ring"]])]})
    assert select(2, 0) == "recursive_doubling"
    selector.reload()
    assert select(2, 0) == "ring"


def test_reload_rereads_environment(table_file, tmp_path, monkeypatch):
    assert select(4, 2000) == "ring"
    monkeypatch.delenv("AL_TUNING_FILE")
    assert select(4, 2000) == "ring"  # still the loaded table
    selector.reload()
    assert selector.current_table().source == str(selector.SHIPPED_TABLE_PATH)
    assert select(4, 2000) == "mpi_passthrough"   # the shipped default's nearest size, 3


def test_write_then_read_round_trip(tmp_path):
    table = selector.parse_table({**TABLE, "model": {"alpha": 2e-6, "beta": 1e-10}})
    path = selector.write_table(table, tmp_path / "new" / "tuning.json")
    again = selector.read_table(path, known)
    assert again.rules == table.rules
    assert again.model == table.model
    assert again.metadata == {"host": "test"}


# --- placement (our extension: rules for in-place or out-of-place calls only) --------------

PLACED = {"format": "aluminum-tuning/1", "rules": [
    rule(2, [[0, "mpi_passthrough"], [262144, "shared_memory"]]),
    {**rule(2, [[0, "mpi_passthrough"], [65536, "shared_memory"]]), "placement": "outofplace"},
    rule(4, [[0, "ring"]]),
]}


def test_placement_rules_apply_to_their_calls_only(tmp_path, monkeypatch):
    monkeypatch.setenv("AL_TUNING_FILE", str(write(tmp_path / "t.json", PLACED)))
    selector.set_known_algorithms(known)
    pick = lambda nbytes, inplace, p=2: selector.select_algorithm(  # noqa: E731
        "mpi", "allreduce", p, nbytes, "DEFAULT", inplace)
    assert pick(65536, False) == "shared_memory"     # the out-of-place rule
    assert pick(65536, True) == "mpi_passthrough"    # no in-place rule: the general one
    assert pick(65536, None) == "mpi_passthrough"    # placement unknown: the general one
    assert pick(1 << 20, True) == "shared_memory"
    assert pick(65536, False, p=4) == "ring"         # comm size 4 has only a general rule
    data = selector.current_table().to_json()
    assert [r.get("placement") for r in data["rules"]] == [None, "outofplace", None]
    assert selector.parse_table(data).rules == selector.current_table().rules   # round trip


# Placement, mode and buffers are validated alike.
LIMITS = pytest.mark.parametrize("key, value", [("placement", "inplace"),
                                                ("mode", "nonblocking"),
                                                ("buffers", "shared")])


@LIMITS
@pytest.mark.parametrize("bad", ["sideways", 1, True])
def test_bad_limit_is_rejected(key, value, bad):
    with pytest.raises(selector.TuningTableError,
                       match=re.escape(f"rules[0].{key}: expected one of")):
        selector.parse_table({"format": "aluminum-tuning/1",
                              "rules": [{**rule(2, [[0, "ring"]]), key: bad}]})


@LIMITS
def test_same_limit_twice_is_a_duplicate_but_two_limits_are_not(key, value):
    general, limited = rule(2, [[0, "ring"]]), {**rule(2, [[0, "ring"]]), key: value}
    assert len(selector.parse_table({"format": "aluminum-tuning/1",
                                     "rules": [general, limited]}).rules) == 2
    with pytest.raises(selector.TuningTableError, match=f"{key} '{value}'"):
        selector.parse_table({"format": "aluminum-tuning/1", "rules": [limited, limited]})


# --- mode (our extension: rules for blocking or nonblocking calls only) -------------------

MODED = {"format": "aluminum-tuning/1", "rules": [
    rule(2, [[0, "mpi_passthrough"], [262144, "shared_memory"]]),
    {**rule(2, [[0, "mpi_passthrough"], [65536, "ring"]]), "placement": "inplace"},
    {**rule(2, [[0, "mpi_passthrough"], [1024, "shared_memory"]]), "mode": "nonblocking"},
    {**rule(2, [[0, "recursive_doubling"]]), "mode": "nonblocking", "placement": "inplace"},
    {**rule(4, [[0, "ring"]]), "mode": "blocking"},
]}


def test_mode_rules_apply_to_their_calls_and_outrank_placement(tmp_path, monkeypatch):
    monkeypatch.setenv("AL_TUNING_FILE", str(write(tmp_path / "t.json", MODED)))
    selector.set_known_algorithms(known)

    def pick(nbytes, inplace, nonblocking, p=2):
        return selector.select_algorithm("mpi", "allreduce", p, nbytes, "DEFAULT", inplace,
                                         nonblocking)
    assert pick(65536, False, True) == "shared_memory"        # the nonblocking rule
    assert pick(65536, True, True) == "recursive_doubling"    # nonblocking and in place
    assert pick(65536, True, False) == "ring"                 # blocking: the in-place rule
    assert pick(65536, True, None) == "ring"                  # mode unknown: likewise
    assert pick(65536, False, False) == "mpi_passthrough"     # the general rule
    assert pick(65536, None, True) == "shared_memory"         # placement unknown
    # 4 ranks have a blocking rule only: nonblocking calls take the nearest size's rule
    assert pick(65536, False, True, p=4) == "shared_memory"
    assert pick(100, False, False, p=4) == "ring"
    data = selector.current_table().to_json()
    assert [r.get("mode") for r in data["rules"]] == [None, None, "nonblocking", "nonblocking",
                                                      "blocking"]
    assert selector.parse_table(data).rules == selector.current_table().rules   # round trip


# --- buffers (our extension: rules for communicators with shared buffers or without) ------

BY_BUFFERS = {"format": "aluminum-tuning/1", "rules": [
    rule(2, [[0, "mpi_passthrough"], [65536, "shared_memory"]]),
    {**rule(2, [[0, "mpi_passthrough"], [1 << 20, "shared_memory"]]), "buffers": "private"},
    {**rule(2, [[0, "ring"]]), "placement": "inplace"},
    {**rule(2, [[0, "recursive_doubling"]]), "placement": "inplace", "buffers": "shared"},
    {**rule(2, [[0, "rabenseifner"]]), "mode": "nonblocking"},
]}


def test_buffers_rules_outrank_placement_and_are_outranked_by_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("AL_TUNING_FILE", str(write(tmp_path / "t.json", BY_BUFFERS)))
    selector.set_known_algorithms(known)

    def pick(inplace, shared, nonblocking=False, nbytes=65536):
        return selector.select_algorithm("mpi", "allreduce", 2, nbytes, "DEFAULT", inplace,
                                         nonblocking, None, shared)
    assert pick(False, False) == "mpi_passthrough"          # the private rule
    assert pick(False, False, nbytes=1 << 20) == "shared_memory"
    assert pick(False, True) == "shared_memory"             # no shared rule: the general one
    assert pick(False, None) == "shared_memory"             # unknown: the general one
    assert pick(True, True) == "recursive_doubling"         # in place, shared
    assert pick(True, False) == "mpi_passthrough"           # the private rule beats in place
    assert pick(True, None) == "ring"                       # unknown: the in-place rule
    assert pick(True, True, nonblocking=True) == "rabenseifner"   # a mode beats both
    data = selector.current_table().to_json()
    assert [r.get("buffers") for r in data["rules"]] == [None, "private", None, "shared", None]
    assert selector.parse_table(data).rules == selector.current_table().rules   # round trip


def test_automatic_asks_whether_the_communicator_has_shared_buffers(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from aluminum.backends import get_backend
    monkeypatch.setenv("AL_TUNING_FILE", str(write(tmp_path / "t.json", BY_BUFFERS)))
    selector.reload()
    mpi = get_backend("mpi")
    private = SimpleNamespace(size=2, local_size=2, backend=mpi, shares_buffers=False)
    shared = SimpleNamespace(size=2, local_size=2, backend=mpi, shares_buffers=True)
    unknown = SimpleNamespace(size=2, local_size=2, backend=mpi)    # (no such attribute)
    choose = lambda comm: selector.choose(comm, "allreduce", "automatic", 65536,  # noqa: E731
                                          False, False).name
    assert choose(private) == "allreduce/mpi_passthrough"
    assert choose(shared) == "allreduce/shared_memory"
    assert choose(unknown) == choose(private)


def test_nonblocking_calls_follow_the_nonblocking_rules(tmp_path, monkeypatch):
    """al.nonblocking_allreduce asks for a nonblocking rule, al.allreduce for a blocking one
    (and repeat calls, which skip the selector, keep what each form chose)."""
    import numpy as np

    import aluminum as al
    from aluminum.backends.mpi.algorithms.ring_allreduce import RingAllreduce

    table = {"format": "aluminum-tuning/1", "rules": [
        rule(1, [[0, "mpi_passthrough"]]),
        {**rule(1, [[0, "ring"]]), "mode": "nonblocking"}]}
    monkeypatch.setenv("AL_TUNING_FILE", str(write(tmp_path / "t.json", table)))
    selector.set_known_algorithms(known)
    rings = []
    start = RingAllreduce.start
    monkeypatch.setattr(RingAllreduce, "start", lambda state: (rings.append("start"),
                                                               start(state))[1])
    monkeypatch.setattr(RingAllreduce, "drive", lambda state: rings.append("blocking"))
    with al.MPICommunicator() as comm:
        for _ in range(2):
            buf = np.arange(5, dtype=np.float64)
            al.nonblocking_allreduce(buf, comm).wait()
            al.allreduce(buf, comm)
            np.testing.assert_array_equal(buf, np.arange(5.0))
    assert rings == ["start", "start"]     # never a blocking ring


def test_automatic_never_picks_a_single_node_algorithm_across_nodes(tmp_path, monkeypatch):
    """A table measured on one node that picks shared_memory: on a communicator spanning
    nodes that choice must become the default instead of an error."""
    from types import SimpleNamespace

    from aluminum.backends import get_backend

    table = {"format": "aluminum-tuning/1", "rules": [
        {"backend": "mpi", "op": "allreduce", "comm_size": 2,
         "by_bytes": [[0, "shared_memory"]]}]}
    monkeypatch.setenv("AL_TUNING_FILE", str(write(tmp_path / "one_node.json", table)))
    selector.set_known_algorithms(None)
    mpi = get_backend("mpi")
    one_node = SimpleNamespace(size=2, local_size=2, backend=mpi)
    two_nodes = SimpleNamespace(size=2, local_size=1, backend=mpi)
    assert selector.choose(one_node, "allreduce", "automatic", 1 << 20).name == \
        "allreduce/shared_memory"
    assert selector.choose(two_nodes, "allreduce", "automatic", 1 << 20).name == \
        "allreduce/mpi_passthrough"


def _fifo(tmp_path):
    import os

    path = tmp_path / "table.fifo"
    os.mkfifo(path)
    return path


def _oversized(tmp_path):
    path = tmp_path / "huge.json"
    with open(path, "wb") as file:     # sparse: no disk used
        file.truncate(selector.MAX_TABLE_BYTES + 1)
    return path


@pytest.mark.timeout(30)
@pytest.mark.parametrize("make, problem", [
    (lambda tmp_path: "/dev/zero", "expected a regular file, got a character device"),
    (_fifo, "expected a regular file, got a FIFO"),
    (lambda tmp_path: tmp_path, "expected a regular file, got a directory"),
    (_oversized, f"expected at most {4 * (4 << 20)} bytes"),
], ids=["dev-zero", "fifo", "directory", "oversized"])
def test_a_path_that_is_not_a_sane_regular_file_warns_and_falls_back(
        tmp_path, monkeypatch, make, problem):
    path = make(tmp_path)
    monkeypatch.setenv("AL_TUNING_FILE", str(path))
    with pytest.warns(selector.TuningTableWarning, match=re.escape(problem)) as record:
        assert selector.current_table().source == str(selector.SHIPPED_TABLE_PATH)
    assert str(path) in str(record[0].message)
