"""The two-level α-β model (aluminum/tuning/two_level_model.py) against values worked out by hand,
and the selector's choices on communicators that span nodes."""
import json
import math

import pytest
from hypothesis import given, strategies as st

from aluminum.core.pieces import between_nodes_piece, pipeline_chunks
from aluminum.tuning import selector
from aluminum.tuning import two_level_model as model
from aluminum.tuning.costmodel import AlphaBeta
from aluminum.core.errors import ArgumentError

INTRA = AlphaBeta(alpha=1e-6, beta=1e-10)
INTER = AlphaBeta(alpha=50e-6, beta=8e-9)
MIB = 1 << 20


def test_ring_across_two_nodes_of_two_waits_on_the_link_every_step():
    # p = 4: 6 steps of n/4 bytes, each over a node's link
    n = 4 * MIB
    expected = 6 * (50e-6 + n / 4 * 8e-9)
    assert model.predict("allreduce", "ring", model.Nodes(2, 2), n, INTRA, INTER) == \
        pytest.approx(expected)


def test_hierarchical_is_two_node_rings_and_one_ring_of_shards_across():
    n = 4 * MIB
    inside = 2 * 1 * (1e-6 + n / 2 * 1e-10)          # L = 2: one step each way
    across = 2 * 1 * (50e-6 + n / 2 * 8e-9)          # N = 2: node's link carries n/2 a step
    # pipelined in chunks of 1 ms of the link (125 000 B at 8 ns/B): 33 of them, so the
    # link's phase sets the pace and the node's adds a 33rd
    assert model.predict("allreduce", "hierarchical", model.Nodes(2, 2), n, INTRA, INTER) == \
        pytest.approx(across + inside / 33)


def test_recursive_doubling_crosses_with_every_rank_of_the_node():
    n = 1000.0
    # Nodes(2, 2): distance 1 inside the node, distance 2 across with both ranks' vectors
    expected = (1e-6 + n * 1e-10) + (50e-6 + 2 * n * 8e-9)
    assert model.predict("allreduce", "recursive_doubling", model.Nodes(2, 2), n, INTRA,
                                   INTER) == pytest.approx(expected)


def test_rabenseifner_halves_inside_the_node_first():
    n = 1000.0
    # q = 4: distance 1 (inside, n/2), then distance 2 (across, both ranks, n/4 each); x2
    expected = 2 * ((1e-6 + n / 2 * 1e-10) + (50e-6 + 2 * n / 4 * 8e-9))
    assert model.predict("allreduce", "rabenseifner", model.Nodes(2, 2), n, INTRA, INTER) == \
        pytest.approx(expected)


def test_one_node_is_the_one_level_ring_with_intra_parameters():
    n, p = 3 * MIB, 4
    ring = 2 * (p - 1) * 1e-6 + 2 * (p - 1) / p * n * 1e-10
    for algo in ("ring", "hierarchical"):
        assert model.predict("allreduce", algo, model.Nodes(1, p), n, INTRA, INTER) == \
            pytest.approx(ring)


def test_the_bound_is_what_each_node_must_send_at_the_link_rate():
    assert model.lower_bound(model.Nodes(2, 2), 4 * MIB, INTER) == \
        pytest.approx(4 * MIB * 8e-9)
    assert model.lower_bound(model.Nodes(3, 4), 3 * MIB, INTER) == \
        pytest.approx(2 * 3 * MIB * 2 / 3 * 8e-9)
    assert model.lower_bound(model.Nodes(1, 8), MIB, INTER) == 0.0


OURS = ("recursive_doubling", "ring", "rabenseifner", "hierarchical")


@pytest.mark.parametrize("nodes", [model.Nodes(2, 2), model.Nodes(3, 2), model.Nodes(64, 8)])
def test_latency_wins_small_and_the_hierarchy_wins_large(nodes):
    assert model.best("allreduce", nodes, 4, INTRA, INTER, candidates=OURS) == \
        "recursive_doubling"
    assert model.best("allreduce", nodes, 4, INTRA, INTER) == "mpi_passthrough"   # the tie
    assert model.best("allreduce", nodes, 256 * MIB, INTRA, INTER) == "hierarchical"
    # and hierarchical never predicts more than the link bound plus the node's own work
    for n in (MIB, 16 * MIB):
        assert model.predict("allreduce", "hierarchical", nodes, n, INTRA, INTER) >= \
            model.lower_bound(nodes, n, INTER)


