"""Path and command guards: nothing the agent passes may escape the workspace, no later tool accepts a command,
and a test command string is split into argv, never handed to a shell."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from pypto_tune.tools.errors import InputError, PatchError
from pypto_tune.tools.patching import plan_diff_edit
from pypto_tune.tools.service import TuningService
from tests.conftest import make_workspace, sim_command
from tests.server.mcp_client import connect

pytestmark = pytest.mark.process


def _start(svc: TuningService, ws: Path, files: list[str]):
    return svc.start_session(workspace=str(ws), operator_files=files, test_command=sim_command(), run_mode="sim",
                             goal_speedup=2.0)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return make_workspace(tmp_path)


def test_operator_file_with_dotdot_is_refused(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.py").write_text("x = 1\n")
    with pytest.raises(InputError, match="outside the workspace"):
        _start(TuningService(default_workspace=ws), ws, ["../outside.py"])


def test_operator_file_absolute_outside_is_refused(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.py").write_text("x = 1\n")
    with pytest.raises(InputError, match="outside the workspace"):
        _start(TuningService(default_workspace=ws), ws, [str(tmp_path / "outside.py")])


def test_operator_file_symlink_escaping_workspace_is_refused(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.py").write_text("x = 1\n")
    os.symlink(tmp_path / "outside.py", ws / "link.py")
    with pytest.raises(InputError, match=r"resolves to .*outside\.py, outside the workspace"):
        _start(TuningService(default_workspace=ws), ws, ["link.py"])


def test_operator_file_inside_ledger_folder_is_refused(ws: Path) -> None:
    (ws / ".pypto-tune").mkdir()
    (ws / ".pypto-tune" / "evil.py").write_text("x = 1\n")
    with pytest.raises(InputError, match=".pypto-tune"):
        _start(TuningService(default_workspace=ws), ws, [".pypto-tune/evil.py"])


def test_operator_file_with_nul_byte_is_refused(ws: Path) -> None:
    with pytest.raises(InputError, match="NUL"):
        _start(TuningService(default_workspace=ws), ws, ["softmax.py\x00.py"])


def test_refused_start_leaves_no_session_in_the_ledger(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.py").write_text("x = 1\n")
    svc = TuningService(default_workspace=ws)
    with pytest.raises(InputError):
        _start(svc, ws, ["../outside.py"])
    ledger = ws / ".pypto-tune" / "ledger.sqlite3"
    if ledger.exists():
        import sqlite3
        assert sqlite3.connect(ledger).execute("select count(*) from sessions").fetchone()[0] == 0


@pytest.mark.parametrize("where", ["abs", "dotdot", "symlink"])
def test_analyze_bubbles_output_dir_outside_workspace_is_refused(ws: Path, tmp_path: Path, where: str) -> None:
    out = tmp_path / "elsewhere" / "output" / "output_20260101_000000"
    out.mkdir(parents=True)
    arg = {"abs": str(out), "dotdot": "../elsewhere/output"}.get(where)
    if where == "symlink":
        os.symlink(tmp_path / "elsewhere", ws / "out-link")
        arg = "out-link/output"
    with pytest.raises(InputError, match="outside the workspace"):
        TuningService(default_workspace=ws).analyze_bubbles(output_dir=arg)


@pytest.mark.parametrize("target", ["other.py", "../softmax.py", "/etc/passwd", ".pypto-tune/ledger.sqlite3"])
def test_diff_touching_a_file_outside_the_operator_set_is_refused(ws: Path, target: str) -> None:
    src = (ws / "softmax.py").read_text()
    diff = (f"--- a/{target}\n+++ b/{target}\n@@ -1,1 +1,1 @@\n-{src.splitlines()[0]}\n+import os\n")
    with pytest.raises(PatchError):
        plan_diff_edit({"softmax.py": src}, diff)


def test_diff_with_two_files_one_foreign_is_refused_whole(ws: Path) -> None:
    src = (ws / "softmax.py").read_text()
    new = src.replace("TILE_B = 4", "TILE_B = 2")
    assert new != src
    import difflib
    good = "".join(difflib.unified_diff(src.splitlines(True), new.splitlines(True), "a/softmax.py", "b/softmax.py"))
    bad = "--- a/evil.py\n+++ b/evil.py\n@@ -0,0 +1,1 @@\n+import os\n"
    with pytest.raises(PatchError):
        plan_diff_edit({"softmax.py": src}, good + bad)


COMMANDISH = ("command", "cmd", "argv", "shell", "exec", "script", "program", "args")


def test_no_tool_but_start_session_accepts_a_command(ws: Path) -> None:
    async def go():
        async with connect(ws) as s:
            return (await s.client.list_tools()).tools

    tools = anyio.run(go)
    assert len(tools) >= 10
    offenders = []
    for t in tools:
        props = (t.input_schema or {}).get("properties", {}) if isinstance(t.input_schema, dict) else {}
        for name, schema in props.items():
            low = name.lower()
            # a closed choice (an enum such as start_campaign's executor "local"/"ray") carries no command text
            if isinstance(schema, dict) and "enum" in schema:
                continue
            if any(w in low for w in COMMANDISH) and t.name != "start_session":
                offenders.append(f"{t.name}.{name}")
        if t.name == "start_session":
            assert "test_command" in props
            assert "shell" not in props, "the MCP surface must not let the agent switch the shell on"
    assert not offenders, offenders


def test_shell_metacharacters_in_test_command_are_not_run_by_a_shell(ws: Path) -> None:
    # the metacharacters follow the run-mode flag's value, which the command check reads as its own word
    cmd = f"{sys.executable} softmax.py --run-mode sim ; touch PWNED && touch PWNED2 | touch PWNED3 $(touch PWNED4)"

    async def go():
        async with connect(ws) as s:
            st = await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"], test_command=cmd,
                            run_mode="sim", goal_speedup=2.0, timeout_s=60)
            assert st["test_command"][0] == sys.executable and "softmax.py" in st["test_command"]
            assert "touch" in st["test_command"]  # the metacharacters became plain words
            await s.client.call_tool("run_precision_check", {"session_id": st["session_id"]})

    anyio.run(go)
    for name in ("PWNED", "PWNED2", "PWNED3", "PWNED4"):
        assert not (ws / name).exists(), f"{name} was created: the command went through a shell"
        assert not (Path.cwd() / name).exists()


def test_analyze_bubbles_without_a_default_workspace_does_not_write_outside(tmp_path: Path) -> None:
    import shutil

    from tests.conftest import RUNS

    elsewhere = tmp_path / "not-a-workspace"
    shutil.copytree(RUNS / "softmax_tuned", elsewhere)
    before = {p for p in elsewhere.rglob("*")}
    try:
        TuningService(default_workspace=None).analyze_bubbles(output_dir=str(elsewhere / "output"), lang="en")
    except InputError:
        return
    written = {p for p in elsewhere.rglob("*")} - before
    assert not written, f"analyze_bubbles wrote outside any workspace: {sorted(written)}"
