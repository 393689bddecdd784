"""Decisions the gates make, at library level on a real SQLite ledger (no simulator): the cases the mutation run of
issue #16 found untested, and the rule gaps it closed. Expected values come from the rules as domain.md states them
(R14 thresholds 5/8/5, the kept time as the median of the kept code's valid samples), never from the code under test.

The same attacks run over MCP stdio with the real simulator in tests/admission/test_rule_gaps_over_stdio.py; these are
the fast kill suite of benchmarks/mutation.py.
"""

from __future__ import annotations

import statistics
import threading
from pathlib import Path

import pytest

from pypto_tune.tools.code.admission import admit
from pypto_tune.tools.errors import GateRefusal, InputError
from pypto_tune.tools.session.recorder import patch_row
from pypto_tune.tools.patching import legality
from pypto_tune.tools.service import TuningService
from pypto_tune.tools.rules import tuning_loop
from pypto_tune.tools.session.state import derive_state, kept_samples_of, load_rows
from pypto_tune.tools.snapshot import KnobChange
from tests.report.ledger_rows import SOFTMAX, VEC, Writer, analysis, with_tile_b, with_vec_tile

BASE_US = 20.0
#: domain.md R14: a stage ends at its consecutive-no-gain threshold — 5 (FRONTEND), 8 (SWIMLANE), 5 (INCORE)
THRESHOLDS = {"FRONTEND": 5, "SWIMLANE_1": 8, "INCORE_1": 5, "SWIMLANE_2": 8, "INCORE_2": 5, "SWIMLANE_3": 8,
              "INCORE_3": 5}
NEXT = {"FRONTEND": "SWIMLANE_1", "SWIMLANE_1": "INCORE_1", "INCORE_1": "SWIMLANE_2"}


def tuning(ws: Path, stage: str = "FRONTEND") -> Writer:
    """A SIM session in ``stage`` with a 20 µs baseline, written the way the operations write it; the workspace
    holds the kept bytes."""
    ws.mkdir(parents=True, exist_ok=True)
    w = Writer(ws, run_mode="sim", repeats=1, goal_speedup=100.0)
    w.env_ok()
    w.precision(w.run("precision", None, "0", w.sources), "passed", None, "0", w.sources)
    w.transition("state", "S1_SETUP", "S2_COLLECT", "baseline precision passed (S1b)")
    w.debug_on()
    mid = w.measure("baseline", 0, w.kept, [BASE_US], "0", analysis(BASE_US, active_util=40.0, busy_us=[8.0]))
    w.transition("state", "S2_COLLECT", "S3_ANALYZE", "baseline collected (S2)")
    w.ledger.insert("analyses", session_id=w.sid, at=w.now(), measurement_id=mid, stage=None,
                    report_path=str(ws / "analysis-m1.en.md"), suggestions=[])
    w.transition("state", "S3_ANALYZE", "S4_TUNE", "baseline analysed (S3)")
    w.transition("stage", None, "FRONTEND", "tuning starts with the frontend stage")
    if stage != "FRONTEND":
        w.transition("stage", "FRONTEND", stage, "test: the stage under test")
        mid = w.measure("stage-baseline", -1, w.kept, [BASE_US], "0",
                        analysis(BASE_US, active_util=40.0, busy_us=[8.0]), stage=stage)
        w.ledger.insert("analyses", session_id=w.sid, at=w.now(), measurement_id=mid, stage=stage,
                        report_path=str(ws / "analysis-m2.en.md"), suggestions=[])
    (ws / "softmax.py").write_text(w.kept["softmax.py"])
    return w


def no_gain_round(w: Writer, n: int, stage: str) -> None:
    change = KnobChange(knob_id="softmax.py:TILE_B", file="softmax.py", line=14, before=4, after=n)
    after = with_tile_b(w.kept, n)
    w.open_round(n, stage, "F-3", change, after, before_us=BASE_US)
    w.decide(n, "reverted", "no-gain", BASE_US, 0.0, "", after)


def state(w: Writer):
    return derive_state(load_rows(w.ledger, w.sid))


# ------------------------------------------------------------------------------------------------ R14 stage exit


@pytest.mark.parametrize("stage", list(THRESHOLDS))
def test_each_stage_threshold_is_the_one_domain_r14_names(stage: str) -> None:
    t = THRESHOLDS[stage]
    assert tuning_loop.stage_exit_reason(stage, t - 1) == ""
    assert str(t) in tuning_loop.stage_exit_reason(stage, t)
    assert tuning_loop.stage_exit_reason(stage, t + 3) != ""


