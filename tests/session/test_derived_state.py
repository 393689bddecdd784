"""What ``derive_state`` makes of a real ledger, for the facts a gate decides on: the baseline and target, the kept code,
the order a candidate batch's rounds count toward a stage's exit, a stage's own collection and analysis, the checklist a
stage sees, the test command as corrected, and the question a person must answer (R5).

Each ledger is written the way the operations write it (tests/report/ledger_rows.py); each expected value follows from
the rule the README states (rule table, keep/revert, R14, R15/R16, R5), never from ``derive_state`` itself. These are
the fast kill suite of benchmarks/mutation.py for tools/session/state.py (issue #16).
"""

from __future__ import annotations

from pathlib import Path

from pypto_tune.tools.session.recorder import patch_row
from pypto_tune.tools.snapshot import KnobChange
from tests.report.ledger_rows import VEC, Writer, analysis, code_hash, with_tile_b, with_vec_tile
from tests.rules.test_rule_decisions import BASE_US, state, tuning


def _tile_b(n: int) -> KnobChange:
    return KnobChange(knob_id="softmax.py:TILE_B", file="softmax.py", line=14, before=4, after=n)


def _invalid(w: Writer, round_no: int, sources: dict[str, str], us: float, stage: str | None = None) -> int:
    return w.ledger.insert("measurements", session_id=w.sid, at=w.now(), round=round_no, code_hash=code_hash(sources),
                           valid=False, invalid_reasons=["fake tasks (B.9.3)"], operator_time_us=us, e2e_us=None,
                           samples=[us], analysis={}, archive="", run_ids=[], stage=stage, per_kernel={})


def test_the_baseline_is_the_first_valid_measurement_of_round_zero_and_the_target_follows_from_it(
        tmp_path: Path) -> None:
    """R1: the target is the baseline over the speed-up (here 100×). An invalid baseline run does not count."""
    ws = tmp_path / "ws"
    ws.mkdir()
    w = Writer(ws, run_mode="sim", repeats=1, goal_speedup=100.0)
    w.debug_on()
    w.measure("measure", 3, w.kept, [7.0], "0", analysis(7.0, active_util=40.0, busy_us=[3.0]))  # not round 0
    _invalid(w, 0, w.kept, 5.0)
    assert (state(w).baseline_us, state(w).target_us) == (None, None)
    w.measure("baseline", 0, w.kept, [BASE_US], "0", analysis(BASE_US, active_util=40.0, busy_us=[8.0]))
    w.measure("baseline", 0, w.kept, [30.0], "0", analysis(30.0, active_util=40.0, busy_us=[8.0]))
    st = state(w)
    assert st.baseline_us == BASE_US and st.target_us == BASE_US / 100.0


def test_a_candidate_trial_between_two_kept_changes_moves_neither_the_expected_nor_the_kept_code(
        tmp_path: Path) -> None:
    """A trial ran on a private copy (search.py): its patch row is skipped, and the patches after it still count."""
    w = tuning(tmp_path / "ws")
    w.ledger.insert("patches", **patch_row(w.sid, kind="trial", round_no=1, before=w.kept,
                                            after=with_tile_b(w.kept, 8), note="candidate trial"))
    two = with_tile_b(w.kept, 2)
    w.open_round(2, "FRONTEND", "F-3", _tile_b(2), two, before_us=BASE_US)
    w.decide(2, "kept", "gain", 18.0, -10.0, "", two)
    st = state(w)
    assert (st.current_hash, st.kept_hash, st.best_round) == (code_hash(two), code_hash(two), 2)
    assert st.expected_sources == two == st.kept_sources


