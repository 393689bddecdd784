"""Decisions of the rules and gates that the full mutation run (benchmarks/mutation.py, issue #16) found untested.

Each expected value comes from the rule as domain.md and the README state it — the stage order of D.1, the NPU
keep/revert rule of E.1 as resolved in the README (difference of the medians ± 2.5 pooled standard errors beyond
−1 %, the standard error of a median being 1.2533 σ/√n) — or from a real SQLite ledger written the way the
operations write it; never from the function under test.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from pypto_tune.tools.errors import GateRefusal
from pypto_tune.tools.patching import unified_diff
from pypto_tune.tools.service import TuningService
from pypto_tune.tools.rules import tuning_loop
from pypto_tune.tools.snapshot import KnobChange
from tests.report.ledger_rows import VEC, Writer, analysis, with_tile_b, with_vec_tile
from tests.rules.test_rule_decisions import BASE_US, state, tuning

# ------------------------------------------------------------------------------------------------ D.1 stage order


def test_the_stages_follow_one_another_in_the_order_d1_gives_and_the_last_has_no_successor() -> None:
    # D.1 level 2 with the outer loop unrolled (n = 1..3)
    order = ["FRONTEND", "SWIMLANE_1", "INCORE_1", "SWIMLANE_2", "INCORE_2", "SWIMLANE_3", "INCORE_3"]
    walked, stage = [order[0]], tuning_loop.next_stage(order[0])
    while stage is not None and len(walked) <= len(order):  # bounded: a stage that follows itself must fail, not hang
        walked.append(stage.name)
        stage = tuning_loop.next_stage(stage.name)
    assert walked == order
    assert tuning_loop.next_stage("ALGORITHM") is None and tuning_loop.next_stage("S4_TUNE") is None


# ------------------------------------------------------------------------------------------------ E.1 on the NPU

Z = 2.5  # README keep/revert: ± 2.5 standard errors
MIN_PCT = 1.0  # … lying entirely beyond −1 %
SE_OF_MEDIAN = 1.2533  # standard error of a median = sqrt(pi / 2) σ/√n for normal noise


def _pooled_se_pct(before: list[float], after: list[float]) -> float:
    """The standard error of the difference of two medians, in % of the kept median, from the spread pooled over
    both sides (relative residuals about each side's own median; two medians estimated → n − 2 degrees of
    freedom)."""
    mb, ma = statistics.median(before), statistics.median(after)
    resid = [x / mb - 1 for x in before] + [x / ma - 1 for x in after]
    sigma = math.sqrt(sum(r * r for r in resid) / (len(resid) - 2))
    return SE_OF_MEDIAN * sigma * math.sqrt(1 / len(before) + 1 / len(after)) * 100


def test_the_median_standard_error_factor_is_the_normal_one() -> None:
    assert SE_OF_MEDIAN == pytest.approx(math.sqrt(math.pi / 2), abs=1e-4)


def _spread(centre: float, rel: float, n: int) -> list[float]:
    """``n`` samples about ``centre`` whose relative residuals do not depend on the centre."""
    return [centre * (1 + rel * (i - (n - 1) / 2) / n) for i in range(n)]


@pytest.mark.parametrize(("n_kept", "n_after", "rel_kept", "rel_after"),
                         [(6, 3, 0.03, 0.02), (3, 3, 0.02, 0.05), (9, 4, 0.01, 0.04)])
def test_an_npu_gain_is_kept_exactly_when_its_band_clears_minus_one_percent(n_kept: int, n_after: int,
                                                                           rel_kept: float,
                                                                           rel_after: float) -> None:
    """With residuals fixed, the standard error does not move with the candidate's median, so the rule has one
    boundary: median = kept × (1 − (1 % + 2.5 se)). A hair beyond it is a decisive gain; a hair short of it is not
    decisive and, at the sample cap, not kept."""
    kept = _spread(100.0, rel_kept, n_kept)
    before_us = statistics.median(kept)
    se = _pooled_se_pct(kept, _spread(90.0, rel_after, n_after))
    assert se == pytest.approx(_pooled_se_pct(kept, _spread(97.0, rel_after, n_after)))
    edge = before_us * (1 - (MIN_PCT + Z * se) / 100)
    beyond = tuning_loop.judge_measurement(before_us, _spread(edge * (1 - 1e-6), rel_after, n_after), "npu", kept)
    short = tuning_loop.judge_measurement(before_us, _spread(edge * (1 + 1e-6), rel_after, n_after), "npu", kept)
    assert beyond.result_type == "gain" and beyond.decisive, beyond
    assert not short.decisive and short.result_type == "no-gain", short
    assert beyond.delta_pct == pytest.approx((edge * (1 - 1e-6) - before_us) / before_us * 100)


@pytest.mark.parametrize(("n_kept", "n_after"), [(6, 3), (3, 4)])
def test_an_npu_regression_and_a_sure_no_gain_have_their_own_boundaries(n_kept: int, n_after: int) -> None:
    """Regression: the band lies entirely above +1 % (d − 2.5 se > 1 %). No gain: the band lies above −1 %
    (d − 2.5 se > −1 %), i.e. surely not 1 % better. Anything between is not decisive."""
    kept = _spread(100.0, 0.03, n_kept)
    before_us = statistics.median(kept)
    se = _pooled_se_pct(kept, _spread(100.0, 0.02, n_after))
    worse = before_us * (1 + (MIN_PCT + Z * se) / 100)
    up = tuning_loop.judge_measurement(before_us, _spread(worse * (1 + 1e-6), 0.02, n_after), "npu", kept, final=False)
    flat = tuning_loop.judge_measurement(before_us, _spread(worse * (1 - 1e-6), 0.02, n_after), "npu", kept, final=False)
    assert (up.result_type, up.decisive) == ("regression", True), up
    assert (flat.result_type, flat.decisive) == ("no-gain", True), flat
    sure = before_us * (1 + (Z * se - MIN_PCT) / 100)
    same = tuning_loop.judge_measurement(before_us, _spread(sure * (1 + 1e-6), 0.02, n_after), "npu", kept, final=False)
    open_ = tuning_loop.judge_measurement(before_us, _spread(sure * (1 - 1e-6), 0.02, n_after), "npu", kept, final=False)
    assert (same.result_type, same.decisive) == ("no-gain", True), same
    assert not open_.decisive, open_




def _provisional(delta: float, se: float) -> str:
    """The README's reading of an undecided band: looks like a gain / regression beyond the margin max(2 se, 1 %)."""
    margin = max(2 * se, MIN_PCT)
    return "gain" if delta < -margin else "regression" if delta > margin else "no-gain"


