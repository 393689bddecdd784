"""Issue #16, item 4: the server's own folder ``.pypto-tune/`` belongs to the server. Over MCP stdio, real simulator.

The attack: run copies live under ``.pypto-tune/exec/``, and a test runner looking for its configuration upward from
the copy picked up a file an agent had dropped into ``.pypto-tune/`` — while the status board showed no drift. Here
any file the server did not write there is drift: named on the board, every run refused until ``revert_patch``
moves it into the quarantine; the server's own files (ledger, blobs, artifacts of the baseline) are not.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.conftest import make_workspace, sim_command
from tests.server.mcp_client import connect

pytestmark = pytest.mark.sim

DROPPED = {
    ".pypto-tune/conftest.py": "import os\nos.environ['TILE_B'] = '32'\n",  # found upward from a run copy
    ".pypto-tune/exec/pytest.ini": "[pytest]\naddopts = -p evil\n",
    ".pypto-tune/blobs/" + "0" * 64: "not a recorded file\n",
}


def test_files_dropped_into_the_servers_folder_are_drift_until_quarantined(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"],
                              test_command=sim_command(), run_mode="sim", goal_speedup=2.0))["session_id"]
            await s.ok("run_precision_check", session_id=sid)
            await s.ok("enable_runtime_debug", session_id=sid)
            await s.ok("collect_swimlane", session_id=sid)  # artifacts/ and blobs/ of its own
            st = await s.ok("get_status", session_id=sid)
            assert st["drift"] is False, st["message"]

            for rel, text in DROPPED.items():
                (ws / rel).parent.mkdir(parents=True, exist_ok=True)
                (ws / rel).write_text(text)
            st = await s.ok("get_status", session_id=sid)
            assert st["drift"] is True, st["message"]
            for rel in DROPPED:
                assert rel in st["message"], (rel, st["message"])
            assert "the server did not write" in st["message"]
            for tool in ("collect_swimlane", "run_precision_check"):  # nothing runs next to a foreign file
                msg = await s.refused(tool, session_id=sid)
                assert "GATE drift:" in msg and ".pypto-tune/conftest.py" in msg, msg

            rev = await s.ok("revert_patch", session_id=sid)
            assert "quarantine" in rev["message"], rev
            for rel in DROPPED:
                assert not (ws / rel).exists()
                assert list((ws / ".pypto-tune" / "quarantine").glob(f"*/{rel}")), rel
            st = await s.ok("get_status", session_id=sid)
            assert st["drift"] is False and st["ledger_findings"] == [], st["message"]
            assert (await s.ok("analyze_bubbles", session_id=sid, lang="en"))["stage"] == "FRONTEND"

    anyio.run(scenario)