def test_the_algorithm_stage_ends_after_three_rounds_without_gain() -> None:
    """prompts/workflow/perf_tune.en.md section 8: in ALGORITHM "3 rounds without gain end it" (R23 names no count)."""
    assert tuning_loop.stage_exit_reason("ALGORITHM", 2) == ""
    assert "3 consecutive rounds without gain" in tuning_loop.stage_exit_reason("ALGORITHM", 3)


def test_npu_repeats_have_a_floor_of_three_the_agent_cannot_lower(tmp_path: Path) -> None:
    """README keep/revert: "On the NPU `repeats` has a floor of 3" (issue #10, attack 9); SIM is exact, 1 will do.
    A call that passes the floor goes on to the next check, which an empty device id fails here before anything
    starts."""
    (tmp_path / "softmax.py").write_text(SOFTMAX)
    svc = TuningService(default_workspace=tmp_path)
    kw = {"workspace": str(tmp_path), "operator_files": ["softmax.py"], "test_command": ["python3", "softmax.py"],
          "goal_speedup": 2.0, "device_ids": [" "]}
    with pytest.raises(InputError, match="repeats on the NPU must be at least 3, got 2"):
        svc.start_session(run_mode="npu", repeats=2, **kw)
    for run_mode, repeats in (("npu", 3), ("npu", None), ("sim", 1)):
        with pytest.raises(InputError, match="device_ids must be non-empty"):
            svc.start_session(run_mode=run_mode, repeats=repeats, **kw)


@pytest.mark.parametrize("stage", ["FRONTEND", "SWIMLANE_1", "INCORE_1"])
def test_a_stage_is_left_exactly_at_its_no_gain_threshold_and_not_one_round_earlier(tmp_path: Path,
                                                                                    stage: str) -> None:
    w = tuning(tmp_path / "ws", stage)
    svc = TuningService(default_workspace=w.ws)
    h = svc.ctx.find(w.sid)
    t = THRESHOLDS[stage]
    for n in range(1, t):
        no_gain_round(w, n, stage)
    st = state(w)
    assert st.counters[stage].consecutive_no_gain == t - 1
    assert svc.stage_control.judge(h, st) == "" and state(w).stage == stage
    no_gain_round(w, t, stage)
    msg = svc.stage_control.judge(h, state(w))
    assert f"{t} consecutive rounds without gain" in msg, msg
    assert state(w).stage == NEXT[stage]


def test_a_gain_resets_the_streak_and_a_failure_does_not_count_r13(tmp_path: Path) -> None:
    w = tuning(tmp_path / "ws")
    for n in (1, 2):
        no_gain_round(w, n, "FRONTEND")
    change = KnobChange(knob_id=VEC, file="softmax.py", line=33, before=[1, 4, 256], after=[1, 8, 256])
    failed = with_vec_tile(w.kept, "1, 8, 256")
    w.open_round(3, "FRONTEND", "F-10", change, failed, before_us=BASE_US)
    w.decide(3, "failed", "compile-failure", None, None, "", failed)
    c = state(w).counters["FRONTEND"]
    assert (c.consecutive_no_gain, c.failures, c.rounds) == (2, 1, 3)
    gain = with_vec_tile(w.kept, "1, 16, 256")
    w.open_round(4, "FRONTEND", "F-10", change.model_copy(update={"after": [1, 16, 256]}), gain, before_us=BASE_US)
    w.decide(4, "kept", "gain", 18.0, -10.0, "", gain)
    assert state(w).counters["FRONTEND"].consecutive_no_gain == 0


# ------------------------------------------------------------------------------------------------ the kept time


