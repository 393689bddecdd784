"""Specification of the candidate search: legal, never repeated, inside the stage, honest about its evidence,
reacting to history, deterministic."""

from __future__ import annotations

import pytest
from pypto_tune.tools.code.admission import admit
from pypto_tune.tools.patching import extract_knobs, plan_knob_edit
from pypto_tune.tools.search import (
    TriedChange,
    code_hash,
    edited_sources,
    find,
    search,
    semantic_hash,
)
from pypto_tune.tools.search.models import CATALOG_PREFIX

from .conftest import load_operator


def _knob(sources, context, name):
    return next(k for k in extract_knobs(sources, context) if k.name == name or k.id.endswith(name))


# ------------------------------------------------------------------------------------------------ legality


@pytest.mark.parametrize("op,stage,limit", [
    ("softmax", "frontend", 4), ("matmul_act", "frontend", 3), ("multi_stage", "swimlane", 4),
    ("split_harness", "frontend", 3),
])
def test_every_candidate_is_admitted_by_the_servers_own_admission(op, stage, limit, admission_cache):
    kept, ctx = load_operator(op)
    prop = search(kept, stage=stage, context=ctx, limit=limit, cache=admission_cache)
    assert prop.candidates, prop
    knobs = {k.id: k for k in extract_knobs(kept, ctx)}
    for c in prop.candidates:
        # admitted again here, independently of the search's own check: the edit plan_knob_edit makes for it
        after = plan_knob_edit(kept, c.knob, c.value, context=ctx).new_sources
        adm = admit(kept, after, context=ctx)
        assert adm.kind == "knob" and adm.change is not None and adm.change.knob_id == c.knob
        assert c.catalog_id.startswith(CATALOG_PREFIX[stage])
        assert c.catalog_id in knobs[c.knob].catalog_ids  # the server's catalog-stage rule
        assert edited_sources(kept, c, context=ctx, cache=admission_cache) == after


def test_a_value_the_admission_refuses_is_never_a_candidate(admission_cache):
    # (64, 512) FP32 is 128 KB: the admission refuses it (unified buffer); it must not appear at any limit
    kept, ctx = load_operator("rmsnorm_grid")
    prop = search(kept, stage="frontend", context=ctx, limit=None, knob="set_vec_tile_shapes",
                  cache=admission_cache)
    values = [c.value for c in prop.candidates]
    assert values and [64, 512] not in values
    assert all(v[1] >= 64 for v in values)  # never cuts the already split reduce axis finer
    # ROWS_PER_BLOCK = 1: one loop iteration's view is [1, 512], and no tile is larger than the view it tiles but
    # one: the linked pair's, set before the block that uncovers it (tools/search/linked.py)
    beyond = [c for c in prop.candidates if not (c.value[0] == 1 and c.value[1] <= 512)]
    (pair,) = beyond
    assert pair.value[1] <= 512 and "the linked pair's tile, set first" in pair.why
    assert prop.exhausted is False


def test_no_candidate_tile_outgrows_the_unified_buffer_as_the_kernel_transposes_it(admission_cache):
    from tests.patching.test_legality_on_what_ran import TRANSPOSE_OP

    def transposed_kb(v):  # [b, h, s, d] held as [b, h, d, s'], s' = s padded to 16 FP32 (64 bytes)
        return v[0] * v[1] * v[3] * max(v[2], 16) * 4 / 1024

    def values(text):
        prop = search({"key_op.py": text}, stage="frontend", context={}, limit=12, knob="TILE",
                      cache=admission_cache)
        return [c.value for c in prop.candidates]

    kept = values(TRANSPOSE_OP)
    assert kept and all(transposed_kb(v) <= 96 for v in kept), kept
    # the same kernel transposing two leading axes: its tail stays, and larger tiles are legal
    heads = TRANSPOSE_OP.replace("pypto.transpose(k, 2, 3)", "pypto.transpose(k, 1, 2)").replace(
        "(B, H, D, S), pypto.DT_FP32)", "(B, S, H, D), pypto.DT_FP32)")
    assert any(transposed_kb(v) > 96 for v in values(heads))


def test_generated_values_respect_the_operators_shapes(admission_cache):
    kept, ctx = load_operator("matmul_act")
    prop = search(kept, stage="frontend", context=ctx, limit=None, knob="M_BLOCK", cache=admission_cache)
    assert sorted(c.value for c in prop.candidates) == [1, 2, 4, 8, 16, 32, 128, 256]  # divide M = 256, not 64
    prop = search(kept, stage="swimlane", context=ctx, limit=None, knob="stitch_function_max_num",
                  cache=admission_cache)
    assert all(c.value >= 4 for c in prop.candidates)  # ≥ root-function instances (4 iterations), B.9.3
    assert {c.catalog_id for c in prop.candidates} == {"S-9"}