def test_a_batch_that_kept_a_gain_ends_its_streak_with_that_gain_wherever_the_winner_falls(tmp_path: Path) -> None:
    """R14 with candidate batches (issue #12): a batch is judged as a whole, so its kept winner resets the
    no-gain streak after the batch's other trials count, even when the winner has the batch's lowest number; rounds
    outside a batch count in their own order."""
    w = tuning(tmp_path / "ws")
    for n in (1, 2):  # two no-gain rounds before the batch
        after = with_tile_b(w.kept, n + 5)
        w.open_round(n, "FRONTEND", "F-3", _tile_b(n + 5), after, before_us=BASE_US)
        w.decide(n, "reverted", "no-gain", BASE_US, 0.0, "", after)
    assert state(w).counters["FRONTEND"].consecutive_no_gain == 2
    tiles = {3: "1, 16, 256", 4: "1, 8, 256", 5: "1, 2, 256"}
    results = {3: ("kept", "gain", 18.0), 4: ("reverted", "no-gain", BASE_US), 5: ("reverted", "regression", 22.0)}
    for n, tile in tiles.items():
        change = KnobChange(knob_id=VEC, file="softmax.py", line=33, before=[1, 4, 256],
                            after=[int(x) for x in tile.split(", ")])
        w.open_round(n, "FRONTEND", "F-10", change, with_vec_tile(w.kept, tile), before_us=BASE_US, kind="trial",
                     batch="b1")
        w.trial_row("b1", {"knob": VEC, "value": tile}, n, "measured", results[n][2], {})
    kept_before = dict(w.kept)
    for n, (decision, result, us) in results.items():
        w.decide(n, decision, result, us, (us - BASE_US) / BASE_US * 100, "", with_vec_tile(kept_before, tiles[n]),
                 trial=True)
    c = state(w).counters["FRONTEND"]
    assert (c.rounds, c.consecutive_no_gain) == (5, 0)
    six = with_tile_b(w.kept, 6)  # a round after the batch counts after it
    w.open_round(6, "FRONTEND", "F-3", _tile_b(6), six, before_us=18.0)
    w.decide(6, "reverted", "no-gain", 18.0, 0.0, "", six)
    assert state(w).counters["FRONTEND"].consecutive_no_gain == 1


def test_a_stage_is_measured_by_its_own_valid_entry_collection_and_analysed_on_the_newest_one(tmp_path: Path) -> None:
    """R15/R16: SWIMLANE_n needs a fresh collection of its own (round −1, valid, this stage) and an analysis of that
    collection; a newer collection needs its own analysis."""
    w = tuning(tmp_path / "ws")
    w.transition("stage", "FRONTEND", "SWIMLANE_1", "test")
    st = state(w)
    assert not st.stage_measured and not st.stage_analyzed

    def analyse(mid: int) -> None:
        w.ledger.insert("analyses", session_id=w.sid, at=w.now(), measurement_id=mid, stage="SWIMLANE_1",
                        report_path="a.md", suggestions=[])

    a = analysis(BASE_US, active_util=40.0, busy_us=[8.0])
    analyse(_invalid(w, -1, w.kept, BASE_US, stage="SWIMLANE_1"))  # invalid: no collection
    analyse(w.measure("stage-baseline", -1, w.kept, [BASE_US], "0", a, stage="INCORE_1"))  # another stage's
    analyse(w.measure("measure", 1, w.kept, [BASE_US], "0", a, stage="SWIMLANE_1"))  # a round's, not the entry's
    st = state(w)
    assert not st.stage_measured and not st.stage_analyzed
    first = w.measure("stage-baseline", -1, w.kept, [BASE_US], "0", a, stage="SWIMLANE_1")
    assert (state(w).stage_measured, state(w).stage_analyzed) == (True, False)
    analyse(first)
    assert (state(w).stage_measured, state(w).stage_analyzed) == (True, True)
    newest = w.measure("stage-baseline", -1, w.kept, [BASE_US], "0", a, stage="SWIMLANE_1")
    assert (state(w).stage_measured, state(w).stage_analyzed) == (True, False)
    analyse(newest)
    assert state(w).stage_analyzed


def test_frontend_and_algorithm_reuse_the_baseline_collection_and_analysis(tmp_path: Path) -> None:
    """R15: FRONTEND's entry data is the S2/S3 baseline; ALGORITHM (after INCORE_3) starts without a collection."""
    ws = tmp_path / "ws"
    ws.mkdir()
    w = Writer(ws, run_mode="sim", repeats=1, goal_speedup=100.0)
    w.debug_on()
    for level1 in ("S2_COLLECT", "S3_ANALYZE", "S4_TUNE"):
        w.transition("state", None, level1, "test")
    w.transition("stage", None, "FRONTEND", "test")
    assert (state(w).stage_measured, state(w).stage_analyzed) == (False, False)
    mid = w.measure("baseline", 0, w.kept, [BASE_US], "0", analysis(BASE_US, active_util=40.0, busy_us=[8.0]))
    assert (state(w).stage_measured, state(w).stage_analyzed) == (True, False)
    w.ledger.insert("analyses", session_id=w.sid, at=w.now(), measurement_id=mid, stage=None, report_path="a.md",
                    suggestions=[])
    assert (state(w).stage_measured, state(w).stage_analyzed) == (True, True)
    w.transition("stage", "FRONTEND", "ALGORITHM", "test")
    assert (state(w).stage, state(w).stage_measured, state(w).stage_analyzed) == ("ALGORITHM", True, True)


