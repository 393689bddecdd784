"""The ledger as a user handles it: copied or backed up as one file, restored without its log, damaged in its
middle. Each either resumes the session or is refused with a message that names the file and the way out — never a
silent fresh session over a workspace that has one, never "internal error"."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import anyio

from tests.conftest import make_workspace, sim_command
from tests.server.mcp_client import connect

import pytest

pytestmark = pytest.mark.process

LEDGER = Path(".pypto-tune") / "ledger.sqlite3"


def _start(ws: Path) -> dict:
    return dict(workspace=str(ws), operator_files=["softmax.py"], test_command=sim_command(), run_mode="sim",
                goal_speedup=2.0)


def _put_back(ws: Path, copy: Path) -> None:
    """The ledger file alone in place of the workspace's ledger (its -wal and -shm gone, as after a copy)."""
    for suffix in ("", "-wal", "-shm"):
        (ws / f"{LEDGER}{suffix}").unlink(missing_ok=True)
    shutil.copy2(copy, ws / LEDGER)


def _sessions_in(file: Path) -> int:
    """Sessions readable from the main file alone (a copy of it, so SQLite cannot reach any log beside it)."""
    alone = file.with_name("alone.sqlite3")
    shutil.copy2(file, alone)
    try:
        with sqlite3.connect(alone) as db:
            return int(db.execute("SELECT COUNT(*) FROM sessions").fetchone()[0])
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{alone}{suffix}").unlink(missing_ok=True)


def test_a_ledger_copied_alone_resumes_or_is_refused_by_name(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    backups = tmp_path / "backups"
    backups.mkdir()

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = (await s.ok("start_session", **_start(ws)))["session_id"]
        # the server checkpointed its ledger on the way out: the main file holds the history
        assert _sessions_in(ws / LEDGER) == 1
        shutil.copy2(ws / LEDGER, backups / "after-exit.sqlite3")

        _put_back(ws, backups / "after-exit.sqlite3")
        async with connect(ws) as s:
            again = await s.ok("start_session", **_start(ws))
            assert again["resumed"] and again["session_id"] == sid, again
            # a copy taken while the server runs, before any checkpoint: the stop's rows are only in the log
            await s.ok("stop_session", session_id=sid, reason="the user stops here")
            shutil.copy2(ws / LEDGER, backups / "mid-session.sqlite3")

        _put_back(ws, backups / "mid-session.sqlite3")
        async with connect(ws) as s:
            msg = await s.refused("start_session", **_start(ws))
        assert "history is missing" in msg and str(ws / LEDGER) in msg and "ledger.sqlite3-wal" in msg, msg
        assert "internal error" not in msg

        # garbage in the middle of a checkpointed ledger: a damaged file, named, with what to do
        _put_back(ws, backups / "after-exit.sqlite3")
        size = (ws / LEDGER).stat().st_size
        with open(ws / LEDGER, "r+b") as fh:
            fh.seek(4096)  # past the header page: the tables' pages
            fh.write(os.urandom(size - 2 * 4096))
        async with connect(ws) as s:
            msg = await s.refused("start_session", **_start(ws))
        assert "damaged" in msg and str(ws / LEDGER) in msg and "restore" in msg, msg
        assert "internal error" not in msg

    anyio.run(scenario)