def test_an_invalid_measurement_of_the_kept_code_never_moves_the_kept_time(tmp_path: Path) -> None:
    """A tampered or broken re-measurement of the kept code (here: 1 µs, invalid) must not count: the kept time is
    the median of the kept code's VALID samples only (README, keep/revert)."""
    w = tuning(tmp_path / "ws", "SWIMLANE_1")  # two valid samples of the kept code: 20.0 and 20.0
    later = w.measure("stage-baseline", -1, w.kept, [22.0, 24.0], "0",
                      analysis(22.0, active_util=40.0, busy_us=[8.0]), stage="SWIMLANE_1")
    valid = [BASE_US, BASE_US, 22.0, 24.0]
    st = state(w)
    assert st.kept_us == statistics.median(valid) == 21.0
    # what a decision judged at measurement `later` compared with: the samples recorded before it, not its own
    assert kept_samples_of(st.rows["measurements"], st.kept_hash, before_id=later) == [BASE_US, BASE_US]
    w.ledger.insert("measurements", session_id=w.sid, at=w.now(), round=-2, code_hash=st.kept_hash, valid=False,
                    invalid_reasons=["the run's private copy changed"], operator_time_us=None, e2e_us=None,
                    samples=[1.0, 1.0, 1.0, 1.0, 1.0], analysis={}, archive="", run_ids=[], stage="SWIMLANE_1",
                    per_kernel={})
    st = state(w)
    assert st.kept_samples == valid and st.kept_us == 21.0


# ------------------------------------------------------------------------------------------------ R19 by code


def test_a_failed_change_is_refused_after_a_correction_round_that_was_abandoned(tmp_path: Path) -> None:
    w = tuning(tmp_path / "ws")
    svc = TuningService(default_workspace=w.ws)
    bad = with_vec_tile(w.kept, "1, 8, 256")
    change = KnobChange(knob_id=VEC, file="softmax.py", line=33, before=[1, 4, 256], after=[1, 8, 256])
    w.open_round(1, "FRONTEND", "F-10", change, bad, before_us=BASE_US)
    w.precision(w.run("precision", 1, "0", bad), "error", 1, "0", bad, key="Run pass failed")
    fixed = with_vec_tile(w.kept, "1, 16, 256")
    w.ledger.insert("patches", **patch_row(w.sid, kind="correction", round_no=1, before=bad, after=fixed,
                                            note="correction", changes=[change.model_copy(update={
                                                "after": [1, 16, 256]})]))
    w.decide(1, "reverted", "abandoned", None, None, "reverted before verification", fixed)
    assert state(w).decisions[1]["result_type"] == "abandoned"
    with pytest.raises(GateRefusal) as refused:
        svc.apply_tuning_patch(w.sid, knob=VEC, value=[1, 8, 256], catalog_id="F-10", rationale="again")
    assert refused.value.rule == "no-retry" and "round 1" in refused.value.message, refused.value
    assert "precision error (runtime-error)" in refused.value.message  # how it failed, as its record says
    # the correction itself never ran: it is not a failure and may be tried
    r = svc.apply_tuning_patch(w.sid, knob=VEC, value=[1, 16, 256], catalog_id="F-10", rationale="untried")
    assert r.round == 2


def test_a_change_whose_measurement_was_invalid_is_refused_whatever_closed_its_round(tmp_path: Path) -> None:
    w = tuning(tmp_path / "ws")
    svc = TuningService(default_workspace=w.ws)
    tried = {"softmax.py": w.kept["softmax.py"].replace("\nTILE_B = 4\n", "\nTILE_B = 2\n")}
    change = KnobChange(knob_id="softmax.py:TILE_B", file="softmax.py", line=14, before=4, after=2)
    w.open_round(1, "FRONTEND", "F-3", change, tried, before_us=BASE_US)
    w.precision(w.run("precision", 1, "0", tried), "passed", 1, "0", tried)
    w.ledger.insert("measurements", session_id=w.sid, at=w.now(), round=1, code_hash=state(w).current_hash,
                    valid=False, invalid_reasons=["fake tasks (B.9.3)"], operator_time_us=None, e2e_us=None,
                    samples=[], analysis={}, archive="", run_ids=[], stage="FRONTEND", per_kernel={})
    w.decide(1, "reverted", "abandoned", None, None, "", tried)
    with pytest.raises(GateRefusal) as refused:
        svc.apply_tuning_patch(w.sid, knob="softmax.py:TILE_B", value=2, catalog_id="F-3", rationale="again")
    assert refused.value.rule == "no-retry" and "invalid measurement" in refused.value.message


# ------------------------------------------------------------------------------------------------ operation lock


