"""R14b's "theoretical limit" stop counts the platform's cores, not only the busy ones (issue #12: layer_norm
sessions ended after one round on a kernel that ran on 1 of 48 vector cores at 100 % active utilisation)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from pypto_tune.tools.session import gates


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
