"""Every live knob is a candidate, and a knob asked for without one says why; a value at or past one that did not
compile is not proposed again from the same state.

The operator is ``tests/knob_operators.py``'s ``rows_op.py`` (written for these tests), with one real SIM probe
record of its test. What is expected is read off its text: the config the test builds carries ``unroll_list=[2, 1]``
into a ``loop_unroll`` over 64 rows, so every power-of-two chain up to 64 other than [2, 1] is a candidate (and
``[1, 2]`` or ``[2]`` would be the same loop); the scale kernel's tile is a branch-local list read by subscripts,
[2, 512] as it ran; the sigmoid kernel casts its FP16 input to FP32 under ``TILE``, so no tile above 96 KB of FP32
([32, 1024] is 128 KB) is proposed.
"""

from __future__ import annotations

import pytest

from pypto_tune.tools.errors import InputError
from pypto_tune.tools.patching.effective import UB_TILE_MAX_BYTES
from pypto_tune.tools.search import AdmissionCache, TriedChange, search
from pypto_tune.tools.search.failures import at_or_past, bounded_by_failure
from pypto_tune.tools.search.hashing import code_hash
from pypto_tune.tools.search.values import unroll_factors, unroll_values
from tests.knob_operators import ROWS_FILE, ROWS_OP, probe_run, write_rows_op

CONFIG = "rows_op.py:test_rows.RowsConfig(unroll_list)"
LOOP = "rows_op.py:build_scale.scale_kernel.loop_unroll[ROW_BLOCKS].unroll_list"
SCALE_TILE = "rows_op.py:build_scale.scale_kernel.set_vec_tile_shapes#1"
ONLY_TRACED = "rows_op.py:build_scale.scale_kernel.set_vec_tile_shapes#2"
TILE = "rows_op.py:TILE"
NBUF = "rows_op.py:build_sigmoid.sigmoid_kernel.pass_options.vec_nbuffer_setting"
KEPT = {ROWS_FILE: ROWS_OP}


def test_an_unroll_list_is_the_factors_loop_unroll_runs():
    assert unroll_factors([1, 2, 4]) == unroll_factors([4, 2, 1]) == unroll_factors([4, 2]) == (4, 2, 1)
    assert unroll_factors([2, 1]) != unroll_factors([4, 2, 1])
    assert unroll_factors({"$expr": "cfg.unroll_list"}) is None and unroll_factors([0, 1]) is None
    values = [v.value for v in unroll_values([1, 2], 64)]
    assert [2, 1] not in values and [1] in values and [64, 32, 16, 8, 4, 2, 1] in values
    assert all(max(v) <= 8 for v in (x.value for x in unroll_values([2, 1], 8)))


def test_a_compile_failure_bounds_the_values_at_or_past_it_from_the_same_state():
    grew = TriedChange(knob_id=TILE, value=[32, 512], before_value=[8, 1024], from_kept_hash="h",
                       outcome="failed", failure_type="compile-failure")
    # [32, 512] did not grow the tile on every axis: its failure says nothing about larger ones
    assert bounded_by_failure([grew], "h", TILE, [64, 512]) is None
    failed = grew.model_copy(update={"value": [16, 1024]})
    assert bounded_by_failure([failed], "h", TILE, [32, 1024]) is failed
    assert bounded_by_failure([failed], "h", TILE, [16, 1024]) is failed
    assert bounded_by_failure([failed], "h", TILE, [32, 512]) is None  # narrower on one axis
    assert bounded_by_failure([failed], "other", TILE, [32, 1024]) is None  # the kept state changed since
    runtime = failed.model_copy(update={"failure_type": "runtime-error"})
    assert bounded_by_failure([runtime], "h", TILE, [32, 1024]) is None
    zero = TriedChange(knob_id=NBUF, value={-2: 1, -1: 0}, before_value=None, from_kept_hash="h", outcome="failed",
                       failure_type="compile-failure")
    assert bounded_by_failure([zero], "h", NBUF, {-2: 1, -1: 2}) is None  # zero buffers is no size
    # an option absent before: its failure bounds the larger values once a smaller one ran from the same state
    eight = zero.model_copy(update={"value": {-2: 1, -1: 8}})
    ran = TriedChange(knob_id=NBUF, value={-2: 1, -1: 2}, before_value=None, from_kept_hash="h", outcome="regression",
                      before_us=26.5, after_us=36.0)
    assert bounded_by_failure([eight], "h", NBUF, {-2: 1, -1: 16}) is None  # nothing ran below it: no size known
    assert bounded_by_failure([eight, ran], "h", NBUF, {-2: 1, -1: 16}) is eight
    assert bounded_by_failure([eight, ran], "h", NBUF, {-2: 1, -1: 4}) is None
    assert bounded_by_failure([eight, ran.model_copy(update={"from_kept_hash": "g"})], "h", NBUF,
                              {-2: 1, -1: 16}) is None
    unroll = TriedChange(knob_id=CONFIG, value=[16, 8, 4, 2, 1], before_value=[2, 1], from_kept_hash="h",
                         outcome="failed", failure_type="compile-failure")
    assert bounded_by_failure([unroll], "h", CONFIG, [32, 16, 8, 4, 2, 1], unroll=True) is unroll
    assert bounded_by_failure([unroll], "h", CONFIG, [8, 4, 2, 1], unroll=True) is None
    assert at_or_past([4, 4], [4, 4]) and not at_or_past([4], [4, 4])


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> dict:
    rec, _ = probe_run(write_rows_op(tmp_path_factory.mktemp("rows")))
    return rec