def test_a_change_is_refused_while_another_call_holds_the_sessions_operation_lock(tmp_path: Path) -> None:
    w = tuning(tmp_path / "ws")
    svc = TuningService(default_workspace=w.ws)
    h = svc.ctx.find(w.sid)
    before = (w.ws / "softmax.py").read_bytes()
    seen: list[BaseException] = []

    def agent() -> None:
        try:
            svc.apply_tuning_patch(w.sid, knob=VEC, value=[1, 8, 256], catalog_id="F-10", rationale="racer")
        except BaseException as exc:  # noqa: BLE001 - the refusal is the result under test
            seen.append(exc)

    with svc.ctx.claim(h, "collect_swimlane", w.sid):
        t = threading.Thread(target=agent)
        t.start()
        t.join()
    assert len(seen) == 1 and isinstance(seen[0], GateRefusal) and seen[0].rule == "busy", seen
    assert "collect_swimlane is running" in seen[0].message
    assert (w.ws / "softmax.py").read_bytes() == before
    assert not w.ledger.rows("write_intents", w.sid) and not w.ledger.rows("rounds", w.sid)
    # released: the same call goes through
    assert svc.apply_tuning_patch(w.sid, knob=VEC, value=[1, 8, 256], catalog_id="F-10", rationale="alone").round == 1


# ------------------------------------------------------------------------------------------------ admission


def test_an_edit_inside_an_except_block_beside_a_knob_change_is_refused_naming_its_line() -> None:
    """Issue #16's mutation run: the line-finder did not look inside ``except`` handlers, so such an edit was refused
    only by a fallback no test reached — removing it admitted "an error passes" as one knob change."""
    before = {"softmax.py": SOFTMAX}
    handler = '        print(f"PRECISION: error: {type(exc).__name__}: {exc}")\n        return 2'
    assert handler in SOFTMAX
    after = {"softmax.py": SOFTMAX.replace("\nTILE_B = 4\n", "\nTILE_B = 2\n").replace(
        handler, '        print("PRECISION: passed")\n        return 0')}
    with pytest.raises(GateRefusal) as refused:
        admit(before, after)
    msg = refused.value.message
    assert refused.value.rule == "one-change" and "besides the knob change softmax.py:TILE_B" in msg, msg
    assert 'line 69 changed: print("PRECISION: passed")' in msg and "line 70 changed: return 0" in msg, msg


# ------------------------------------------------------------------------------------------------ option domains


def test_every_tunable_option_serves_a_catalogue_item_and_declares_a_checked_domain() -> None:
    from pypto_tune.tools.analysis import load_catalog

    catalogue = {i.id for i in load_catalog().items}
    specs = {**legality.OPTION_SPECS, **legality.KIND_SPECS, **legality.LOOP_SPECS, **legality.COMBINE_SPECS}
    for name, spec in specs.items():
        if not spec.tunable:
            continue
        assert spec.catalog_ids and set(spec.catalog_ids) <= catalogue, name
        with pytest.raises(Exception):  # a declared domain refuses what is not in it
            spec.validate(object(), {})


@pytest.mark.parametrize(("kind", "key", "group"), [("pass_option", "pg_upper_bound", "pass_options"),
                                                    ("jit_option", "pg_lower_bound", "pass_options"),
                                                    ("jit_option", "max_workspace_kb", "runtime_options"),
                                                    ("loop_option", "parallel", None),
                                                    ("jit_option", "mg_vec_parallel_lb", "pass_options")])
def test_an_option_no_catalogue_item_names_is_never_tunable(kind: str, key: str, group: str | None) -> None:
    spec = legality.spec_for(kind, key, group)
    assert not spec.tunable and not spec.catalog_ids and legality.uncatalogued(spec.legal)


# ------------------------------------------------------------------------------------------------ checklist, R14


def _mark(svc: TuningService, w: Writer, cid: str, reason: str) -> str:
    try:
        svc.mark_checklist(w.sid, catalog_id=cid, status="not-applicable", reason=reason)
        return ""
    except GateRefusal as refusal:
        assert refusal.rule == "stage-exit", refusal
        return refusal.message


def test_a_checklist_mark_needs_a_specific_reason_where_the_item_has_a_knob(tmp_path: Path) -> None:
    w = tuning(tmp_path / "ws")
    svc = TuningService(default_workspace=w.ws)
    with pytest.raises(Exception, match="only 'not-applicable'"):
        svc.mark_checklist(w.sid, catalog_id="F-4", status="tried", reason="a round tried it, trust me")
    # F-4 (reshape hoisting): no knob of this operator serves it — a short reason of a few words is enough
    assert "few words" in _mark(svc, w, "F-4", "too short")  # 9 characters
    assert _mark(svc, w, "F-4", "no reshape") == ""  # 10 characters
    # F-3 (block the loop): TILE_B serves it — the reason must name the knob or a measured figure, ≥ 30 characters
    assert "name the knob or cite a measured figure" in _mark(svc, w, "F-3", "not useful for this operator at all")
    assert "name the knob" in _mark(svc, w, "F-3", "TILE_B stays as it is")  # names it, but 21 characters
    assert _mark(svc, w, "F-3", "TILE_B already blocks the batch axis well") == ""
    # the same words for another item with a knob are boilerplate
    assert "already given" in _mark(svc, w, "F-10", "TILE_B already blocks the batch axis well")
    assert _mark(svc, w, "F-10", "vector tile: 20.0 µs at baseline, 8 tasks busy") == ""


