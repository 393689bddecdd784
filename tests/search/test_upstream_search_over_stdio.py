"""Issue #17 items 3–4 over MCP stdio, on the upstream-style fixtures, with the real server and the real simulator.

One LayerNorm session (``fixtures/operators/upstream_layernorm``: a config dataclass built in the test, a
dynamic-batch branch the static test never enters, block rows linked to the tile's rows):

* its ``✓ LayerNorm passed`` line decides the baseline verdict;
* ``propose_candidates`` never targets a site ``list_knobs`` reports dead, never proposes a tile larger than one
  loop iteration's view ([block_rows = 1, 512], read off the fixture's source), raises the block first and names
  the linked pair; with ``wait=false`` it answers with a job handle whose result is the same proposal;
* ``run_candidates(wait=false)`` answers with a handle; after the batch ``analyze_bubbles`` analyses the kept state
  by default and the trial it is asked for with ``round``; ``measurement`` and ``round`` together, or a round
  without a measurement, are refused with the rounds that have one;
* the next proposal of the block carries the batch's trials as this session's history.

One activation workspace whose SIM success line was reworded so that it is no verdict at all: the precision check
reports a command problem (a pass_pattern to add, not baseline failure 1/3, no device named in SIM), and the same
session passes once started again with the suggested pass_pattern.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import OPERATORS
from tests.server.mcp_client import Session, connect

pytestmark = [pytest.mark.sim, pytest.mark.slow]

LN_CMD = ["layernorm_op.py", "layernorm_op.py::test_layer_norm", "--run_mode", "sim"]
BLOCK = "layernorm_op.py:test_layer_norm.LayerNormConfig(block_rows)"


def _copy(tmp_path: Path, op: str) -> Path:
    ws = tmp_path / op
    shutil.copytree(OPERATORS / op, ws, ignore=shutil.ignore_patterns("__pycache__", "output", ".pypto-tune",
                                                                      "grid.json"))
    return ws


async def _wait(s: Session, handle: dict[str, Any]) -> dict[str, Any]:
    while handle["status"] not in ("done", "failed", "cancelled"):
        handle = await s.ok("wait_job", job_id=handle["job_id"], timeout_s=30)
    assert handle["status"] == "done", handle
    return handle["result"]


async def _ledger(s: Session, sid: str) -> dict[str, list[dict[str, Any]]]:
    text = (await s.client.read_resource(f"pypto-tune://sessions/{sid}/ledger")).contents[0].text
    return json.loads(text)["tables"]


def _config_in_test(text: str) -> tuple[int, int]:
    """block_rows of test_layer_norm's config and the hidden size (the dataclass default HIDDEN)."""
    block = int(re.search(r"def test_layer_norm\(.*?\n\s+config = LayerNormConfig\(block_rows=(\d+)", text,
                          re.S).group(1))
    hidden = int(re.search(r"^HIDDEN = (\d+)", text, re.M).group(1))
    return block, hidden


