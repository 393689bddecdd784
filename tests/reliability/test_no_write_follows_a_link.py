"""Issue #16, item 5: no write of the server follows a symbolic link, over MCP stdio against the real server.

The attack: a recorded folder is replaced by a symbolic link, then ``revert_patch`` (which restores every recorded
file) deleted and rewrote a file outside the workspace; pointed at the server's own ``.pypto-tune/`` it overwrote the
ledger, and the next start failed with "database disk image is malformed". The same through an operator file
replaced by a link to the ledger. No simulator run is needed to reach these writes: a drift revert is allowed from
the first call on, so the scenario stays cheap (one server, no baseline).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import anyio

from tests.conftest import OPERATORS, sim_command
from tests.server.mcp_client import connect

import pytest

pytestmark = pytest.mark.process

RECORDED = b"recorded notes: the bytes the session started with\n"
FOREIGN = b"a file outside the workspace that nobody gave the server\n"


def _ledger_ok(ws: Path) -> bool:
    con = sqlite3.connect(ws / ".pypto-tune" / "ledger.sqlite3")
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0] == "ok" and bool(
            con.execute("SELECT COUNT(*) FROM sessions").fetchone()[0])
    finally:
        con.close()


def test_revert_never_writes_through_a_folder_or_file_replaced_by_a_link(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    shutil.copy2(OPERATORS / "softmax" / "softmax.py", ws / "softmax.py")
    (ws / "data").mkdir()
    (ws / "data" / "notes.txt").write_bytes(RECORDED)
    (ws / "data" / "ledger.sqlite3").write_bytes(RECORDED)  # a recorded file that shares the ledger's name
    (outside / "notes.txt").write_bytes(FOREIGN)
    op = ws / "softmax.py"
    src = op.read_bytes()

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"],
                              test_command=sim_command(), run_mode="sim", goal_speedup=2.0))["session_id"]
            ledger = ws / ".pypto-tune" / "ledger.sqlite3"
            before = ledger.read_bytes()[:16]

            # 1: the recorded folder data/ replaced by a link to a folder outside the workspace
            shutil.rmtree(ws / "data")
            (ws / "data").symlink_to(outside)
            assert (await s.ok("get_status", session_id=sid))["drift"] is True
            msg = await s.refused("revert_patch", session_id=sid)
            assert "data" in msg and "symbolic link" in msg and "never writes through a link" in msg, msg
            assert (outside / "notes.txt").read_bytes() == FOREIGN, "revert rewrote a file outside the workspace"
            assert (ws / "data").is_symlink(), "nothing moved either: the refusal comes before any write"

            # 2: the same folder pointed at the server's own folder: its recorded ledger.sqlite3 would land on the
            # ledger itself
            (ws / "data").unlink()
            (ws / "data").symlink_to(".pypto-tune")
            msg = await s.refused("revert_patch", session_id=sid)
            assert "data" in msg and "symbolic link" in msg, msg
            assert ledger.read_bytes()[:16] == before and _ledger_ok(ws)

            # the person removes the link (only the link): revert restores the recorded folder byte for byte
            (ws / "data").unlink()
            await s.ok("revert_patch", session_id=sid)
            assert (ws / "data" / "notes.txt").read_bytes() == RECORDED
            assert not (ws / "data").is_symlink()

            # 3: the operator file itself replaced by a link to the ledger: revert puts the file back in place of
            # the link and never writes the operator's text over what the link pointed at
            op.unlink()
            op.symlink_to(".pypto-tune/ledger.sqlite3")
            await s.ok("revert_patch", session_id=sid)
            assert not op.is_symlink() and op.read_bytes() == src
            assert _ledger_ok(ws)
            st = await s.ok("get_status", session_id=sid)
            assert st["drift"] is False and st["ledger_findings"] == []

        # a new server reads the same ledger: nothing was overwritten ("database disk image is malformed" before)
        async with connect(ws) as s:
            again = await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"],
                               test_command=sim_command(), run_mode="sim", goal_speedup=2.0)
            assert again["session_id"] == sid

    anyio.run(scenario)
    assert os.listdir(outside) == ["notes.txt"]