# ------------------------------------------------------------------------------------------------ stage


def test_candidates_stay_in_the_stage(admission_cache):
    kept, ctx = load_operator("multi_stage")
    front = search(kept, stage="frontend", context=ctx, limit=8, cache=admission_cache)
    swim = search(kept, stage="SWIMLANE_2", context=ctx, limit=6, cache=admission_cache)
    assert front.candidates and swim.candidates
    assert all(c.catalog_id.startswith("F-") and c.stage == "frontend" for c in front.candidates)
    assert all(c.catalog_id.startswith("S-") and c.stage == "swimlane" for c in swim.candidates)
    assert not any(c.knob_name == "vec_nbuffer_setting" for c in front.candidates)  # S-5 only
    assert not any(c.knob.endswith("ROWS_PER_BLOCK") for c in swim.candidates)  # serves no S- item


def test_knob_filter_and_unknown_knob(admission_cache):
    kept, ctx = load_operator("softmax")
    prop = search(kept, stage="frontend", context=ctx, limit=3, knob="TILE_B", cache=admission_cache)
    assert prop.candidates and all(c.knob == "softmax.py:TILE_B" for c in prop.candidates)
    from pypto_tune.tools.errors import InputError

    with pytest.raises(InputError):
        search(kept, stage="frontend", context=ctx, knob="NO_SUCH_KNOB")
    with pytest.raises(InputError):
        search(kept, stage="report", context=ctx)


# ------------------------------------------------------------------------------------------------ never again


def test_a_change_tried_from_this_kept_state_is_never_proposed_again(admission_cache):
    kept, ctx = load_operator("rmsnorm_grid")
    first = search(kept, stage="frontend", context=ctx, limit=2, cache=admission_cache)
    top = first.candidates[0]
    tried = TriedChange(knob_id=top.knob, value=top.value, before_value=top.before, from_kept_hash=code_hash(kept),
                        outcome="no-gain", before_us=106.4, after_us=106.4, round=1)
    again = search(kept, stage="frontend", context=ctx, limit=2, history=[tried], cache=admission_cache)
    assert all((c.knob, c.value) != (top.knob, top.value) for c in again.candidates)
    assert again.excluded.get("tried") == 1
    # the same knob and value tried from ANOTHER kept state is not the same change: it may come back
    other = tried.model_copy(update={"from_kept_hash": "another-state"})
    back = search(kept, stage="frontend", context=ctx, limit=None, knob=top.knob, history=[other],
                  cache=admission_cache)
    assert any((c.knob, c.value) == (top.knob, top.value) for c in back.candidates)


def test_code_that_failed_is_never_proposed_again_whatever_the_path(admission_cache):
    kept, ctx = load_operator("softmax")
    top = search(kept, stage="frontend", context=ctx, limit=1, cache=admission_cache).candidates[0]
    failed_code = semantic_hash(plan_knob_edit(kept, top.knob, top.value, context=ctx).new_sources)
    # recorded from a different kept state and as a diff edit (other knob id): only the code's meaning matches
    tried = TriedChange(knob_id="softmax.py:something-else", value=1, from_kept_hash="older-state",
                        outcome="failed", failure_type="compile-failure", semantic_hash=failed_code)
    prop = search(kept, stage="frontend", context=ctx, limit=None, history=[tried], cache=admission_cache)
    assert top.id not in {c.id for c in prop.candidates}
    assert prop.excluded.get("failed-code") == 1


def test_json_history_with_string_keys_still_matches():
    # the ledger hands values back through JSON: {-2: 1, -1: 2} arrives as {"-2": 1, "-1": 2}
    t = TriedChange.model_validate({"knob_id": "k", "value": {"-2": 1, "-1": 2}, "outcome": "no-gain"})
    assert t.value == {-2: 1, -1: 2}


# ------------------------------------------------------------------------------------------------ evidence


def test_without_analysis_or_history_the_evidence_claims_neither(admission_cache):
    kept, ctx = load_operator("softmax")
    prop = search(kept, stage="frontend", context=ctx, limit=4, cache=admission_cache)
    for c in prop.candidates:
        assert "analysis" not in c.evidence and "history" not in c.evidence
        for p in c.evidence.get("prior", []):
            assert p["kind"].startswith("prior") and p["supported_by"]
    assert any("no analysis given" in n for n in prop.notes)


def test_analysis_evidence_comes_from_the_given_analysis(softmax_analysis, admission_cache):
    kept, ctx = load_operator("softmax")
    prop = search(kept, stage="frontend", context=ctx, analysis=softmax_analysis, limit=4, cache=admission_cache)
    frac = round(softmax_analysis["short_task_fraction"], 4)
    cited = [c.evidence["analysis"] for c in prop.candidates if "analysis" in c.evidence]
    assert cited, [c.why for c in prop.candidates]
    for ev in cited:
        if "short-tasks" in ev:
            assert ev["short-tasks"]["short_task_fraction"] == frac
        if "suggested" in ev:
            ids = {s["catalog_id"] for s in softmax_analysis["suggestions"]}
            assert ev["suggested"]["catalog_id"] in ids