def test_an_undecided_npu_round_says_which_way_it_leans_and_at_the_cap_only_a_clear_slowdown_is_a_regression() -> None:
    """Undecided (the band straddles −1 %): before the sample cap the result leans by the margin; at the cap the change
    is not kept — a regression if it is slower by more than the margin, else no gain."""
    kept = _spread(100.0, 0.6, 3)
    se = _pooled_se_pct(kept, _spread(100.0, 0.6, 3))
    assert se > 2  # wide enough that a slowdown beyond 2 se can still straddle −1 %
    for delta in (2.25 * se - 0.5, -(MIN_PCT + 2 * se) - 0.1 * se, 0.5 * se):
        after = _spread(100.0 * (1 + delta / 100), 0.6, 3)
        assert delta - Z * se <= -MIN_PCT <= delta + Z * se  # undecided by construction
        open_ = tuning_loop.judge_measurement(100.0, after, "npu", kept, final=False)
        capped = tuning_loop.judge_measurement(100.0, after, "npu", kept, final=True)
        assert (open_.result_type, open_.decisive) == (_provisional(delta, se), False), (delta, open_)
        want = "regression" if _provisional(delta, se) == "regression" else "no-gain"
        assert (capped.result_type, capped.decisive) == (want, False) and "not decisive" in capped.note, capped


def test_which_spread_an_npu_judgement_uses() -> None:
    """README keep/revert: the spread is pooled from both sides once there are samples of the kept state (at least
    4 samples in all); without kept samples the round's own spread (3 or more repeats); otherwise the single-shot
    margin of E.1 (4 %, i.e. one standard error of 2 %). The margin recorded is max(2 se, 1 %)."""
    after3, kept1 = [100.0, 97.0, 103.0], [100.0]
    own = statistics.pstdev(after3) / statistics.median(after3) * 100
    cases = [(after3, kept1, _pooled_se_pct(kept1, after3)),  # 4 samples, one of them kept: pooled
             (after3, None, own),  # 3 repeats, nothing of the kept state: the round's own σ
             (after3[:2], kept1, 2.0),  # 3 samples in all: single shot
             (after3[:2], None, 2.0)]
    assert len({round(se, 6) for _, _, se in cases[:3]}) == 3  # the three rules give three different answers
    for samples, kept, se in cases:
        j = tuning_loop.judge_measurement(100.0, samples, "npu", kept, final=False)
        assert j.margin_pct == pytest.approx(max(2 * se, MIN_PCT)), (samples, kept, j)


