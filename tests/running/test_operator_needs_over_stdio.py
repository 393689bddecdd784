"""Bringing a real test, over MCP stdio: what the test's files need from the interpreter is named by the first
precision check — a module it cannot import, an option key the installed pypto does not know — with the file, the
line and the fix, before the session fingerprints the interpreter (so installing the module then costs nothing); and
a session started in English is answered in English by every tool that answers in prose; and a kernel that only moves
data is measured like any other."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from tests.conftest import make_workspace, python_without_pypto
from tests.server.mcp_client import connect

pytestmark = pytest.mark.process

# PyPTO 0.2.0 knows no runtime option max_workspace_kb: set, it fails the run as `IndexError: map::at` from SetScope
NEEDY_OP = '''"""A kernel file as a user might bring it: an option from another pypto version."""
import pypto

R, C = 8, 64


@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM, "max_workspace_kb": 64})
def kernel(x: pypto.Tensor([R, C], pypto.DT_FP32), y: pypto.Tensor([R, C], pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(8, 64)
    y[:, :] = pypto.exp(x)
'''
NEEDY_TEST = '''import sys

import numdifftools_not_installed_here
import torch

import kernel_op

print("PRECISION: passed")
'''

# Compiled, its copies name no source file (PyPTO's concat, view and assemble examples): only the function says
# where the kernel was defined
STACK_OP = '''"""Two row blocks stacked into one: a kernel that only moves data."""
import pypto
import torch

R, C = 16, 64


@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM})
def stack_kernel(top: pypto.Tensor([R, C], pypto.DT_FP32), bottom: pypto.Tensor([R, C], pypto.DT_FP32),
                 out: pypto.Tensor([2 * R, C], pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(16, 64)
    out[:] = pypto.concat([top, bottom], dim=0)


if __name__ == "__main__":
    out = torch.empty(2 * R, C)
    stack_kernel(torch.ones(R, C), torch.zeros(R, C), out)
    print("PRECISION: passed")
'''


@pytest.mark.sim
def test_the_first_check_names_what_the_test_needs_before_anything_is_fingerprinted(tmp_path: Path) -> None:
    ws = tmp_path / "op"
    ws.mkdir()
    (ws / "kernel_op.py").write_text(NEEDY_OP)
    (ws / "test_kernel.py").write_text(NEEDY_TEST)

    async def scenario() -> str:
        async with connect(ws) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["kernel_op.py"],
                              test_command=["python", "test_kernel.py"], run_mode="sim", goal_speedup=2.0,
                              lang="en"))["session_id"]
            return await s.refused("run_precision_check", session_id=sid)

    text = anyio.run(scenario)
    assert text.startswith("GATE env-check: the environment checklist failed"), text
    assert "test imports: test_kernel.py:3 imports numdifftools_not_installed_here" in text
    assert "before the baseline" in text and "pip install" in text
    assert "pypto options: kernel_op.py:7: runtime_options key 'max_workspace_kb' is not an option" in text
    assert "IndexError: map::at" in text and "stitch_function_max_num" in text
    with sqlite3.connect(ws / ".pypto-tune" / "ledger.sqlite3") as db:
        scans = db.execute("SELECT COUNT(*) FROM env_checks WHERE name = 'interpreter files'").fetchone()[0]
        runs = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    assert scans == 0 and runs == 0, "nothing is fingerprinted or run before the test's needs are met"


def test_a_session_started_in_english_is_answered_in_english(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"],
                              test_command=["python", "softmax.py", "--run-mode", "sim"], run_mode="sim",
                              goal_speedup=2.0, lang="en"))["session_id"]
            en = (await s.ok("get_status", session_id=sid, lang="en"))["board"]
            zh = (await s.ok("get_status", session_id=sid, lang="zh"))["board"]
            assert en != zh
            assert (await s.ok("get_status", session_id=sid))["board"] == en
            resource = (await s.client.read_resource(f"pypto-tune://sessions/{sid}/status")).contents[0].text
            assert resource == en
            stopped = await s.ok("stop_session", session_id=sid, reason="the user is done")
            assert stopped["board"] != (await s.ok("get_status", session_id=sid, lang="zh"))["board"]
            assert stopped["board"] == (await s.ok("get_status", session_id=sid, lang="en"))["board"]
            paths = (await s.ok("render_report", session_id=sid, format="md"))["paths"]
            assert paths and all(Path(p).name.endswith("_en.md") for p in paths), paths

    anyio.run(scenario)



def test_the_checklist_asks_the_interpreter_the_test_runs_not_the_servers(tmp_path: Path) -> None:
    """The server's own interpreter has pypto; the test command's does not: the first check says so, before a
    baseline is spent on a ModuleNotFoundError."""
    python = python_without_pypto()
    ws = make_workspace(tmp_path)

    async def scenario() -> str:
        async with connect(ws) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"],
                              test_command=[python, "softmax.py", "--run-mode", "sim"], run_mode="sim",
                              goal_speedup=2.0, lang="en"))["session_id"]
            return await s.refused("run_precision_check", session_id=sid)

    text = anyio.run(scenario)
    assert text.startswith("GATE env-check: the environment checklist failed"), text
    assert "import pypto" in text and f"{python} -c" in text and "No module named 'pypto'" in text, text
    with sqlite3.connect(ws / ".pypto-tune" / "ledger.sqlite3") as db:
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0


@pytest.mark.sim
def test_a_kernel_that_only_moves_data_is_measured_like_any_other(tmp_path: Path) -> None:
    ws = tmp_path / "op"
    ws.mkdir()
    (ws / "stack_op.py").write_text(STACK_OP)

    async def scenario() -> tuple[dict, dict]:
        async with connect(ws) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["stack_op.py"],
                              test_command=["python", "stack_op.py"], run_mode="sim", goal_speedup=2.0,
                              lang="en"))["session_id"]
            pre = await s.ok("run_precision_check", session_id=sid)
            await s.ok("enable_runtime_debug", session_id=sid)
            return pre, await s.ok("collect_swimlane", session_id=sid)

    pre, lanes = anyio.run(scenario)
    assert pre["verdict"] == "passed", pre["reason"]
    assert lanes["operator_time_us"] > 0
