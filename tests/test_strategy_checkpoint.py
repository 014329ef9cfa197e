"""Strategy checkpoints (sharding/checkpoint.py): the file's text and its checks against a
program, in one process.  Saving and loading through the ParallelExecutor on 2 and 4 ranks,
errors on every rank alike: tests/mpi/auto_parallel_ranks.py."""
import json
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aluminum.executor as ex
from aluminum.executor.sharding.checkpoint import (checkpoint_text, pinned_strategies,
                                                   read_on_rank0, write_on_rank0)
from aluminum.executor.sharding.search import candidates

WEIGHTS = ["l0.w", "l1.w", "l2.w"]
SHAPES = [(6, 8), (8, 8), (8, 4)]
NONE = [None, None, None]


def text(ranks=4, layers=None, **changes) -> str:
    """A checkpoint's text written by hand, as a user would."""
    content = {"format": "aluminum strategy checkpoint", "version": 1, "ranks": ranks,
               "layers": [{"weight": "l1.w", "shape": [8, 8], "strategy": [[1, 1], [1, 4]]}]
               if layers is None else layers}
    content.update(changes)
    return json.dumps(content)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_saved_strategies_load_back_as_they_were(data):
    nranks = data.draw(st.integers(1, 4))
    strategies = [data.draw(st.sampled_from(candidates(nranks))) for _ in WEIGHTS]
    saved = checkpoint_text(WEIGHTS, SHAPES, strategies, nranks)
    assert json.loads(saved)["ranks"] == nranks
    assert pinned_strategies(saved, "f.json", WEIGHTS, SHAPES, NONE, nranks) == \
        dict(zip(WEIGHTS, strategies))


def test_a_file_naming_some_layers_pins_only_those_and_may_repeat_a_hand_set_one():
    assert pinned_strategies(text(), "f.json", WEIGHTS, SHAPES, NONE, 4) == \
        {"l1.w": ((1, 1), (1, 4))}
    hand = [None, ((1, 1), (1, 4)), None]
    assert pinned_strategies(text(), "f.json", WEIGHTS, SHAPES, hand, 4) == \
        {"l1.w": ((1, 1), (1, 4))}


@pytest.mark.parametrize("content, message", [
    ("{", "not JSON"),
    (json.dumps([1, 2]), 'expected {"format": "aluminum strategy checkpoint"'),
    (text(version=2), 'expected {"format": "aluminum strategy checkpoint", "version": 1'),
    (text(ranks=8), "saved for 8 ranks; this communicator has 4"),
    (text(layers=[{"weight": "l7.w", "strategy": [[4, 1], [1, 1]]}]),
     "layer 'l7.w' is not a weight of this program's fc chain, whose weights are "
     "['l0.w', 'l1.w', 'l2.w']"),
    (text(layers=[{"weight": "l0.w", "strategy": [[4, 1], [1, 1]]}] * 2),
     "layer 'l0.w' appears twice"),
    (text(layers=[{"weight": "l0.w", "shape": [6, 9], "strategy": [[4, 1], [1, 1]]}]),
     "layer 'l0.w' was saved with shape [6, 9]; it is [6, 8] in this program"),
    (text(layers=[{"weight": "l0.w", "strategy": [[3, 1], [1, 1]]}]),
     "layer 'l0.w': strategy ((3, 1), (1, 1)) does not divide the mesh"),
    (text(layers=[{"weight": "l0.w", "strategy": [[2, 2], [1, 2]]}]),
     "layer 'l0.w': strategy ((2, 2), (1, 2)) splits dimension 'k' in 2 and in 1 parts"),
    (text(layers=[{"weight": "l0.w", "strategy": "data parallel"}]),
     "layer 'l0.w': shard: expected one tuple per input"),
    (text(layers=[{"weight": "l0.w"}]), "expected each layer as"),
])
def test_a_file_that_does_not_fit_the_program_names_the_file_and_the_mismatch(content,
                                                                               message):
    with pytest.raises(ex.ProgramError) as raised:
        pinned_strategies(content, "/tmp/s.json", WEIGHTS, SHAPES, NONE, 4)
    assert "strategy checkpoint /tmp/s.json" in str(raised.value)
    assert message in str(raised.value), str(raised.value)


def test_a_strategy_set_by_hand_that_differs_from_the_file_is_an_error():
    hand = [None, ((4, 1), (1, 1)), None]
    with pytest.raises(ex.ProgramError, match=r"layer 'l1.w' has strategy \(\(1, 1\), "
                                              r"\(1, 4\)\) in the file and \(\(4, 1\), "
                                              r"\(1, 1\)\) set by hand"):
        pinned_strategies(text(), "f.json", WEIGHTS, SHAPES, hand, 4)


def test_the_context_takes_paths_and_a_bad_one_changes_nothing(tmp_path):
    try:
        ex.set_parallel_context(strategy_ckpt_save_file=tmp_path / "s.json")
        assert ex.get_parallel_context().strategy_ckpt_save_file == str(tmp_path / "s.json")
        with pytest.raises(ex.ProgramError, match="strategy_ckpt_load_file: expected a file "
                                                  "path"):
            ex.set_parallel_context(parallel_mode="auto_parallel", strategy_ckpt_load_file=3)
        context = ex.get_parallel_context()
        assert context.parallel_mode is ex.ParallelMode.STAND_ALONE
        assert context.strategy_ckpt_load_file is None
        ex.set_parallel_context(strategy_ckpt_save_file="")
        assert ex.get_parallel_context().strategy_ckpt_save_file is None
    finally:
        ex.reset_parallel_context()


def test_rank_0_writes_the_file_whole_and_a_path_it_cannot_use_is_an_error(tmp_path):
    one = types.SimpleNamespace(rank=0, size=1)
    path = str(tmp_path / "s.json")
    write_on_rank0(path, "first", one)
    write_on_rank0(path, "second", one)
    assert read_on_rank0(path, one) == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]     # no temporary left
    missing = str(tmp_path / "no" / "s.json")
    with pytest.raises(ex.ProgramError, match=f"strategy checkpoint {missing}: cannot write"):
        write_on_rank0(missing, "x", one)
    with pytest.raises(ex.ProgramError, match=f"strategy checkpoint {missing}: cannot read"):
        read_on_rank0(missing, one)
