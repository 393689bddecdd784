"""A round whose summed operator time fell can still be flagged: one kernel, or the AICore end-to-end time, got
slower beyond the noise margin (issue #11: E2E rose 30 % while the summed work time fell 16 %, unnoticed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pypto_tune.tools.operations.rounds import _regression_flags


@dataclass
class _State:
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    kept_hash: str = "kept"


def _m(code: str, e2e: float, kernels: dict[str, float]) -> dict[str, Any]:
    return {"valid": True, "code_hash": code, "e2e_us": e2e,
            "per_kernel": {k: {"time": [t]} for k, t in kernels.items()}}


def test_the_total_falls_while_one_kernel_and_the_end_to_end_time_rise() -> None:
    st = _State(rows={"measurements": [_m("kept", 100.0, {"residual_add": 10.0, "rms_norm": 50.0})]})
    after = _m("new", 130.0, {"residual_add": 12.0, "rms_norm": 36.0})  # sum 60 -> 48 µs: a 20 % "gain"
    flags = _regression_flags(st, after, margin_pct=0.5)
    assert flags == ["FLAG: AICore end-to-end time rose +30.0 % (100.000 → 130.000 µs)",
                     "FLAG: kernel residual_add got slower +20.0 % (10.000 → 12.000 µs)"]


def test_rises_inside_the_noise_margin_are_not_flagged() -> None:
    st = _State(rows={"measurements": [_m("kept", 100.0, {"a": 10.0}), _m("kept", 102.0, {"a": 10.2})]})
    # medians of the kept code: e2e 101, a 10.1; +1.9 % and +1.0 % stay inside a 2 % margin
    assert _regression_flags(st, _m("new", 102.9, {"a": 10.2}), margin_pct=2.0) == []
    assert _regression_flags(st, _m("new", 104.0, {"a": 10.2}), margin_pct=2.0) == [
        "FLAG: AICore end-to-end time rose +3.0 % (101.000 → 104.000 µs)"]


def test_a_kernel_the_kept_code_never_ran_is_not_compared() -> None:
    st = _State(rows={"measurements": [_m("kept", 0.0, {"a": 10.0}), _m("other", 0.0, {"b": 1.0})]})
    assert _regression_flags(st, _m("new", 0.0, {"a": 9.0, "b": 50.0}), margin_pct=0.5) == []
