"""R14b's "theoretical limit" stop counts the platform's cores, not only the busy ones (issue #12: layer_norm
sessions ended after one round on a kernel that ran on 1 of 48 vector cores at 100 % active utilisation)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from pypto_tune.tools.rules import gates


def _analysis(active: int, listed: int, *, theoretical: int = 0, busy_frac: float = 1.0,
              bubble: float = 0.0, op_us: float = 10.0) -> dict[str, Any]:
    cores = [{"name": f"AIV_{i}", "core_type": "AIV", "active": i < active,
              "busy_us": op_us * busy_frac if i < active else 0.0} for i in range(listed)]
    return {"cores": cores, "operator_time_us": op_us, "active_core_utilization_pct": 100.0 * busy_frac,
            "active_bubble_rate_pct": bubble,
            "core_usage": {"rows": [{"core_type": "AIV", "theoretical_cores": theoretical}]} if theoretical else {}}


@dataclass
class _State:
    """The fields R14b reads from a SessionState."""

    analysis: dict[str, Any]
    kept_us: float | None = 10.0
    target_us: float | None = 1.0
    kept_hash: str = "k"
    session: dict[str, Any] = field(default_factory=lambda: {"config": {"started_epoch": time.time()},
                                                             "time_limit_h": 4})

    def last_valid_measurement(self, code_hash: str | None = None) -> dict[str, Any]:
        return {"analysis": self.analysis}


def test_one_of_48_vector_cores_busy_is_not_a_limit_and_both_figures_are_named() -> None:
    lone = _analysis(active=1, listed=48)  # SIM lists idle cores: 48 lanes, one of them busy all the time
    assert gates.platform_utilization(lone) == pytest.approx(100.0 / 48)
    assert gates.global_stop_reason(_State(lone)) == ""  # 100 % of its active cores, 2 % of the platform


def test_on_the_npu_idle_cores_have_no_lane_so_the_theoretical_count_decides() -> None:
    lone = _analysis(active=1, listed=1, theoretical=48)  # the NPU trace lists only the busy core
    assert gates.platform_utilization(lone) == pytest.approx(100.0 / 48)
    assert gates.global_stop_reason(_State(lone)) == ""


def test_every_core_busy_with_few_bubbles_is_the_limit() -> None:
    full = _analysis(active=48, listed=48, busy_frac=0.9, bubble=5.0)
    reason = gates.global_stop_reason(_State(full))
    assert reason.startswith("theoretical limit") and "90.0 % of the platform" in reason and "bubble 5.0 %" in reason


@pytest.mark.parametrize(("busy_frac", "bubble"), [(0.79, 5.0), (0.9, 10.0)])
def test_either_figure_short_of_its_threshold_keeps_tuning(busy_frac: float, bubble: float) -> None:
    assert gates.global_stop_reason(_State(_analysis(active=48, listed=48, busy_frac=busy_frac,
                                                     bubble=bubble))) == ""


# ------------------------------------------------------------------------------------------------ at the thresholds
# R14b (README rule table, `finished`): stop at utilisation > 80 % of both the active cores and the platform's cores of
# the types the kernel uses, with bubble < 10 %; and when the kept time is at or below the target. Each threshold is
# tested on it (not a stop: the inequalities are strict) and a step beyond it.


def _limit(util_active: float, util_platform: float, bubble: float) -> dict[str, Any]:
    """48 AIV cores all busy ``util_platform`` % of a 10 µs operator; the active-core figures as given."""
    a = _analysis(active=48, listed=48, busy_frac=util_platform / 100.0, bubble=bubble)
    a["active_core_utilization_pct"] = util_active
    return a


@pytest.mark.parametrize(("util_active", "util_platform", "bubble", "stops"), [
    (90.0, 90.0, 5.0, True),
    (80.0, 90.0, 5.0, False), (80.5, 90.0, 5.0, True),  # active cores: > 80 %
    (90.0, 80.0, 5.0, False), (90.0, 80.5, 5.0, True),  # the platform's cores: > 80 %
    (90.0, 90.0, 10.0, False), (90.0, 90.0, 9.5, True),  # bubble: < 10 %
])
def test_the_theoretical_limit_at_each_of_its_thresholds(util_active: float, util_platform: float, bubble: float,
                                                          stops: bool) -> None:
    a = _limit(util_active, util_platform, bubble)
    assert gates.platform_utilization(a) == pytest.approx(util_platform)
    reason = gates.global_stop_reason(_State(a))
    assert reason.startswith("theoretical limit") if stops else reason == "", reason


def test_the_limit_needs_every_figure_and_without_them_tuning_goes_on() -> None:
    full = _limit(90.0, 90.0, 5.0)
    for key in ("active_core_utilization_pct", "active_bubble_rate_pct", "cores"):
        assert gates.global_stop_reason(_State({k: v for k, v in full.items() if k != key})) == "", key


@pytest.mark.parametrize(("kept_us", "target_us", "reached"), [
    (10.0, 10.0, True), (9.0, 10.0, True), (10.001, 10.0, False), (None, 10.0, False), (10.0, None, False)])
def test_the_target_is_reached_at_or_below_it(kept_us: float | None, target_us: float | None, reached: bool) -> None:
    far = _analysis(active=1, listed=48)  # far from the limit: only the target can stop it
    reason = gates.global_stop_reason(_State(far, kept_us=kept_us, target_us=target_us))
    assert reason.startswith("target reached") if reached else reason == "", reason


def test_without_a_measurement_of_the_kept_code_only_the_target_and_the_time_limit_stop() -> None:
    @dataclass
    class _Unmeasured(_State):
        def last_valid_measurement(self, code_hash: str | None = None) -> None:
            return None

    assert gates.global_stop_reason(_Unmeasured({})) == ""
    late = {"config": {"started_epoch": time.time() - 5 * 3600}, "time_limit_h": 4}
    assert gates.global_stop_reason(_Unmeasured({}, session=late)) == "time limit of 4 h reached"
    assert gates.global_stop_reason(_Unmeasured({}, kept_us=1.0, session=late)).startswith("target reached")


# ------------------------------------------------------------------------------------------------ the platform's cores


def test_the_platform_counts_only_the_core_types_the_kernel_used_and_only_its_active_cores_busy_time() -> None:
    """AIV cores busy, AIC cores idle: the AIC lanes and the AIC device count do not dilute the figure; an inactive
    AIV lane (fake tasks only) adds a lane but not its busy time; an active core with no busy time adds nothing."""
    cores = ([{"core_type": "AIV", "active": True, "busy_us": 8.0}] * 3
             + [{"core_type": "AIV", "active": True, "busy_us": 0.0}]
             + [{"core_type": "AIV", "active": False, "busy_us": 5.0}]
             + [{"core_type": "AIC", "active": False, "busy_us": 0.0}] * 24)
    a = {"cores": cores, "operator_time_us": 10.0,
         "core_usage": {"rows": [{"core_type": "AIC", "theoretical_cores": 24}]}}
    assert gates.platform_utilization(a) == pytest.approx(100.0 * 3 * 8.0 / (5 * 10.0))
    a["core_usage"]["rows"].append({"core_type": "AIV", "theoretical_cores": 8})  # the device has 8: more than listed
    assert gates.platform_utilization(a) == pytest.approx(100.0 * 3 * 8.0 / (8 * 10.0))
    a["core_usage"]["rows"].append({"core_type": "AIV", "theoretical_cores": 2})  # the larger count decides
    assert gates.platform_utilization(a) == pytest.approx(100.0 * 3 * 8.0 / (8 * 10.0))
    a["core_usage"]["rows"].append({"core_type": "AIV", "theoretical_cores": None})
    assert gates.platform_utilization(a) == pytest.approx(100.0 * 3 * 8.0 / (8 * 10.0))


def test_two_core_types_in_use_count_both() -> None:
    cores = [{"core_type": "AIV", "active": True, "busy_us": 6.0}, {"core_type": "AIC", "active": True,
                                                                      "busy_us": 9.0}]
    a = {"cores": cores, "operator_time_us": 10.0,
         "core_usage": {"rows": [{"core_type": "AIV", "theoretical_cores": 2},
                                 {"core_type": "AIC", "theoretical_cores": 1}]}}
    assert gates.platform_utilization(a) == pytest.approx(100.0 * 15.0 / (3 * 10.0))


def test_no_figure_without_an_active_core_or_an_operator_time() -> None:
    idle = [{"core_type": "AIV", "active": False, "busy_us": 0.0}] * 4
    busy = [{"core_type": "AIV", "active": True, "busy_us": 4.0}]
    assert gates.platform_utilization({"cores": idle, "operator_time_us": 10.0}) is None
    assert gates.platform_utilization({"cores": busy, "operator_time_us": 0.0}) is None
    assert gates.platform_utilization({"cores": busy}) is None
    assert gates.platform_utilization({"cores": busy, "operator_time_us": None}) is None
    assert gates.platform_utilization({"operator_time_us": 10.0}) is None
    assert gates.platform_utilization({"cores": busy, "operator_time_us": 10.0}) == pytest.approx(40.0)
    # a kernel shorter than a microsecond is still measured (0.5 µs, the core busy 0.4 µs of it)
    tiny = [{"core_type": "AIV", "active": True, "busy_us": 0.4}]
    assert gates.platform_utilization({"cores": tiny, "operator_time_us": 0.5}) == pytest.approx(80.0)