def test_sim_is_exact_any_slowdown_is_a_regression_and_there_is_no_noise_margin() -> None:
    slower = tuning_loop.judge_measurement(100.0, [100.5], "sim")
    same = tuning_loop.judge_measurement(100.0, [100.0], "sim")
    faster = tuning_loop.judge_measurement(100.0, [99.5], "sim")
    assert [j.result_type for j in (slower, same, faster)] == ["regression", "no-gain", "gain"]
    assert [j.margin_pct for j in (slower, same, faster)] == [0.0, 0.0, 0.0]
    assert slower.delta_pct == pytest.approx(0.5) and faster.delta_pct == pytest.approx(-0.5)



def test_a_sim_gain_below_half_a_percent_is_flagged_as_maybe_not_transferable() -> None:
    """E.1 / README keep/revert: SIM gains < 0.5 % are flagged as maybe not transferable; exactly 0.5 % is not."""
    notes = {after: tuning_loop.judge_measurement(100.0, [after], "sim").note for after in (99.6, 99.5, 99.4, 100.0)}
    assert "may not transfer" in notes[99.6]
    assert notes[99.5] == notes[99.4] == notes[100.0] == ""


@pytest.mark.parametrize(("after_us", "final", "want"), [
    (93.5, False, ("gain", True)), (94.0, False, ("gain", False)),  # the band's top edge at −1 %: d + 5 < −1
    (94.0, True, ("no-gain", False)),  # undecided at the cap: not kept
    (95.5, False, ("gain", False)), (96.0, False, ("no-gain", False)),  # the lean: d < −margin (4 %)
    (104.0, False, ("no-gain", False)), (104.0, True, ("no-gain", False)),  # lo = −1: not surely no gain; d = margin
    (104.5, False, ("no-gain", True)),  # lo > −1: surely not 1 % better
    (106.0, False, ("no-gain", True)), (106.5, False, ("regression", True)),  # the bottom edge at +1 %: d − 5 > 1
])
def test_a_single_shot_npu_comparison_at_each_edge_of_its_band(after_us: float, final: bool,
                                                              want: tuple[str, bool]) -> None:
    """One sample, no kept samples: the standard error is E.1's single-shot 4 % read as 2 standard errors, so
    se = 2 % and the band is d ± 2.5 × 2 = d ± 5 %, the margin max(2 se, 1 %) = 4 %. Every boundary is strict
    ("entirely beyond"): at exactly the edge the band does not clear it. 100 → 94 is d = −6 % exactly in floats."""
    j = tuning_loop.judge_measurement(100.0, [after_us], "npu", final=final)
    assert (j.result_type, j.decisive) == want, j
    assert j.margin_pct == 4.0 and j.delta_pct == pytest.approx(after_us - 100.0)


# ------------------------------------------------------------------------------------------------ R10 checklist marks


def test_a_reason_for_an_item_with_a_knob_needs_thirty_characters_not_twenty_nine(tmp_path: Path) -> None:
    """stages.mark_checklist: where a knob of this operator serves the item, the reason names it (or a measured
    figure) in at least 30 characters (README, R10/R14)."""
    w = tuning(tmp_path / "ws")
    svc = TuningService(default_workspace=w.ws)
    short, enough = "TILE_B: 4 rows a block, best", "TILE_B: 4 rows a block is best"
    assert (len(short), len(enough)) == (28, 30)
    with pytest.raises(GateRefusal, match="at least 30 characters"):
        svc.mark_checklist(w.sid, catalog_id="F-3", status="not-applicable", reason=short + "!")  # 29
    svc.mark_checklist(w.sid, catalog_id="F-3", status="not-applicable", reason=enough)
    marks = w.ledger.rows("checklist_marks", w.sid)
    assert [(m["catalog_id"], m["reason"]) for m in marks if m["catalog_id"] == "F-3"] == [("F-3", enough)]


# ------------------------------------------------------------------------------------------------ R10 / R11 in _admit


