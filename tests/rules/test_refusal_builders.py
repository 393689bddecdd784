"""The refusals built outside the gate table (``tools/rules/`` calls, change, checklist, drift, setup) and the two
predicates beside them: each names its rule id and the calls an agent may make next, and each predicate answers as
the rule says. Pure: no ledger, no server, no process — the kill suite of ``scripts/mutation.sh`` for these modules.

The expected rule ids and next calls come from the README's rules table and the rule's own wording (R5, R10, R11,
R19, R23), not from the builders' code.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pypto_tune.tools.errors import GateRefusal
from pypto_tune.tools.rules import calls, change, checklist, drift, setup

#: what an agent can do after the admission refused its change: change again, look at the knobs, look at the board
AFTER_ADMISSION = ["apply_tuning_patch", "list_knobs", "get_status"]

ADMISSION_REFUSALS: list[tuple[str, Callable[..., GateRefusal]]] = [
    ("one-change", change.one_change), ("legality", change.legality), ("live-site", change.live_site),
    ("catalog-stage", change.catalog_stage), ("algorithm", change.algorithm),
]


@pytest.mark.parametrize(("rule", "build"), ADMISSION_REFUSALS, ids=[r for r, _ in ADMISSION_REFUSALS])
def test_a_refused_change_names_its_rule_and_by_default_lets_the_agent_change_again(
        rule: str, build: Callable[..., GateRefusal]) -> None:
    refused = build("the edit touches two knobs", "change one knob")
    assert (refused.rule, refused.allowed, refused.hint) == (rule, AFTER_ADMISSION, "change one knob")
    own = build("the edit touches two knobs", "change one knob", ["revert_patch", "get_status"])
    assert own.allowed == ["revert_patch", "get_status"]  # the caller's list replaces the default, whole


def test_a_correction_of_another_knob_is_refused_under_r11_and_may_be_corrected_recorded_or_rolled_back() -> None:
    refused = change.correction_of_other_knob(frozenset({"tile_m"}), "tile_n")
    assert refused.rule == "correction-limit"
    assert refused.allowed == ["apply_tuning_patch", "record_round", "revert_patch"]


def test_a_knob_outside_the_stages_catalogue_is_refused_under_r10() -> None:
    for refused in (change.serves_no_item("tile_m"), change.serves_other_item("tile_m", ["C1"], "C2")):
        assert (refused.rule, refused.allowed) == ("catalog-stage", ["apply_tuning_patch", "list_knobs"])
    adopted = change.adopted_edit_outside_stage([], "FRONTEND")
    assert (adopted.rule, adopted.allowed) == ("catalog-stage", ["revert_patch", "get_status"])


def test_a_change_tried_and_not_kept_is_refused_under_r19_with_the_proposer_as_the_way_on() -> None:
    refused = change.already_tried("tile_m=64 gained nothing in round 3")
    assert refused.rule == "no-retry"
    assert refused.allowed == ["apply_tuning_patch", "propose_candidates", "list_knobs", "get_status"]


def test_an_illegal_value_is_a_legality_refusal_that_points_at_the_legal_range_unless_the_planner_said_more() -> None:
    bare = change.illegal_value("tile_m=7 is not a multiple of 16", "")
    assert (bare.rule, bare.allowed) == ("legality", ["apply_tuning_patch", "list_knobs", "propose_candidates"])
    assert "legal range" in bare.hint
    assert change.illegal_value("tile_m=7 is not a multiple of 16", "use 16, 32 or 64").hint == "use 16, 32 or 64"


@pytest.mark.parametrize("tool", ["apply_tuning_patch", "run_precision_check", "collect_swimlane", "record_round",
                                  "render_report", "advance_stage"])
def test_drift_blocks_every_call_but_a_revert_or_an_adoption(tool: str) -> None:
    assert drift.blocks(tool, adopting=False)
    assert not drift.blocks(tool, adopting=True)
    assert not drift.blocks("revert_patch", adopting=False)


def test_every_drift_refusal_names_the_drift_rule_and_a_way_out() -> None:
    assert drift.external_edit("kernel.py changed").allowed == drift.DRIFT_ALLOWED
    assert drift.DRIFT_ALLOWED[:2] == ["revert_patch", "run_precision_check(adopt_drift=true)"]
    refusals = [drift.external_edit("kernel.py changed"), drift.report_over_edit("kernel.py changed", ["get_status"]),
                drift.ledger_dir_is_link(".pypto-tune"), drift.adopt_outside_tuning("S2_COLLECT"),
                drift.adopt_other_files(["harness.py"]), drift.UnrecordedEdit("apply_tuning_patch", ["kernel.py"])]
    assert {r.rule for r in refusals} == {"drift"}
    assert all(r.allowed and "get_status" in r.allowed for r in refusals)


def test_the_test_command_may_be_corrected_only_during_setup_before_the_baseline_passed() -> None:
    assert setup.command_correctable("S1_SETUP", set())
    assert not setup.command_correctable("S1_SETUP", {"0123456789ab"})
    assert not setup.command_correctable("S2_COLLECT", set())
    assert not setup.command_correctable("S4_TUNE", {"0123456789ab"})


def test_the_session_refusals_name_their_rules_and_the_calls_left() -> None:
    finish = "stop_session('s') then start a new session"
    cases = [
        (setup.no_goal(), "goal", ["start_session"]),
        (setup.command_fixed("s", ["python", "t.py"], finish), "command-fixed",
         ["start_session (same command)", "stop_session", "get_status"]),
        (setup.patterns_fixed("s", {"pass": "OK"}, finish), "command-fixed",
         ["start_session (same patterns)", "stop_session", "get_status"]),
        (setup.env_check_failed(["torch missing", "pypto missing"]), "env-check", ["run_precision_check",
                                                                                 "get_status"]),
        (setup.no_sandbox("bwrap is not installed", "apt-get install bubblewrap"), "sandbox", ["get_status"]),
        (setup.session_locked("123", "10:00"), "session-lock", ["get_status", "list_knobs", "analyze_bubbles"]),
    ]
    for refused, rule, allowed in cases:
        assert (refused.rule, refused.allowed) == (rule, allowed)
    assert "torch missing; pypto missing" in setup.env_check_failed(["torch missing", "pypto missing"]).message
    differs = setup.environment_differs("s", ["python 3.11 → 3.12", "torch 2.13 → 2.14"], "/ws")
    assert differs.rule == "environment" and differs.allowed[-1] == "get_status"
    assert "python 3.11 → 3.12; torch 2.13 → 2.14" in differs.message


def test_a_busy_session_and_an_untrusted_ledger_leave_only_waiting_reading_or_ending() -> None:
    busy = calls.busy("run_candidates")
    assert (busy.rule, busy.allowed) == ("busy", ["wait_job", "get_status", "list_knobs"])
    untrusted = calls.untrusted_ledger(["row 7 of rounds was not written by the server"])
    assert (untrusted.rule, untrusted.allowed) == ("ledger-integrity", ["get_status", "render_report", "stop_session"])
    # the calls past an untrusted ledger are exactly the ways out it names (a report of what is there, or the end)
    assert set(calls.INTEGRITY_EXEMPT) == set(untrusted.allowed) - {"get_status"}


def test_a_stage_is_left_early_only_with_every_item_tried_or_marked_with_a_reason() -> None:
    for refused in (checklist.items_untried("FRONTEND", ["C1.2"]),
                    checklist.not_applicable_refused("C1.2", "the reason is under thirty characters")):
        assert refused.rule == "stage-exit"
        assert refused.allowed == ["apply_tuning_patch", "propose_candidates", "mark_checklist", "get_status"]
