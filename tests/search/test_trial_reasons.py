"""A trial's reason says why it was kept or not, in words that match the numbers: a tie is a tie (not "better"), a
smaller gain names the one that won, and a losing trial says how it measured against the kept state (not its
precision reason). SIM judgements are exact (rules.judge_measurement): kept state 10 µs."""

from __future__ import annotations

from types import SimpleNamespace

from pypto_tune.tools.operations.search import SearchOps, _Trial


def _trial(index: int, samples: list[float]) -> _Trial:
    return _Trial(index=index, candidate={"id": f"c{index}"}, knob="softmax.py:TILE_B", value=index, catalog_id="S-1",
                  round_no=10 + index, samples=samples, reason="passed: compiled and simulated (SIM)")


def test_reasons_name_ties_smaller_gains_and_losses_by_their_numbers() -> None:
    st = SimpleNamespace(kept_us=10.0, kept_samples=[10.0], run_mode="sim")
    first, tie, smaller, slower, same, dataless = (_trial(0, [8.0]), _trial(1, [8.0]), _trial(2, [9.0]),
                                                   _trial(3, [10.5]), _trial(4, [10.0]), _trial(5, []))
    winner = SearchOps._decide(None, st, [first, tie, smaller, slower, same, dataless])  # type: ignore[arg-type]
    assert winner is first and first.decision == "kept" and first.reason == "gain: -20.00 % against the kept state"
    assert tie.result_type == "not-chosen" and tie.reason == (
        "a gain (-20.00 %) equal to round 10's: one change is kept per batch, and a tie goes to the one listed first")
    assert "better" not in tie.reason
    assert smaller.reason == "a gain (-10.00 %), smaller than round 10's (-20.00 %), which was kept"
    assert (slower.result_type, slower.reason) == ("regression", "slower: +5.00 % against the kept state")
    assert (same.result_type, same.reason) == ("no-gain", "no gain: +0.00 % against the kept state")
    assert dataless.decision == "failed"
    assert not any("passed" in t.reason for t in (first, tie, smaller, slower, same))
