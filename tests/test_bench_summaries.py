"""The auto-parallel benchmarks' summaries, on hand-made rows and windows: what each says
must follow from the numbers by hand, since nothing else checks them."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
import auto_parallel  # noqa: E402
import step_drift  # noqa: E402


def _row(model, strategies, predicted, measured, fused=False):
    return {"model": model, "strategies": strategies, "fused": fused,
            "predicted_ms": predicted, "measured_ms": measured}


def test_spread_counts_rows_within_a_quarter_before_and_after_the_job_factor():
    rows = [_row("a", [[1]], 13.0, 10.0),       # 1.30: outside
            _row("a", [[2]], 13.0, 10.0),       # 1.30: outside
            _row("b", [[1]], 12.0, 10.0),       # 1.20: inside
            _row("b", [[1]], 12.0, 8.0)]        # 1.50: outside; the strategy of the row before
    found = auto_parallel.spread(rows)
    assert found["within"] == 1
    factor = (1.3 * 1.3 * 1.2 * 1.5) ** 0.25
    assert found["job_factor"] == pytest.approx(factor)
    # divided by it: 1.3/f, 1.3/f, 1.2/f, 1.5/f -> all within ±25 % (f = 1.32)
    assert found["within_job_factor_out"] == 4
    assert found["same_strategy"] == pytest.approx([10.0 / 8.0])


def test_spread_counts_a_second_calibrations_rows_and_how_far_the_two_fall_apart():
    rows = [dict(_row("a", [[1]], 10.0, 10.0), predicted_again_ms=12.0),   # 1.0 and 1.2
            dict(_row("a", [[2]], 13.0, 10.0), predicted_again_ms=10.0),   # 1.3 and 1.0
            dict(_row("b", [[1]], 8.0, 10.0), predicted_again_ms=11.0)]    # 0.8 and 1.1
    found = auto_parallel.spread(rows)
    assert found["within"] == 2 and found["within_again"] == 3
    # apart: 12/10 = 1.2 (no), 10/13 = 0.77 (yes: 1.3 > 1.25), 11/8 = 1.375 (yes)
    assert found["calibrations_apart"] == 2
    assert "within_again" not in auto_parallel.spread([_row("a", [[1]], 1.0, 1.0)])


def test_spread_pairs_only_rows_of_one_model_and_fusion():
    rows = [_row("a", [[1]], 1.0, 2.0), _row("a", [[1]], 1.0, 3.0, fused=True),
            _row("b", [[1]], 1.0, 4.0)]
    assert auto_parallel.spread(rows)["same_strategy"] == []


def test_step_drift_summary_ranges_and_an_oracles_misses():
    # two programs, one window a second: the first doubles once (at window 4), the second
    # stays; lag 2 s pairs (0,2) (1,3) (2,4) (3,5) (4,6) (5,7): two straddle the jump
    first = np.array([1, 1, 1, 1, 2, 2, 2, 2], float)
    second = np.ones(8)
    medians = np.column_stack([first, second])
    found = step_drift.summary(np.arange(8.0), medians)
    assert found["window_s"] == 1.0
    assert found["range"] == pytest.approx([2.0, 1.0])
    assert found["common_range"] == pytest.approx(2 ** 0.5)
    assert found["range_common_out"] == pytest.approx([2 ** 0.5, 2 ** 0.5])
    # lag 2: 6 pairs per program, 2 of the first's 12 pairs in all apart by 2x
    assert found["oracle_misses"][2] == pytest.approx(2 / 12)
    # lag 5: pairs (0,5) (1,6) (2,7): all three of the first's straddle the jump
    assert found["oracle_misses"][5] == pytest.approx(3 / 6)
    assert 10 not in found["oracle_misses"]    # (no pair that far apart)
