"""Tests of the benchmark package: sizes, bandwidth formulas, reports, tuner output, plots.

Two tests run real 2-rank sweeps through the self-launching CLI; two more run the allreduce,
training and call-cost scripts of bench/ on 2 ranks.  Those four are marked ``bench``
(pytest.ini): the default run, CI included, runs them; ``-m "not bench"`` leaves them out.
"""
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aluminum as al
from aluminum.tuning import selector
from aluminum.bench import model, ops, peers, report, sweep, tune
from aluminum.bench.__main__ import main as bench_main
from aluminum.bench.sizes import format_size, parse_size, parse_sizes

KIB, MIB = 1 << 10, 1 << 20


# --- sizes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("4", 4), ("1KiB", KIB), ("1k", KIB), ("2KB", 2 * KIB), ("64MiB", 64 * MIB),
    ("1GiB", 1 << 30), (" 8 B ", 8)])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "KiB", "1.5KiB", "-4", "4 parsecs"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match="expected a size"):
        parse_size(text)


def test_parse_sizes_ranges_and_lists():
    assert parse_sizes("4:64MiB") == [4 << i for i in range(25)]
    assert parse_sizes("4:64MiB", step=4) == [4 << 2 * i for i in range(13)]
    assert parse_sizes("4:1000") == [4, 8, 16, 32, 64, 128, 256, 512, 1000]   # hi included
    assert parse_sizes("1MiB,8,8,1KiB") == [8, KIB, MIB]
    for bad, step in (("64:4", 2), ("0:8", 2), ("4:8", 1), (",", 2)):
        with pytest.raises(ValueError):
            parse_sizes(bad, step)


def test_format_size():
    assert [format_size(n) for n in (12, KIB, 1536, 64 * MIB, 3 << 30, MIB - 4)] == \
        ["12B", "1KiB", "1.5KiB", "64MiB", "3GiB", "1048572B"]


# --- layouts and bandwidth -----------------------------------------------------------------

def test_bus_bandwidth_matches_nccl_tests_formulas():
    # 1 MiB in 1 ms: algbw = 1.048576 GB/s; busbw factors by hand for p = 4.
    expected = {"allreduce": 1.5, "reduce_scatter": 0.75, "allgather": 0.75,
                "alltoall": 0.75, "gather": 0.75, "scatter": 0.75, "bcast": 1.0,
                "reduce": 1.0, "sendrecv": 1.0, "barrier": 0.0}
    times = np.full((4, 10), 1e-3)
    for op, factor in expected.items():
        point = sweep.summarize(times, MIB, 10, ops.spec(op).bus_factor(4))
        assert point.algbw_gbps == pytest.approx(1.048576)
        assert point.busbw_gbps == pytest.approx(1.048576 * factor), op


def test_summarize_takes_the_slowest_rank_per_iteration():
    per_rank = np.array([[1e-6, 5e-6, 2e-6], [3e-6, 1e-6, 2e-6]])
    point = sweep.summarize(per_rank, 4, 3, 2.0)
    assert (point.avg_us, point.min_us, point.max_us, point.median_us) == \
        pytest.approx((10 / 3, 2.0, 5.0, 3.0))
    assert sweep.summarize(per_rank, 4, 3, 1.0, divisor=2).avg_us == pytest.approx(5 / 3)


def test_rounds_keep_the_lowest_median_not_the_lowest_avg():
    """One stalled iteration inflates a round's Avg; the kept round is the best by the
    statistic the tuner and the automatic-vs-fastest summary compare."""
    steady = sweep.summarize(np.array([[3e-6, 3e-6, 3e-6]]), 4, 3, 1.0)
    stalled = sweep.summarize(np.array([[2e-6, 2e-6, 90e-6]]), 4, 3, 1.0)
    assert stalled.avg_us > steady.avg_us and stalled.median_us < steady.median_us
    assert sweep.better_round(steady, None)
    assert sweep.better_round(stalled, steady)
    assert not sweep.better_round(steady, stalled)