def test_a_change_cites_the_catalogue_item_its_knob_serves(tmp_path: Path) -> None:
    """R10: TILE_B is a loop block (F-3 among others), not a vector tile: citing the vector-tile item F-10 for it is
    refused, naming what it serves."""
    w = tuning(tmp_path / "ws")
    svc = TuningService(default_workspace=w.ws)
    with pytest.raises(GateRefusal) as refused:
        svc.apply_tuning_patch(w.sid, knob="softmax.py:TILE_B", value=2, catalog_id="F-10", rationale="wrong id")
    msg = refused.value.message
    assert refused.value.rule == "catalog-stage" and "F-3" in msg and msg.endswith("not F-10"), refused.value
    assert not w.ledger.rows("rounds", w.sid) and not w.ledger.rows("admissions", w.sid)
    assert svc.apply_tuning_patch(w.sid, knob="softmax.py:TILE_B", value=2, catalog_id="F-3",
                                  rationale="right id").round == 1
    admitted = w.ledger.rows("admissions", w.sid)  # what the report's admission table is built from
    assert [(a["verdict"], a["knob_id"], a["path"]) for a in admitted] == [("knob", "softmax.py:TILE_B", "knob")]


def test_a_knob_that_serves_no_catalogue_item_is_never_tuned_in_a_configuration_stage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """R10: "a knob no catalogue item names is never tuned". The extractor gives every tunable knob at least one
    catalogue id (the next test), so no real operator reaches this refusal of ``SessionContext.admit``; admission is made to report
    the changed knob without ids, which is what a knob outside the catalogue would look like."""
    from pypto_tune.tools.code import admission

    real = admission.admit
    monkeypatch.setattr(admission, "admit", lambda *a, **kw: real(*a, **kw).model_copy(update={"catalog_ids": []}))
    w = tuning(tmp_path / "ws")
    svc = TuningService(default_workspace=w.ws)
    h = svc.ctx.find(w.sid)
    st = state(w)
    after = with_tile_b(w.kept, 2)
    for cited in ("F-3", ""):
        with pytest.raises(GateRefusal) as refused:
            svc.ctx.admit(h, st, "apply_tuning_patch", st.kept_sources, after, catalog_id=cited)
        assert refused.value.rule == "catalog-stage", refused.value
        assert "softmax.py:TILE_B serves no catalogue item" in refused.value.message, refused.value
    assert not w.ledger.rows("admissions", w.sid)
    # a declared change of the ALGORITHM stage is not bound to the configuration stages' catalogue
    w.transition("stage", "FRONTEND", "ALGORITHM", "test: the configuration stages converged")
    adm = svc.ctx.admit(h, state(w), "apply_tuning_patch", st.kept_sources, after, catalog_id="", algorithm=True)
    assert adm.change is not None and adm.change.knob_id == "softmax.py:TILE_B" and adm.catalog_ids == []


def test_every_tunable_knob_kind_and_every_tiling_consumer_names_a_catalogue_item() -> None:
    """Why no real knob reaches the refusal above: an option's or a kind's tunable spec names its catalogue ids, and
    a tile source or constant takes the ids of what it feeds (tools/patching/roles.py: the tiling calls, a slice, a
    jit option, an unroll list, a submit-before-loop flag, a cache policy) — each of which names at least one id that
    the catalogue holds."""
    from pypto_tune.tools.analysis import load_catalog
    from pypto_tune.tools.patching import extract, legality, roles

    catalogue = {i.id for i in load_catalog().items}
    specs = {**legality.OPTION_SPECS, **legality.LOOP_SPECS, **legality.COMBINE_SPECS, **legality.KIND_SPECS}
    tunable = {k: s for k, s in specs.items() if s.tunable}
    assert tunable and all(s.catalog_ids and set(s.catalog_ids) <= catalogue for s in tunable.values()), tunable
    consumers = set(roles.TUNING_CALLS.values()) | {"slice", "jit_options", "unroll", "loop_submit", "cache_policy"}
    for c in consumers:
        ids = extract.CONSUMER_CATALOG.get(c, ())
        assert ids and set(ids) <= catalogue, (c, ids)


def test_a_correction_adjusts_the_rounds_own_knob_and_nothing_else(tmp_path: Path) -> None:
    """R11: after a precision failure one quick correction of the SAME knob; a correction that puts the round's
    knob back and changes another one instead (one knob away from the kept state, so one-change alone would let it
    through) is refused."""
    w = tuning(tmp_path / "ws")
    svc = TuningService(default_workspace=w.ws)
    svc.apply_tuning_patch(w.sid, knob=VEC, value=[1, 8, 256], catalog_id="F-10", rationale="wider tile")
    bad = with_vec_tile(w.kept, "1, 8, 256")
    w.precision(w.run("precision", 1, "0", bad), "failed", 1, "0", bad)
    other = with_tile_b(w.kept, 2)  # the round's knob back as kept, TILE_B changed instead
    with pytest.raises(GateRefusal) as refused:
        svc.apply_tuning_patch(w.sid, diff=unified_diff(bad, other), catalog_id="F-3", rationale="another knob")
    assert refused.value.rule == "correction-limit", refused.value
    assert f"round's own knob {VEC}, not softmax.py:TILE_B" in refused.value.message
    fixed = svc.apply_tuning_patch(w.sid, knob=VEC, value=[1, 16, 256], catalog_id="F-10", rationale="correct it")
    assert (fixed.round, fixed.kind) == (1, "correction")


