"""The environment checklist remembers what ``import pypto`` answered, over MCP stdio with the real simulator: a
second session on the same interpreter and environment takes the answer instead of importing torch and pypto
again; a file added to a folder the runs import from, or a workspace entry named like a module the import loads,
makes the checklist ask afresh."""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
from pathlib import Path

import anyio
import pytest

from tests.conftest import OPERATORS
from tests.server.mcp_client import connect

pytestmark = [pytest.mark.process, pytest.mark.sim]


def _workspace(at: Path) -> Path:
    at.mkdir()
    shutil.copy2(OPERATORS / "softmax" / "softmax.py", at / "softmax.py")
    return at


def _import_check(ws: Path) -> str:
    with sqlite3.connect(ws / ".pypto-tune" / "ledger.sqlite3") as db:
        rows = db.execute("SELECT ok, detail FROM env_checks WHERE name = 'import pypto'").fetchall()
    assert len(rows) == 1 and rows[0][0] == 1, rows
    return str(rows[0][1])


def test_a_second_session_takes_the_remembered_answer_and_a_changed_interpreter_or_workspace_asks_again(
        tmp_path: Path) -> None:
    extra = tmp_path / "extra"  # a PYTHONPATH folder: the runs import from it, so the fingerprint covers it
    extra.mkdir()
    env = {"HOME": os.environ["HOME"], "PATH": os.environ["PATH"], "PYTHONPATH": str(extra),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    memo = tmp_path / "cache" / "pypto-tune" / "imports"

    async def baseline(ws: Path) -> str:
        async with connect(ws, env=env) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"],
                              test_command=[sys.executable, "softmax.py", "--run-mode", "sim"], run_mode="sim",
                              goal_speedup=2.0, lang="en"))["session_id"]
            await s.ok("run_precision_check", session_id=sid)
        return _import_check(ws)

    first = anyio.run(baseline, _workspace(tmp_path / "first"))
    assert first.startswith("pypto 0.2.0 from ") and "remembered" not in first, first
    assert len(list(memo.glob("*.json"))) == 1

    second = anyio.run(baseline, _workspace(tmp_path / "second"))
    assert second.startswith(first + " (remembered from "), second

    shadowed = _workspace(tmp_path / "shadowed")
    (shadowed / "sympy").mkdir()  # an empty folder: pypto still imports, but the answer could differ
    assert "remembered" not in anyio.run(baseline, shadowed)

    (extra / "newly_installed.py").write_text("VALUE = 1\n")
    changed = anyio.run(baseline, _workspace(tmp_path / "changed"))
    assert changed.startswith("pypto 0.2.0 from ") and "remembered" not in changed, changed
    assert len(list(memo.glob("*.json"))) == 2, "the changed interpreter's answer is kept under its own digest"