def test_history_evidence_is_the_sessions_own_rounds(admission_cache):
    kept, ctx = load_operator("softmax")
    tb = _knob(kept, ctx, "TILE_B")
    hist = [TriedChange(knob_id=tb.id, value=8, before_value=4, from_kept_hash="x", outcome="regression",
                        before_us=36.405, after_us=39.0, round=7)]
    prop = search(kept, stage="frontend", context=ctx, limit=None, knob="TILE_B", history=hist,
                  cache=admission_cache)
    rounds = {h["round"] for c in prop.candidates for h in c.evidence.get("history", [])}
    assert rounds == {7}


def test_suggestions_no_knob_serves_are_reported_for_the_algorithm_stage(softmax_analysis, admission_cache):
    kept, ctx = load_operator("softmax")
    prop = search(kept, stage="frontend", context=ctx, analysis=softmax_analysis, limit=2, cache=admission_cache)
    notes = {n.catalog_id for n in prop.needs_algorithm_stage}
    assert {"F-4", "F-5", "F-6"} <= notes  # reshape hoisting, static axis, loop merging: structural
    assert not notes & {c.catalog_id for c in prop.candidates}
    served = {c for k in extract_knobs(kept, ctx) if k.tunable for c in k.catalog_ids}
    assert not notes & served


# ------------------------------------------------------------------------------------------------ ranking


def _ranks(prop):
    return {(c.knob, repr(c.value)): c.rank for c in prop.candidates}


def test_a_direction_that_regressed_is_not_continued(admission_cache):
    kept, ctx = load_operator("softmax")
    tb = _knob(kept, ctx, "TILE_B")
    base = search(kept, stage="frontend", context=ctx, limit=None, knob="TILE_B", cache=admission_cache)
    order = [c.value for c in base.candidates]
    assert order[0] == 1  # 32 iterations fill the 48 vector cores in one wave (prior loop-iteration-waves)
    # the session measured: 4 → 2 regressed from this very state. 1 lies beyond 2 in the same direction
    hist = [TriedChange(knob_id=tb.id, value=2, before_value=4, from_kept_hash=code_hash(kept), outcome="regression",
                        before_us=36.405, after_us=38.4, round=3)]
    after = search(kept, stage="frontend", context=ctx, limit=None, knob="TILE_B", history=hist,
                   cache=admission_cache)
    values = [c.value for c in after.candidates]
    assert 2 not in values
    assert values.index(1) > values.index(8)  # stopped: the other direction goes first now
    stop = next(c for c in after.candidates if c.value == 1)
    assert "stop" in stop.why and stop.score < next(c for c in base.candidates if c.value == 1).score


def test_a_direction_that_gained_is_continued(admission_cache):
    kept, ctx = load_operator("softmax")
    tb = _knob(kept, ctx, "TILE_B")
    # TILE_B is 4 now; pretend the kept change that brought it here came from 8 (a gain going down)
    hist = [TriedChange(knob_id=tb.id, value=4, before_value=8, from_kept_hash="older", outcome="kept",
                        before_us=50.0, after_us=36.405, round=2)]
    prop = search(kept, stage="frontend", context=ctx, limit=None, knob="TILE_B", history=hist,
                  cache=admission_cache)
    by_value = {c.value: c for c in prop.candidates}
    assert "continues the direction" in by_value[2].why
    assert 8 not in by_value  # the state the gain left: its code again, measured and slower than the kept state
    back = [c for v, c in by_value.items() if v > 4]  # further back still: new code, but against the gain
    assert back and all("walks back" in c.why and c.rank > by_value[2].rank for c in back)


@pytest.mark.slow  # long for the unit tier (scripts/test.sh --fast); the full suite runs it
def test_a_failed_compile_pushes_down_every_larger_tile(admission_cache):
    kept, ctx = load_operator("rmsnorm_grid")
    # 64 rows per loop iteration: the view is [64, 512], so tiles of 8 and 32 rows are within it
    kept = {f: t.replace("ROWS_PER_BLOCK = 1", "ROWS_PER_BLOCK = 64") for f, t in kept.items()}
    vt = _knob(kept, ctx, "set_vec_tile_shapes")
    hist = [TriedChange(knob_id=vt.id, value=[16, 512], before_value=[1, 512], from_kept_hash="older",
                        outcome="failed", failure_type="compile-failure", round=4)]
    prop = search(kept, stage="frontend", context=ctx, limit=None, knob="set_vec_tile_shapes", history=hist,
                  cache=admission_cache)
    by_value = {tuple(c.value): c for c in prop.candidates}
    assert by_value[(32, 512)].rank > by_value[(8, 512)].rank
    assert "failed to compile" in by_value[(32, 512)].why


