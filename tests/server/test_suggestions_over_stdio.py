"""Suggestions an agent can act on (issue #12): in a session, ``analyze_bubbles`` shows only the current stage's
catalogue items, each naming the knobs of THIS operator that carry it out, or saying it is an analysis or needs a
structural change (ALGORITHM stage) — never another stage's items first, never a knob the operator does not have."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import anyio
import pytest

from tests.conftest import OPERATORS
from tests.server.mcp_client import connect

pytestmark = pytest.mark.sim


def test_the_baseline_analysis_suggests_frontend_items_through_this_operators_knobs(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy2(OPERATORS / "softmax" / "softmax.py", ws / "softmax.py")

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"],
                              test_command=[sys.executable, "softmax.py", "--run-mode", "sim"], run_mode="sim",
                              goal_speedup=2.0))["session_id"]
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            await s.ok("enable_runtime_debug", session_id=sid)
            await s.ok("collect_swimlane", session_id=sid)
            a = await s.ok("analyze_bubbles", session_id=sid, lang="en", detail="full")
            assert a["stage"] == "FRONTEND"
            sugg = a["suggestions"]
            assert sugg, a["message"]
            assert {x["stage"] for x in sugg} == {"frontend"}
            knob_ids = {k["id"] for k in (await s.ok("list_knobs", session_id=sid))["knobs"]}
            for x in sugg:
                assert x["action"] in ("knob", "analysis", "structural"), x
                assert (x["action"] == "knob") == bool(x["knobs"]), x
                assert set(x["knobs"]) <= knob_ids, (x, knob_ids)
            # softmax's vector tile and block size serve frontend items: at least one suggestion names one
            assert any(x["action"] == "knob" for x in sugg), sugg
            # the compact default view carries the same annotations
            compact = await s.ok("analyze_bubbles", session_id=sid, lang="en")
            assert [(x["catalog_id"], x["action"]) for x in compact["suggestions"]] == \
                [(x["catalog_id"], x["action"]) for x in sugg[:len(compact["suggestions"])]]

    anyio.run(scenario)
