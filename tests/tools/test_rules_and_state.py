"""The session rules as a pure state machine: keep/revert judgement, derived state, allowed actions — no processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from pypto_tune.tools import gates, rules
from pypto_tune.tools.errors import GateRefusal
from pypto_tune.tools.ledger import Ledger, now_iso
from pypto_tune.tools.state import derive_state, load_rows


class TestJudgement:
    def test_sim_keeps_any_strict_gain_and_flags_tiny_ones(self) -> None:
        j = rules.judge_measurement(100.0, [99.8], "sim")
        assert j.result_type == "gain" and "may not transfer" in j.note

    def test_sim_treats_equal_as_no_gain(self) -> None:
        assert rules.judge_measurement(100.0, [100.0], "sim").result_type == "no-gain"

    def test_sim_regression(self) -> None:
        j = rules.judge_measurement(10.0, [12.0], "sim")
        assert j.result_type == "regression" and j.delta_pct == pytest.approx(20.0)

    def test_npu_needs_more_than_the_noise_of_its_repeats(self) -> None:
        # The skill's weight case: five repeats spanning 347.76–362.04 µs (σ ≈ 1.7 %): a 2 % gain is noise.
        noisy = [347.76, 352.0, 355.0, 358.0, 362.04]
        assert rules.judge_measurement(355.0 / 0.98, noisy, "npu").result_type == "no-gain"
        assert rules.judge_measurement(420.0, noisy, "npu").result_type == "gain"

    def test_npu_single_shot_uses_the_4_percent_bound(self) -> None:
        assert rules.judge_measurement(100.0, [97.0], "npu").result_type == "no-gain"
        assert rules.judge_measurement(100.0, [95.0], "npu").result_type == "gain"

    @pytest.mark.parametrize(("verdict", "out", "kind"), [
        ("timeout", "", "timeout"),
        ("error", "Run pass failed., func CompileFunction", "compile-failure"),
        ("failed", "PRECISION: failed (max abs diff 1.0)", "precision-failure"),
        ("error", "Segmentation fault", "runtime-error"),
    ])
    def test_failures_map_to_the_round_table_result_types(self, verdict: str, out: str, kind: str) -> None:
        assert rules.classify_failure(verdict, out) == kind


def _session(ledger: Ledger, sid: str = "s1") -> None:
    src = {"k.py": "TILE = 1\n"}
    ledger.insert("sessions", id=sid, created_at=now_iso(), workspace="/w", operator="k", operator_files=["k.py"],
                  test_command=["python", "k.py"], shell=False, run_mode="sim", goal_kind="speedup",
                  goal_value=2.0, timeout_s=300.0, device_ids=["0", "1"], time_limit_h=12.0, repeats=1,
                  original_sources=src, original_hash="h0", original_raw_hash="r0",
                  config={"started_epoch": 1e18})


def _prec(ledger: Ledger, verdict: str, code_hash: str = "h0", round_no: int | None = None) -> None:
    ledger.insert("precision_records", session_id="s1", at=now_iso(), run_id=None, command=["python"],
                  verdict=verdict, numerics_checked=False, exit_code=0 if verdict == "passed" else 1, duration_s=1.0,
                  key_output="", reason="", code_hash=code_hash, round=round_no, device_id="0", result_type=None)


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    lg = Ledger(tmp_path / "ledger.sqlite3")
    _session(lg)
    return lg


def test_a_new_session_allows_only_the_precision_check(ledger: Ledger) -> None:
    st = derive_state(load_rows(ledger, "s1"))
    assert st.level1 == "S1_SETUP" and gates.allowed_actions(st) == ["run_precision_check", "get_status"]
    with pytest.raises(GateRefusal, match="precision-first"):
        gates.check("collect_swimlane", st, disk_raw_hash="r0")


def test_three_baseline_failures_wait_for_the_user_and_a_confirmation_resets(ledger: Ledger) -> None:
    for _ in range(3):
        _prec(ledger, "failed")
    st = derive_state(load_rows(ledger, "s1"))
    assert st.awaiting_user and st.baseline_failures == 3
    with pytest.raises(GateRefusal) as refusal:
        gates.check("run_precision_check", st, disk_raw_hash="r0")
    assert refusal.value.rule == "baseline-retry"
    gates.check("run_precision_check", st, disk_raw_hash="r0", confirm_retry=True)
    last = max(r["id"] for r in st.rows["precision_records"])
    ledger.insert("confirmations", session_id="s1", at=now_iso(), kind="baseline-retry", detail=str(last))
    assert not derive_state(load_rows(ledger, "s1")).awaiting_user


def test_drift_blocks_everything_but_revert_and_adoption(ledger: Ledger) -> None:
    _prec(ledger, "passed")
    st = derive_state(load_rows(ledger, "s1"))
    with pytest.raises(GateRefusal, match="drift"):
        gates.check("enable_runtime_debug", st, disk_raw_hash="changed")
    gates.check("run_precision_check", st, disk_raw_hash="changed", adopt_drift=True)
    gates.check("get_status", st, disk_raw_hash="changed")


def test_the_ledger_refuses_updates_and_deletes(ledger: Ledger) -> None:
    import sqlite3

    conn = sqlite3.connect(ledger.path)
    for sql in ("UPDATE sessions SET goal_value = 100", "DELETE FROM sessions"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute(sql)
    assert ledger.schema_version() == 1 and ledger.integrity_ok()


def test_one_change_gate_counts_knobs() -> None:
    from pypto_tune.tools.snapshot import KnobChange

    one = [KnobChange(knob_id="a", file="k.py", line=1, before=1, after=2)]
    gates.check_one_change(one, algorithm=False, first_knobs=None)
    with pytest.raises(GateRefusal, match="2 knobs"):
        gates.check_one_change(one * 2, algorithm=False, first_knobs=None)
    with pytest.raises(GateRefusal, match="no recognised tuning knob"):
        gates.check_one_change([], algorithm=False, first_knobs=None)
    gates.check_one_change([], algorithm=True, first_knobs=None)
    with pytest.raises(GateRefusal, match="correction"):
        gates.check_one_change(one, algorithm=False, first_knobs=["b"])


def test_stage_sequence_and_thresholds_follow_the_skill() -> None:
    assert [s.name for s in rules.STAGES] == ["FRONTEND", "SWIMLANE_1", "INCORE_1", "SWIMLANE_2", "INCORE_2",
                                              "SWIMLANE_3", "INCORE_3"]
    assert {s.group: s.no_gain_threshold for s in rules.STAGES} == {"frontend": 5, "swimlane": 8, "incore": 5}
    assert rules.next_stage("INCORE_3") is None
