"""Keep the best of a batch (tools/rules/tuning_loop.py ``judge_batch``): each measured trial is judged against the
kept state, the fastest gain is kept and every other gain is "not chosen" — one change point per round. Pure: no
process; the same decision over MCP stdio is in tests/search/test_search_over_stdio.py.
"""

from __future__ import annotations

from pypto_tune.tools.rules.tuning_loop import BatchTrial, judge_batch


def trial(round_no: int, *samples: float, index: int | None = None, pool: tuple[float, ...] = (),
          invalid: bool = False) -> BatchTrial:
    return BatchTrial(round_no, round_no if index is None else index, tuple(samples), pool, invalid)


def test_the_fastest_gain_is_kept_and_a_smaller_gain_is_not_chosen_naming_the_kept_round() -> None:
    out = judge_batch(100.0, [100.0], "sim", [trial(4, 90.0), trial(5, 80.0), trial(6, 120.0)])
    assert [o.decision for o in out] == ["reverted", "kept", "reverted"]
    assert [o.result_type for o in out] == ["not-chosen", "gain", "regression"]
    assert out[0].reason == "a gain (-10.00 %), smaller than round 5's (-20.00 %), which was kept"
    assert out[1].reason == "gain: -20.00 % against the kept state"
    assert out[2].reason == "slower: +20.00 % against the kept state" and out[2].delta_pct == 20.0


def test_equal_gains_keep_the_one_listed_first() -> None:
    out = judge_batch(100.0, [100.0], "sim", [trial(7, 80.0, index=1), trial(8, 80.0, index=0)])
    assert [o.decision for o in out] == ["reverted", "kept"]
    assert out[0].result_type == "not-chosen"
    assert out[0].reason == ("a gain (-20.00 %) equal to round 8's: one change is kept per batch, and a tie goes to "
                             "the one listed first")


def test_equal_time_is_no_gain_and_nothing_is_kept() -> None:
    out = judge_batch(100.0, [100.0], "sim", [trial(1, 100.0), trial(2, 100.5)])
    assert [(o.decision, o.result_type) for o in out] == [("reverted", "no-gain"), ("reverted", "regression")]
    assert out[0].reason == "no gain: +0.00 % against the kept state"


def test_a_failed_trial_and_a_discarded_one_keep_their_own_reason_and_never_win() -> None:
    out = judge_batch(100.0, [100.0], "sim", [trial(1), trial(2, 50.0, invalid=True), trial(3, 99.8)])
    assert (out[0].decision, out[0].result_type, out[0].reason) == ("failed", "", "")
    assert (out[1].decision, out[1].result_type, out[1].reason) == ("invalid", "invalid", "")
    assert out[2].decision == "kept" and out[2].result_type == "gain"
    assert "may not transfer to the NPU" in out[2].reason  # a SIM gain under 0.5 % says so
    assert [o.decision for o in judge_batch(100.0, [100.0], "sim", [trial(1)])] == ["failed"]


def test_on_the_npu_a_trial_measured_beside_the_kept_state_is_judged_against_those_samples() -> None:
    kept = [100.0, 100.2, 99.8]
    # against the session's kept time (100 µs) 95 µs is a gain; the kept state measured beside it ran at 95 µs too
    beside = trial(3, 95.0, 95.1, 94.9, pool=(95.0, 95.1, 94.9, 95.05, 94.95, 95.0))
    assert judge_batch(100.0, kept, "npu", [trial(3, 95.0, 95.1, 94.9)])[0].decision == "kept"
    out = judge_batch(100.0, kept, "npu", [beside])[0]
    assert (out.decision, out.result_type) == ("reverted", "no-gain")
    assert out.margin_pct is not None and out.margin_pct >= 1.0
