"""The first hour of a real user (issue #11), over MCP stdio with the real simulator, on operators written the way
PyPTO's own examples are (argparse ``--run_mode``, a ``file::test_fn`` selector, several jits per file, ``✓ … passed``
output, a test that runs several kernels):

* a passing upstream-style test is judged passed, and the verdict says which line decided it;
* a broken command is refused at start (missing file, a run-mode flag that contradicts the session), and a
  command that starts but fails its baseline can be corrected until the baseline passes (recorded as a correction);
* a test running several kernels is accounted per kernel; knobs of kernels the test never ran are marked (in
  test_first_hour_gaps_over_stdio.py, on the session whose rounds it flags: one baseline serves both);
* a resumed session keeps its goal.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import anyio
import pytest

from tests.conftest import OPERATORS
from tests.server.mcp_client import connect

pytestmark = pytest.mark.sim


def _copy(tmp_path: Path, name: str) -> Path:
    ws = tmp_path / name
    shutil.copytree(OPERATORS / name, ws, ignore=shutil.ignore_patterns("*.json", "__pycache__", "README.md"))
    return ws


def test_an_upstream_style_test_passes_and_says_which_line_decided(tmp_path: Path) -> None:
    ws = _copy(tmp_path, "upstream_softmax")
    good = [sys.executable, "softmax_op.py", "softmax_op.py::test_softmax", "--run_mode", "sim"]

    async def scenario() -> None:
        async with connect(ws) as s:
            base = dict(workspace=str(ws), operator_files=["softmax_op.py"], run_mode="sim", goal_speedup=2.0)
            # refused at start, before anything is recorded: a missing script, a selector naming nothing, and a
            # run-mode flag that contradicts the session
            for cmd, why in (([sys.executable, "no_such.py", "--run_mode", "sim"], "no_such.py"),
                             ([sys.executable, "softmax_op.py", "softmax_op.py::test_nothing", "--run_mode", "sim"],
                              "test_nothing"),
                             ([sys.executable, "softmax_op.py", "--run_mode", "npu"], "npu")):
                msg = await s.refused("start_session", test_command=cmd, **base)
                assert "test command" in msg and why in msg, msg
            # a command that starts but whose baseline cannot pass (it only lists the tests: exit 0, no verdict):
            # corrected before the baseline passed, as a correction of the same session
            wrong = [sys.executable, "softmax_op.py", "--run_mode", "sim", "--list"]
            st = await s.ok("start_session", test_command=wrong, **base)
            sid = st["session_id"]
            failed = await s.ok("run_precision_check", session_id=sid)
            assert failed["verdict"] != "passed" and failed["reason"] and failed["deciding_lines"]
            fixed = await s.ok("start_session", test_command=good, **base)
            assert fixed["session_id"] == sid and fixed["resumed"] and "corrected" in fixed["message"]
            assert fixed["test_command"] == good
            ok = await s.ok("run_precision_check", session_id=sid)
            assert ok["verdict"] == "passed" and ok["numerics_checked"] is False
            assert any("passed" in line["text"] and line["role"] == "pass" for line in ok["deciding_lines"]), ok
            assert "numerics" in ok["message"].lower() or "not checked" in ok["message"].lower()
            # fixed once the baseline passed
            msg = await s.refused("start_session", test_command=wrong, **base)
            assert "GATE command-fixed:" in msg
            # a resumed session keeps its goal
            msg = await s.refused("start_session", test_command=good, **{**base, "goal_speedup": 3.0})
            assert "goal" in msg and "new session" in msg
            ledger = (await s.client.read_resource(f"pypto-tune://sessions/{sid}/ledger")).contents[0].text
            assert '"corrections"' in ledger and "corrected before the baseline" in ledger

    anyio.run(scenario)
