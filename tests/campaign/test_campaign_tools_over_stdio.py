"""The campaign tools over MCP stdio, as an agent uses them: start a campaign, watch it, stop it — and what a
campaign may not do: take a workspace another server holds, run a test outside its workspace, or keep a change
because a knowledge file says so.

One real server (``pypto-tune serve``) over stdio and one campaign of four operators, started with
``start_campaign`` (its driver is a process of its own):

* ``rmsnorm`` (two trials) ranked with a *forged* knowledge store: forty observations, of eight operators that do not
  exist, claiming that the worst vector tile of rmsnorm (``(1, 1, 512)``: twice the tasks) gains 4096×. The store
  puts it first, says so in ``why``; the server measures it and does not keep it;
* ``softmax`` (six trials), still running when the agent stops the campaign: its step finishes, its session is
  stopped as the user's stop and reported;
* ``held``: a workspace this very server holds a session on — the campaign's session can only attach read-only, so
  the operator fails, naming the holder;
* ``escape``: a test command whose script lies outside its workspace — ``start_session``'s command check refuses it.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from pypto_tune.tools.knowledge.distill import observation
from pypto_tune.tools.knowledge.store import KnowledgeFile, read, write

from tests.conftest import OPERATORS
from tests.sessions import campaign_until
from tests.server.mcp_client import connect

pytestmark = [pytest.mark.slow, pytest.mark.sim]

VEC = "rmsnorm.py:rmsnorm_kernel.set_vec_tile_shapes#1"
WORST = [1, 1, 512]
WAIT_S = 900.0


def forged_store(path: Path) -> None:
    """Forty observations of eight non-existent operators, each the very situation of rmsnorm's worst tile, each
    claiming a 4096× gain (computed with the same function the distiller uses, on rmsnorm's real sources)."""
    src = {"rmsnorm.py": (OPERATORS / "rmsnorm" / "rmsnorm.py").read_text()}
    after = {"rmsnorm.py": src["rmsnorm.py"].replace("set_vec_tile_shapes(1, 2, 512)", "set_vec_tile_shapes(1, 1, 512)")}
    assert after != src
    kf = KnowledgeFile()
    for i in range(40):
        # eight made-up operators: the store counts an operator once however many rounds it holds, so a forgery
        # that wants to lead the ranking must invent several
        o = observation(operator=f"forged_op{i % 8}", session_id=f"forged{i % 8}", round_no=i + 1, stage="FRONTEND",
                        catalog_id="F-10",
                        before_sources=src, after_sources=after, context={}, knob_id=VEC, before_value=[1, 2, 512],
                        after_value=WORST, before_us=4096.0, after_us=1.0, outcome="kept", failure_type=None)
        assert o is not None and o.situation
        kf.observations.append(o)
    write(path, kf)


def manifest(root: Path, held: Path) -> Path:
    (root / "outside.py").write_text("print('PRECISION: passed')\n")
    ops = [("rmsnorm", "rmsnorm", "rmsnorm.py", ["python", "rmsnorm.py", "--run-mode", "sim"], 2),
           ("softmax", "softmax", "softmax.py", ["python", "softmax.py", "--run-mode", "sim"], 6),
           ("escape", "softmax", "softmax.py", ["python", "../outside.py", "--run-mode", "sim"], 2)]
    lines = ['name = "tools"', "batch = 2", "concurrency = 4", "", "[defaults]", 'run_mode = "sim"',
             "goal_speedup = 100", ""]
    for name, src, f, cmd, trials in ops:
        lines += ["[[operator]]", f'name = "{name}"', f'workspace = "ws/{name}"', f'source = "{OPERATORS / src}"',
                  f'operator_files = ["{f}"]', "test_command = " + json.dumps(cmd), f"trials = {trials}", ""]
    lines += ["[[operator]]", 'name = "held"', f'workspace = "{held}"', 'operator_files = ["softmax.py"]',
              'test_command = ["python", "softmax.py", "--run-mode", "sim"]', "trials = 2", ""]
    path = root / "campaign.toml"
    path.write_text("\n".join(lines))
    return path


async def until(s: Any, folder: str, done: Any, what: str) -> dict[str, Any]:
    return await campaign_until(s, folder, done, what, wait_s=WAIT_S, poll_s=2.0)


def test_an_agent_starts_watches_and_stops_a_campaign(tmp_path: Path) -> None:
    root = tmp_path / "lib"
    root.mkdir()
    held = tmp_path / "held"
    held.mkdir()
    shutil.copy2(OPERATORS / "softmax" / "softmax.py", held / "softmax.py")
    store = tmp_path / "forged.json"
    forged_store(store)
    m = manifest(root, held)
    (root / "nogoal.toml").write_text(m.read_text().replace("goal_speedup = 100", ""))

    async def scenario() -> dict[str, Any]:
        async with connect(tmp_path) as s:
            # this server holds a session on `held` (an agent mid-session)
            await s.ok("start_session", workspace=str(held), operator_files=["softmax.py"],
                       test_command=[sys.executable, "softmax.py", "--run-mode", "sim"], run_mode="sim",
                       goal_speedup=2.0)
            refused = await s.refused("start_campaign", manifest=str(root / "nogoal.toml"))
            assert "goal_speedup or goal_target_us" in refused and "Next:" in refused
            started = await s.ok("start_campaign", manifest=str(m), knowledge=str(store))
            assert started["state"] in ("starting", "running") and started["driver_pid"], started
            folder = started["folder"]
            running = await until(s, folder, lambda v: (v["counts"].get("done", 0) >= 1
                                                        or v["state"] not in ("starting", "running")),
                                  "a first operator done")
            assert running["state"] == "running", running["board"]
            rows = {r["name"]: r for r in running["operators"]}
            assert rows["rmsnorm"]["status"] == "done", running["board"]
            stopped = await s.ok("stop_campaign", campaign=folder)
            assert stopped["message"].startswith("stop requested")
            end = await until(s, folder, lambda v: v["state"] in ("stopped", "finished", "driver-gone")
                              and v["driver_pid"] is None, "the campaign to stop")
            again = await s.ok("stop_campaign", campaign=folder)  # idempotent: nothing left to stop
            return {"folder": folder, "end": end, "again": again, "running": running}

    out = anyio.run(scenario)
    end = out["end"]
    rows = {r["name"]: r for r in end["operators"]}
    assert end["state"] == "stopped" and end["driver_pid"] is None, end["board"]
    assert "nothing to stop" in out["again"]["message"]
    assert rows["rmsnorm"]["status"] == "done" and rows["softmax"]["status"] == "stopped", end["board"]
    assert "campaign stopped" in rows["softmax"]["reason"]  # the user's stop, recorded as such by the session
    assert rows["held"]["status"] == "failed" and "holds" in rows["held"]["reason"], rows["held"]
    assert rows["escape"]["status"] == "failed" and "outside.py" in rows["escape"]["reason"], rows["escape"]
    assert len(end["reports"]) == 4 and all(Path(p).is_file() for p in end["reports"])
    assert "rmsnorm" in end["board"] and "SIM" in end["board"]

    # the forged store ranked the worst tile first and said why; the server measured it and did not keep it
    from pypto_tune.tools.campaign.facts import latest_session, ledger_tables

    ws = root / "ws" / "rmsnorm"
    trials = ledger_tables(ws, latest_session(ws).session_id)["trials"]
    # (1, 1, 512) or a tile the model sees doing the same work (more rows than rmsnorm's block of 1 are clipped)
    forged = [t for t in trials if isinstance(t["candidate"]["value"], list)
              and t["candidate"]["value"][1:] == WORST[1:]]
    assert len(forged) == 1, [t["candidate"]["value"] for t in trials]
    t = forged[0]
    assert t["candidate"]["rank"] <= 2 and "forged_op" in t["candidate"]["why"]  # the bonus of a larger move may pass it
    assert t["candidate"]["evidence"]["knowledge"][0]["kind"].startswith("knowledge (other sessions'")
    baseline = latest_session(ws).baseline_us
    assert t["outcome"] == "regression" and t["operator_time_us"] > baseline, t  # measured, judged, not kept
    assert all(x["operator_time_us"] < baseline for x in trials if x["outcome"] == "kept")
    # the campaign's ledgers were added to the store it was given (the forged entries stay, labelled by operator)
    kf = read(store)
    ops = {o.operator for o in kf.observations}
    assert {"forged_op0", "forged_op7", "rmsnorm", "softmax"} <= ops, ops
    measured = [o for o in kf.observations if o.operator == "rmsnorm" and o.after == t["candidate"]["value"]]
    assert measured and measured[0].gain_log2 is not None and measured[0].gain_log2 < 0  # what it really did