@pytest.fixture(scope="module")
def cache() -> AdmissionCache:
    return AdmissionCache()


@pytest.mark.sim
def test_an_unroll_list_a_config_carries_is_proposed_and_admitted(record, cache):
    for asked in (CONFIG, "unroll_list", LOOP):  # the source, the catalogue's knob name, the loop's own site
        prop = search(KEPT, stage="frontend", knob=asked, limit=3, cache=cache, run=record)
        assert prop.candidates, (asked, prop.why_none, prop.notes)
        assert {c.knob for c in prop.candidates} == {CONFIG} and not prop.why_none
        for c in prop.candidates:
            assert c.admitted and c.catalog_id in ("F-8", "F-2")
            assert unroll_factors(c.value) != (2, 1) and max(c.value) <= 64
    every = search(KEPT, stage="frontend", limit=None, cache=cache, run=record, budget_s=0.0)
    values = sorted((c.value for c in every.candidates if c.knob == CONFIG), key=len)
    assert values[0] == [1] and [4, 2, 1] in values and [64, 32, 16, 8, 4, 2, 1] in values


@pytest.mark.sim
def test_every_live_tile_is_a_candidate_and_none_the_buffer_cannot_hold(record, cache):
    prop = search(KEPT, stage="frontend", limit=None, cache=cache, run=record, budget_s=0.0)
    knobs = {c.knob for c in prop.candidates}
    # the branch-local list read by subscripts: its call pinned to literals, from the value it ran with
    assert SCALE_TILE in knobs and TILE in knobs and CONFIG in knobs
    assert ONLY_TRACED in prop.dead_sites and ONLY_TRACED not in knobs
    tiles = [c.value for c in prop.candidates if c.knob == TILE]
    assert [16, 1024] in tiles
    assert all(rows * cols * 4 <= UB_TILE_MAX_BYTES for rows, cols in tiles)  # FP32 after the cast
    assert [32, 1024] not in tiles and [64, 1024] not in tiles


@pytest.mark.sim
def test_a_knob_asked_for_says_why_it_has_no_candidate(record, cache):
    # buffer counts: candidates in the swimlane stage, and in the frontend the stage named as the reason
    swim = search(KEPT, stage="swimlane", knob=NBUF, limit=2, cache=cache, run=record)
    assert swim.candidates and all(c.value[-1] in (1, 2, 4, 8, 16) for c in swim.candidates)
    front = search(KEPT, stage="frontend", knob=NBUF, limit=2, cache=cache, run=record)
    assert not front.candidates and "frontend stage" in front.why_none and "S-5" in front.why_none
    # every value of the config's list measured from this state: said so, not "exhausted" in general
    kh = code_hash(KEPT)
    every = search(KEPT, stage="frontend", knob=CONFIG, limit=None, cache=cache, run=record, budget_s=0.0)
    tried = [TriedChange(knob_id=CONFIG, value=c.value, before_value=[2, 1], from_kept_hash=kh, outcome="no-gain",
                         before_us=10.0, after_us=10.0) for c in every.candidates]
    done = search(KEPT, stage="frontend", knob=CONFIG, limit=3, cache=cache, run=record, history=tried)
    assert not done.candidates and done.exhausted and "already measured" in done.why_none
    # a dead site asked for by name: named dead, with the reason the run gives
    with pytest.raises(InputError) as dead:
        search(KEPT, stage="frontend", knob=ONLY_TRACED, limit=1, cache=cache, run=record)
    assert "dead" in str(dead.value) and "never execute" in str(dead.value)
    # a knob the catalogue names that this operator has no site of: which items name it, and what adding one is
    with pytest.raises(InputError) as absent:
        search(KEPT, stage="frontend", knob="BLOCK_SIZE", limit=1, cache=cache, run=record)
    assert "F-1" in absent.value.message and "ALGORITHM" in absent.value.hint
    with pytest.raises(InputError) as fixed:
        search(KEPT, stage="frontend", knob="run_mode", limit=1, cache=cache, run=record)
    assert "not tunable" in fixed.value.message


@pytest.mark.sim
def test_a_value_that_did_not_compile_bounds_the_next_proposals(record, cache):
    kh = code_hash(KEPT)
    failed = TriedChange(knob_id=CONFIG, value=[8, 4, 2, 1], before_value=[2, 1], from_kept_hash=kh,
                         outcome="failed", failure_type="compile-failure")
    prop = search(KEPT, stage="frontend", knob=CONFIG, limit=None, cache=cache, run=record, history=[failed],
                  budget_s=0.0)
    values = [c.value for c in prop.candidates]
    assert prop.excluded.get("failed-larger") == 3  # the chains up to 16, 32 and 64
    assert values and all(max(v) < 8 for v in values) and [4, 2, 1] in values
    # once another change was kept the state differs, and the bound no longer holds
    later = search(KEPT, stage="frontend", knob=CONFIG, limit=None, cache=cache, run=record,
                   history=[failed.model_copy(update={"from_kept_hash": "an-earlier-state"})], budget_s=0.0)
    assert [16, 8, 4, 2, 1] in [c.value for c in later.candidates] and not later.excluded.get("failed-larger")
