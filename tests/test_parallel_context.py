"""MindSpore's facade on one process: the context's validation and reset, and GradReducer
on a communicator of one rank (multi-rank behaviour: tests/mpi/rank_executor_data_parallel.py)."""
import numpy as np
import pytest

import aluminum as al
import aluminum.executor as ex


@pytest.fixture(autouse=True)
def fresh_context():
    ex.reset_parallel_context()
    yield
    ex.reset_parallel_context()


def test_an_unknown_mode_is_a_clear_error_and_changes_nothing():
    with pytest.raises(ex.ProgramError, match="parallel_mode: expected one of"):
        ex.set_parallel_context(parallel_mode="model_parallel")
    assert ex.get_parallel_context().parallel_mode is ex.ParallelMode.STAND_ALONE


def test_modes_are_given_by_member_or_name_and_reset_restores_the_defaults():
    ex.set_parallel_context(parallel_mode="data_parallel", gradients_mean=False)
    context = ex.get_parallel_context()
    assert context.parallel_mode is ex.ParallelMode.DATA_PARALLEL and not context.gradients_mean
    ex.reset_parallel_context()
    context = ex.get_parallel_context()
    assert context.parallel_mode is ex.ParallelMode.STAND_ALONE and context.gradients_mean


def test_stand_alone_executors_get_no_communicator():
    assert ex.get_parallel_context().communicator() is None


def test_grad_reducer_on_one_rank_returns_copies_of_the_gradients():
    with al.MPICommunicator() as comm:
        grads = [np.arange(6.0).reshape(2, 3), np.ones(4, np.float32)]
        reduced = ex.GradReducer(comm)(grads)
        for got, given in zip(reduced, grads):
            np.testing.assert_array_equal(got, given)
            assert got.dtype == given.dtype and got is not given
