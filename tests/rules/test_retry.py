"""What a change may serve and correct (R10, R11) and never the same change twice (R19): tools/rules/retry.py on
hand-made admissions and ledger rows. Pure: no process, no ledger file. The same rules through the service, on a real
ledger, are in tests/rules/test_rule_decisions.py and test_gate_decisions.py; over MCP stdio in tests/admission/.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pypto_tune.tools.rules import retry
from pypto_tune.tools.rules.tuning_loop import ALGORITHM_STAGE, STAGES_BY_NAME

FRONTEND = STAGES_BY_NAME["FRONTEND"]
A, B = "op.py:k.block", "op.py:k.set_vec_tile_shapes#1"


def change(knob: str, after: Any) -> SimpleNamespace:
    return SimpleNamespace(knob_id=knob, after=after)


def one(knob: str = A, after: Any = 8, served: tuple[str, ...] = ("F-3",)) -> SimpleNamespace:
    return SimpleNamespace(kind="knob", change=change(knob, after), changes=[], catalog_ids=list(served))


def pair(a: Any = 8, b: Any = [8, 128], served: tuple[str, ...] = ("F-3", "F-10")) -> SimpleNamespace:
    return SimpleNamespace(kind="pair", change=None, changes=[change(A, a), change(B, b)], catalog_ids=list(served))


# ------------------------------------------------------------------------------------------------ R10 / R11


def test_a_knob_change_serves_the_item_it_cites_in_a_configuration_stage() -> None:
    assert retry.served_and_corrected(one(), FRONTEND, "F-3", None) is None
    assert retry.served_and_corrected(one(), FRONTEND, "", None) is None  # no citation: any item it serves
    other = retry.served_and_corrected(one(), FRONTEND, "F-10", None)
    assert other is not None and other.rule == "catalog-stage" and "serves F-3, not F-10" in other.message
    none = retry.served_and_corrected(one(served=()), FRONTEND, "F-3", None)
    assert none is not None and none.rule == "catalog-stage" and "serves no catalogue item" in none.message


def test_the_algorithm_stage_and_a_session_without_a_stage_ask_for_no_catalogue_item() -> None:
    for stage in (ALGORITHM_STAGE, None):
        assert retry.served_and_corrected(one(served=()), stage, "F-10", None) is None


def test_a_correction_moves_only_its_rounds_own_knobs() -> None:
    assert retry.served_and_corrected(one(), FRONTEND, "F-3", frozenset({A})) is None
    refused = retry.served_and_corrected(one(B, [8, 128], ("F-10",)), FRONTEND, "F-10", frozenset({A}))
    assert refused is not None and refused.rule == "correction-limit" and B in refused.message
    # a linked pair's round: both of its knobs are its own, and a correction may not reach past them
    assert retry.served_and_corrected(pair(), FRONTEND, "F-3", frozenset({A, B})) is None
    refused = retry.served_and_corrected(pair(), FRONTEND, "F-3", frozenset({A}))
    assert refused is not None and refused.rule == "correction-limit" and f"{A} + {B}" in refused.message


def test_a_pair_cites_an_item_one_of_its_knobs_serves() -> None:
    assert retry.served_and_corrected(pair(), FRONTEND, "F-10", None) is None
    refused = retry.served_and_corrected(pair(served=("F-3",)), FRONTEND, "F-10", None)
    assert refused is not None and refused.rule == "catalog-stage" and f"{A} + {B}" in refused.message


def test_a_change_that_moves_no_knob_is_not_judged_here() -> None:
    for adm in (SimpleNamespace(kind="knob", change=None, changes=[], catalog_ids=[]),
                SimpleNamespace(kind="structural", change=None, changes=[change(A, 8)], catalog_ids=[])):
        assert retry.served_and_corrected(adm, FRONTEND, "F-10", frozenset({B})) is None


# ------------------------------------------------------------------------------------------------ R19

KEPT, OTHER = "kept-hash", "other-kept-hash"


def ledger(*rounds: tuple[int, str, list[tuple[str, Any]], str, str], kept: str = KEPT) -> SimpleNamespace:
    """A session state with one "tuning" patch per round: (number, before_hash, knob changes, decision, result)."""
    patches = [dict(round=n, kind="tuning", after_hash=f"code-{n}", after_raw_hash=f"raw-{n}",
                    knob_changes=[{"knob_id": k, "after": v} for k, v in moved]) for n, _, moved, _, _ in rounds]
    return SimpleNamespace(
        rows={"patches": patches, "precision_records": [], "measurements": [], "runs": [], "corrections": [],
              "round_decisions": []},
        rounds=[dict(number=n, change=f"change {n}", before_hash=before) for n, before, _, _, _ in rounds],
        decisions={n: dict(decision=d, result_type=r) for n, _, _, d, r in rounds}, kept_hash=kept)


def tried(st: SimpleNamespace, adm: SimpleNamespace, semantic: str = "new") -> str:
    refusal = retry.already_tried(st, semantic, adm, lambda p: f"sem-{p['round']}")
    assert refusal is None or refusal.rule == "no-retry", refusal
    return refusal.message if refusal else ""


def test_the_same_pair_from_the_same_kept_state_is_not_tried_twice() -> None:
    st = ledger((1, KEPT, [(A, 8), (B, [8, 128])], "reverted", "no-gain"))
    assert "this linked pair was tried from this same kept state in round 1 and ended reverted (no-gain)" in \
        tried(st, pair())
    assert tried(st, pair(b=[16, 128])) == ""  # another value of one half is another pair
    assert tried(ledger((1, OTHER, [(A, 8), (B, [8, 128])], "reverted", "no-gain")), pair()) == ""
    assert tried(ledger((1, KEPT, [(A, 8), (B, [8, 128])], "kept", "gain")), pair()) == ""


def test_a_pair_does_not_retry_a_half_that_failed_on_its_own_but_may_follow_a_half_that_only_gained_nothing() -> None:
    failed = ledger((1, KEPT, [(B, [8, 128])], "failed", "compile-failure"))
    assert f"{B} at this value failed on its own from this same kept state in round 1 (compile-failure)" in \
        tried(failed, pair())
    assert tried(ledger((1, KEPT, [(B, [8, 128])], "reverted", "no-gain")), pair()) == ""
    assert tried(ledger((1, OTHER, [(B, [8, 128])], "failed", "compile-failure")), pair()) == ""


def test_one_knob_and_value_from_the_same_kept_state_and_the_same_code_anywhere() -> None:
    st = ledger((1, KEPT, [(A, 8)], "reverted", "regression"))
    assert f"{A} = 8 was tried from this same kept state in round 1 and ended reverted (regression)" in tried(st, one())
    assert tried(st, one(after=16)) == ""
    assert tried(ledger((1, OTHER, [(A, 8)], "reverted", "regression")), one()) == ""
    # the same code by meaning, from any kept state
    moved = ledger((1, OTHER, [(A, 8)], "reverted", "regression"))
    assert "this exact change was tried in round 1 (change 1)" in tried(moved, one(after=16), semantic="sem-1")
    # a change that was kept, or a round abandoned by a correction, does not count
    for decision, result in (("kept", "gain"), ("reverted", "abandoned")):
        assert tried(ledger((1, KEPT, [(A, 8)], decision, result)), one(), semantic="sem-1") == ""


def test_only_patches_that_carry_a_rounds_change_count() -> None:
    st = ledger((1, KEPT, [(A, 8)], "reverted", "no-gain"))
    for kind in ("trial-apply", "revert", "baseline"):
        st.rows["patches"][0]["kind"] = kind
        assert tried(st, one()) == "", kind
    for kind in retry.CHANGE_PATCHES:
        st.rows["patches"][0]["kind"] = kind
        assert tried(st, one()) != "", kind


def failures(precision: list[dict[str, Any]] = (), measurements: list[dict[str, Any]] = (),
             runs: list[dict[str, Any]] = ()) -> dict[str, str]:
    return retry.failed_code(SimpleNamespace(rows={"precision_records": list(precision),
                                                   "measurements": list(measurements), "runs": list(runs)}))


def prec(round_no: int | None, code: str, verdict: str = "error", run_id: int | None = None) -> dict[str, Any]:
    return dict(round=round_no, code_hash=code, verdict=verdict, result_type="compile-failure", run_id=run_id)


def meas(round_no: int | None, code: str, valid: bool = False, run_ids: list[int] | None = None,
         why: str = "fake tasks (B.9.3)") -> dict[str, Any]:
    return dict(round=round_no, code_hash=code, valid=valid, run_ids=run_ids, invalid_reasons=[why])


def test_the_failed_code_of_rounds_is_what_r19_keys_on_never_the_baseline_or_a_reference_run() -> None:
    got = failures([prec(1, "c1"), prec(2, "c2", "passed"), prec(0, "c0"), prec(None, "cb"), prec(-2, "cr")])
    assert got == {"c1": "precision error (compile-failure)"}
    got = failures(measurements=[meas(1, "m1"), meas(2, "m2", valid=True), meas(0, "m0"), meas(None, "mb"),
                                 meas(-2, "mr")])
    assert got == {"m1": "invalid measurement (fake tasks (B.9.3))"}
    long = failures(measurements=[meas(3, "m3", why="x" * 200)])
    assert long == {"m3": "invalid measurement (" + "x" * 120 + ")"}  # a reason is cut at 120 characters


def test_a_run_the_server_discarded_for_the_environments_sake_says_nothing_of_its_code() -> None:
    env = [dict(id=5, tampered=["interpreter files changed"]), dict(id=6, tampered=["op.py"])]
    got = failures([prec(1, "c5", run_id=5), prec(2, "c6", run_id=6), prec(3, "cn", run_id=None)],
                   [meas(4, "m5", run_ids=[5]), meas(5, "m6", run_ids=[6]), meas(6, "mn", run_ids=None)], env)
    # run 6's copy was rewritten while it ran: an attack on the run, still charged to the change
    assert set(got) == {"c6", "cn", "m6", "mn"}
