"""A run that compiled is never recorded as a failure because PyPTO named the probe hook as a source.

PyPTO names each operation of ``program.json`` after the Python frame that made it. The run-time probe wraps the
pypto calls it records; on upstream_rope pinned to a (2, 256) vector tile, the COPY_IN a ``pypto.view`` makes is
made inside the hook's wrapper, so ``program.json`` names the hook's file. The output check (every file a run's
program names must be the recorded copy's or the run's closure) did not count the server's own read-only folders
as the run's, threw the run's only output folder away, and the trial was recorded as a compile failure — which
the search's history and the knowledge store then took as a fact about the candidate.

Expected times: the fixture's measured grid (``benchmarks/grids/upstream_rope.json``; SIM is deterministic).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import anyio
import pytest

from tests.conftest import OPERATORS
from tests.server.mcp_client import connect
from tests.sessions import to_frontend

pytestmark = pytest.mark.sim

ROOT = Path(__file__).resolve().parents[2]
TILE = "rope_op.py:build_rope.rope_kernel.set_vec_tile_shapes#1"
ENTRY = 'rope_op.py:ROPE_TILING["vec_tile"]'


def _grid_us(block: int, rows: int, cols: int) -> float:
    grid = json.loads((ROOT / "benchmarks" / "grids" / "upstream_rope.json").read_text())
    want = {"block_tokens": block, "vec_tile_rows": rows, "vec_tile_cols": cols}
    return next(r["operator_time_us"] for r in grid["configs"] if r["knobs"] == want)


def test_a_view_made_inside_the_probe_hook_still_counts_as_the_runs_own(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(OPERATORS / "upstream_rope", ws, ignore=shutil.ignore_patterns("grid.json", "__pycache__"))
    cmd = [sys.executable, "rope_op.py", "rope_op.py::test_rope", "--run_mode", "sim"]

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = await to_frontend(s, ws, ["rope_op.py"], cmd)
            # the gated trial path (run_candidates). (4, 256) is clamped to the block's two rows, so (2, 256) runs
            # the same configuration and is ranked after every distinct one: ask for the whole list
            prop = await s.ok("propose_candidates", session_id=sid, limit=50)
            # since the tiling dict is read entry by entry, the search moves ROPE_TILING["vec_tile"]; the same tile
            # pinned at the call makes the same operations
            wide = next(c for c in prop["candidates"] if c["knob"] in (TILE, ENTRY) and c["value"] == [2, 256])
            res = await s.ok("run_candidates", session_id=sid, candidates=[wide["id"]])
            (trial,) = res["trials"]
            assert trial["result_type"] == "gain", trial  # before the fix: "compile-failure"
            assert trial["operator_time_us"] == pytest.approx(_grid_us(2, 2, 256), abs=2e-3)
            assert trial["decision"] == "kept"
            # the manual path (apply_tuning_patch → run_precision_check) runs the same probed check
            await s.ok("apply_tuning_patch", session_id=sid, knob=TILE, value=[1, 256], catalog_id="F-10",
                       rationale="one row per tile")
            pre = await s.ok("run_precision_check", session_id=sid)
            assert pre["verdict"] == "passed", pre["reason"]

    anyio.run(scenario)