def test_a_structural_change_is_admitted_only_in_the_algorithm_stage_even_when_declared(tmp_path: Path) -> None:
    """R23, in the admission path itself (behind gates.check, which refuses algorithm=true outside ALGORITHM first):
    a declared algorithm change in FRONTEND is still one-change-refused; the same change is admitted in ALGORITHM."""
    w = tuning(tmp_path / "ws")
    svc = TuningService(default_workspace=w.ws)
    h = svc.ctx.find(w.sid)
    st = state(w)
    after = {"softmax.py": w.kept["softmax.py"].replace("= e / s", "= e / (s + 0.0)")}
    with pytest.raises(GateRefusal) as refused:
        svc.ctx.admit(h, st, "apply_tuning_patch", st.kept_sources, after, catalog_id="F-3", algorithm=True)
    assert refused.value.rule == "one-change" and "= e / (s + 0.0)" in refused.value.message, refused.value
    w.transition("stage", "FRONTEND", "ALGORITHM", "test: the configuration stages converged")
    adm = svc.ctx.admit(h, state(w), "apply_tuning_patch", st.kept_sources, after, catalog_id="F-3", algorithm=True)
    assert adm.kind == "structural"


# ------------------------------------------------------------------------------------------------ R19


def test_a_change_that_gained_nothing_is_refused_again_however_its_value_is_spelled(tmp_path: Path) -> None:
    """R19: a change judged and not kept is never tried again — the same code, and the same knob and value from the
    same kept state even when the value is written another way (``2 * 4`` for 8: other code, the same change)."""
    w = tuning(tmp_path / "ws")
    svc = TuningService(default_workspace=w.ws)
    # round 1 was rolled back unrun (abandoned: not a judgement, it may be tried again); round 2 gained nothing
    two = with_tile_b(w.kept, 2)
    w.open_round(1, "FRONTEND", "F-3", KnobChange(knob_id="softmax.py:TILE_B", file="softmax.py", line=14,
                                                  before=4, after=2), two, before_us=BASE_US)
    w.decide(1, "reverted", "abandoned", None, None, "rolled back unrun", two)
    change = KnobChange(knob_id=VEC, file="softmax.py", line=33, before=[1, 4, 256], after=[1, 8, 256])
    tried = with_vec_tile(w.kept, "1, 8, 256")
    w.open_round(2, "FRONTEND", "F-10", change, tried, before_us=BASE_US)
    w.decide(2, "reverted", "no-gain", BASE_US, 0.0, "", tried)
    with pytest.raises(GateRefusal) as again:
        svc.apply_tuning_patch(w.sid, knob=VEC, value=[1, 8, 256], catalog_id="F-10", rationale="again")
    assert again.value.rule == "no-retry" and "round 2" in again.value.message, again.value
    assert f"round 2 ({VEC}: [1, 4, 256] → [1, 8, 256])" in again.value.message, again.value  # which change it was
    spelled = with_vec_tile(w.kept, "1, 2 * 4, 256")
    with pytest.raises(GateRefusal) as other:
        svc.apply_tuning_patch(w.sid, diff=unified_diff(w.kept, spelled), catalog_id="F-10", rationale="spelled")
    assert other.value.rule == "no-retry" and "from this same kept state in round 2" in other.value.message, \
        other.value
    assert other.value.message.startswith(f"{VEC} = "), other.value  # the refusal names the knob it refuses
    # another value of the same knob is a new change; the abandoned one may be tried
    assert svc.apply_tuning_patch(w.sid, knob=VEC, value=[1, 16, 256], catalog_id="F-10",
                                  rationale="new value").round == 3