def test_a_stage_sees_its_own_marks_legacy_marks_and_other_groups_marks_but_not_an_earlier_stage_of_its_group(
        tmp_path: Path) -> None:
    """Issue #10, attack 6: SWIMLANE_2 starts with its own checklist, not SWIMLANE_1's "not applicable"."""
    w = tuning(tmp_path / "ws", "SWIMLANE_2")

    def mark(group: str, stage: str | None, cid: str) -> None:
        w.ledger.insert("checklist_marks", session_id=w.sid, at=w.now(), stage_group=group, stage=stage,
                        catalog_id=cid, status="not-applicable", reason=f"{cid} in {stage}", round=None)

    mark("swimlane", "SWIMLANE_1", "S-3")
    mark("swimlane", None, "S-4")  # a ledger from before marks named their stage
    mark("swimlane", "SWIMLANE_2", "S-5")
    mark("frontend", "FRONTEND", "F-3")
    assert sorted(state(w).checklist) == [("frontend", "F-3"), ("swimlane", "S-4"), ("swimlane", "S-5")]
    w.transition("stage", "SWIMLANE_2", "INCORE_2", "test")  # another group: the swimlane marks are not its own
    assert sorted(state(w).checklist) == [("frontend", "F-3"), ("swimlane", "S-3"), ("swimlane", "S-4"),
                                          ("swimlane", "S-5")]


def test_the_test_command_is_the_newest_correction_of_it(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    w = Writer(ws, run_mode="sim", repeats=1, goal_speedup=100.0)
    assert state(w).test_command == w.argv
    w.correction(w.argv, ["python3", "softmax.py", "--fixed"])
    w.ledger.insert("corrections", session_id=w.sid, at=w.now(), field="timeout_s", before_value=300.0,
                    after_value=["not", "a", "command"], reason="another field")
    w.correction(["python3", "softmax.py", "--fixed"], ["python3", "softmax.py", "--fixed", "--twice"])
    w.ledger.insert("corrections", session_id=w.sid, at=w.now(), field="device_ids", before_value=["0"],
                    after_value=["1"], reason="another field")
    assert state(w).test_command == ["python3", "softmax.py", "--fixed", "--twice"]


def test_the_pending_question_is_the_newest_unanswered_one_and_shown_only_while_a_person_is_awaited(
        tmp_path: Path) -> None:
    """R5: after 3 baseline failures the server asks a person. A "no" leaves the question open; a retry answer from
    a person closes it; another kind of confirmation answers nothing."""
    ws = tmp_path / "ws"
    ws.mkdir()
    w = Writer(ws, run_mode="sim", repeats=1, goal_speedup=100.0)
    runs = [w.precision(w.run("precision", None, "0", w.sources), "error", None, "0", w.sources) for _ in range(2)]
    early = w.question("retry the baseline?", runs[-1])  # asked before the third failure: not awaited yet
    assert state(w).pending_question is None
    third = w.precision(w.run("precision", None, "0", w.sources), "error", None, "0", w.sources)
    st = state(w)
    assert st.awaiting_user and st.pending_question is not None and st.pending_question["id"] == early
    asked = w.question("retry the baseline after 3 failures?", third)
    w.ledger.insert("questions", session_id=w.sid, at=w.now(), kind="environment", text="accept?", info={})
    assert state(w).pending_question["id"] == asked  # the newest question of R5's kind, not the newest of all
    w.ledger.insert("confirmations", session_id=w.sid, at=w.now(), kind="environment", detail=str(third),
                    source="cli", question_id=asked)  # not an answer to a retry question
    assert state(w).pending_question["id"] == asked
    w.confirmation(asked, third, "cli")
    w.confirmation(early, third, "cli")
    st = state(w)
    assert not st.awaiting_user and st.pending_question is None
    # three failures more: a person is awaited again, and the questions answered before are not pending
    for _ in range(3):
        w.precision(w.run("precision", None, "0", w.sources), "error", None, "0", w.sources)
    st = state(w)
    assert st.awaiting_user and st.pending_question is None
