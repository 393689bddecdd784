"""Issue #16, item 7: a server that cannot build the run sandbox refuses to measure, naming what is missing, unless the
person starting it passed ``--unsandboxed`` — and such a session says so in the ledger, on the board and in the
report. "Cannot build" is made real by pointing the server at a bwrap that does not exist (``PYPTO_TUNE_BWRAP``)."""

from __future__ import annotations

import sqlite3
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment

from tests.conftest import make_workspace, sim_command
from tests.server.mcp_client import Session
from tests.warm_interpreter import server_command

pytestmark = pytest.mark.sim


@asynccontextmanager
async def _server(ws: Path, *extra: str):
    env = {**get_default_environment(), "PYPTO_TUNE_BWRAP": "/nonexistent/bwrap"}
    # forked from the warm interpreter, as every stdio server of the tests (the sandbox is probed once per server,
    # on first use, in the environment the server got)
    command, args = server_command(["serve", "--workspace", str(ws), "--log-level", "WARNING", *extra], env)
    params = StdioServerParameters(command=command, args=args, cwd=str(ws), env=env)
    async with Client(params, mode="legacy") as client:  # type: ignore[arg-type]
        yield Session(client)


def test_no_sandbox_no_measurement_unless_a_person_said_so(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    start = dict(workspace=str(ws), operator_files=["softmax.py"], test_command=sim_command(), run_mode="sim",
                 goal_speedup=2.0)

    async def scenario() -> None:
        async with _server(ws) as s:
            msg = await s.refused("start_session", **start)
            assert "GATE sandbox:" in msg and "/nonexistent/bwrap" in msg
            assert "apt-get install bubblewrap" in msg and "--unsandboxed" in msg
        ledger = ws / ".pypto-tune" / "ledger.sqlite3"
        if ledger.exists():  # nothing was recorded: no session row
            with sqlite3.connect(ledger) as db:
                assert db.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 0

        async with _server(ws, "--unsandboxed") as s:
            sid = (await s.ok("start_session", **start))["session_id"]
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            ledger = await s.client.read_resource(f"pypto-tune://sessions/{sid}/ledger")
            text = "".join(getattr(c, "text", "") for c in ledger.contents)
            assert '"sandbox": "none"' in text and "bubblewrap (bwrap) is not installed" in text
            board = (await s.ok("get_status", session_id=sid))["board"]
            assert "UNSANDBOXED" in board or "未沙箱化" in board, board
            await s.ok("stop_session", session_id=sid, reason="test over")
            paths = (await s.ok("render_report", session_id=sid, format="both", lang="en"))["paths"]
            for p in paths:
                assert "UNSANDBOXED: runs of this session executed without the run sandbox" in Path(p).read_text()

    anyio.run(scenario)