def test_a_knob_that_never_moved_the_time_goes_last(admission_cache):
    kept, ctx = load_operator("multi_stage")
    nb = _knob(kept, ctx, "vec_nbuffer_setting")
    hist = [TriedChange(knob_id=nb.id, value={-2: 1, -1: n}, before_value={-2: 1, -1: 1}, from_kept_hash="s",
                        outcome="no-gain", before_us=15.254, after_us=15.254, round=n) for n in (2, 4)]
    before = search(kept, stage="swimlane", context=ctx, limit=None, cache=admission_cache)
    prop = search(kept, stage="swimlane", context=ctx, limit=None, history=hist, cache=admission_cache)
    nbuf = [c for c in prop.candidates if c.knob == nb.id]
    assert nbuf and all("unchanged" in c.why for c in nbuf)  # the history's flat-knob rule, now part of the prior
    old = {c.value[-1]: c for c in before.candidates if c.knob == nb.id}
    # predicted to help before (merging 4 tiles per iteration); now the session model, fitted to the two trials
    # without effect, ranks it lower, names those rounds as what lowered it, and puts every other kind first
    for c in nbuf:
        assert c.score < old[c.value[-1]].score
        moved = c.evidence["session"]["moved_by"]
        assert moved and {m["round"] for m in moved} <= {2, 4}  # toward "no effect", from whichever side
    # (a candidate that runs the same configuration as one ranked above comes last of all, flat knob or not)
    others = [c for c in prop.candidates if c.knob != nb.id and not c.why.startswith("runs the same configuration")]
    assert others and max(c.rank for c in others) < min(c.rank for c in nbuf)


def test_plain_ranking_is_catalogue_priority_then_nearest_value(admission_cache):
    kept, ctx = load_operator("softmax")
    prop = search(kept, stage="frontend", context=ctx, limit=3, ranking="plain", cache=admission_cache)
    assert [c.catalog_id for c in prop.candidates] == ["F-2", "F-2", "F-2"]  # TILE_B growing: F-2 (3 stars, P0)
    assert [c.value for c in prop.candidates][:1] == [8]  # nearest, larger first
    assert all(c.why.startswith("plain ranking") for c in prop.candidates)


# ------------------------------------------------------------------------------------------------ determinism


@pytest.mark.slow  # long for the unit tier (scripts/test.sh --fast); the full suite runs it
def test_same_inputs_same_ids_and_order(softmax_analysis, admission_cache):
    kept, ctx = load_operator("matmul_act")
    a = search(kept, stage="frontend", context=ctx, analysis=softmax_analysis, limit=5, cache=admission_cache)
    b = search(kept, stage="frontend", context=ctx, analysis=softmax_analysis, limit=5)
    assert [(c.id, c.knob, c.value, c.why) for c in a.candidates] == \
        [(c.id, c.knob, c.value, c.why) for c in b.candidates]
    assert len({c.id for c in a.candidates}) == len(a.candidates)
    assert find(a.candidates, [a.candidates[1].id]) == [a.candidates[1]]
    # ids belong to the kept state: another kept state gives other ids for the same knob and value
    # (the cache holds admission answers, which depend on the texts only, not on the kept state's hash)
    moved = search(kept, stage="frontend", context=ctx, limit=5, kept_hash="another-kept-state",
                   cache=admission_cache)
    assert not {c.id for c in a.candidates} & {c.id for c in moved.candidates}


def test_candidates_survive_a_json_round_trip(admission_cache):
    from pypto_tune.tools.search import Candidate

    kept, ctx = load_operator("multi_stage")
    prop = search(kept, stage="swimlane", context=ctx, limit=3, cache=admission_cache)
    for c in prop.candidates:
        back = Candidate.model_validate_json(c.model_dump_json())
        assert back.value == c.value and back.id == c.id


def test_a_tried_setting_matches_whatever_its_key_order(admission_cache):
    kept, ctx = load_operator("multi_stage")
    nb = _knob(kept, ctx, "vec_nbuffer_setting")
    tried = TriedChange.model_validate({"knob_id": nb.id, "value": {"-1": 2, "-2": 1}, "outcome": "no-gain",
                                        "from_kept_hash": code_hash(kept), "before_us": 82.69, "after_us": 82.69})
    prop = search(kept, stage="swimlane", context=ctx, limit=None, knob="vec_nbuffer_setting", history=[tried],
                  cache=admission_cache)
    assert {-2: 1, -1: 2} not in [c.value for c in prop.candidates] and prop.excluded.get("tried") == 1