def test_crossovers_list_each_change_once():
    changes = model.crossovers(model.Nodes(2, 2), INTRA, INTER, [4 << i for i in range(24)],
                               candidates=OURS)
    winners = [algo for _, algo in changes]
    assert winners[0] == "recursive_doubling" and winners[-1] == "hierarchical"
    assert all(a != b for a, b in zip(winners, winners[1:]))


def test_hierarchical_reduce_is_a_node_ring_a_pipelined_chain_and_a_gather():
    n = 4 * MIB                                      # shards of 2 MiB: 8 pieces of 256 KiB
    ring = 1 * (1e-6 + n / 2 * 1e-10)                # L = 2: one step
    chain = (3 - 2 + 8) * (50e-6 + n / 8 * 8e-9)     # N = 3 nodes; both shards' pieces a hop
    gather = 1e-6 + n / 2 * 1e-10
    for op in ("reduce", "bcast"):                   # the broadcast mirrors it
        assert model.predict(op, "hierarchical", model.Nodes(3, 2), n, INTRA, INTER) == \
            pytest.approx(ring + chain + gather)


def test_hierarchical_allgather_crosses_in_node_sized_messages():
    s = 4 * MIB                                      # gathered
    assert model.predict("allgather", "ring", model.Nodes(2, 2), s, INTRA, INTER) == \
        pytest.approx(3 * (50e-6 + s / 4 * 8e-9))
    assert model.predict("allgather", "hierarchical", model.Nodes(2, 2), s, INTRA, INTER) \
        == pytest.approx((50e-6 + s / 2 * 8e-9) + (1e-6 + s / 2 * 1e-10))


def test_the_least_bytes_per_node_by_operation():
    nodes = model.Nodes(4, 2)
    assert model.least_bytes("allreduce", nodes, MIB) == pytest.approx(1.5 * MIB)
    assert model.least_bytes("reduce", nodes, MIB) == model.least_bytes("bcast", nodes, MIB) \
        == MIB
    assert model.least_bytes("allgather", nodes, MIB) == pytest.approx(0.75 * MIB)
    assert model.lower_bound(nodes, MIB, INTER, "reduce") == pytest.approx(MIB * 8e-9)


@pytest.mark.parametrize("call", [
    lambda: model.predict("allreduce", "shared_memory", model.Nodes(2, 2), 8, INTRA, INTER),
    lambda: model.predict("allreduce", "ring", model.Nodes(0, 2), 8, INTRA, INTER),
    lambda: model.best("allreduce", model.Nodes(2, 2), 8, INTRA, INTER, candidates=["nccl"]),
    lambda: model.predict("reduce", "hierarchical", model.Nodes(1, 4), 8, INTRA, INTER),
    lambda: model.predict("alltoall", "ring", model.Nodes(2, 2), 8, INTRA, INTER),
])
def test_bad_arguments_are_argument_errors(call):
    with pytest.raises(ArgumentError):
        call()


# --- the selector across nodes ---------------------------------------------------------------

KNOWN = {"mpi_passthrough", "recursive_doubling", "ring", "rabenseifner", "shared_memory",
         "hierarchical"}