def test_going_back_to_an_earlier_kept_code_is_a_new_change_not_a_retry_of_the_rollback(tmp_path: Path) -> None:
    """R19 refuses a CHANGE that was judged and not kept. A rollback is no change: round 1 (TILE_B 4 → 2, no gain) was
    rolled back to TILE_B = 4; after round 2 kept TILE_B = 8, going back to 4 is a change from a new kept state that
    nobody tried — its code is byte for byte what round 1's rollback wrote."""
    w = tuning(tmp_path / "ws")
    svc = TuningService(default_workspace=w.ws)

    def tile_b(value: int) -> dict[str, str]:  # the assignment only (the docstring also says "TILE_B = 4")
        return {"softmax.py": w.kept["softmax.py"].replace("\nTILE_B = 4\n", f"\nTILE_B = {value}\n")}

    first_kept, two, eight = dict(w.kept), tile_b(2), tile_b(8)
    w.open_round(1, "FRONTEND", "F-3", KnobChange(knob_id="softmax.py:TILE_B", file="softmax.py", line=14,
                                                  before=4, after=2), two, before_us=BASE_US)
    w.decide(1, "reverted", "no-gain", BASE_US, 0.0, "", two)  # its revert patch writes TILE_B = 4 back
    w.open_round(2, "FRONTEND", "F-3", KnobChange(knob_id="softmax.py:TILE_B", file="softmax.py", line=14,
                                                  before=4, after=8), eight, before_us=BASE_US)
    w.precision(w.run("precision", 2, "0", eight), "passed", 2, "0", eight)
    w.decide(2, "kept", "gain", 18.0, -10.0, "", eight)
    (w.ws / "softmax.py").write_text(w.kept["softmax.py"])
    back = svc.apply_tuning_patch(w.sid, knob="softmax.py:TILE_B", value=4, catalog_id="F-3", rationale="back")
    assert back.round == 3 and state(w).expected_sources == first_kept


def test_a_shift_folds_to_its_number_up_to_64_bits_and_stays_text_past_them() -> None:
    """R19's one spelling of a value: ``1 << n`` is the number 2**n for a shift of at most 64 bits; a larger shift
    is not computed (it keeps its text, so it never equals a number)."""
    from pypto_tune.tools.rules.retry import value_key

    assert value_key({"$expr": "1 << 64"}) == value_key(2 ** 64)
    assert value_key({"$expr": "1 << 65"}) != value_key(2 ** 65)
    assert value_key({"$expr": "1 << 65"}) == value_key({"$expr": "1<<65"})
    assert value_key({"$expr": "2 *"}) != value_key(2)  # not an expression at all: its text, never a crash


def test_a_cube_tile_value_is_one_value_whatever_the_order_of_its_named_dimensions() -> None:
    from pypto_tune.tools.rules.retry import value_key

    assert value_key({"m": [64, 64], "k": [32, 32], "n": [64, 64]}) == \
        value_key({"n": (64, 64), "m": (64, 64), "k": (32, 32)})
    assert value_key({"m": [64, 64], "k": [32, 32], "n": [64, 64]}) != \
        value_key({"m": [64, 64], "k": [64, 64], "n": [32, 32]})


# ------------------------------------------------------------------------------------------------ R14b


def test_the_theoretical_limit_is_read_from_the_kept_codes_newest_valid_measurement(tmp_path: Path) -> None:
    """R14b ends the session at util > 80 % (of the active cores and of the platform's) with bubble < 10 %, read from
    the newest VALID measurement of the KEPT code — never another code's, an invalid one, or the kept-state
    reference samples an NPU round took for its own decision (round −2)."""
    from pypto_tune.tools.rules import gates

    w = tuning(tmp_path / "ws", "SWIMLANE_1")  # its measurements so far: 40 % utilisation
    at_limit = analysis(BASE_US, active_util=95.0, busy_us=[19.0] * 4, theoretical_aiv=4)  # 95 %, 95 %, bubble 5 %
    assert gates.platform_utilization(at_limit) == pytest.approx(100 * 4 * 19.0 / (4 * BASE_US))
    other = with_tile_b(w.kept, 2)
    w.measure("measure", 1, other, [19.0], "0", at_limit, stage="SWIMLANE_1")
    assert gates.global_stop_reason(state(w)) == ""
    w.ledger.insert("measurements", session_id=w.sid, at=w.now(), round=-1, code_hash=state(w).kept_hash,
                    valid=False, invalid_reasons=["fake tasks (B.9.3)"], operator_time_us=BASE_US, e2e_us=None,
                    samples=[BASE_US], analysis=at_limit, archive="", run_ids=[], stage="SWIMLANE_1", per_kernel={})
    assert gates.global_stop_reason(state(w)) == ""
    w.measure("kept-reference", -2, w.kept, [BASE_US], "0", at_limit, stage="SWIMLANE_1")
    assert gates.global_stop_reason(state(w)) == ""
    w.measure("stage-baseline", -1, w.kept, [BASE_US], "0", at_limit, stage="SWIMLANE_1")
    assert gates.global_stop_reason(state(w)).startswith("theoretical limit")
    w.measure("stage-baseline", -1, w.kept, [BASE_US], "0", analysis(BASE_US, active_util=40.0, busy_us=[8.0]),
              stage="SWIMLANE_1")
    assert gates.global_stop_reason(state(w)) == ""  # the newest one decides


