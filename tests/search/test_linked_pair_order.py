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


def _plan(tile_now: list[int]) -> linked.PairPlan:
    tile = _tile_knob(tile_now)

    def after(changes):
        b, t = BLOCK.value, tile.value
        for knob, value in changes:
            if knob.id == BLOCK.id:
                b = value
            else:
                t = value
        return _feats(b, t)

    def tasks(feats) -> float:
        (entry,) = feats[0]["vec"]
        rows, cols = entry["eff_tile"]
        return ROWS * COLS / (rows * cols)

    base_tasks = tasks(_feats(BLOCK.value, tile_now))

    def score(feats) -> float:
        block = feats[0]["vec"][0]["block"][0]
        return math.log2(base_tasks / tasks(feats)) + BLOCK_CREDIT * math.log2(block / BLOCK.value)

    def tile_values(kernel) -> list[list[int]]:
        view_rows = kernel["vec"][0]["block"][0]
        return [[r, c] for r in (1, 2, 4, 8) for c in (128, 256, 512) if r <= view_rows]

    link = linked.Link(BLOCK, tile, "kernel", "vec", (0,))
    return linked.plan(link, base=_feats(BLOCK.value, tile_now), after=after, score=score, block_values=[2, 4, 8],
                       tile_values=tile_values)


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
