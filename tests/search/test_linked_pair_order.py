"""Which half of a linked (block, tile) pair goes first (``tools/search/linked.PairPlan.tile_first``).

Every step of a walk must be kept on its own, i.e. be a strict gain. A block step alone often runs exactly as before
(measured: upstream_rope's block 2 → 4 with a (2, 64) tile, multi_stage's 8 → 32 with (2, 1024)), so "block first"
can stall at its first step. The pair's tile set now is clipped to the view the block gives it and runs as the
tile that fills that view — a gain of its own — and the block step after it uncovers the rest. So: the tile first
whenever that clipped step is predicted to gain more than the block alone; the block first when the tile can gain
nothing yet (it already fills its view).

A toy kernel: ``ROWS`` × ``COLS`` elements, a loop over blocks of ``BLOCK`` rows, a vector tile clipped to the
block's view. Its score is log2 of the vector tasks saved (what the tile decides) plus a small credit per block
doubling (fewer loop iterations) — a block alone gains only that credit.
"""

from __future__ import annotations

import math

from pypto_tune.tools.patching.models import Knob
from pypto_tune.tools.search import linked

ROWS, COLS = 64, 512
BLOCK_CREDIT = 0.1
BLOCK = Knob(id="op.py:BLOCK", kind="tile_constant", name="BLOCK", file="op.py", line=3, value=1,
             context={"consumers": ["loop"]})


def _tile_knob(value: list[int]) -> Knob:
    return Knob(id="op.py:kernel.set_vec_tile_shapes#1", kind="vec_tile", name="set_vec_tile_shapes", file="op.py",
                line=9, value=value)


def _feats(block: int, tile: list[int]) -> list[dict]:
    eff = [min(tile[0], block), min(tile[1], COLS)]  # a tile is clipped to the view it tiles
    return [{"scope": "kernel", "file": "op.py", "vec": [{"line": 9, "block": [block, COLS], "eff_tile": eff}]}]


def _tasks(feats) -> float:
    (entry,) = feats[0]["vec"]
    rows, cols = entry["eff_tile"]
    return ROWS * COLS / (rows * cols)


def _tile_values(kernel) -> list[list[int]]:
    view_rows = kernel["vec"][0]["block"][0]
    return [[r, c] for r in (1, 2, 4, 8) for c in (128, 256, 512) if r <= view_rows]


def _pair(tile_now: list[int]):
    """The pair's link and the kernel picture under trial values (the search's ``after_many``)."""
    tile = _tile_knob(tile_now)

    def after(changes):
        b, t = BLOCK.value, tile.value
        for knob, value in changes:
            if knob.id == BLOCK.id:
                b = value
            else:
                t = value
        return _feats(b, t)

    return linked.Link(BLOCK, tile, "kernel", "vec", (0,)), after


def _plan(tile_now: list[int]) -> linked.PairPlan:
    link, after = _pair(tile_now)
    base_tasks = _tasks(_feats(BLOCK.value, tile_now))

    def score(feats) -> float:
        block = feats[0]["vec"][0]["block"][0]
        return math.log2(base_tasks / _tasks(feats)) + BLOCK_CREDIT * math.log2(block / BLOCK.value)

    return linked.plan(link, base=_feats(BLOCK.value, tile_now), after=after, score=score, block_values=[2, 4, 8],
                       tile_values=_tile_values)


def test_the_tile_goes_first_clipped_when_it_gains_now_and_the_block_alone_barely_does():
    pl = _plan([1, 128])
    assert pl.needs_pair
    assert pl.best_block == 8 and pl.best_tile == [8, 512]
    assert pl.clipped_now == math.log2(4)  # [8, 512] runs as [1, 512] under a block of 1: 4× fewer tasks now
    assert pl.block_alone_for["('i', 8)"] == BLOCK_CREDIT * 3
    assert pl.tile_first
    assert pl.summary()["order"].startswith("set set_vec_tile_shapes = [8, 512] first")