@pytest.fixture
def table(tmp_path, monkeypatch):
    """Write a table and make it the selector's; the registry knows KNOWN for allreduce."""
    monkeypatch.delenv("AL_TUNING_FILE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    previous = selector.set_known_algorithms(lambda backend, op: KNOWN)

    def use(rules, **extra):
        path = tmp_path / "tuning.json"
        path.write_text(json.dumps({"format": "aluminum-tuning/1", "rules": rules, **extra}))
        monkeypatch.setenv("AL_TUNING_FILE", str(path))
        selector.reload()
    yield use
    selector.set_known_algorithms(previous)


def rule(by_bytes, comm_size=4, **extra):
    return {"backend": "mpi", "op": "allreduce", "comm_size": comm_size,
            "by_bytes": by_bytes, **extra}


def select(nbytes, nodes=None, comm_size=4):
    return selector.select_algorithm("mpi", "allreduce", comm_size, nbytes, "DEFAULT",
                                     nodes=nodes)


def test_rules_measured_on_one_node_do_not_apply_across_nodes_and_back(table):
    table([rule([[0, "shared_memory"]]), rule([[0, "ring"], [MIB, "hierarchical"]], nodes=2)])
    assert select(4 * MIB) == "shared_memory"
    assert select(4, nodes=(2, 2)) == "ring"
    assert select(4 * MIB, nodes=(2, 2)) == "hierarchical"
    assert select(4 * MIB, nodes=(3, 2)) == "hierarchical"   # the nearest node count


def test_without_rules_across_nodes_the_two_level_model_decides(table):
    inter = {"alpha": 50e-6, "beta": 8e-9}
    table([rule([[0, "shared_memory"]])], model={"alpha": 1e-6, "beta": 1e-10},
          inter_model=inter)
    # 4 B on 2 nodes of 2: recursive doubling (α + nβ) + (α' + 2nβ') = 51 µs, under the
    # hierarchical 2(α + (n/2)β) + 2(α' + (n/2)β') = 102 µs; MPI's own is modelled as the
    # best flat one and wins the tie
    assert select(4, nodes=(2, 2)) == "mpi_passthrough"
    assert select(64 * MIB, nodes=(2, 2)) == "hierarchical"
    # nodes of different sizes: hierarchical cannot run, the model picks among the rest,
    # modelled on nodes of the largest size (2 of 2).  At n = 64 MiB the link dominates:
    # ring 6(α' + (n/4)β') = 0.81 s; recursive doubling (α + nβ) + (α' + 2nβ') = 1.08 s;
    # Rabenseifner 2((α + (n/2)β) + (α' + 2(n/4)β')) = 0.54 s, MPI's own as the best of them
    assert select(64 * MIB, nodes=(2, 0), comm_size=3) == "mpi_passthrough"


def test_mpi_allreduce_is_modelled_as_the_best_flat_algorithm_and_wins_its_ties(table):
    nodes = model.Nodes(2, 2)
    # 4 B: recursive doubling, (α + nβ) inside the node, then (α' + 2nβ') across
    small = (1e-6 + 4 * 1e-10) + (50e-6 + 2 * 4 * 8e-9)
    assert model.predict("allreduce", "mpi_passthrough", nodes, 4, INTRA, INTER) == \
        pytest.approx(small)
    # 64 MiB: Rabenseifner, halving inside the node first, 2((α + (n/2)β) + (α' + 2(n/4)β'))
    # = 0.544 s, under the ring's 6(α' + (n/4)β') = 0.806 s and recursive doubling's 1.08 s
    large = 2 * ((1e-6 + 32 * MIB * 1e-10) + (50e-6 + 2 * 16 * MIB * 8e-9))
    assert model.predict("allreduce", "mpi_passthrough", nodes, 64 * MIB, INTRA, INTER) == \
        pytest.approx(large)
    # 3 nodes of 1 (not a power of two): recursive doubling, a fold to the first node and
    # back, 2(α' + nβ'), and one exchange, α' + nβ'
    n = 4 * MIB
    folded = 3 * (50e-6 + n * 8e-9)
    assert model.predict("allreduce", "mpi_passthrough", model.Nodes(3, 1), n, INTRA, INTER) \
        == pytest.approx(folded)
    # where MPI's is not offered (another backend), ours flat are chosen as before
    table([], model={"alpha": 1e-6, "beta": 1e-10}, inter_model={"alpha": 50e-6,
                                                                 "beta": 8e-9})
    selector.set_known_algorithms(lambda backend, op: KNOWN - {"mpi_passthrough"})
    assert select(4, nodes=(2, 2)) == "recursive_doubling"
    assert select(64 * MIB, nodes=(2, 0), comm_size=3) == "rabenseifner"


def test_a_rule_for_one_node_is_refused_with_the_table(table):
    table([rule([[0, "ring"]], nodes=1)])
    with pytest.warns(selector.TuningTableWarning, match=r"rules\[0\]\.nodes: expected an "
                      r"integer >= 2.*got 1"):
        selector.current_table()


def test_node_rules_and_the_inter_model_survive_a_write_and_read(tmp_path):
    table = selector.parse_table({"format": "aluminum-tuning/1", "inter_model":
                                  {"alpha": 5e-5, "beta": 8e-9},
                                  "rules": [rule([[0, "hierarchical"]], nodes=2)]})
    path = selector.write_table(table, tmp_path / "t.json")
    again = selector.read_table(path)
    assert again.inter_model == AlphaBeta(5e-5, 8e-9)
    assert again.rules[0].nodes == 2


def test_the_model_picks_reduce_bcast_and_allgather_across_nodes(table):
    table([], model={"alpha": 1e-6, "beta": 1e-10}, inter_model={"alpha": 50e-6,
                                                                 "beta": 8e-9})

    def pick(op, nbytes, nodes, comm_size):
        return selector.select_algorithm("mpi", op, comm_size, nbytes, "DEFAULT",
                                         nodes=nodes)
    # MPI's reduce and bcast are not modelled: which tree it uses across nodes is its own
    for op in ("reduce", "bcast"):
        for nbytes, nodes, size in ((4, (4, 8), 32), (64 * MIB, (4, 8), 32),
                                    (64 * MIB, (2, 2), 4)):
            assert pick(op, nbytes, nodes, size) == "hierarchical"
        assert pick(op, 64 * MIB, (4, 0), 30) == "DEFAULT"   # nodes differ: none runs
    assert pick("allgather", 4 * MIB, (2, 2), 4) == "hierarchical"
    assert pick("allgather", 4 * MIB, (2, 0), 3) == "ring"
    assert pick("alltoall", 4 * MIB, (2, 2), 4) == "DEFAULT"      # not modelled


def test_on_one_rank_per_node_hierarchical_wins_its_tie_with_the_ring(table):
    table([], model={"alpha": 1e-6, "beta": 1e-10}, inter_model={"alpha": 50e-6,
                                                                 "beta": 8e-9})
    # 16 MiB on 3 nodes of 1: the ring, 4(α' + (n/3)β') = 0.179 s, well under MPI's own
    # (recursive doubling with its fold, 3(α' + nβ') = 0.403 s) and Rabenseifner's; the
    # hierarchical allreduce costs the same (no node phases) and wins the tie: it is the
    # ring in pipelined chunks
    assert select(16 * MIB, nodes=(3, 1), comm_size=3) == "hierarchical"


def test_hierarchical_chunks_are_a_millisecond_of_the_tables_link(table):
    # 1 Gbit/s (8 ns/B): a millisecond carries 125 000 B, so 1 MiB crosses in 8 chunks,
    # 8 MiB in 67 and 64 MiB in the most, 128; 64 KiB is under one chunk
    table([], inter_model={"alpha": 50e-6, "beta": 8e-9})
    assert [pipeline_chunks(n) for n in (64 << 10, MIB, 8 * MIB, 64 * MIB)] == [1, 8, 67, 128]
    # 100 Gbit/s: a millisecond is more than the largest chunk, 1 MiB
    table([], inter_model={"alpha": 5e-6, "beta": 8e-11})
    assert [pipeline_chunks(n) for n in (MIB, 4 * MIB)] == [1, 4]
    # 8 Gbit/s: 1 MB, within the bounds
    table([], inter_model={"alpha": 5e-6, "beta": 1e-9})
    assert pipeline_chunks(4 * MIB) == 4


def test_messages_between_nodes_go_in_pieces_only_over_a_slow_link(table):
    # 1 Gbit/s (8 ns/B): a 32 KiB piece takes 262 µs on the link, a slow one: pieces
    table([], inter_model={"alpha": 50e-6, "beta": 8e-9})
    assert between_nodes_piece() == 32 * 1024
    # 2 Gbit/s (4 ns/B): 131 µs, still slow; 4 Gbit/s (2 ns/B): 66 µs, fast: whole messages
    table([], inter_model={"alpha": 50e-6, "beta": 4e-9})
    assert between_nodes_piece() == 32 * 1024
    table([], inter_model={"alpha": 5e-6, "beta": 2e-9})
    assert between_nodes_piece() is None


@pytest.fixture
def measured():
    """``selector.use_measured_link`` for the test; forgotten after it."""
    yield selector.use_measured_link
    selector.use_measured_link(None)


def test_a_measured_link_counts_where_no_table_says_and_a_table_outranks_it(table, measured):
    table([], model={"alpha": 1e-6, "beta": 1e-10})
    assert selector.inter_node_model() == (model.DEFAULT_INTER, "default")
    assert selector.link_probe_wanted()
    # the default 1 Gbit/s: 4 MiB crosses in chunks of 125 000 B (a millisecond), 33 of
    # them, and messages go in 32 KiB pieces (262 µs each on the link); measured at 100
    # Gbit/s (0.08 ns/B): in 4 chunks of 1 MiB (the largest), and a piece would take 2.6 µs,
    # too quick to cut messages
    assert pipeline_chunks(4 * MIB) == 33 and between_nodes_piece() == 32 << 10
    measured((5e-6, 8e-11))
    assert selector.inter_node_model() == (AlphaBeta(5e-6, 8e-11), "measured")
    assert pipeline_chunks(4 * MIB) == 4 and between_nodes_piece() is None
    # a table with the link's model wins, and al.init() then measures nothing
    table([], model={"alpha": 1e-6, "beta": 1e-10}, inter_model={"alpha": 50e-6,
                                                                 "beta": 8e-9})
    assert selector.inter_node_model() == (AlphaBeta(50e-6, 8e-9), "tuning table")
    assert pipeline_chunks(4 * MIB) == 33 and not selector.link_probe_wanted()


@pytest.mark.parametrize("setting,wanted", [("0", False), ("off", False), ("No", False),
                                            ("1", True), ("", True)])
def test_al_link_probe_turns_the_measurement_off(table, monkeypatch, setting, wanted):
    table([])
    monkeypatch.setenv("AL_LINK_PROBE", setting)
    assert selector.link_probe_wanted() is wanted


def test_a_measured_link_is_rounded_to_one_two_or_five_times_a_power_of_ten():
    """The probe's rounding (nearest by ratio): readings a few percent apart give one value,
    so two jobs on one cluster choose alike; hand-computed boundaries at sqrt(2), sqrt(10)
    and sqrt(50) times a power of ten."""
    from aluminum.backends.mpi.link_probe import one_two_five
    assert one_two_five(238e6) == 200e6       # a 250 Mbit/s tbf link, read
    assert one_two_five(952e6) == one_two_five(1024e6) == 1e9
    assert one_two_five(1.40e9) == 1e9
    assert one_two_five(1.43e9) == 2e9
    assert one_two_five(3.1e-5) == 2e-5
    assert one_two_five(3.2e-5) == 5e-5
    assert one_two_five(7.0) == 5.0
    assert one_two_five(7.2) == 10.0
    assert one_two_five(9.7e-6) == one_two_five(8.0e-6) == 1e-05   # (not 10 * 1e-06)
    assert one_two_five(4.8e-6) == 5e-06


# Every 1, 2 or 5 times a power of ten from 1e-12 to 5e12, as Python reads the literal (the
# float nearest each number): what a rounded reading must be exactly.
ONE_TWO_FIVE = {float(f"{mantissa}e{exponent}") for mantissa in (1, 2, 5)
                for exponent in range(-12, 13)}


@given(st.floats(min_value=1.0, max_value=9.99), st.integers(min_value=-11, max_value=11))
def test_a_rounded_reading_is_exactly_the_float_of_one_two_or_five_times_a_power_of_ten(
        mantissa, exponent):
    """Exactly that float, not a product a rounding error away from it (``10 * 1e-06`` is
    9.999999999999999e-06), so equal links compare equal; and the nearest by ratio (never
    more than sqrt(2.5) away: the widest gap, 2 to 5, splits at sqrt(10))."""
    from aluminum.backends.mpi.link_probe import one_two_five
    value = mantissa * 10.0 ** exponent
    rounded = one_two_five(value)
    assert rounded in ONE_TWO_FIVE
    assert abs(math.log(rounded / value)) <= math.log(2.5) / 2 + 1e-12

