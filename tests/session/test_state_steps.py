"""The named steps of ``derive_state`` (tools/session/state.py) that tests/session/test_derived_state.py does not pin
through a whole ledger: the environment's answer, the code the workspace must hold (and the debug toggle), R5's count
of baseline failures, the open round and the kept code. Rows are written as the ledger returns them (dicts); each
expected value follows from the rule as the README states it. Pure: no ledger file, no process.
"""

from __future__ import annotations

from typing import Any

from pypto_tune.tools.running.verdict import COMMAND_PROBLEM
from pypto_tune.tools.session import state

SESSION = {"original_hash": "h0", "original_raw_hash": "r0", "original_sources": {"op.py": "v0"}}


def patch(kind: str, n: int | None, after: str, before: str = "v0") -> dict[str, Any]:
    return {"kind": kind, "round": n, "after_hash": f"h-{after}", "after_raw_hash": f"r-{after}",
            "after_sources": {"op.py": after}, "before_sources": {"op.py": before}}


def test_the_environment_is_judged_on_its_newest_batch_of_checks_only() -> None:
    assert state._environment([]) == (None, 0)
    checks = [{"batch": 1, "ok": False}, {"batch": 2, "ok": True}, {"batch": 2, "ok": True}]
    assert state._environment(checks) == (True, 2)
    assert state._environment([*checks, {"batch": 3, "ok": True}, {"batch": 3, "ok": False}]) == (False, 3)


def test_the_expected_code_is_the_last_patch_written_and_a_trial_on_a_private_copy_is_not() -> None:
    assert state._expected_code(SESSION, []) == ("h0", "r0", {"op.py": "v0"}, False, None)
    patches = [patch("round", 1, "v1"), patch("trial", 2, "v2")]
    assert state._expected_code(SESSION, patches) == ("h-v1", "r-v1", {"op.py": "v1"}, False, None)


def test_the_debug_toggle_keeps_the_sources_before_it_until_it_is_turned_off_or_restored() -> None:
    on = [patch("round", 1, "v1"), patch("debug-on", None, "v1+dbg", before="v1")]
    assert state._expected_code(SESSION, on)[3:] == (True, {"op.py": "v1"})
    for off in ("debug-off", "debug-restore"):
        assert state._expected_code(SESSION, [*on, patch(off, None, "v1", before="v1+dbg")])[3:] == (False, None)


def test_r5_counts_consecutive_baseline_failures_that_only_a_pass_or_a_person_resets() -> None:
    def record(i: int, verdict: str, **more: Any) -> dict[str, Any]:
        return {"id": i, "round": None, "verdict": verdict, **more}

    records = [record(1, "failed"), record(2, "failed"), record(3, "passed"), record(4, "failed"),
               record(5, "failed", result_type=COMMAND_PROBLEM),  # the command's problem, not the operator's
               {"id": 6, "round": 1, "verdict": "failed"},  # a round's failure is not a baseline failure
               record(7, "failed")]
    rows = {"precision_records": records, "confirmations": []}
    assert state._baseline_failures(rows) == 2
    agent = {"kind": "baseline-retry", "detail": "7", "source": "agent"}
    assert state._baseline_failures({**rows, "confirmations": [agent]}) == 2
    person = {"kind": "baseline-retry", "detail": "4", "source": "elicitation"}
    assert state._baseline_failures({**rows, "confirmations": [person]}) == 1  # record 7 came after the answer


def test_the_open_round_is_the_newest_undecided_one_with_its_own_records() -> None:
    rows: dict[str, Any] = {
        "rounds": [{"number": 1}, {"number": 2}, {"number": 3}],
        "precision_records": [{"round": 2, "id": 1}, {"round": 3, "id": 2}],
        "measurements": [{"round": 3, "id": 9}], "patches": [patch("round", 3, "v3"), patch("correction", 3, "v4")],
    }
    decided = {1: {"decision": "kept"}, 3: {"decision": "reverted"}}
    open_round = state._open_round(rows, decided)
    assert open_round is not None and open_round.number == 2
    assert open_round.precision == [{"round": 2, "id": 1}] and open_round.measurements == []
    assert state._open_round(rows, {**decided, 2: {"decision": "kept"}}) is None
    assert state._open_round({**rows, "rounds": [{"number": 3}]}, {}).corrections == 1  # type: ignore[union-attr]


def test_the_kept_code_takes_patches_outside_rounds_and_those_of_rounds_decided_kept() -> None:
    patches = [patch("adopt", None, "v1"), patch("round", 1, "v2"), patch("round", 2, "v3"),
               patch("trial", 3, "v4"), patch("trial-apply", 3, "v4")]
    decisions = {1: {"decision": "kept"}, 2: {"decision": "reverted"}, 3: {"decision": "kept"}}
    assert state._kept_code(SESSION, patches, decisions) == ("h-v4", "r-v4", {"op.py": "v4"}, 3)
    assert state._kept_code(SESSION, patches[:3], {2: {"decision": "reverted"}}) == ("h-v1", "r-v1",
                                                                                    {"op.py": "v1"}, None)
