"""The first hour of a real user (issue #11), over MCP stdio with the real simulator, on operators written the way
PyPTO's own examples are (argparse ``--run_mode``, a ``file::test_fn`` selector, several jits per file, ``✓ … passed``
output, a test that runs several kernels):

* a passing upstream-style test is judged passed, and the verdict says which line decided it;
* a broken command is refused at start (missing file, a run-mode flag that contradicts the session), and a
  command that starts but fails its baseline can be corrected until the baseline passes (recorded as a correction);
* a test running several kernels is accounted per kernel; knobs of kernels the test never ran are marked;
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


def test_a_test_running_several_kernels_is_accounted_per_kernel(tmp_path: Path) -> None:
    ws = _copy(tmp_path, "layer_norm_multi")
    cmd = [sys.executable, "layer_norm_ops.py", "layer_norm_ops.py::test_add_rms_norm", "--run_mode", "sim"]

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["layer_norm_ops.py"],
                              test_command=cmd, run_mode="sim", goal_speedup=2.0))["session_id"]
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            await s.ok("enable_runtime_debug", session_id=sid)
            m = await s.ok("collect_swimlane", session_id=sid)
            kernels = {k["kernel"]: k for k in m["per_kernel"]}
            assert set(kernels) == {"residual_add", "rms_norm"}, m["per_kernel"]
            assert m["operator_time_us"] == pytest.approx(sum(k["operator_time_us"] for k in kernels.values()),
                                                          rel=1e-6)
            assert all(k["e2e_us"] > 0 for k in kernels.values()) and "per kernel" in m["message"]
            listed = await s.ok("list_knobs", session_id=sid)
            knobs = listed["knobs"] + listed["dead_knobs"]  # the run-time probe puts the unrun kernel's apart
            # the summary leaves out what is unknown: a knob outside every kernel has no "kernel"
            by_kernel = {k["kernel"]: k["kernel_ran"] for k in knobs if k.get("kernel")}
            assert {k["kernel"] for k in listed["dead_knobs"] if k.get("kernel")} == {"layer_norm"}
            assert by_kernel == {"residual_add": True, "layer_norm": False, "rms_norm": True}, by_kernel
            assert "did not run" in (await s.ok("list_knobs", session_id=sid))["message"]

    anyio.run(scenario)
