"""Issue #16, item 2: a resume from a server in another environment is refused with the difference named, until a
person accepts the new environment as the session's baseline (``pypto-tune confirm`` typed at a terminal); then it
is recorded and its roots are fingerprinted anew."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import anyio
import pytest
from mcp.client.stdio import get_default_environment

from tests.conftest import make_workspace, sim_command
from tests.server.mcp_client import connect
from tests.sessions import run_in_pty

pytestmark = pytest.mark.sim


def test_a_changed_environment_needs_a_person(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    extra = tmp_path / "extra-site"
    extra.mkdir()
    start = dict(workspace=str(ws), operator_files=["softmax.py"], test_command=sim_command(), run_mode="sim",
                 goal_speedup=2.0)
    other = {**get_default_environment(), "PYTHONPATH": str(extra)}

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = (await s.ok("start_session", **start))["session_id"]
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
        async with connect(ws, env=other) as s:
            msg = await s.refused("start_session", **start)
            assert "GATE environment:" in msg and f"PYTHONPATH is now '{extra}'" in msg, msg
            assert f"interpreter/toolchain roots added: {extra}" in msg
        answer = run_in_pty([sys.executable, "-m", "pypto_tune.server.cli", "confirm", "--workspace", str(ws)],
                            "ACCEPT\n", prompt=b"Type ACCEPT")
        assert f"PYTHONPATH is now '{extra}'" in answer and "accepted by a person" in answer, answer
        async with connect(ws, env=other) as s:
            again = await s.ok("start_session", **start)
            assert again["resumed"] and "accepted is recorded as this session's baseline" in again["message"]
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
        # ... and the old environment is now the different one
        async with connect(ws) as s:
            assert "GATE environment:" in await s.refused("start_session", **start)

    anyio.run(scenario)
    with sqlite3.connect(ws / ".pypto-tune" / "ledger.sqlite3") as db:
        fields = [r[0] for r in db.execute("SELECT field FROM corrections")]
        sources = [r[0] for r in db.execute("SELECT source FROM confirmations WHERE kind = 'environment-accepted'")]
        scans = db.execute("SELECT COUNT(*) FROM env_checks WHERE name = 'interpreter files'").fetchone()[0]
    assert fields == ["environment"] and sources == ["cli"] and scans == 2
