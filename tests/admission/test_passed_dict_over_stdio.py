"""A tiling dict the test builds and hands on (upstream_mean_pool: to the kernel's builder, through a helper that
returns the tile, into the jit's options) over MCP stdio, with the real server, sandbox and simulator: one entry is
one knob, moved and measured at the grid's time; a diff that also makes the helper write an entry (so the tile that
runs is not the one the entry says) is refused and the file is untouched. Expected times: the fixture's measured
grid (``benchmarks/grids/upstream_mean_pool.json``)."""

from __future__ import annotations

import difflib
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
SEQ = 'mean_pool_op.py:test_mean_pool.tiling["seq_chunk"]'
CMD = [sys.executable, "mean_pool_op.py", "mean_pool_op.py::test_mean_pool", "--run_mode", "sim"]
RETURN = '    return (tiling["rows_per_block"], tiling["seq_chunk"], tiling["hidden_chunk"])'


def _grid_us(**knobs: int) -> float:
    grid = json.loads((ROOT / "benchmarks" / "grids" / "upstream_mean_pool.json").read_text())
    want = {"rows_per_block": 1, "seq_chunk": 8, "hidden_chunk": 64, "vec_nbuffer": 1, **knobs}
    return next(r["operator_time_us"] for r in grid["configs"] if r["knobs"] == want)


def _diff(old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "a/mean_pool_op.py",
                                        "b/mean_pool_op.py"))


def test_an_entry_of_a_passed_dict_is_one_knob_and_a_helper_that_writes_it_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(OPERATORS / "upstream_mean_pool", ws, ignore=shutil.ignore_patterns("grid.json", "__pycache__"))
    op = ws / "mean_pool_op.py"

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = await to_frontend(s, ws, ["mean_pool_op.py"], CMD)
            knobs = {k["id"] for k in (await s.ok("list_knobs", session_id=sid))["knobs"]}
            assert SEQ in knobs
            src = op.read_text()
            # the entry moved to 64, and the helper made to overwrite it with 8: the number the entry says would not
            # be the tile that runs
            sneaky = src.replace('"seq_chunk": 8,', '"seq_chunk": 64,').replace(
                RETURN, '    tiling["seq_chunk"] = 8\n' + RETURN)
            assert sneaky.count('tiling["seq_chunk"] = 8') == 1
            msg = await s.refused("apply_tuning_patch", session_id=sid, diff=_diff(src, sneaky), catalog_id="F-10",
                                  rationale="longer sequence chunks")
            assert "GATE one-change:" in msg and 'tiling["seq_chunk"] = 8' in msg and SEQ in msg, msg
            assert op.read_text() == src, "a refused change must not touch the file"
            await s.ok("apply_tuning_patch", session_id=sid, knob=SEQ, value=64, catalog_id="F-10",
                       rationale="the whole sequence per tile")
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            assert (await s.ok("collect_swimlane", session_id=sid))["valid"]
            rec = await s.ok("record_round", session_id=sid)
            assert rec["decision"] == "kept" and rec["after_us"] == pytest.approx(_grid_us(seq_chunk=64), abs=2e-3)

    anyio.run(scenario)