# ------------------------------------------------------------------------------------------------ derived state


def test_the_derived_state_follows_the_ledger_from_collection_to_the_algorithm_stage(tmp_path: Path) -> None:
    """derive_state on a real ledger: no debug switch until enable_runtime_debug's patch (so collection is refused,
    R2/R7); the outer round of D.1 (1 until and in FRONTEND, n in SWIMLANE_n / INCORE_n, 3 in ALGORITHM which
    follows the third); a candidate trial's code (run on a private copy) moves neither the expected nor the kept
    code; a finish reason only once the session moved to reporting."""
    from pypto_tune.tools.session.recorder import patch_row
    from pypto_tune.tools.rules import gates

    ws = tmp_path / "ws"
    ws.mkdir()
    w = Writer(ws, run_mode="sim", repeats=1, goal_speedup=100.0)
    w.env_ok()
    w.precision(w.run("precision", None, "0", w.sources), "passed", None, "0", w.sources)
    w.transition("state", "S1_SETUP", "S2_COLLECT", "baseline precision passed (S1b)")
    st = state(w)
    assert (st.level1, st.stage, st.outer_round, st.finish_reason, st.debug_enabled) == \
        ("S2_COLLECT", None, 1, None, False)
    with pytest.raises(GateRefusal) as refused:
        gates.check("collect_swimlane", st)
    assert refused.value.rule == "debug-mode"
    w.debug_on()
    st = state(w)
    assert st.debug_enabled
    gates.check("collect_swimlane", st)  # allowed now
    kept_hash, expected = st.kept_hash, st.expected_sources
    w.ledger.insert("patches", **patch_row(w.sid, kind="trial", round_no=5, before=expected,
                                            after=with_tile_b(expected, 2), note="candidate trial"))
    st = state(w)
    assert (st.current_hash, st.kept_hash, st.expected_sources) == (kept_hash, kept_hash, expected)
    for to in ("S3_ANALYZE", "S4_TUNE"):
        w.transition("state", st.level1, to, "test")
    outer = {"FRONTEND": 1, "SWIMLANE_1": 1, "INCORE_1": 1, "SWIMLANE_2": 2, "INCORE_2": 2, "SWIMLANE_3": 3,
             "INCORE_3": 3, "ALGORITHM": 3}
    before = None
    for stage, n in outer.items():
        w.transition("stage", before, stage, "test")
        st = state(w)
        assert (st.stage, st.outer_round, st.finish_reason) == (stage, n, None), stage
        before = stage
    w.transition("state", "S4_TUNE", "S5_REPORT", "user stop: enough")
    st = state(w)
    assert st.finished and st.finish_reason == "user stop: enough"
    assert st.debug_enabled and st.debug_baseline == w.sources
    w.ledger.insert("patches", **patch_row(w.sid, kind="debug-restore", round_no=None, before=st.expected_sources,
                                            after=w.sources, note="debug options restored (R22)"))
    st = state(w)
    assert (st.debug_enabled, st.debug_baseline, st.expected_sources) == (False, None, w.sources)


