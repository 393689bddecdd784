"""scripts/setup.sh and scripts/demo.sh run again while a session and a campaign run from the same checkout: they
change no file of .venv (a session fingerprints the interpreter's files and would discard its next run), say so in one
line, the session goes on measuring and the campaign's trials are all judged on runs the server kept; a set-up that
must change .venv names the running session and stops."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import json

import anyio

from tests.conftest import OPERATORS, require_real
from tests.server.mcp_client import connect
from tests.sessions import campaign_until

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv"
SOFTMAX = ROOT / "fixtures" / "operators" / "softmax" / "softmax.py"


def _venv_state() -> dict[str, tuple[int, int, int, int]]:
    """Every entry of .venv with what a rewrite changes: size, inode, mtime and ctime (the session's scan reads
    size, inode and ctime)."""
    out = {}
    for folder, dirs, files in os.walk(VENV):
        for name in dirs + files:
            st = os.lstat(os.path.join(folder, name))
            out[os.path.join(folder, name)] = (st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    return out


def _run(script: str, *args: str, extra: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "EXTRA"}
    if extra:
        env["EXTRA"] = extra
    return subprocess.run(["bash", str(ROOT / "scripts" / script), *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=ROOT)


def _stamped_extras() -> set[str]:
    try:
        lines = (VENV / ".pypto-tune-setup").read_text().splitlines()
    except OSError:
        return set()
    return {e for line in lines if line.startswith("extras ") for e in line.split(" ", 1)[1].split(",")}


def _campaign(root: Path) -> Path:
    """One softmax operator, three trials one at a time: long enough to be running while the set-up runs twice."""
    root.mkdir()
    cmd = json.dumps(["python", "softmax.py", "--run-mode", "sim"])
    (root / "campaign.toml").write_text(
        'name = "beside-setup"\nbatch = 1\nconcurrency = 1\n\n[defaults]\nrun_mode = "sim"\ngoal_speedup = 100\n\n'
        f'[[operator]]\nname = "softmax"\nworkspace = "ws/softmax"\nsource = "{OPERATORS / "softmax"}"\n'
        f'operator_files = ["softmax.py"]\ntest_command = {cmd}\ntrials = 3\n')
    return root / "campaign.toml"


def test_setup_and_demo_run_again_beside_a_session_change_nothing_it_measures(tmp_path: Path) -> None:
    require_real(Path(sys.executable).parent.parent == VENV, f"the tests run from {VENV}")
    require_real({"sim", "operator-tests"} <= _stamped_extras(), "a .venv made by scripts/setup.sh (its stamp)")
    ws = tmp_path / "op"
    ws.mkdir()
    shutil.copy2(SOFTMAX, ws / "softmax.py")

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"],
                              test_command=["python", "softmax.py", "--run-mode", "sim"], run_mode="sim",
                              goal_speedup=4.0))["session_id"]
            # the baseline's precision check fingerprints the interpreter's files: from here on a change voids runs
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            await s.ok("enable_runtime_debug", session_id=sid)
            # a campaign from the same checkout, its operator's session started and measuring
            started = await s.ok("start_campaign", manifest=str(_campaign(tmp_path / "lib")))
            folder = started["folder"]
            running = await campaign_until(
                s, folder, lambda v: any(r["status"] == "running" for r in v["operators"])
                or v["state"] not in ("starting", "running"), "the campaign's operator to run", wait_s=600, poll_s=1.0)
            assert running["state"] == "running", running["board"]
            before = _venv_state()
            # the checkout's main command and its set-up, run twice while the session holds its workspace
            for _ in range(2):
                setup = _run("setup.sh")
                assert setup.returncode == 0, setup.stderr
                assert setup.stdout.strip().splitlines()[-1].startswith("setup: .venv is up to date"), setup.stdout
                demo = _run("demo.sh", "--help")
                assert demo.returncode == 0 and "usage: pypto-tune demo" in demo.stdout, demo.stderr
            assert _venv_state() == before
            end = await campaign_until(s, folder, lambda v: v["state"] not in ("starting", "running")
                                       and v["driver_pid"] is None, "the campaign to finish", wait_s=600, poll_s=1.0)
            assert end["state"] == "finished", end["board"]
            row = {r["name"]: r for r in end["operators"]}["softmax"]
            assert row["status"] == "done", row
            # a set-up that must change .venv (an extra not installed) names the session and stops
            refused = _run("setup.sh", extra="mutation")
            assert refused.returncode == 1, refused.stdout + refused.stderr
            assert "processes run from it" in refused.stderr
            # each process is listed with every session it (or a child) holds: the test runner holds others too
            holders = [ln for ln in refused.stderr.splitlines() if "holds the session of" in ln]
            assert any(str(ws) in [w.strip() for w in ln.split("holds the session of", 1)[1].split(", ")]
                       for ln in holders), holders
            assert "--force" in refused.stderr
            assert _venv_state() == before
            # and the session still measures: its baseline collection is valid, nothing discarded
            measured = await s.ok("collect_swimlane", session_id=sid)
            assert measured["valid"] and measured["operator_time_us"], measured["invalid_reasons"]

    anyio.run(scenario)

    # the campaign's ledger: every run kept (none discarded for a changed interpreter), every trial judged on its
    # measurement, so no knob value was charged for the set-up
    from pypto_tune.tools.campaign.facts import latest_session, ledger_tables
    from pypto_tune.tools.session.discarded import discarded_run_ids

    cws = tmp_path / "lib" / "ws" / "softmax"
    rows = ledger_tables(cws, latest_session(cws).session_id)
    assert rows["runs"] and not any(r.get("tampered") for r in rows["runs"]), [r["tampered"] for r in rows["runs"]]
    assert len(rows["trials"]) == 3, rows["trials"]
    assert len(rows["round_decisions"]) >= 3 and not discarded_run_ids(rows), rows["round_decisions"]


def test_setup_help_and_an_unknown_option() -> None:
    shown = _run("setup.sh", "--help")
    assert shown.returncode == 0 and "--force" in shown.stdout and "EXTRA=" in shown.stdout
    wrong = _run("setup.sh", "--froce")
    assert wrong.returncode == 2 and "--force" in wrong.stderr
