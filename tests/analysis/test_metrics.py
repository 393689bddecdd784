"""analyze_perf's formulas (B.2) reproduced exactly, and where the corrected figures depart from them (E.2)."""

from __future__ import annotations

import pytest

from pypto_tune.tools.analysis import metrics
from pypto_tune.tools.analysis.models import LogCore


def core(name, work, wait, sched, n=1):
    return LogCore(name=name, core_type=name.split("_")[0], index=int(name.split("_")[1]), n_real=n, work_us=work,
                   wait_total_us=wait, wait_schedule_us=sched, wait_predecessor_us=wait - sched, line=1)


def test_per_core_formulas():
    (c,) = metrics.core_stats([core("AIV_25", 10.0, 4.0, 1.0)])
    assert c.busy_us == 6.0  # AicoreTime = work − TotalWait
    assert c.utilization_pct == pytest.approx(60.0)  # busy / (busy + wait)
    assert c.bubble_rate_pct == pytest.approx(100 / 7)  # sched / (busy + sched)
    (idle,) = metrics.core_stats([core("AIC_1", 0.0, 0, 0, n=0)])
    assert (idle.utilization_pct, idle.bubble_rate_pct, idle.active) == (0.0, 0.0, False)


def test_only_aic_and_aiv_blocks_are_selected():
    cs = [core("Fake Core_0", 0, 0, 0, 0), core("HUB_80", 9, 1, 1), core("AI-CPU_3", 9, 1, 1), core("AIV_25", 2, 1, 0)]
    assert [c.name for c in metrics.core_stats(cs)] == ["AIV_25"]


def test_reference_load_balance_is_unbounded_and_aic_only():
    assert metrics.reference_load_balance([1.0]) == 100.0  # fewer than two AIC cores
    assert metrics.reference_load_balance([0.0, 0.0]) == 0.0  # mean 0: all AIC idle
    assert metrics.reference_load_balance([10.0, 0.0, 0.0, 0.0]) == pytest.approx((1 - 3 ** 0.5) * 100)  # −73.2 %
    stats = metrics.core_stats([core("AIC_1", 10, 0, 0), core("AIC_2", 0, 0, 0, n=0), core("AIC_3", 0, 0, 0, n=0),
                                core("AIC_4", 0, 0, 0, n=0), core("AIV_25", 5, 0, 0), core("AIV_26", 1, 0, 0)])
    fig = metrics.core_figures(stats, [])
    assert fig.load_balance == pytest.approx((1 - 3 ** 0.5) * 100)
    # corrected: per type over active cores, clamped, worse type: AIC has one active core (100), AIV 5 vs 1
    assert fig.active_balance == pytest.approx((1 - 2 / 3) * 100)
    assert fig.max_work_us == 10


@pytest.mark.parametrize("u, b, lb, expect", [
    (90.0, 2.0, 90.0, {"utilization": 4, "bubble": 4, "load_balance": 4, "overall": 4}),  # strict inequalities
    (90.01, 1.99, 90.01, {"utilization": 5, "bubble": 5, "load_balance": 5, "overall": 5}),
    (50.0, 20.0, 50.0, {"utilization": 1, "bubble": 1, "load_balance": 1, "overall": 1}),
    (61.0, 9.0, 10.0, {"utilization": 3, "bubble": 3, "load_balance": 1, "overall": 2}),  # mean 2.33 → 2
    (81.0, 4.0, 61.0, {"utilization": 4, "bubble": 4, "load_balance": 3, "overall": 4}),  # mean 3.67 → 4
])
def test_rating_table(u, b, lb, expect):
    assert metrics.ratings(u, b, lb) == expect


def test_bottleneck_flags_and_directions():
    fig = metrics.CoreFigures(avg_util=45, avg_bubble=15, avg_aic_util=0, avg_aiv_util=0, avg_aic_bubble=0,
                              avg_aiv_bubble=0, load_balance=70, active_util=75, active_bubble=15, active_balance=95,
                              max_work_us=1, max_aic_wait_pred_us=501)
    flags = {b.kind: b for b in metrics.bottlenecks(fig)}
    assert flags["utilization"].severity == "high" and flags["utilization"].false_alarm  # 75 % on active cores
    assert flags["bubble"].severity == "medium" and not flags["bubble"].false_alarm
    assert flags["load_balance"].severity == "medium" and flags["load_balance"].false_alarm
    assert flags["dependency"].value == 501
    assert metrics.directions(fig) == ["frontend", "swimlane"]


def test_a_load_balance_below_zero_or_at_its_floor_says_why():
    """(1 − CV)·100 is negative when CV > 1 (reference) and clamped to 0 (active cores): the message names it
    instead of printing a bare −18.30 % or 0.00 % (issue #18)."""
    fig = metrics.CoreFigures(avg_util=60, avg_bubble=5, avg_aic_util=60, avg_aiv_util=60, avg_aic_bubble=5,
                              avg_aiv_bubble=5, load_balance=-18.3, active_util=60, active_bubble=5, active_balance=0.0,
                              max_work_us=10.0, max_aic_wait_pred_us=0.0)
    (lb,) = [b for b in metrics.bottlenecks(fig) if b.kind == "load_balance"]
    assert "-18.30 %" in lb.message and "below 0: busy-time CV > 1" in lb.message
    assert "active cores only: 0.00 % (the floor: CV ≥ 1 on some core type)" in lb.message
    assert "变异系数 > 1" in lb.message_zh and "下限" in lb.message_zh
