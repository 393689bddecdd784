"""When the search proposes a linked pair as one candidate (``tools/search/pairs.py``, rule ``linked-pair``).

A pair is a way past a plateau, not a grid over two knobs. It is proposed where the single-step walk cannot go:

* **plateau** — this session measured each knob alone from the kept state, and neither gained;
* **prediction** — the best point the model sees needs both knobs, and neither step gains on its own first (the tile
  already fills its view, so the pair's tile set now is the same run).

Where the walk has a step of its own (the pair's tile, clipped to the view of now, gains first) no pair is proposed;
a pair tried from this kept state is not proposed again, and a half that failed alone makes no plateau (no-retry).

The plateau cases run the search on the upstream-style LayerNorm fixture with the probe record of a real SIM run
(``data/upstream_layernorm.probe.json``), ``budget_s=0`` (ranked and generated, one single change admitted); the
prediction case plans the toy kernel of ``test_linked_pair_order.py``.
"""

from __future__ import annotations

from pypto_tune.tools.search import AdmissionCache, TriedChange, code_hash, pairs, search
from pypto_tune.tools.search import rank as R
from pypto_tune.tools.search.cache import value_key

from .test_linked_pair_order import _plan
from .test_search_reads_the_run import BLOCK, LN, LN_FILE, TILE_FIELD, _load

KEPT, RECORD = _load(LN, LN_FILE)
KEPT_HASH = code_hash(KEPT)


def _alone(knob: str, value, before, outcome: str, after_us: float, n: int) -> TriedChange:
    return TriedChange(knob_id=knob, value=value, before_value=before, from_kept_hash=KEPT_HASH, outcome=outcome,
                       before_us=10.0, after_us=after_us, round=n)


PLATEAU = [_alone(BLOCK, 4, 1, "no-gain", 10.0, 1), _alone(TILE_FIELD, [4, 512], [1, 128], "regression", 10.03, 2)]


def _pairs(history, cache: AdmissionCache) -> list:
    prop = search(KEPT, stage="frontend", limit=16, cache=cache, run=RECORD, budget_s=0.0, history=history)
    return [c for c in prop.candidates if c.kind == "pair"]


def test_no_pair_where_the_walk_has_a_step_of_its_own():
    # the pair's tile, set first, runs as the tile that fills the one-row view: a gain on its own (tile first)
    assert _pairs([], AdmissionCache()) == []


def test_a_measured_plateau_proposes_the_two_knobs_as_one_candidate():
    cache = AdmissionCache()
    (pair,) = [c for c in _pairs(PLATEAU, cache) if c.value == 4 and c.pair_with.value == [4, 512]]
    assert pair.knob == BLOCK and pair.before == 1
    assert pair.pair_with.knob == TILE_FIELD and pair.pair_with.before == [1, 128]
    assert pair.evidence["pair"]["trigger"] == "plateau"
    assert "plateau measured from this kept state" in pair.why and "no-gain" in pair.why
    assert pair.catalog_id.startswith("F-")
    # the id names both knobs and values: the single change of the block has another
    assert pair.id != search(KEPT, stage="frontend", limit=1, knob=BLOCK, cache=cache, run=RECORD,
                             budget_s=0.0).candidates[0].id


def test_a_pair_tried_from_this_kept_state_is_not_proposed_again():
    tried = TriedChange(knob_id=BLOCK, value=4, before_value=1, from_kept_hash=KEPT_HASH, outcome="no-gain",
                        before_us=10.0, after_us=10.0, round=3,
                        pair_with={"knob": TILE_FIELD, "value": [4, 512], "before": [1, 128]})
    found = _pairs([*PLATEAU, tried], AdmissionCache())
    assert not [c for c in found if c.value == 4 and c.pair_with.value == [4, 512]]


def test_a_half_that_failed_alone_makes_no_plateau():
    failed = [PLATEAU[0], _alone(TILE_FIELD, [4, 512], [1, 128], "failed", None, 2)]  # type: ignore[arg-type]
    assert _pairs(failed, AdmissionCache()) == []


def test_a_prediction_that_needs_both_knobs_with_no_first_step_proposes_the_pair():
    pl = _plan([1, 512])  # the tile already fills the one-row view: more rows now are the same run
    assert pl.needs_pair and not pl.tile_first

    def score(block, bv, tile, tv):  # the ranking's hook: here, the plan's own joint score
        return [R.Term("model", "joint", pl.through.get(value_key(bv), 0.0), "joint point")]

    (p,) = pairs.points({pl.link.block.id: pl}, [], "kept", score)
    assert (p.block_value, p.tile_value, p.trigger) == (pl.best_block, pl.best_tile, "prediction")
    assert p.score > 0 and "neither step gains on its own first" in p.reason


def test_a_pair_refused_when_run_is_not_proposed_again_from_this_kept_state():
    # past the answer budget a pair goes out unadmitted; run_candidates' admission refusing it is remembered
    from pypto_tune.tools.search import remember_refusal

    cache = AdmissionCache()
    (pair,) = [c for c in _pairs(PLATEAU, cache) if c.value == 4 and c.pair_with.value == [4, 512]]
    assert not pair.admitted
    remember_refusal(cache, KEPT, None, RECORD, pair.knob, pair.value, pair.pair_with.model_dump(),
                     "GATE legality: refused when run")
    assert not [c for c in _pairs(PLATEAU, cache) if c.value == 4 and c.pair_with.value == [4, 512]]
    assert [c for c in _pairs(PLATEAU, AdmissionCache()) if c.value == 4 and c.pair_with.value == [4, 512]]


def test_pairs_that_run_one_configuration_are_one_candidate():
    # [8, 512] and [4, 512] over a block of 4 rows are clipped to the same tile: one run, proposed once
    wider = [*PLATEAU, _alone(TILE_FIELD, [8, 512], [1, 128], "regression", 10.05, 3)]
    found = [c for c in _pairs(wider, AdmissionCache()) if c.value == 4]
    assert len(found) == 1 and found[0].pair_with.value in ([4, 512], [8, 512])


def test_a_pair_whose_configuration_a_pair_measured_is_not_proposed():
    ran = TriedChange(knob_id=BLOCK, value=4, before_value=1, from_kept_hash=KEPT_HASH, outcome="regression",
                      before_us=10.0, after_us=10.4, round=3,
                      pair_with={"knob": TILE_FIELD, "value": [8, 512], "before": [1, 128]})
    wider = [*PLATEAU, _alone(TILE_FIELD, [8, 512], [1, 128], "regression", 10.05, 4), ran]
    assert not [c for c in _pairs(wider, AdmissionCache()) if c.value == 4]


def test_two_pairs_of_a_link_that_did_not_gain_end_its_pairs_from_this_kept_state():
    def paired(tile, n: int) -> TriedChange:
        return TriedChange(knob_id=BLOCK, value=8, before_value=1, from_kept_hash=KEPT_HASH, outcome="regression",
                           before_us=10.0, after_us=10.5, round=n,
                           pair_with={"knob": TILE_FIELD, "value": tile, "before": [1, 128]})

    assert _pairs([*PLATEAU, paired([8, 256], 3)], AdmissionCache())  # one crossing that failed: others remain
    assert _pairs([*PLATEAU, paired([8, 256], 3), paired([8, 1024], 4)], AdmissionCache()) == []
    elsewhere = [paired([8, 256], 3).model_copy(update={"from_kept_hash": "other"}),
                 paired([8, 1024], 4).model_copy(update={"from_kept_hash": "other"})]
    assert _pairs([*PLATEAU, *elsewhere], AdmissionCache())  # counted where they were tried
