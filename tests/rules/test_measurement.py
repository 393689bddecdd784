"""How a state is measured and judged (tools/rules/tuning_loop.py): how many samples, and the keep/revert of a round
from them — SIM deterministic, the NPU by confidence from the pooled spread. Pure: no process."""

from __future__ import annotations

import math
import statistics

import pytest

from pypto_tune.tools.errors import InputError
from pypto_tune.tools.rules.tuning_loop import MEDIAN_SE_FACTOR, _rel_se_pct, judge_measurement, repeats_for


def test_sim_measures_once_and_the_npu_at_least_three_times_never_more_than_twenty() -> None:
    assert repeats_for("sim", None) == 1 and repeats_for("sim", 2) == 2
    assert repeats_for("npu", None) == 3 and repeats_for("npu", 3) == 3 and repeats_for("npu", 20) == 20
    with pytest.raises(InputError, match="repeats on the NPU must be at least 3, got 2"):
        repeats_for("npu", 2)  # the agent cannot lower the floor
    for bad in (0, 21):
        with pytest.raises(InputError, match=f"repeats must be 1..20, got {bad}"):
            repeats_for("sim", bad)


def test_a_sim_judgement_is_always_decisive() -> None:
    for after in (90.0, 100.0, 110.0):
        assert judge_measurement(100.0, [after], "sim").decisive is True


def test_the_standard_error_pools_both_states_relative_spreads() -> None:
    before, after = [100.0, 102.0, 98.0], [90.0, 91.8, 88.2]  # the same ±2 % spread around each median
    resid = [x / 100.0 - 1.0 for x in before] + [x / 90.0 - 1.0 for x in after]
    sigma = math.sqrt(sum(r * r for r in resid) / (len(resid) - 2))
    expected = MEDIAN_SE_FACTOR * sigma * math.sqrt(1 / 3 + 1 / 3) * 100.0
    assert _rel_se_pct(before, after) == pytest.approx(expected, rel=1e-12)
    assert _rel_se_pct([100.0] * 3, [90.0] * 3) == 0.0  # no spread: no doubt
    # the margin an NPU round reports is two standard errors (at least 1 %)
    j = judge_measurement(statistics.median(before), after, "npu", before)
    assert j.margin_pct == pytest.approx(max(2 * expected, 1.0), rel=1e-12)


def test_without_a_kept_time_nothing_is_a_gain_and_a_flat_npu_round_has_the_1_percent_floor() -> None:
    assert judge_measurement(0.0, [5.0], "sim").result_type == "no-gain"
    assert judge_measurement(0.0, [5.0, 5.0, 5.0], "npu").delta_pct == 0.0
    assert judge_measurement(0.0, [0.0, 0.0, 0.0], "npu").result_type == "no-gain"
    # no spread in the round's own samples (no kept samples to pool): its margin is the floor, not more
    j = judge_measurement(100.0, [0.0, 0.0, 0.0], "npu")
    assert (j.result_type, j.margin_pct) == ("gain", 1.0)
