"""The store alone, without the hand-written model, plans a linked (block, tile) pair (``search/linked.py``).

upstream_layernorm's best point needs both knobs: its tile can use no more rows than ``block_rows`` gives it, and a
block step alone runs no faster (each step must be kept on its own). The model plans that pair; until 2026-12-05 the
store ranking alone did not plan at all, and once it had kept [1, 512] (the best lone tile) the way to the best point
was closed: the pair's tile set then is the same run, and the block alone regressed. Leave-one-out on a campaign's
ledgers, the store alone never reached 90 % on upstream_layernorm, upstream_rope or rmsnorm_grid.

The store here holds three moves measured on two *other* operators, described as the situation module describes
them (log2 quantities; the numbers are those of layernorm's own kernel picture, so they match as neighbours):

* a tile step that cut the vector tasks 4× (one task per loop iteration): +1.5 log2;
* a block step that cut the loop iterations 4× with the tile growing along (tasks per iteration unchanged): +1.0;
* a block step alone, the tile as it was (4× the tasks per iteration, as many tasks): −0.6.

Rated in one go, the joint point is a larger move than any of them; rated step by step it is +1.5 then +1.0. So the
pair's tile goes first, clipped to the one row the block gives it now — it runs as [1, 512] does — and the block
follows. The probe record is the one ``tests/search`` reads (a real SIM run of the fixture); the walk itself (the
block step after the pair's tile is kept) needs a record of that next state, so it is measured by the leave-one-out
replay (``benchmarks/campaign_bench.py --part knowledge``), not here.
"""

from __future__ import annotations

import json
from pathlib import Path

from pypto_tune.tools.knowledge.store import KnowledgeFile, Observation
from pypto_tune.tools.search import AdmissionCache, search
from pypto_tune.tools.search.priors import load_priors

ROOT = Path(__file__).resolve().parents[2]
LN_FILE = "layernorm_op.py"
TILE = "layernorm_op.py:test_layer_norm.LayerNormConfig(vec_tile_shape)"
BLOCK = "layernorm_op.py:test_layer_norm.LayerNormConfig(block_rows)"
STORE_ONLY = frozenset({"history", "analysis", "knowledge"})

TILE_STEP = {"b_bytes": 9.0, "a_bytes": 11.0, "d_bytes": 2.0, "b_iters": 7.0, "a_iters": 7.0, "d_iters": 0.0,
             "b_par": 5.585, "a_par": 5.585, "d_par": 0.0, "b_tasks": 9.0, "a_tasks": 7.0, "d_tasks": -2.0,
             "b_tpi": 2.0, "a_tpi": 0.0, "d_tpi": -2.0, "b_waves": 3.459, "a_waves": 1.585, "d_waves": -1.874}
BLOCK_WITH_TILE = {"b_bytes": 11.0, "a_bytes": 13.0, "d_bytes": 2.0, "b_iters": 7.0, "a_iters": 5.0, "d_iters": -2.0,
                   "b_par": 5.585, "a_par": 5.0, "d_par": -0.585, "b_tasks": 7.0, "a_tasks": 5.0, "d_tasks": -2.0,
                   "b_tpi": 0.0, "a_tpi": 0.0, "d_tpi": 0.0, "b_waves": 1.585, "a_waves": 0.0, "d_waves": -1.585}
BLOCK_ALONE = {"b_bytes": 11.0, "a_bytes": 11.0, "d_bytes": 0.0, "b_iters": 7.0, "a_iters": 5.0, "d_iters": -2.0,
               "b_par": 5.585, "a_par": 5.585, "d_par": 0.0, "b_tasks": 7.0, "a_tasks": 7.0, "d_tasks": 0.0,
               "b_tpi": 0.0, "a_tpi": 2.0, "d_tpi": 2.0, "b_waves": 1.585, "a_waves": 1.585, "d_waves": 0.0}


def _obs(key: str, operator: str, knob_kind: str, situation: dict[str, float], gain: float) -> Observation:
    return Observation(key=key, operator=operator, session_id=f"s-{operator}", round=1, stage="FRONTEND",
                       group="frontend", kernel_kind="vector", change_class="vector-work", knob=key,
                       knob_kind=knob_kind, before_us=10.0, after_us=10.0 / 2 ** gain, gain_log2=gain,
                       outcome="kept" if gain > 0 else "regression", situation=dict(situation))


def _store() -> KnowledgeFile:
    kf = KnowledgeFile()
    kf.observations = [_obs("tile", "rowwise_op", "vec_tile", TILE_STEP, 1.5),
                       _obs("block+tile", "norm_op", "tile_constant", BLOCK_WITH_TILE, 1.0),
                       _obs("block", "norm_op", "tile_constant", BLOCK_ALONE, -0.6)]
    return kf


def _layernorm() -> tuple[dict[str, str], dict]:
    kept = {LN_FILE: (ROOT / "fixtures" / "operators" / "upstream_layernorm" / LN_FILE).read_text()}
    return kept, json.loads((ROOT / "tests" / "search" / "data" / "upstream_layernorm.probe.json").read_text())


def test_the_store_alone_sets_the_pairs_tile_first_and_says_whose_prediction_it_is():
    kept, rec = _layernorm()
    prop = search(kept, stage="frontend", limit=None, cache=AdmissionCache(), run=rec, budget_s=0.0,
                  signals=STORE_ONLY, priors=load_priors(knowledge=_store()))
    first = prop.candidates[0]
    assert first.knob == TILE and first.value[0] > 1 and first.value[1] == 512, (first.knob, first.value)
    assert "the linked pair's tile, set first" in first.why
    assert "predictions from the store's measurements of similar changes" in first.why
    assert "model" not in first.evidence  # no model term: the planning's numbers are the store's
    pair = next(e["linked_pair"] for e in first.evidence["knowledge"] if "linked_pair" in e)
    assert pair["predicted_by"] == "knowledge" and pair["block_knob"] == BLOCK
    assert pair["best_point"]["LayerNormConfig.block_rows"] == first.value[0]  # the block then uncovers the tile
    assert any(n.startswith("linked pair: the best point the store can see") for n in prop.notes)
    # the lone tile it would otherwise have kept, [1, 512], runs the same now but ranks below the pair's tile
    lone = next(c for c in prop.candidates if c.knob == TILE and c.value == [1, 512])
    assert lone.score < first.score


def test_without_a_store_nothing_is_planned():
    kept, rec = _layernorm()
    prop = search(kept, stage="frontend", limit=None, cache=AdmissionCache(), run=rec, budget_s=0.0,
                  signals=STORE_ONLY, priors=load_priors(knowledge=KnowledgeFile()))
    assert not any(n.startswith("linked pair") for n in prop.notes)
    assert not any(c.knob == TILE and c.value[0] > 1 for c in prop.candidates)  # no tile beyond its view