def test_series_are_timed_in_interleaved_blocks_each_after_an_untimed_call():
    """A slow phase of the machine must hit every series alike: the timed calls of the
    series alternate in blocks, the first series rotating, each block re-warmed untimed."""
    log: list[tuple[str, bool]] = []
    timing = [False]

    def barrier():
        timing[0] = True

    def call(name):
        def fn():
            log.append((name, timing[0]))
            timing[0] = False
        return fn

    iters = 4 * sweep.MIN_BLOCK_ITERS
    times = sweep.time_interleaved([call("a"), call("b")], iters, 2, barrier, first=1)
    assert [t.shape for t in times] == [(iters,), (iters,)]
    assert all(np.all(t >= 0) for t in times)
    assert log[:4] == [("a", False)] * 2 + [("b", False)] * 2          # warmup
    turns = []                 # [series, timed calls]: each turn starts with an untimed call
    for name, timed in log[4:]:
        if not timed:
            turns.append([name, 0])
        else:
            assert turns[-1][0] == name
            turns[-1][1] += 1
    blocks = iters // sweep.MIN_BLOCK_ITERS
    assert [t[0] for t in turns] == ["b", "a", "a", "b", "b", "a", "a", "b"][:2 * blocks]
    assert all(t[1] == iters // blocks for t in turns)


@pytest.mark.parametrize("op, size, p, actual", [
    ("allreduce", 4, 3, 4), ("allreduce", 6, 3, 4), ("allgather", 4, 3, 12),
    ("allgather", 64, 3, 60), ("reduce_scatter", 1024, 4, 1024), ("barrier", 64, 2, 0),
    ("multisendrecv", 64, 3, 64), ("multisendrecv", 4, 3, 8)])
def test_actual_size_rounds_like_nccl_tests(op, size, p, actual):
    assert ops.actual_size(ops.spec(op), size, 4, p) == actual


def test_build_case_layouts_follow_mpi():
    f32 = np.dtype(np.float32)
    case = ops.build_case(ops.spec("allgather"), 48, f32, False, 1, 3)
    assert (case.send.size, case.recv.size, case.size) == (4, 12, 48)
    case = ops.build_case(ops.spec("allgather"), 48, f32, True, 1, 3)
    assert (case.send.size, case.recv) == (12, None)
    root = ops.build_case(ops.spec("scatter"), 48, f32, True, 0, 3)
    leaf = ops.build_case(ops.spec("scatter"), 48, f32, True, 2, 3)
    assert (root.send.size, leaf.send.size) == (12, 4)
    assert ops.spec("gather").selector_bytes(48, 3) == 16
    assert ops.spec("allgather").selector_bytes(48, 3) == 48


def test_iterations_scale_down_with_size():
    assert sweep.scaled(1000, 4, 20) == 1000
    assert sweep.scaled(1000, 64 * KIB, 20) == 1000
    assert sweep.scaled(1000, 256 * KIB, 20) == 250
    assert sweep.scaled(1000, 64 * MIB, 20) == 20
    assert sweep.scaled(5, 64 * MIB, 20) == 5


def test_parse_peers():
    assert peers.parse_peers("mpi4py, torch-gloo,mpi4py") == ["mpi4py", "torch-gloo"]
    assert peers.parse_peers("") == []
    with pytest.raises(ValueError, match="nccl"):
        peers.parse_peers("nccl")


def test_ranks_are_launched_without_the_launch_options(monkeypatch):
    """``--np`` and ``--jobs`` (either spelling) are for the launch: each launched rank
    gets the rest of the command line."""
    from types import SimpleNamespace

    import aluminum.launch

    launched = []
    monkeypatch.setattr(aluminum.launch, "launch", lambda n, argv, **kwargs: (
        launched.append((n, argv[argv.index("aluminum.bench") + 1:])),
        SimpleNamespace(returncode=0))[1])
    assert bench_main(["--np", "2", "allreduce", "--np=3", "--iters", "5"]) == 0
    assert launched == [(3, ["allreduce", "--iters", "5"])]
    launched.clear()
    assert bench_main(["tune", "--jobs", "3", "--np", "2", "--jobs=2", "--ops", "allreduce"]) == 0
    assert [(n, argv[:3]) for n, argv in launched] == [(2, ["tune", "--ops", "allreduce"])] * 2
    assert [argv[3] for _, argv in launched] == ["--record", "--earlier"]     # 2 jobs


def test_tune_jobs_need_a_launch_of_their_own(capsys):
    with pytest.raises(SystemExit):
        bench_main(["tune", "--jobs", "2", "--ops", "allreduce"])
    assert "--jobs: needs --np" in capsys.readouterr().err


# --- reports -------------------------------------------------------------------------------

def _point(size, avg, algo=""):
    return sweep.Point(size, 100, avg, avg * 0.9, avg * 2, avg, size / avg / 1e3,
                       size / avg / 1e3, algo)


def _result():
    return sweep.Result(
        "allreduce", "mpi", 2, "float32", False, False,
        [sweep.Series("automatic", "ours", [_point(4, 2.0, "recursive_doubling"),
                                            _point(MIB, 100.0, "shared_memory")]),
         sweep.Series("ring", "ours", [_point(4, 6.0), _point(MIB, 150.0)]),
         sweep.Series("mpi4py", "peer", [_point(4, 1.0), _point(MIB, 200.0)]),
         sweep.Series("torch-gloo", "peer", [], skipped="torch is not installed")],
        "2026-11-22T10:00:00", "vm", "Open MPI v5.0.11", 2)


def test_json_round_trip(tmp_path):
    result = _result()
    assert report.from_json(json.loads(json.dumps(report.to_json(result)))) == result
    path = tmp_path / "r.json"
    path.write_text(report.dumps_json(result))
    assert report.load_json(str(path)) == result
    with pytest.raises(ValueError, match="aluminum-bench/1"):
        report.from_json({"format": "something-else"})


def test_a_sweep_across_nodes_says_which_link_it_went_by():
    assert "link between nodes" not in report.format_table(_result())
    across = dataclasses.replace(_result(), link="952 Mbit/s, α 19.1 us (measured)")
    assert "# link between nodes: 952 Mbit/s, α 19.1 us (measured)" in \
        report.format_table(across).splitlines()
    assert report.from_json(json.loads(json.dumps(report.to_json(across)))) == across


def test_table_has_every_column_ratio_and_fastest_mark():
    text = report.format_table(_result())
    header = next(line for line in text.splitlines() if "Series" in line)
    for title in ("Size", "Iters", "Avg(us)", "Min(us)", "Max(us)", "algbw(GB/s)",
                  "busbw(GB/s)", "xmpi4py"):
        assert title in header
    assert "xtorch-gloo" not in header            # skipped peers get no column...
    assert "torch-gloo: not measured (torch is not installed)" in text   # ...but a reason
    rows = {tuple(line.split()[:2]): line.split() for line in text.splitlines()
            if line and not line.startswith("#") and len(line.split()) > 7}
    assert rows[("4", "automatic->recursive_doubling")][-1] == "2.00x"
    assert rows[("1048576", "automatic->shared_memory*")][-1] == "0.50x"
    assert rows[("4", "mpi4py*")][3] == "1.00"
    assert "2(p-1)/p" in text
    assert "# allreduce on 2 ranks: Avg latency (us) by size" in text
    assert ("automatic vs the fastest algorithm at each size (medians): worst 0.67x at "
            "1048576 B") in text
    assert report.automatic_rows(_result()) == [
        (4, 2.0, "recursive_doubling", None, "ring", 6.0),
        (MIB, 100.0, "shared_memory", None, "ring", 150.0)]
    assert ("# automatic within 10% of the fastest (or 2 us below 20 us): 2 of 2 sizes\n"
            in text)


@pytest.mark.parametrize("auto, fastest, close", [
    (11.0, 10.0, True), (11.5, 10.0, True), (12.1, 10.0, False), (110.0, 100.0, True),
    (111.0, 100.0, False), (21.9, 19.9, True), (22.0, 19.9, False), (23.0, 20.0, False)])
def test_close_to_fastest_allows_ten_percent_or_two_us_under_twenty(auto, fastest, close):
    assert report.close_to_fastest(auto, fastest) is close
    result = _result()
    result.series[0].points[0] = _point(4, auto, "ring")
    result.series[1].points[0] = _point(4, fastest)
    text = report.format_table(result)
    assert ("2 of 2 sizes" if close else "1 of 2 sizes; not at 4B") in text


def test_summary_shows_the_noise_of_one_algorithm_measured_twice():
    result = _result()
    result.series[0].points[0] = _point(4, 4.5, "ring")   # automatic ran ring: 4.5 vs 6.0
    assert report.automatic_rows(result)[0] == (4, 4.5, "ring", 6.0, "ring", 6.0)
    text = report.format_table(result)
    assert ("# noise: automatic vs the column of the algorithm it ran, the same code measured "
            "twice: worst 0.75x at 4 B (4.50 us vs ring 6.00 us)") in text
    assert "# noise" not in report.format_table(_result())   # ran nothing with a column
    assert "# automatic ran the fastest algorithm at 1 of 1 sizes" in text
    result.series[1].points[0] = _point(4, 4.0)               # ring's column now faster
    result.series.insert(2, sweep.Series("shared_memory", "ours",
                                         [_point(4, 1.5), _point(MIB, 80.0)]))
    assert report.automatic_rows(result) == [
        (4, 4.5, "ring", 4.0, "shared_memory", 1.5),
        (MIB, 100.0, "shared_memory", 80.0, "shared_memory", 80.0)]
    assert ("# automatic ran the fastest algorithm at 1 of 2 sizes; not at 4B (ring, 2.67x "
            "shared_memory)") in report.format_table(result)


def test_automatic_on_shared_buffers_is_judged_among_the_shared_columns():
    result = _result()
    shared = sweep.SHARED_SUFFIX
    result.series[3:3] = [
        sweep.Series("automatic" + shared, "ours", [_point(4, 2.0, "mpi_passthrough"),
                                                   _point(MIB, 90.0, "mpi_passthrough")]),
        sweep.Series("mpi_passthrough" + shared, "ours", [_point(4, 2.1), _point(MIB, 95.0)]),
        sweep.Series("shared_memory" + shared, "ours", [_point(4, 8.0), _point(MIB, 30.0)])]
    # the private columns are judged as before, the shared ones only among themselves
    assert report.automatic_rows(result) == report.automatic_rows(_result())
    assert report.automatic_rows(result, shared) == [
        (4, 2.0, "mpi_passthrough", 2.1, "mpi_passthrough", 2.1),
        (MIB, 90.0, "mpi_passthrough", 95.0, "shared_memory", 30.0)]
    text = report.format_table(result)
    assert ("# automatic [shared] within 10% of the fastest (or 2 us below 20 us): 1 of 2 "
            "sizes; not at 1MiB (3.00x, +60.0 us)") in text
    assert ("# automatic [shared] ran the fastest algorithm at 1 of 2 sizes; not at 1MiB "
            "(mpi_passthrough, 3.17x shared_memory)") in text
    assert "# automatic within 10% of the fastest (or 2 us below 20 us): 2 of 2 sizes" in text


def test_csv_has_one_line_per_point():
    lines = report.dumps_csv(_result()).splitlines()
    assert lines[0].split(",") == list(report.CSV_FIELDS)
    assert len(lines) == 1 + 6
    assert lines[1].startswith("allreduce,mpi,2,float32,False,False,automatic,ours,")


# --- tuner ---------------------------------------------------------------------------------

def _series(avgs):
    return [_point(4 << i, avg) for i, avg in enumerate(avgs)]


def test_choose_follows_the_fastest_with_few_thresholds():
    points = {"mpi_passthrough": _series([5.0, 5.0, 10.0, 100.0]),
              "recursive_doubling": _series([3.0, 3.05, 9.0, 200.0]),
              "shared_memory": _series([9.0, 2.99, 9.6, 50.0])}
    # 8 B: shared_memory is faster by < MAX_SLOWDOWN, not worth two thresholds.
    assert tune.choose([[points]], "mpi_passthrough") == [
        (0, "recursive_doubling"), (32, "shared_memory")]
    # One size won narrowly by another algorithm between two of the same: smoothed away.
    island = {"mpi_passthrough": _series([5.0, 5.0, 10.0, 100.0]),
              "shared_memory": _series([9.0, 4.8, 12.0, 120.0])}
    assert tune.choose([[island]], "mpi_passthrough") == [(0, "mpi_passthrough")]
    island["shared_memory"][1].median_us = 4.0        # wins by 20%: a real crossover
    assert tune.choose([[island]], "mpi_passthrough") == [
        (0, "mpi_passthrough"), (8, "shared_memory"), (16, "mpi_passthrough")]
    # Within MAX_SLOWDOWN of the best, the default wins.
    assert tune.choose([[{"ring": _series([3.0]), "mpi_passthrough": _series([3.05])}]],
                       "mpi_passthrough") == [(0, "mpi_passthrough")]
    # Two placements: the choice must hold in both, never more than DEFAULT_MARGIN slower
    # than the default in either; with none within MAX_SLOWDOWN in both, the least bad wins.
    in_place = {"mpi_passthrough": _series([3.0, 30.0]), "ring": _series([9.0, 40.0]),
                "shared_memory": _series([3.1, 41.0])}
    out_of_place = {"mpi_passthrough": _series([20.0, 130.0]), "ring": _series([9.0, 70.0]),
                    "shared_memory": _series([9.2, 71.0])}
    assert tune.choose([[in_place], [out_of_place]], "mpi_passthrough") == [
        (0, "shared_memory"), (8, "mpi_passthrough")]        # ring: 33% slower in place
    in_place["ring"][1].median_us = 32.0
    assert tune.choose([[in_place], [out_of_place]], "mpi_passthrough") == [
        (0, "shared_memory"), (8, "ring")]


def test_choose_never_picks_more_than_max_slowdown():
    rng = np.random.default_rng(0)
    avgs = {name: rng.uniform(1, 2, 30) for name in ("a", "b", "c")}
    points = {name: _series(list(values)) for name, values in avgs.items()}
    rules = selector.Rule("mpi", "allreduce", 2, tuple(tune.choose([[points]], "a")))
    for i in range(30):
        chosen = avgs[rules.choose(4 << i)][i]
        assert chosen <= min(v[i] for v in avgs.values()) * (1 + tune.MAX_SLOWDOWN)


def test_each_job_counts_as_a_mode_so_a_choice_never_loses_much_in_any():
    """Open MPI may run a whole job 2x slower: the choice must hold in every job, not only
    in the job measured last (or the typical one); and one job where an algorithm is 12%
    slower than the library does not bar it when it is 2.5x faster in another."""
    fast_job = {"mpi_passthrough": _series([10.0, 100.0]), "shared_memory": _series([20.0, 112.0])}
    slow_job = {"mpi_passthrough": _series([10.0, 300.0]), "shared_memory": _series([20.0, 120.0])}
    one, both = (tune.rules_from("mpi", "allreduce", 2, [jobs], (False,), "mpi_passthrough")
                 for jobs in ([fast_job], [fast_job, slow_job]))
    assert [r.by_bytes for r in one] == [((0, "mpi_passthrough"),)]
    assert [r.by_bytes for r in both] == [((0, "mpi_passthrough"), (8, "shared_memory"))]


@pytest.mark.bench
def test_cli_tune_over_two_jobs_writes_a_table(tmp_path):
    table = tmp_path / "table.json"
    cmd = [sys.executable, "-m", "aluminum.bench", "tune", "--np", "2", "--jobs", "2", "--ops",
           "allreduce", "--mode", "blocking", "--sizes", "4:256", "--step", "4", "--iters",
           "5", "--warmup", "1", "--rounds", "1", "--output", str(table), "--timeout", "90"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stderr.count("recorded this job's measurements") == 1, run.stderr
    assert "allreduce (blocking): deciding by the worst of 2 jobs" in run.stderr
    rules = [r for r in selector.read_table(table).rules if r.op == "allreduce"]
    assert rules and all(r.comm_size == 2 and r.mode is None for r in rules)
    assert all(algo in al.algorithms("allreduce") for r in rules for _, algo in r.by_bytes)


def test_tuner_writes_a_table_the_selector_accepts(tmp_path):
    path = tmp_path / "tuning.json"
    old = selector.Rule("mpi", "allreduce", 4, ((0, "ring"),))
    selector.write_table(selector.Table((old,)), path)
    rules = [selector.Rule("mpi", "allreduce", 2, ((0, "recursive_doubling"),
                                                   (65536, "shared_memory"))),
             selector.Rule("mpi", "reduce_scatter", 2, ((0, "mpi_passthrough"),))]
    meta = {"created": "now", "host": "vm", "mpi": "Open MPI", "ranks_per_node": 2,
            "note": "test"}
    tune.write(path, rules, al.tuning.AlphaBeta(2e-6, 1.5e-10), meta)
    known = lambda backend, op: al.algorithms(op, backend)  # noqa: E731
    table = selector.read_table(path, known)
    assert {(r.op, r.comm_size) for r in table.rules} == \
        {("allreduce", 2), ("allreduce", 4), ("reduce_scatter", 2)}     # merged
    assert json.loads(path.read_text())["format"] == "aluminum-tuning/1"
    assert table.model == (2e-6, 1.5e-10) and table.metadata["note"] == "test"
    shown = tune.format_rules(table)
    assert "mpi allreduce, 2 ranks:" in shown and "64KiB and up" in shown
    with pytest.raises(selector.TuningTableError, match="unknown"):
        tune.write(path, [selector.Rule("mpi", "allreduce", 2, ((0, "bogus"),))], None, {})


def test_shared_buffer_rules_are_kept_where_they_choose_otherwise():
    def rule(by_bytes, placement=None):
        return selector.Rule("mpi", "allreduce", 2, by_bytes, placement)
    passthrough, late = ((0, "mpi_passthrough"),), ((0, "mpi_passthrough"),
                                                     (1 << 20, "shared_memory"))
    early = ((0, "mpi_passthrough"), (65536, "shared_memory"))
    private = [rule(passthrough), rule(late, "outofplace")]
    shared = [rule(early), rule(late, "outofplace"), rule(passthrough, "inplace")]
    # the general rule differs; out of place agrees; in place agrees with the general one,
    # which private in-place calls take
    kept = tune.shared_rules(private, shared)
    assert [(r.by_bytes, r.placement, r.buffers) for r in kept] == [(early, None, "shared")]
    assert tune._placement_words(kept[0]) == " (shared-buffer calls)"


def test_tuner_keeps_nonblocking_rules_apart(tmp_path):
    """Rules for nonblocking calls are stored, merged and shown as rules of their own."""
    path = tmp_path / "tuning.json"
    blocking = selector.Rule("mpi", "allreduce", 2, ((0, "mpi_passthrough"),))
    nonblocking = selector.Rule("mpi", "allreduce", 2, ((0, "mpi_passthrough"),
                                                         (1 << 20, "shared_memory")),
                                placement="inplace", mode="nonblocking")
    tune.write(path, [nonblocking, blocking], None, {})
    table = selector.read_table(path, lambda backend, op: al.algorithms(op, backend))
    assert table.rules == (blocking, nonblocking)
    tune.write(path, [selector.Rule("mpi", "allreduce", 2, ((0, "ring"),))], None, {})
    assert selector.read_table(path).rules[1] == nonblocking     # merged, not replaced
    shown = tune.format_rules(table)
    assert "mpi allreduce, 2 ranks (nonblocking inplace calls):" in shown
    assert "1MiB and up       shared_memory" in shown


# --- cost model ----------------------------------------------------------------------------

def test_model_crossover_is_exact():
    # p = 4: recursive doubling 2(a + nb), ring 6a + 1.5nb: equal at n = 8a/b.
    alpha, beta = 2e-6, 1.5e-10
    found = model.exact_crossovers("allreduce", 4, alpha, beta, ["recursive_doubling", "ring"],
                                   parse_sizes("4:64MiB"))
    assert found == [(106667, "ring")]
    text = model.format_model("allreduce", 4, alpha, beta, [4, MIB],
                              ["recursive_doubling", "ring"])
    assert "ring from 106667 B" in text


@pytest.mark.parametrize("text, seconds", [("2e-6", 2e-6), ("2us", 2e-6), ("0.15ns", 1.5e-10),
                                           ("0.15ns/B", 1.5e-10), ("1ms", 1e-3)])
def test_parse_seconds(text, seconds):
    assert model.parse_seconds(text) == pytest.approx(seconds)


# --- plot and an end-to-end run ------------------------------------------------------------

def _check_png(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 300 and height > 200


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (aluminum[plot])")
    from aluminum.bench.plot import plot

    _check_png(plot(_result(), tmp_path / "latency.png"))


@pytest.mark.bench
def test_cli_sweep_on_two_ranks_writes_json(tmp_path):
    out = tmp_path / "sweep.json"
    cmd = [sys.executable, "-m", "aluminum.bench", "--np", "2", "allreduce", "--sizes",
           "4:1KiB", "--iters", "5", "--warmup", "1", "--algo", "automatic,mpi_passthrough",
           "--compare", "mpi4py", "--json", str(out), "--timeout", "90"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "# aluminum.bench allreduce" in run.stdout and "xmpi4py" in run.stdout
    result = report.load_json(str(out))
    assert (result.op, result.ranks, result.dtype) == ("allreduce", 2, "float32")
    # by default automatic also runs on al.shared_empty buffers (allreduce, MPI backend)
    assert [s.name for s in result.series] == ["automatic", "mpi_passthrough",
                                               "automatic [shared]", "mpi4py"]
    for series in result.series:
        assert [pt.size for pt in series.points] == [4 << i for i in range(9)]
        assert all(pt.iters == 5 and 0 < pt.min_us <= pt.avg_us <= pt.max_us
                   for pt in series.points)
    assert all(pt.algo in al.algorithms("allreduce") for pt in result.get("automatic").points)


def test_tuner_adds_per_placement_rules_only_where_placements_disagree():
    in_place = {"mpi_passthrough": _series([3.0, 30.0]), "shared_memory": _series([6.0, 20.0])}
    out_of_place = {"mpi_passthrough": _series([9.0, 60.0]),
                    "shared_memory": _series([4.0, 21.0])}
    rules = tune.rules_from("mpi", "allreduce", 2, [[in_place], [out_of_place]], (True, False),
                            "mpi_passthrough")
    by_placement = {rule.placement: rule.by_bytes for rule in rules}
    assert by_placement["inplace"] == ((0, "mpi_passthrough"), (8, "shared_memory"))
    assert by_placement["outofplace"] == ((0, "shared_memory"),)
    assert by_placement[None][0] == (0, "mpi_passthrough")   # holds for both: the default first
    assert set(by_placement) == {None, "inplace", "outofplace"}
    same = tune.rules_from("mpi", "allreduce", 2, [[in_place], [in_place]], (True, False),
                           "mpi_passthrough")
    assert [rule.placement for rule in same] == [None]


@pytest.mark.bench
@pytest.mark.parametrize("script, args, rows", [
    ("allreduce_vs_copy.py", ["--algos", "ring,shared_memory", "--touch"],
     ["4KiB", "64KiB", "with the caller's own buffers:", "allowing al.shared_empty buffers:"]),
    ("allreduce_floors.py", [], ["4KiB", "64KiB", "floor_zero_copy"])])
def test_allreduce_scripts_run_on_two_ranks_and_check_their_sums(script, args, rows):
    """Both scripts check every series' sum before timing and exit non-zero on a wrong one."""
    path = Path(__file__).resolve().parent.parent / "bench" / script
    cmd = [sys.executable, "-m", "aluminum.run", "-n", "2", str(path), "--sizes",
           "4KiB,64KiB", "--seconds", "0.02", "--rounds", "1", *args]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    for row in rows:
        assert row in run.stdout, run.stdout


@pytest.mark.bench
@pytest.mark.parametrize("script, args, rows", [
    ("train.py", ["--batch", "4", "--steps", "1", "--no-torch"],
     ["overlapped + fused", "CPU busy", "weak-scaling efficiency"]),
    ("timeline.py", ["--batch", "4", "--steps", "2"],
     ["communication |", "fused_allreduce", "while compute ops ran on another stream"]),
    ("call_floor.py", ["--iters", "20", "--rounds", "1"],
     ["allreduce out of place", "python floor", "start().wait()", "al.barrier",
      "allreduce out of place, new buffers", "nonblocking().wait()"])])
def test_training_and_call_cost_scripts_run_on_two_ranks(script, args, rows):
    path = Path(__file__).resolve().parent.parent / "bench" / script
    cmd = [sys.executable, "-m", "aluminum.run", "-n", "2", str(path), *args]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    for row in rows:
        assert row in run.stdout, run.stdout


@pytest.mark.bench
def test_op_table_compares_same_and_new_buffers_with_mpi4py():
    """Each row: ours, mpi4py and their ratio on the same buffers every call, then on new
    buffers every call (both libraries allocating them in the timed call)."""
    script = Path(__file__).resolve().parent.parent / "bench" / "op_table.py"
    run = subprocess.run([sys.executable, str(script), "--np", "2", "--ops", "allreduce,send",
                          "--rounds", "1"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = {line.split()[0]: line.split()[1:] for line in run.stdout.splitlines()
            if line.split() and line.split()[0] in ("allreduce", "send")}
    assert set(rows) == {"allreduce", "send"}
    for op, values in rows.items():
        ours, peer, ratio, ours_new, peer_new, ratio_new = map(float, values)
        assert 0 < ours and 0 < peer and ratio == pytest.approx(ours / peer, abs=0.03), op
        assert 0 < ours_new and 0 < peer_new, op
        assert ratio_new == pytest.approx(ours_new / peer_new, abs=0.03), op