def test_search_on_an_upstream_style_operator_over_stdio(tmp_path: Path) -> None:
    ws = _copy(tmp_path, "upstream_layernorm")
    block, hidden = _config_in_test((ws / "layernorm_op.py").read_text())

    async def main() -> None:
        async with connect(ws) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["layernorm_op.py"],
                              test_command=[sys.executable, *LN_CMD], run_mode="sim",
                              goal_speedup=1000.0))["session_id"]
            pre = await s.ok("run_precision_check", session_id=sid)
            assert pre["verdict"] == "passed" and pre["deciding_lines"][-1]["text"].startswith("✓ LayerNorm passed")
            assert pre["device_id"] is None  # SIM: no device
            await s.ok("enable_runtime_debug", session_id=sid)
            await s.ok("collect_swimlane", session_id=sid)
            await s.ok("analyze_bubbles", session_id=sid, lang="en")

            knobs = await s.ok("list_knobs", session_id=sid)
            dead = {k["id"] for k in knobs["dead_knobs"]}
            assert "layernorm_op.py:build_layer_norm.layer_norm_kernel.set_vec_tile_shapes#1" in dead  # dynamic path

            prop = await s.ok("propose_candidates", session_id=sid, limit=8)
            cands = prop["candidates"]
            assert cands and not {c["knob"] for c in cands} & dead
            for c in cands:
                v = c["value"]
                if isinstance(v, list) and len(v) == 2:  # a vector tile, pinned or as the config field
                    assert v[0] <= block and v[1] <= hidden, c
            assert cands[0]["knob"] == BLOCK and cands[0]["value"] > block
            assert any(n.startswith("linked pair") for n in prop["notes"])

            handle = await s.ok("propose_candidates", session_id=sid, limit=8, wait=False)
            assert set(handle) >= {"job_id", "status"}
            again = await _wait(s, handle)
            assert [c["id"] for c in again["candidates"]] == [c["id"] for c in cands]

            handle = await s.ok("run_candidates", session_id=sid, candidates=[c["id"] for c in cands[:2]],
                                wait=False)
            assert set(handle) >= {"job_id", "status"}
            res = await _wait(s, handle)
            tables = await _ledger(s, sid)
            by_round = {int(m["round"]): m for m in tables["measurements"] if m["valid"]}
            kept_round = res["winner_round"] if res["winner_round"] is not None else 0
            a = await s.ok("analyze_bubbles", session_id=sid, lang="en")
            assert "the kept state" in a["message"]
            assert a["measurement_id"] == by_round[kept_round]["id"]
            other = [t for t in res["trials"] if t["round"] != kept_round and t["round"] in by_round]
            if other:
                r = other[0]["round"]
                b = await s.ok("analyze_bubbles", session_id=sid, lang="en", round=r)
                assert b["measurement_id"] == by_round[r]["id"] and f"round {r} as asked" in b["message"]
            both = await s.refused("analyze_bubbles", session_id=sid, measurement=by_round[kept_round]["id"],
                                   round=kept_round)
            assert "not both" in both
            missing = await s.refused("analyze_bubbles", session_id=sid, round=999)
            assert "round 999 has no valid measurement" in missing and "rounds with one" in missing

            nxt = await s.ok("propose_candidates", session_id=sid, limit=8, knob=BLOCK)
            rounds = {h["round"] for c in nxt["candidates"] for h in c["evidence"].get("history", [])}
            assert rounds & {t["round"] for t in res["trials"]}, [c["why"] for c in nxt["candidates"]]

    anyio.run(main)


def test_a_missing_verdict_line_is_a_command_problem_over_stdio(tmp_path: Path) -> None:
    ws = _copy(tmp_path, "upstream_activation")
    path = ws / "activation_ops.py"
    text = path.read_text()
    # the SIM success line reworded so that no recogniser reads a verdict in it (a user's own wording)
    old = 'print(f"✓ {name} test {word} (SIM: simulated only; numerics not checked)")'
    assert old in text
    path.write_text(text.replace(old, 'print(f"{name}: kernel returned, outputs written (SIM)")'))
    cmd = [sys.executable, "activation_ops.py", "activation_ops.py::test_swiglu", "--run_mode", "sim"]

    async def main() -> None:
        async with connect(ws) as s:
            args = dict(workspace=str(ws), operator_files=["activation_ops.py"], test_command=cmd, run_mode="sim",
                        goal_speedup=10.0)
            sid = (await s.ok("start_session", **args))["session_id"]
            pre = await s.ok("run_precision_check", session_id=sid)
            assert pre["verdict"] == "failed" and pre["command_problem"] is True
            assert pre["attempts_left"] == 3  # not baseline failure 1/3 (R5 counts failures of the operator)
            assert "NOT a baseline failure" in pre["message"] and "pass_pattern" in pre["message"]
            assert "device" not in pre["message"].lower() and pre["device_id"] is None
            pattern = pre["suggested_pass_pattern"]
            assert pattern and re.search(pattern, "SwiGLU: kernel returned, outputs written (SIM)")
            status = await s.ok("get_status", session_id=sid)
            assert status["state"] == "S1_SETUP"
            # the advice works: the same session, started again with the pattern, passes
            await s.ok("start_session", **args, pass_pattern=pattern)
            again = await s.ok("run_precision_check", session_id=sid)
            assert again["verdict"] == "passed" and again["decided_by"] == "session-pattern"

    anyio.run(main)
