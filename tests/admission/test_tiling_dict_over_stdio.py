"""A tiling dict read entry by entry (upstream_rope's ``ROPE_TILING``) over MCP stdio, with the real server, sandbox
and simulator: each entry is one knob, moved and measured like any other; two entries in one diff are two knobs
(one change only as a pair the run links, rule linked-pair: the block and the tile rows it caps); and
the same dict used another way in the agent's own code — here iterated in the test — is no knob at all, whatever
the agent claims. Expected times: the fixture's measured grid (``benchmarks/grids/upstream_rope.json``).

That last one is the admission gate's decision on the two sources alone (``admit``, no run needed), checked on the gate
itself: the stdio path of a refused non-knob change (``GATE one-change: … not a tuning knob``, the file untouched) is
the same for any such change and is shown over stdio above and in ``test_attacks_over_stdio.py``."""

from __future__ import annotations

import difflib
import json
import shutil
import sys
from pathlib import Path

import anyio
import pytest

from pypto_tune.tools.code.admission import admit
from pypto_tune.tools.errors import GateRefusal
from tests.conftest import OPERATORS
from tests.server.mcp_client import connect
from tests.sessions import to_frontend

ROOT = Path(__file__).resolve().parents[2]
BLOCK = 'rope_op.py:ROPE_TILING["block_tokens"]'
TILE = 'rope_op.py:ROPE_TILING["vec_tile"]'
SHIPPED = '{"block_tokens": 2, "vec_tile": (2, 64)}'
CMD = [sys.executable, "rope_op.py", "rope_op.py::test_rope", "--run_mode", "sim"]


def _grid_us(block: int, rows: int, cols: int) -> float:
    grid = json.loads((ROOT / "benchmarks" / "grids" / "upstream_rope.json").read_text())
    want = {"block_tokens": block, "vec_tile_rows": rows, "vec_tile_cols": cols}
    return next(r["operator_time_us"] for r in grid["configs"] if r["knobs"] == want)


def _diff(old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "a/rope_op.py", "b/rope_op.py"))


def _ws(tmp_path: Path, extra: str = "") -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(OPERATORS / "upstream_rope", ws, ignore=shutil.ignore_patterns("grid.json", "__pycache__"))
    if extra:
        (ws / "rope_op.py").write_text((ws / "rope_op.py").read_text().replace(
            "\n\ndef test_rope(", extra + "\n\ndef test_rope(", 1))
    return ws


@pytest.mark.sim
def test_each_entry_of_a_tiling_dict_is_one_knob_and_two_are_two(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    op = ws / "rope_op.py"

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = await to_frontend(s, ws, ["rope_op.py"], CMD)
            knobs = {k["id"] for k in (await s.ok("list_knobs", session_id=sid))["knobs"]}
            assert {BLOCK, TILE} <= knobs and "rope_op.py:ROPE_TILING" not in knobs
            src = op.read_text()
            both = src.replace(SHIPPED, '{"block_tokens": 4, "vec_tile": (2, 128)}')  # columns: not the block's
            msg = await s.refused("apply_tuning_patch", session_id=sid, diff=_diff(src, both), catalog_id="F-10",
                                  rationale="block and tile together")
            assert "GATE one-change:" in msg and BLOCK in msg and TILE in msg, msg
            assert op.read_text() == src, "a refused change must not touch the file"
            await s.ok("apply_tuning_patch", session_id=sid, knob=TILE, value=[2, 256], catalog_id="F-10",
                       rationale="whole rows per tile")
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            assert (await s.ok("collect_swimlane", session_id=sid))["valid"]
            rec = await s.ok("record_round", session_id=sid)
            assert rec["decision"] == "kept" and rec["after_us"] == pytest.approx(_grid_us(2, 2, 256), abs=2e-3)
            assert '"vec_tile": (2, 256)' in op.read_text() or '"vec_tile": [2, 256]' in op.read_text()

    anyio.run(scenario)


def test_a_dict_the_agents_code_also_iterates_is_no_knob(tmp_path: Path) -> None:
    iterated = (_ws(tmp_path, extra="\n\nfor _key in ROPE_TILING:  # the agent's own code reads the dict whole\n"
                                   "    print(_key)\n") / "rope_op.py").read_text()
    shipped = (OPERATORS / "upstream_rope" / "rope_op.py").read_text()

    def decision(src: str) -> GateRefusal | None:
        try:
            admit({"rope_op.py": src}, {"rope_op.py": src.replace(SHIPPED, '{"block_tokens": 4, "vec_tile": (2, 64)}')})
        except GateRefusal as refusal:
            return refusal
        return None

    refused = decision(iterated)
    assert refused is not None and refused.rule == "one-change", refused
    assert "not a tuning knob" in refused.message and "ROPE_TILING" in refused.message, refused.message
    # the iteration is what makes it no knob: in the shipped operator the same edit is a knob change (here refused at
    # most for its legality, which waits for a run record this gate-level check has none of)
    shipped_decision = decision(shipped)
    assert shipped_decision is None or shipped_decision.rule != "one-change", shipped_decision.message