def test_the_block_goes_first_when_the_tile_already_fills_its_view():
    pl = _plan([1, 512])  # the widest tile one row can hold: set now, [8, 512] would run as it does
    assert pl.needs_pair and pl.best_tile == [8, 512]
    assert pl.clipped_now == 0.0
    assert not pl.tile_first
    assert pl.summary()["order"] == "raise BLOCK first, then set_vec_tile_shapes"


def test_no_pair_no_order():
    pl = _plan([8, 512])  # nothing left for the pair: it already is the tile the best point wants
    assert not pl.needs_pair and not pl.tile_first


# ------------------------------------------------------------------------------------------ a predictor like the store
# The knowledge store predicts a change by the measured outcome of similar single changes: its prediction of a move
# does not grow with the move's size beyond what it has seen. Here: log2 of the vector tasks saved, capped at
# SEEN (no neighbour ever saved more). Rated in one go, the pair's joint point is one move larger than any seen, so it
# is predicted no better than the tile alone; rated step by step (the tile first, clipped; then the block) it is.
SEEN = 1.5


def _store_plan(tile_now: list[int], *, by_steps: bool) -> linked.PairPlan:
    link, after = _pair(tile_now)

    def step(before, after_) -> float:
        return min(math.log2(_tasks(before) / _tasks(after_)), SEEN)

    base = _feats(BLOCK.value, tile_now)
    return linked.plan(link, base=base, after=after, score=lambda feats: step(base, feats), block_values=[2, 4, 8],
                       tile_values=_tile_values, by="knowledge", step=step if by_steps else None)


def test_a_predictor_that_never_saw_so_large_a_move_plans_no_pair_when_it_rates_the_point_in_one_go():
    pl = _store_plan([1, 128], by_steps=False)
    assert pl.tile_alone == SEEN and pl.best_score == SEEN  # [1, 512] saves 4× tasks; the joint point 32×: both capped
    assert not pl.needs_pair


def test_rated_step_by_step_the_store_plans_the_pair_tile_first():
    pl = _store_plan([1, 128], by_steps=True)
    # the tile first: [4, 512] runs as [1, 512] now (4× fewer tasks, capped at SEEN); then the block of 4 uncovers
    # 4× more (capped again). A block of 8 is rated no higher (capped), so the first block to reach it stands
    assert pl.best_block == 4 and pl.best_tile == [4, 512]
    assert pl.clipped_now == SEEN and pl.best_score == 2 * SEEN
    assert pl.free_first  # the pair's first step is predicted as good as the best tile alone: it costs nothing
    assert pl.needs_pair and pl.tile_first and pl.by == "knowledge"
    # its worth now: the first step as predicted, the second discounted
    assert pl.tile_first_worth == SEEN + linked.LOOKAHEAD_DISCOUNT * SEEN


def test_a_free_first_step_needs_no_margin_but_a_gain():
    # The pair's first step is the best lone tile clipped; the block step after it is predicted to gain a little,
    # less than MIN_PAIR_ADVANTAGE: still planned, because going the pair's way risks nothing the lone tile does not
    pl = linked.PairPlan(linked.Link(BLOCK, _tile_knob([1, 128]), "kernel", "vec", (0,)), best_block=8,
                         best_tile=[8, 512], view_now=[1, 512], tile_alone=1.0, clipped_now=1.0,
                         best_score=1.0 + linked.MIN_PAIR_ADVANTAGE / 2)
    assert pl.free_first and pl.needs_pair
    pl.best_score = 1.0  # no gain after it: no pair
    assert not pl.needs_pair
    pl.best_score, pl.clipped_now = 1.0 + linked.MIN_PAIR_ADVANTAGE / 2, 0.5  # the first step costs: the margin holds
    assert not pl.free_first and not pl.needs_pair
    # a tile that already fills its view: the pair's tile set now is the same run, predicted to gain nothing. The
    # block must go first, and that step is no free one: the margin holds
    pl.clipped_now, pl.tile_alone, pl.best_score = 0.0, -0.05, linked.MIN_PAIR_ADVANTAGE / 2
    assert not pl.free_first and not pl.needs_pair
