"""A cell of the arrival board: a count under its slot's generation (core/board_cells.py)."""
import pytest

from aluminum.core.board_cells import count_of, generation_of, given_back, reached


def test_a_cell_holds_a_generation_and_a_count():
    cell = 3 * 2**40 + 17
    assert count_of(cell) == 17 and generation_of(cell) == 3


def test_giving_a_slot_back_restarts_its_count_under_the_next_generation():
    assert given_back(3 * 2**40 + 17) == 4 * 2**40
    assert given_back(0) == 2**40
    last = (2**22 - 1) * 2**40 + 5                 # generations wrap, cells stay positive
    assert given_back(last) == 0 and last < 2**63


@pytest.mark.parametrize("cell, generation, number, expected", [
    (3 * 2**40 + 16, 3, 17, False),                # one collective behind, same slot owner
    (3 * 2**40 + 17, 3, 17, True),                 # arrived
    (3 * 2**40 + 20, 3, 17, True),                 # already further on
    (4 * 2**40, 3, 17, True),                      # the slot was given back since
    (4 * 2**40 + 2, 3, 17, True),                  # ... and taken by another communicator
])
def test_a_rank_reached_a_collective_once_counted_or_gone(cell, generation, number, expected):
    assert reached(cell, generation, number) is expected
