"""The session rules as a pure state machine: keep/revert judgement, derived state, allowed actions — no processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from pypto_tune.tools.rules import gates
from pypto_tune.tools.rules import tuning_loop
from pypto_tune.tools.errors import GateRefusal
from pypto_tune.tools.session.ledger import Ledger, now_iso
from pypto_tune.tools.session.state import derive_state, load_rows


class TestJudgement:
    def test_sim_keeps_any_strict_gain_and_flags_tiny_ones(self) -> None:
        j = tuning_loop.judge_measurement(100.0, [99.8], "sim")
        assert j.result_type == "gain" and "may not transfer" in j.note

    def test_sim_treats_equal_as_no_gain(self) -> None:
        assert tuning_loop.judge_measurement(100.0, [100.0], "sim").result_type == "no-gain"

    def test_sim_regression(self) -> None:
        j = tuning_loop.judge_measurement(10.0, [12.0], "sim")
        assert j.result_type == "regression" and j.delta_pct == pytest.approx(20.0)

    def test_npu_needs_more_than_the_noise_of_its_repeats(self) -> None:
        # The skill's weight case: five repeats spanning 347.76–362.04 µs (σ ≈ 1.7 %): a 2 % gain is noise.
        noisy = [347.76, 352.0, 355.0, 358.0, 362.04]
        assert tuning_loop.judge_measurement(355.0 / 0.98, noisy, "npu").result_type == "no-gain"
        assert tuning_loop.judge_measurement(420.0, noisy, "npu").result_type == "gain"

    def test_npu_a_single_shot_never_proves_a_gain(self) -> None:
        # NPU repeats have a floor of 3; one sample against nothing cannot beat the noise (E.1: ~4 % single-shot).
        for after in (97.0, 95.0):
            j = tuning_loop.judge_measurement(100.0, [after], "npu")
            assert j.result_type == "no-gain" and not j.decisive and "not kept" in j.note
        assert tuning_loop.judge_measurement(100.0, [80.0], "npu").result_type == "gain"

    def test_npu_pooled_samples_decide_a_5_percent_gain_and_not_a_half_percent_one(self) -> None:
        kept = [100.4, 99.1, 100.9, 99.6, 100.2, 99.8]
        gain = tuning_loop.judge_measurement(100.0, [95.2, 94.6, 95.3], "npu", kept)
        assert gain.result_type == "gain" and gain.decisive
        small = tuning_loop.judge_measurement(100.0, [99.3, 99.8, 99.4], "npu", kept, final=False)
        assert not small.decisive or small.result_type == "no-gain"
        assert tuning_loop.judge_measurement(100.0, [99.3, 99.8, 99.4], "npu", kept).result_type != "gain"

    def test_npu_undecided_at_the_cap_is_not_kept(self) -> None:
        kept = [100.0, 104.0, 96.0]
        j = tuning_loop.judge_measurement(100.0, [97.0, 93.0, 101.0], "npu", kept, final=True)
        assert j.result_type == "no-gain" and not j.decisive

    @pytest.mark.parametrize(("verdict", "out", "kind"), [
        ("timeout", "", "timeout"),
        ("error", "Run pass failed., func CompileFunction", "compile-failure"),
        ("failed", "PRECISION: failed (max abs diff 1.0)", "precision-failure"),
        ("error", "Segmentation fault", "runtime-error"),
        ("failed", 'File ".../pypto/cost_model.py", line 67, in _cost_model_run_once_data_from_host\n'
                   "    pypto_impl.CostModelRunOnceDataFromHost(input_datas, output_datas)\n"
                   "RuntimeError: Errcode: FFFFFF!", "compile-failure"),
        ("error", "RuntimeError: Errcode: FFFFFF! (aclrtSynchronizeStream)", "runtime-error"),
    ])
    def test_failures_map_to_the_round_table_result_types(self, verdict: str, out: str, kind: str) -> None:
        assert tuning_loop.classify_failure(verdict, out) == kind


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
        gates.check("collect_swimlane", st)


def test_three_baseline_failures_wait_for_a_person_not_for_the_agent(ledger: Ledger) -> None:
    for _ in range(3):
        _prec(ledger, "failed")
    st = derive_state(load_rows(ledger, "s1"))
    assert st.awaiting_user and st.baseline_failures == 3
    for kw, rule in (({}, "baseline-retry"), ({"confirm_retry": True}, "confirmation")):  # the agent's flag: no
        with pytest.raises(GateRefusal) as refusal:
            gates.check("run_precision_check", st, **kw)
        assert refusal.value.rule == rule and "pypto-tune confirm" in str(refusal.value)
    last = max(r["id"] for r in st.rows["precision_records"])
    # a confirmation row without a person's source (what an old server wrote for confirm_retry=true) changes nothing
    ledger.insert("confirmations", session_id="s1", at=now_iso(), kind="baseline-retry", detail=str(last))
    assert derive_state(load_rows(ledger, "s1")).awaiting_user
    ledger.insert("confirmations", session_id="s1", at=now_iso(), kind="baseline-retry", detail=str(last),
                  source="cli")
    assert not derive_state(load_rows(ledger, "s1")).awaiting_user


def test_drift_blocks_everything_but_revert_and_adoption(ledger: Ledger) -> None:
    _prec(ledger, "passed")
    st = derive_state(load_rows(ledger, "s1"))
    with pytest.raises(GateRefusal, match="drift"):
        gates.check("enable_runtime_debug", st, drift="changed: k.py")
    gates.check("run_precision_check", st, drift="changed: k.py", adopt_drift=True)
    gates.check("get_status", st, drift="changed: k.py")


def test_the_ledger_refuses_updates_and_deletes(ledger: Ledger) -> None:
    import sqlite3

    ledger.insert("write_intents", session_id="s1", at="t", tool="apply_tuning_patch", before_sources={},
                  after_sources={})
    conn = sqlite3.connect(ledger.path)
    for sql in ("UPDATE sessions SET goal_value = 100", "DELETE FROM sessions", "DELETE FROM write_intents",
                "UPDATE write_intents SET tool = 'x'"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute(sql)
    assert ledger.schema_version() == 5 and ledger.integrity_ok()


def test_stage_sequence_and_thresholds_follow_the_skill() -> None:
    assert [s.name for s in tuning_loop.STAGES] == ["FRONTEND", "SWIMLANE_1", "INCORE_1", "SWIMLANE_2", "INCORE_2",
                                              "SWIMLANE_3", "INCORE_3"]
    assert {s.group: s.no_gain_threshold for s in tuning_loop.STAGES} == {"frontend": 5, "swimlane": 8, "incore": 5}
    assert tuning_loop.next_stage("INCORE_3") is None


def _tuning_ledger(ledger: Ledger, stage: str = "FRONTEND") -> None:
    """A session in S4 with a passing precision record and an analysed baseline."""
    _prec(ledger, "passed")
    for to in ("S2_COLLECT", "S3_ANALYZE", "S4_TUNE"):
        ledger.insert("transitions", session_id="s1", at=now_iso(), level="state", from_value=None, to_value=to,
                      reason="test", summary={})
    mid = ledger.insert("measurements", session_id="s1", at=now_iso(), round=0, code_hash="h0", valid=True,
                        invalid_reasons=[], operator_time_us=10.0, e2e_us=9.0, samples=[10.0], analysis={},
                        archive="", run_ids=[], stage=None)
    ledger.insert("analyses", session_id="s1", at=now_iso(), measurement_id=mid, stage=None, report_path="r.md",
                  suggestions=[])
    ledger.insert("transitions", session_id="s1", at=now_iso(), level="stage", from_value=None, to_value=stage,
                  reason="test", summary={})


def _open_round(ledger: Ledger, after_hash: str = "h1") -> None:
    ledger.insert("rounds", session_id="s1", number=1, opened_at=now_iso(), stage="FRONTEND", outer_round=1,
                  kind="config", catalog_id="F-11", change="TILE 1 → 2", rationale="x", before_hash="h0",
                  before_raw_hash="r0", before_us=10.0)
    ledger.insert("patches", session_id="s1", at=now_iso(), round=1, kind="tuning", catalog_id="F-11", diff="",
                  before_hash="h0", after_hash=after_hash, before_raw_hash="r0", after_raw_hash="r1",
                  before_sources={"k.py": "TILE = 1\n"}, after_sources={"k.py": "TILE = 2\n"},
                  knob_changes=[{"knob_id": "k.py:TILE", "file": "k.py", "line": 1, "before": 1, "after": 2}],
                  note="x")


def test_tuning_starts_in_frontend_with_frontend_ids_only(ledger: Ledger) -> None:
    _tuning_ledger(ledger)
    st = derive_state(load_rows(ledger, "s1"))
    assert st.stage == "FRONTEND" and st.stage_measured and st.stage_analyzed
    gates.check("apply_tuning_patch", st, disk_raw_hash="r0", catalog_id="F-11")
    with pytest.raises(GateRefusal, match="catalog-stage"):
        gates.check("apply_tuning_patch", st, disk_raw_hash="r0", catalog_id="S-5")
    with pytest.raises(GateRefusal, match="algorithm"):
        gates.check("apply_tuning_patch", st, disk_raw_hash="r0", catalog_id="F-11", algorithm=True)
    with pytest.raises(GateRefusal, match="report-end"):
        gates.check("render_report", st, disk_raw_hash="r0")


def test_a_swimlane_stage_needs_its_own_collection_and_analysis_first(ledger: Ledger) -> None:
    _tuning_ledger(ledger, stage="SWIMLANE_1")
    st = derive_state(load_rows(ledger, "s1"))
    with pytest.raises(GateRefusal) as refusal:
        gates.check("apply_tuning_patch", st, disk_raw_hash="r0", catalog_id="S-5")
    assert refusal.value.rule == "stage-analysis"
    assert gates.allowed_actions(st)[0] == "collect_swimlane"
    mid = ledger.insert("measurements", session_id="s1", at=now_iso(), round=-1, code_hash="h0", valid=True,
                        invalid_reasons=[], operator_time_us=10.0, e2e_us=9.0, samples=[10.0], analysis={},
                        archive="", run_ids=[], stage="SWIMLANE_1")
    assert gates.allowed_actions(derive_state(load_rows(ledger, "s1")))[0] == "analyze_bubbles"
    ledger.insert("analyses", session_id="s1", at=now_iso(), measurement_id=mid, stage="SWIMLANE_1",
                  report_path="r.md", suggestions=[])
    gates.check("apply_tuning_patch", derive_state(load_rows(ledger, "s1")), disk_raw_hash="r0", catalog_id="S-5")


def test_after_a_precision_failure_one_correction_then_only_rollback(ledger: Ledger) -> None:
    _tuning_ledger(ledger)
    _open_round(ledger)
    st = derive_state(load_rows(ledger, "s1"))
    assert gates.round_phase(st) == "VERIFY"
    with pytest.raises(GateRefusal, match="round-open"):
        gates.check("apply_tuning_patch", st, disk_raw_hash="r1", catalog_id="F-11")
    _prec(ledger, "failed", code_hash="h1", round_no=1)
    st = derive_state(load_rows(ledger, "s1"))
    assert gates.round_phase(st) == "VERIFY_FAILED"
    gates.check("apply_tuning_patch", st, disk_raw_hash="r1", catalog_id="F-11")  # the one correction
    ledger.insert("patches", session_id="s1", at=now_iso(), round=1, kind="correction", catalog_id="F-11", diff="",
                  before_hash="h1", after_hash="h2", before_raw_hash="r1", after_raw_hash="r2",
                  before_sources={"k.py": "TILE = 2\n"}, after_sources={"k.py": "TILE = 3\n"}, knob_changes=[],
                  note="x")
    _prec(ledger, "failed", code_hash="h2", round_no=1)
    st = derive_state(load_rows(ledger, "s1"))
    with pytest.raises(GateRefusal, match="correction-limit"):
        gates.check("apply_tuning_patch", st, disk_raw_hash="r2", catalog_id="F-11")
    gates.check("record_round", st, disk_raw_hash="r2")
    assert st.kept_hash == "h0", "an open round never changes the kept state"


def test_consecutive_no_gain_counts_only_measured_rounds(ledger: Ledger) -> None:
    _tuning_ledger(ledger)
    _open_round(ledger)
    ledger.insert("round_decisions", session_id="s1", number=1, at=now_iso(), decision="failed",
                  result_type="compile-failure", after_us=None, delta_pct=None, error_output="", notes="",
                  restored_hash="h0")
    c = derive_state(load_rows(ledger, "s1")).counters["FRONTEND"]
    assert (c.rounds, c.consecutive_no_gain, c.failures) == (1, 0, 1)  # R13


def test_every_trial_of_a_batch_counts_toward_the_stage_exit(ledger: Ledger) -> None:
    """run_candidates records each candidate as its own round; the no-gain streak counts them one by one, and a batch
    whose winner was kept resets it whatever order its trials finished in (the winner is judged last)."""
    _tuning_ledger(ledger)
    batches = {"b1": [(1, "reverted", "no-gain"), (2, "reverted", "regression")],
               "b2": [(3, "reverted", "not-chosen"), (4, "kept", "gain"), (5, "failed", "compile-failure")],
               "b3": [(6, "reverted", "no-gain"), (7, "reverted", "no-gain"), (8, "reverted", "regression")]}
    streaks = []
    for batch, trials in batches.items():
        for number, decision, result_type in trials:
            ledger.insert("rounds", session_id="s1", number=number, opened_at=now_iso(), stage="FRONTEND",
                          outer_round=1, kind="trial", catalog_id="F-11", change=f"TILE → {number}", rationale="x",
                          before_hash="h0", before_raw_hash="r0", before_us=10.0)
            ledger.insert("trials", session_id="s1", at=now_iso(), batch=batch, candidate={"id": f"c{number}"},
                          round=number, outcome=decision, operator_time_us=None, info={})
        for number, decision, result_type in reversed(trials):  # finishing order is not the judging order
            ledger.insert("round_decisions", session_id="s1", number=number, at=now_iso(), decision=decision,
                          result_type=result_type, after_us=None, delta_pct=None, error_output="", notes="",
                          restored_hash="h0")
        c = derive_state(load_rows(ledger, "s1")).counters["FRONTEND"]
        streaks.append((c.rounds, c.consecutive_no_gain, c.failures))
    assert streaks == [(2, 2, 0), (5, 0, 1), (8, 3, 1)]
