"""The search learns from the session's own trials, over MCP stdio against the real server and the real simulator.

The operator is the ``rmsnorm_grid`` fixture: x[64, 512] FP32, a loop over blocks of ``ROWS_PER_BLOCK`` rows, one
vector tile. Its measured grid (``benchmarks/grids/rmsnorm_grid.json``) says what to expect, and the test reads
nothing off the ranker:

* ``ROWS_PER_BLOCK`` 1 → 4 with the shipped tile [1, 64] is a gain (106.4 → 35.46 µs); from there 8 and 16 measure
  exactly 35.46 µs: the tile, one row by 64 columns, sets the work whatever the block. Two trials without effect
  from one kept state: ``propose_candidates`` does not propose ``ROWS_PER_BLOCK`` from that state again (counted
  as ``no-effect-here``), and it still proposes other kinds (the vector tile, the loop's unroll list);
* with 4 rows per block a vector tile of 8 rows is clamped to the block's 4 rows: [8, 64] runs as [4, 64]. Once
  [8, 64] is measured, the candidate [4, 64] — the same effective configuration — is not proposed; it is reported
  in ``known_outcomes`` with the round that measured it and that round's time.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest

from tests.conftest import OPERATORS, sim_command
from tests.server.mcp_client import connect
from tests.sessions import to_frontend

pytestmark = pytest.mark.sim

FILE = "rmsnorm_grid.py"
BLOCK = f"{FILE}:ROWS_PER_BLOCK"
TILE = f"{FILE}:rmsnorm_rows.set_vec_tile_shapes#1"
# a tile larger than the block's view: written by the test (the search never proposes a tile its view clamps)
CLAMPED = {"id": "hand-tile-8x64", "knob": TILE, "value": [8, 64], "catalog_id": "F-10",
           "why": "written by the test: 8 rows over a view of 4 rows runs as [4, 64]", "evidence": {}}


def test_flat_knob_is_not_proposed_again_from_its_state_and_a_clamped_twin_is_known_not_run(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy2(OPERATORS / "rmsnorm_grid" / FILE, ws / FILE)

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = await to_frontend(s, ws, [FILE], sim_command("rmsnorm_grid"))

            async def propose(**kw) -> dict:
                return await s.ok("propose_candidates", session_id=sid, limit=64, **kw)

            async def run(*cands) -> dict:
                return await s.ok("run_candidates", session_id=sid, candidates=list(cands), parallel=1)

            blocks = {c["value"]: c for c in (await propose(knob=BLOCK))["candidates"]}
            four = await run(blocks[4]["id"])
            assert four["trials"][0]["decision"] == "kept", four
            kept_us = four["best_us"]

            blocks = {c["value"]: c for c in (await propose(knob=BLOCK))["candidates"]}
            flat = await run(blocks[8]["id"], blocks[16]["id"])
            assert [t["result_type"] for t in flat["trials"]] == ["no-gain", "no-gain"], flat
            assert all(t["operator_time_us"] == pytest.approx(kept_us) for t in flat["trials"])

            # two trials without effect from this kept state: the knob is not proposed from it again ...
            after = await propose()
            assert not [c for c in after["candidates"] if c["knob"] == BLOCK], after["candidates"]
            assert after["excluded"].get("no-effect-here", 0) >= 1
            only_block = await propose(knob=BLOCK)
            assert only_block["candidates"] == [] and only_block["excluded"].get("no-effect-here", 0) >= 1
            # ... and other kinds are: the first candidate is not the flat knob, and says what the session measured
            first = after["candidates"][0]
            assert first["knob"] != BLOCK and "session model" in first["why"]
            assert {"mean", "sd", "prior", "moved_by"} <= set(first["evidence"]["session"])

            # a tile its view clamps, measured once: the tile it runs as is known, not proposed, not run
            clamped = await run(CLAMPED)
            t = clamped["trials"][0]
            assert t["verdict"] == "passed" and t["operator_time_us"], clamped
            tiles = await propose(knob=TILE)
            assert [4, 64] not in [c["value"] for c in tiles["candidates"]], tiles["candidates"]
            known = [k for k in tiles["known_outcomes"] if k["value"] == [4, 64]]
            assert known and known[0]["same_as_round"] == t["round"], tiles["known_outcomes"]
            assert known[0]["operator_time_us"] == pytest.approx(t["operator_time_us"], abs=1e-3)
            assert tiles["excluded"].get("known", 0) >= 1

    anyio.run(scenario)