def test_the_newest_environment_check_batch_alone_decides_r3(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    w = Writer(ws, run_mode="sim", repeats=1, goal_speedup=100.0)

    def batch(n: int, ok: list[bool]) -> None:
        for i, good in enumerate(ok):
            w.ledger.insert("env_checks", session_id=w.sid, at=w.now(), batch=n, name=f"check {i}", ok=good,
                            detail="ok" if good else "missing")

    assert state(w).env_ok is None and state(w).env_batches == 0
    batch(1, [True, False, True])
    assert state(w).env_ok is False
    batch(2, [True, True, True])
    assert (state(w).env_ok, state(w).env_batches) == (True, 2)
    batch(3, [True, True, False])
    assert (state(w).env_ok, state(w).env_batches) == (False, 3)


def test_r5_counts_consecutive_baseline_failures_since_a_pass_or_a_persons_answer(tmp_path: Path) -> None:
    """R5: three baseline precision failures in a row wait for a person. Only baseline records count (not a round's,
    not a run that printed no verdict line — the command's problem, issue #17); a pass starts the count again, and
    so does a person's answer (the records up to the one it answered no longer count)."""
    from pypto_tune.tools.running.verdict import COMMAND_PROBLEM

    ws = tmp_path / "ws"
    ws.mkdir()
    w = Writer(ws, run_mode="sim", repeats=1, goal_speedup=100.0)

    def record(verdict: str, round_no: int | None = None, result_type: str | None = "runtime-error") -> int:
        return w.ledger.insert("precision_records", session_id=w.sid, at=w.now(), run_id=None, command=w.argv,
                               verdict=verdict, numerics_checked=False, exit_code=0 if verdict == "passed" else 2,
                               duration_s=1.0, key_output="", reason="", code_hash="c", round=round_no,
                               device_id="0", result_type=None if verdict == "passed" else result_type)

    def count() -> tuple[int, bool]:
        st = state(w)
        return st.baseline_failures, st.awaiting_user

    record("error")
    record("error", result_type=COMMAND_PROBLEM)
    record("failed", round_no=1, result_type="precision-failure")
    record("error")
    assert count() == (2, False)
    answered = record("timeout", result_type="timeout")
    assert count() == (3, True)
    w.confirmation(w.question("retry the baseline?", answered), answered, "cli")
    assert count() == (0, False)
    record("error")
    record("error")
    assert count() == (2, False)
    record("passed")
    assert count() == (0, False)
    record("error")
    record("error")
    assert count() == (2, False)
    record("error")
    assert count() == (3, True)
    # past setup R5 no longer applies: failing checks outside rounds are counted but nobody is asked
    record("passed")
    w.transition("state", "S1_SETUP", "S2_COLLECT", "baseline precision passed (S1b)")
    for _ in range(3):
        record("error")
    assert count() == (3, False)


# ------------------------------------------------------------------------------------------------ round phase, time


def test_the_round_phase_follows_the_newest_precision_record_and_the_measurement_of_the_current_code(
        tmp_path: Path) -> None:
    """D.1 level 3: VERIFY until the round's code has a precision record; the newest record on that code decides
    between VERIFY_FAILED and MEASURE; a measurement of that code makes it RECORD."""
    from pypto_tune.tools.rules import gates

    w = tuning(tmp_path / "ws")
    change = KnobChange(knob_id="softmax.py:TILE_B", file="softmax.py", line=14, before=4, after=2)
    two = with_tile_b(w.kept, 2)
    w.open_round(1, "FRONTEND", "F-3", change, two, before_us=BASE_US)
    assert gates.round_phase(state(w)) == "VERIFY"
    w.precision(w.run("precision", 1, "0", two), "passed", 1, "0", two)
    w.precision(w.run("precision", 1, "0", two), "error", 1, "0", two)
    assert gates.round_phase(state(w)) == "VERIFY_FAILED"
    w.precision(w.run("precision", 1, "1", two), "passed", 1, "1", two)  # a retry on another chip passed
    assert gates.round_phase(state(w)) == "MEASURE"
    w.measure("measure", 1, two, [19.0], "0", analysis(19.0, active_util=40.0, busy_us=[8.0]), stage="FRONTEND")
    assert gates.round_phase(state(w)) == "RECORD"


def test_the_time_limit_counts_hours_since_the_session_started(tmp_path: Path) -> None:
    """R14b: the tuning time limit (hours) against the wall clock since the recorded start: six seconds short of 12 h
    is within it, six seconds past is not (an hour taken as 3599 or 3601 s would move the limit by 12 s)."""
    import time

    from pypto_tune.tools.rules import gates
    from pypto_tune.tools.session.ledger import Ledger, now_iso
    from pypto_tune.tools.session.state import derive_state, load_rows

    ledger = Ledger(tmp_path / "ledger.sqlite3")
    for sid, seconds_ago in (("within", 12 * 3600 - 6), ("past", 12 * 3600 + 6)):
        ledger.insert("sessions", id=sid, created_at=now_iso(), workspace="/w", operator="k",
                      operator_files=["k.py"], test_command=["python", "k.py"], shell=False, run_mode="sim",
                      goal_kind="speedup", goal_value=2.0, timeout_s=300.0, device_ids=["0"], time_limit_h=12.0,
                      repeats=1, original_sources={"k.py": "TILE = 1\n"}, original_hash="h0", original_raw_hash="r0",
                      config={"started_epoch": time.time() - seconds_ago})
    within, past = (derive_state(load_rows(ledger, sid)) for sid in ("within", "past"))
    assert not gates.time_limit_exceeded(within) and gates.global_stop_reason(within) == ""
    assert gates.time_limit_exceeded(past) and gates.global_stop_reason(past) == "time limit of 12.0 h reached"