def test_a_stage_is_left_early_only_measured_and_with_every_item_marked(tmp_path: Path) -> None:
    w = tuning(tmp_path / "ws", "INCORE_3")
    svc = TuningService(default_workspace=w.ws)
    items = [i["catalog_id"] for i in svc.get_status(w.sid).checklist if i["status"] == "untried"]
    assert items and all(c.startswith("I-") for c in items)
    for cid in items[:-1]:
        assert _mark(svc, w, cid, f"{cid}: measured {BASE_US} µs at the stage entry ({cid.lower()})") == ""
    with pytest.raises(GateRefusal) as refused:
        svc.advance_stage(w.sid, reason="done")
    assert refused.value.rule == "stage-exit" and items[-1] in refused.value.message
    assert _mark(svc, w, items[-1], f"{items[-1]}: measured {BASE_US} µs at the stage entry (last)") == ""
    out = svc.advance_stage(w.sid, reason="done")
    # leaving the last configuration stage early ends the session: no ALGORITHM without measured convergence (R23)
    assert "ALGORITHM needs measured convergence" in out.message
    st = state(w)
    assert st.finished and st.stage == "INCORE_3"


def test_the_last_configuration_stage_converged_by_measurement_opens_the_algorithm_stage(tmp_path: Path) -> None:
    w = tuning(tmp_path / "ws", "INCORE_3")
    svc = TuningService(default_workspace=w.ws)
    for n in range(1, THRESHOLDS["INCORE_3"] + 1):
        no_gain_round(w, n, "INCORE_3")
    svc.stage_control.judge(svc.ctx.find(w.sid), state(w))
    st = state(w)
    assert st.stage == "ALGORITHM" and not st.finished


def test_advance_stage_needs_the_stages_own_collection_and_analysis(tmp_path: Path) -> None:
    w = tuning(tmp_path / "ws")
    w.transition("stage", "FRONTEND", "SWIMLANE_1", "test: entered without its entry collection")
    svc = TuningService(default_workspace=w.ws)
    with pytest.raises(GateRefusal) as refused:
        svc.advance_stage(w.sid, reason="skip")
    assert refused.value.rule == "stage-analysis"
    # measured but not analysed yet: still refused (both are needed, R15/R16)
    mid = w.measure("stage-baseline", -1, w.kept, [BASE_US], "0", analysis(BASE_US, active_util=40.0,
                                                                           busy_us=[8.0]), stage="SWIMLANE_1")
    with pytest.raises(GateRefusal) as refused:
        svc.advance_stage(w.sid, reason="skip")
    assert refused.value.rule == "stage-analysis"
    w.ledger.insert("analyses", session_id=w.sid, at=w.now(), measurement_id=mid, stage="SWIMLANE_1",
                    report_path=str(w.ws / "a.md"), suggestions=[])
    with pytest.raises(GateRefusal) as refused:  # now only the untried checklist stands in the way
        svc.advance_stage(w.sid, reason="skip")
    assert refused.value.rule == "stage-exit"
    assert state(w).stage == "SWIMLANE_1"


def test_a_knob_value_has_one_spelling_for_r19_however_it_arrived() -> None:
    from pypto_tune.tools.rules.retry import value_key

    same = [(8, {"$expr": "2 * 4"}), (8, {"$expr": "(8)"}), (2, {"$expr": "+2"}), (-2, {"$expr": "0 - 2"}),
            (16, {"$expr": "1 << 4"}), (1, {"$expr": "7 % 3"}), (3, {"$expr": "7 // 2"}), (5, {"$expr": "2 + 3"}),
            ([1, 8, 256], (1, 8, 256)), ([1, 8], [1, {"$expr": "4 * 2"}]),
            ({-2: 1, -1: 2}, {"-2": 1, "-1": 2}), ({"-1": 2, "-2": 1}, {-2: 1, -1: 2})]
    for a, b in same:
        assert value_key(a) == value_key(b), (a, b)
    different = [(8, 9), (8, {"$expr": "2 * 5"}), ([1, 8, 256], [1, 16, 256]), ({-2: 1, -1: 2}, {-2: 1, -1: 4}),
                 (4, {"$expr": "RUN_MODE.value * 4"}), ({"$expr": "X.value * 512"}, {"$expr": "Y.value * 512"}),
                 (1, {"$expr": "1 << 99"}), (2, {"$expr": "1 / 0"})]
    for a, b in different:
        assert value_key(a) != value_key(b), (a, b)
    # a value that names something keeps its canonical text (and never recurses)
    assert value_key({"$expr": "X.value  *  512"}) == value_key({"$expr": "X.value * 512"})


