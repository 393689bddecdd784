"""Every refusal of ``gates.check``, and its neighbours that are allowed, on a hand-built board (no ledger, no server).

The gates are a pure function of ``SessionState``; the MCP stdio tests (tests/server/) show the same refusals over the
protocol but are slow and not part of the mutation run's kill suite (issue #16). Each case here states one row of the
README rule table (rule id, what it means) as "in this state, this call is refused with this rule id — and this other
call, one condition away, is allowed". The expected rule ids and phases come from that table and domain D.1, never
from the gate code.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest

from pypto_tune.tools.errors import GateRefusal
from pypto_tune.tools.rules import gates
from pypto_tune.tools.session.state import OpenRound, SessionState, StageCounters

CURRENT = "0123456789abcdef0123"  # the current code's functional hash
KEPT = "fedcba9876543210fedc"
HOUR_S = 3600.0


def board(level1: str = "S4_TUNE", stage: str | None = "FRONTEND", *, passed: bool = True, debug: bool = True,
          measured: bool = True, analyzed: bool = True, round_: OpenRound | None = None, awaiting: bool = False,
          started_ago_s: float = 60.0, time_limit_h: float = 12.0, finish_reason: str | None = None) -> SessionState:
    """A session's state as derive_state would give it, with only what the gates read set to something other than
    empty. ``passed``: the current code has a passing precision record."""
    session = {"id": "s", "workspace": "/ws", "run_mode": "sim", "time_limit_h": time_limit_h,
               "config": {"started_epoch": time.time() - started_ago_s}}
    return SessionState(
        session=session, level1=level1, stage=stage, outer_round=1, current_hash=CURRENT, expected_raw_hash="raw",
        expected_sources={}, debug_enabled=debug, debug_baseline=None, env_ok=True, env_batches=1,
        passed_hashes={CURRENT} if passed else {KEPT}, baseline_failures=3 if awaiting else 0, awaiting_user=awaiting,
        baseline_us=20.0, target_us=10.0, kept_hash=KEPT, kept_raw_hash="kept-raw", kept_sources={}, kept_us=20.0,
        best_round=None, open_round=round_, rounds=[], decisions={}, counters={}, stage_entry_transition_id=1,
        stage_measured=measured, stage_analyzed=analyzed, checklist={}, finish_reason=finish_reason,
        rows={"precision_records": [], "measurements": []})


def open_round(phase: str, *, corrections: int = 0, number: int = 4) -> OpenRound:
    """An open round in one step of D.1 level 3, built from the records that define the step: none on the current
    code (VERIFY), a failed precision record (VERIFY_FAILED), a passed one (MEASURE), and a measurement (RECORD)."""
    precision = {"VERIFY": [], "VERIFY_FAILED": [{"code_hash": CURRENT, "verdict": "failed"}]}.get(
        phase, [{"code_hash": CURRENT, "verdict": "passed"}])
    measured = [{"code_hash": CURRENT}] if phase == "RECORD" else []
    patches = [{"kind": "apply"}] + [{"kind": "correction"}] * corrections
    return OpenRound(row={"number": number}, precision=precision, measurements=measured, patches=patches)


def refusal(tool: str, st: SessionState, **kw: Any) -> GateRefusal:
    with pytest.raises(GateRefusal) as refused:
        gates.check(tool, st, **kw)
    return refused.value


def allowed(tool: str, st: SessionState, **kw: Any) -> None:
    gates.check(tool, st, **kw)  # raises GateRefusal when refused


def test_the_helper_builds_each_round_phase_it_names() -> None:
    for phase in ("VERIFY", "VERIFY_FAILED", "MEASURE", "RECORD"):
        assert gates.round_phase(board(round_=open_round(phase), passed=phase in ("MEASURE", "RECORD"))) == phase
    assert gates.round_phase(board()) == "START"


# ------------------------------------------------------------------------------------------------ read-only calls


def test_status_and_knobs_are_always_allowed_even_after_the_end_or_with_drift() -> None:
    for st in (board(), board("S5_REPORT"), board(round_=open_round("VERIFY"), passed=False), board("S1_SETUP")):
        for tool in ("get_status", "list_knobs"):
            allowed(tool, st)
            allowed(tool, st, drift="softmax.py changed")


def test_a_round_is_analysed_only_once_its_code_passed_precision_r6() -> None:
    """precision-first covers a round analysis: an open round whose code has no pass is refused; the same round with
    a pass, and an analysis outside any round (the stage's own), are allowed."""
    r = refusal("analyze_bubbles", board(round_=open_round("VERIFY"), passed=False))
    assert r.rule == "precision-first" and r.allowed == ["run_precision_check", "revert_patch", "get_status"]
    allowed("analyze_bubbles", board(round_=open_round("RECORD"), passed=True))
    allowed("analyze_bubbles", board("S3_ANALYZE", passed=False))
    allowed("get_status", board(round_=open_round("VERIFY"), passed=False))


# ------------------------------------------------------------------------------------------------ the end (R14b, R21)


def test_the_report_comes_only_after_termination_r21_and_not_over_an_external_edit() -> None:
    r = refusal("render_report", board())
    assert r.rule == "report-end" and "FRONTEND" in r.message
    assert refusal("render_report", board("S5_REPORT"), drift="softmax.py changed").rule == "drift"
    allowed("render_report", board("S5_REPORT"))
    allowed("render_report", board("DONE"))


@pytest.mark.parametrize("tool", ["apply_tuning_patch", "run_precision_check", "collect_swimlane", "stop_session",
                                  "record_round", "revert_patch", "run_candidates", "mark_checklist"])
def test_after_termination_only_reporting_is_allowed(tool: str) -> None:
    r = refusal(tool, board("S5_REPORT", finish_reason="target reached"))
    assert r.rule == "finished" and "target reached" in r.message
    assert r.allowed == ["render_report", "get_status"]
    assert refusal(tool, board("DONE"), drift="softmax.py changed").rule == "finished"  # the end before the edit


# ------------------------------------------------------------------------------------------------ drift (R6/R9)


@pytest.mark.parametrize("tool", ["apply_tuning_patch", "collect_swimlane", "enable_runtime_debug", "record_round",
                                  "run_candidates", "stop_session", "run_precision_check"])
def test_an_external_edit_blocks_tuning_and_names_the_ways_out(tool: str) -> None:
    r = refusal(tool, board(round_=open_round("MEASURE")), drift="softmax.py changed")
    assert r.rule == "drift" and "softmax.py changed" in r.message
    assert r.allowed == ["revert_patch", "run_precision_check(adopt_drift=true)", "get_status", "list_knobs"]


def test_with_drift_revert_is_allowed_and_adoption_only_outside_a_round() -> None:
    drift = "softmax.py changed"
    allowed("revert_patch", board(), drift=drift)  # no round open: the revert undoes the external edit
    allowed("revert_patch", board(round_=open_round("VERIFY"), passed=False), drift=drift)
    allowed("run_precision_check", board(), drift=drift, adopt_drift=True)
    r = refusal("run_precision_check", board(round_=open_round("MEASURE")), drift=drift, adopt_drift=True)
    assert r.rule == "round-open"
    assert refusal("apply_tuning_patch", board(), drift=drift, adopt_drift=True).rule == "drift"  # only a check adopts


# ------------------------------------------------------------------------------------------------ R5 at setup


def test_after_three_baseline_failures_only_a_persons_answer_lets_the_check_run_again_r5() -> None:
    waiting = board("S1_SETUP", passed=False, awaiting=True)
    r = refusal("run_precision_check", waiting, confirm_retry=True)
    assert r.rule == "confirmation" and r.allowed == ["get_status", "stop_session"]
    r = refusal("run_precision_check", waiting)
    assert r.rule == "baseline-retry" and r.allowed == ["get_status", "stop_session"] and "3 times" in r.message
    allowed("run_precision_check", board("S1_SETUP", passed=False))
    allowed("run_precision_check", board("S1_SETUP", passed=False), confirm_retry=True)  # nothing to confirm yet
    allowed("stop_session", waiting)


# ------------------------------------------------------------------------------------------------ the debug switch


def test_the_debug_switch_needs_a_pass_and_no_open_round() -> None:
    assert refusal("enable_runtime_debug", board(round_=open_round("MEASURE"))).rule == "round-open"
    r = refusal("enable_runtime_debug", board("S2_COLLECT", passed=False, debug=False))
    assert r.rule == "precision-first" and CURRENT[:12] in r.message
    allowed("enable_runtime_debug", board("S2_COLLECT", debug=False))


# ------------------------------------------------------------------------------------------------ collection


def test_collection_is_refused_before_a_pass_during_setup_and_with_debug_off() -> None:
    assert refusal("collect_swimlane", board("S1_SETUP", passed=True)).rule == "precision-first"
    assert refusal("collect_swimlane", board("S2_COLLECT", passed=False)).rule == "precision-first"
    r = refusal("collect_swimlane", board(round_=open_round("VERIFY"), passed=False))
    assert r.rule == "verify-after-change"  # inside a round the missing pass is the round's own verification (R11)
    r = refusal("collect_swimlane", board("S2_COLLECT", debug=False))
    assert r.rule == "debug-mode" and r.allowed == ["enable_runtime_debug", "get_status"]
    allowed("collect_swimlane", board("S2_COLLECT"))


def test_the_baseline_is_analysed_before_it_is_collected_again_and_a_round_is_measured_once() -> None:
    r = refusal("collect_swimlane", board("S3_ANALYZE"))
    assert r.rule == "sequence" and r.allowed == ["analyze_bubbles", "get_status"]
    r = refusal("collect_swimlane", board(round_=open_round("RECORD")))
    assert r.rule == "measure-once" and "round 4" in r.message
    allowed("collect_swimlane", board(round_=open_round("MEASURE")))
    allowed("collect_swimlane", board(measured=False, analyzed=False))  # the stage's own collection (R15)


# ------------------------------------------------------------------------------------------------ a change


def test_a_change_belongs_to_the_tuning_stages() -> None:
    for level1 in ("S1_SETUP", "S2_COLLECT", "S3_ANALYZE"):
        r = refusal("apply_tuning_patch", board(level1, stage=None), catalog_id="F-3")
        assert r.rule == "sequence" and level1 in r.message


def test_no_change_starts_past_the_time_limit_r14b() -> None:
    """12 h limit: a minute past it is refused as the end of the session; a minute short of it is not."""
    late = board(started_ago_s=12 * HOUR_S + 60)
    for tool in ("apply_tuning_patch", "run_candidates"):
        r = refusal(tool, late, catalog_id="F-3")
        assert r.rule == "finished" and "12.0 h" in r.message
        allowed(tool, board(started_ago_s=12 * HOUR_S - 60), catalog_id="F-3")


def test_the_time_limit_is_exceeded_only_past_it_so_a_change_may_start_at_exactly_12_h_r14b(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """"Exceeded" is strictly more than the limit: on a frozen clock, exactly 12 h after the start a change may still
    start; half a second later the session is over (an hour counted as 3601 s would still allow it then)."""
    now = 1_800_000_000.0
    monkeypatch.setattr(gates.time, "time", lambda: now)
    at_limit, past = board(started_ago_s=12 * HOUR_S), board(started_ago_s=12 * HOUR_S + 0.5)
    assert not gates.time_limit_exceeded(at_limit)
    allowed("apply_tuning_patch", at_limit, catalog_id="F-3")
    assert gates.time_limit_exceeded(past)
    assert refusal("apply_tuning_patch", past, catalog_id="F-3").rule == "finished"


def test_an_open_round_allows_only_its_one_correction_after_a_precision_failure_r11() -> None:
    allowed("apply_tuning_patch", board(round_=open_round("VERIFY_FAILED"), passed=False), catalog_id="F-3")
    r = refusal("apply_tuning_patch", board(round_=open_round("VERIFY_FAILED", corrections=1), passed=False),
                catalog_id="F-3")
    assert r.rule == "correction-limit" and "round 4" in r.message
    assert r.allowed == ["record_round", "revert_patch", "get_status"]  # no second correction offered
    for phase in ("VERIFY", "MEASURE", "RECORD"):
        r = refusal("apply_tuning_patch", board(round_=open_round(phase), passed=phase != "VERIFY"), catalog_id="F-3")
        assert r.rule == "round-open" and phase in r.message, phase


def test_after_a_failed_verification_the_allowed_calls_offer_the_one_correction_only_while_it_is_unused_r11() -> None:
    unused = board(round_=open_round("VERIFY_FAILED", corrections=0), passed=False)
    assert gates.allowed_actions(unused) == ["apply_tuning_patch (one correction of the same knob)", "record_round",
                                             "revert_patch", "get_status"]
    used = board(round_=open_round("VERIFY_FAILED", corrections=1), passed=False)
    assert gates.allowed_actions(used) == ["record_round", "revert_patch", "get_status"]


def test_between_rounds_the_algorithm_stage_offers_only_declared_algorithm_changes_r23() -> None:
    """A configuration stage offers the candidate search, the checklist and the stage exit; the ALGORITHM stage offers
    a declared algorithm change (and the knob list, the analysis, the end) — no candidates, no checklist."""
    assert gates.allowed_actions(board(stage="ALGORITHM")) == [
        "apply_tuning_patch(algorithm=true)", "list_knobs", "analyze_bubbles", "stop_session", "get_status"]
    assert gates.allowed_actions(board(stage="FRONTEND")) == [
        "propose_candidates", "run_candidates", "apply_tuning_patch", "list_knobs", "analyze_bubbles",
        "mark_checklist", "advance_stage", "stop_session", "get_status"]


def test_the_stage_hand_off_summary_is_the_servers_count_of_the_stages_own_rounds_r19() -> None:
    """What a stage hands on is counted by the server: its own rounds only, the kept and the failed ones by the
    recorded decision, the counters of that stage (none yet: zeros), and whether the kept time reached the target
    (reaching it exactly counts)."""
    rounds = [{"number": n, "stage": stage, "catalog_id": cid, "change": f"change {n}"}
              for n, stage, cid in ((1, "FRONTEND", "F-1"), (2, "FRONTEND", "F-3"), (3, "FRONTEND", "F-3"),
                                    (4, "SWIMLANE_1", "S-1"))]
    decisions = {1: {"decision": "kept"}, 2: {"decision": "failed"}, 3: {"decision": "no_gain"},
                 4: {"decision": "kept"}}
    st = board()
    st = replace(st, rounds=rounds, decisions=decisions, kept_us=10.0, target_us=10.0,
                 counters={"FRONTEND": StageCounters(rounds=3, consecutive_no_gain=1, failures=1),
                           "SWIMLANE_1": StageCounters(rounds=1)})
    summary = gates.stage_summary(st)
    assert summary == {
        "stage": "FRONTEND", "rounds": 3, "consecutive_no_gain": 1, "failures": 1, "baseline_us": 20.0,
        "best_us": 10.0, "target_us": 10.0, "reached": True,
        "kept": [{"round": 1, "catalog_id": "F-1", "change": "change 1"}],
        "failed": [{"round": 2, "catalog_id": "F-3", "change": "change 2"}]}
    fresh = gates.stage_summary(replace(st, stage="INCORE_1", kept_us=10.5))
    assert (fresh["rounds"], fresh["consecutive_no_gain"], fresh["failures"]) == (0, 0, 0)
    assert (fresh["kept"], fresh["failed"], fresh["reached"]) == ([], [], False)
    assert gates.stage_summary(replace(st, kept_us=None))["reached"] is False
    assert gates.stage_summary(replace(st, target_us=None))["reached"] is False


def test_a_change_starts_from_verified_code_r6() -> None:
    r = refusal("apply_tuning_patch", board(passed=False), catalog_id="F-3")
    assert r.rule == "precision-first"
    allowed("apply_tuning_patch", board(), catalog_id="F-3")


@pytest.mark.parametrize(("measured", "analyzed"), [(False, False), (True, False), (False, True)])
def test_a_stage_changes_nothing_before_its_own_collection_and_analysis_r15_r16(measured: bool,
                                                                                 analyzed: bool) -> None:
    st = board("S4_TUNE", "SWIMLANE_1", measured=measured, analyzed=analyzed)
    assert refusal("apply_tuning_patch", st, catalog_id="S-1").rule == "stage-analysis"
    assert refusal("run_candidates", st).rule == "stage-analysis"
    assert refusal("propose_candidates", st).rule == "stage-analysis"


def test_a_change_cites_a_known_catalogue_id_of_its_own_stage_r10() -> None:
    swim = board("S4_TUNE", "SWIMLANE_1")
    r = refusal("apply_tuning_patch", swim, catalog_id="F-3")
    assert r.rule == "catalog-stage" and "S-*" in r.message
    assert refusal("apply_tuning_patch", swim).rule == "catalog-stage"  # no id at all
    r = refusal("apply_tuning_patch", swim, catalog_id="S-999")
    assert r.rule == "catalog-stage" and "unknown catalogue id 'S-999'" in r.message
    allowed("apply_tuning_patch", swim, catalog_id="S-1")
    allowed("apply_tuning_patch", board("S4_TUNE", "INCORE_2"), catalog_id="I-1")


def test_algorithm_changes_are_declared_and_belong_to_the_algorithm_stage_only_r23() -> None:
    algo = board("S4_TUNE", "ALGORITHM")
    r = refusal("apply_tuning_patch", algo, catalog_id="A-1")
    assert r.rule == "algorithm" and "algorithm=true" in r.hint
    allowed("apply_tuning_patch", algo, catalog_id="any id", algorithm=True)  # no stage prefix in ALGORITHM
    r = refusal("apply_tuning_patch", board(), catalog_id="F-3", algorithm=True)
    assert r.rule == "algorithm" and "R23" in r.message
    for tool in ("run_candidates", "propose_candidates"):
        assert refusal(tool, algo).rule == "algorithm"


# ------------------------------------------------------------------------------------------------ candidate batches


def test_candidates_belong_to_a_tuning_stage() -> None:
    for st in (board("S3_ANALYZE", stage=None), board("S4_TUNE", stage=None)):
        for tool in ("run_candidates", "propose_candidates"):
            assert refusal(tool, st).rule == "sequence"


def test_proposing_candidates_reads_only_so_a_round_or_a_missing_pass_does_not_block_it() -> None:
    allowed("propose_candidates", board(round_=open_round("VERIFY"), passed=False))
    allowed("propose_candidates", board(started_ago_s=13 * HOUR_S))


def test_a_candidate_batch_needs_no_open_round_and_verified_kept_code() -> None:
    r = refusal("run_candidates", board(round_=open_round("MEASURE")))
    assert r.rule == "round-open" and "round 4" in r.message
    assert refusal("run_candidates", board(passed=False)).rule == "precision-first"
    allowed("run_candidates", board())


# ------------------------------------------------------------------------------------------------ closing a round


def test_a_revert_needs_an_open_round() -> None:
    assert refusal("revert_patch", board()).rule == "no-round"
    for phase in ("VERIFY", "VERIFY_FAILED", "MEASURE", "RECORD"):
        allowed("revert_patch", board(round_=open_round(phase)))


def test_a_round_is_recorded_after_its_failure_or_its_measurement_r11_r12() -> None:
    assert refusal("record_round", board()).rule == "no-round"
    r = refusal("record_round", board(round_=open_round("VERIFY"), passed=False))
    assert r.rule == "verify-after-change" and "round 4" in r.message
    r = refusal("record_round", board(round_=open_round("MEASURE")))
    assert r.rule == "measure-first" and r.allowed == ["collect_swimlane", "revert_patch", "get_status"]
    allowed("record_round", board(round_=open_round("VERIFY_FAILED"), passed=False))  # it records the failure
    allowed("record_round", board(round_=open_round("RECORD")))


# ------------------------------------------------------------------------------------------------ the checklist


def test_the_checklist_belongs_to_a_tuning_stage_and_to_its_own_items() -> None:
    for tool in ("mark_checklist", "advance_stage"):
        assert refusal(tool, board("S3_ANALYZE", stage=None), catalog_id="F-3").rule == "sequence"
        assert refusal(tool, board("S4_TUNE", stage=None), catalog_id="F-3").rule == "sequence"
    r = refusal("mark_checklist", board("S4_TUNE", "INCORE_1"), catalog_id="S-2")
    assert r.rule == "catalog-stage" and "INCORE_1" in r.message
    allowed("mark_checklist", board("S4_TUNE", "INCORE_1"), catalog_id="I-2")


def test_a_stage_is_left_with_no_round_open_but_an_item_may_be_marked_meanwhile() -> None:
    r = refusal("advance_stage", board(round_=open_round("MEASURE")))
    assert r.rule == "round-open" and "round 4" in r.message
    allowed("advance_stage", board())
    allowed("mark_checklist", board(round_=open_round("MEASURE")), catalog_id="F-3")


def test_stop_is_allowed_while_tuning_and_an_unknown_call_is_refused() -> None:
    allowed("stop_session", board(round_=open_round("VERIFY"), passed=False))
    allowed("stop_session", board("S1_SETUP", stage=None, passed=False))
    r = refusal("format_disk", board())
    assert r.rule == "sequence" and "format_disk" in r.message