def test_an_invalid_baseline_collection_is_no_failed_change(tmp_path: Path) -> None:
    """R19 keys on the code of changes that failed in a ROUND: an invalid collection of the baseline (round 0, a
    fake-task run the agent then fixed by collecting again) does not make the original code a failed change."""
    w = tuning(tmp_path / "ws")
    svc = TuningService(default_workspace=w.ws)
    original = dict(w.kept)
    w.ledger.insert("measurements", session_id=w.sid, at=w.now(), round=0, code_hash=state(w).kept_hash,
                    valid=False, invalid_reasons=["fake tasks (B.9.3)"], operator_time_us=None, e2e_us=None,
                    samples=[], analysis={}, archive="", run_ids=[], stage=None, per_kernel={})
    two = {"softmax.py": original["softmax.py"].replace("\nTILE_B = 4\n", "\nTILE_B = 2\n")}
    w.open_round(1, "FRONTEND", "F-3", KnobChange(knob_id="softmax.py:TILE_B", file="softmax.py", line=14,
                                                  before=4, after=2), two, before_us=BASE_US)
    w.precision(w.run("precision", 1, "0", two), "passed", 1, "0", two)
    w.decide(1, "kept", "gain", 18.0, -10.0, "", two)
    w.open_round(2, "FRONTEND", "F-3", KnobChange(knob_id="softmax.py:TILE_B", file="softmax.py", line=14,
                                                  before=2, after=4), original, before_us=18.0)
    w.decide(2, "reverted", "abandoned", None, None, "rolled back unrun", original)
    (w.ws / "softmax.py").write_text(two["softmax.py"])
    assert svc.apply_tuning_patch(w.sid, knob="softmax.py:TILE_B", value=4, catalog_id="F-3",
                                  rationale="back to the original").round == 3


def test_going_back_to_code_that_was_measured_and_kept_is_no_retry(tmp_path: Path) -> None:
    """Only failures count as failed code: a round whose code was measured (validly) and kept, then improved upon, may
    be returned to by a later change (it is judged again against the new kept state)."""
    w = tuning(tmp_path / "ws")
    svc = TuningService(default_workspace=w.ws)
    x = {"softmax.py": w.kept["softmax.py"].replace("\nTILE_B = 4\n", "\nTILE_B = 2\n")}
    w.open_round(1, "FRONTEND", "F-3", KnobChange(knob_id="softmax.py:TILE_B", file="softmax.py", line=14,
                                                  before=4, after=2), x, before_us=BASE_US)
    w.precision(w.run("precision", 1, "0", x), "passed", 1, "0", x)
    w.measure("measure", 1, x, [18.0], "0", analysis(18.0, active_util=45.0, busy_us=[8.0]), stage="FRONTEND")
    w.decide(1, "kept", "gain", 18.0, -10.0, "", x)
    y = with_vec_tile(x, "1, 8, 256")
    w.open_round(2, "FRONTEND", "F-10", KnobChange(knob_id=VEC, file="softmax.py", line=33, before=[1, 4, 256],
                                                   after=[1, 8, 256]), y, before_us=18.0)
    w.precision(w.run("precision", 2, "0", y), "passed", 2, "0", y)
    w.measure("measure", 2, y, [16.0], "0", analysis(16.0, active_util=50.0, busy_us=[8.0]), stage="FRONTEND")
    w.decide(2, "kept", "gain", 16.0, -11.1, "", y)
    (w.ws / "softmax.py").write_text(y["softmax.py"])
    back = svc.apply_tuning_patch(w.sid, knob=VEC, value=[1, 4, 256], catalog_id="F-10", rationale="back")
    assert back.round == 3
