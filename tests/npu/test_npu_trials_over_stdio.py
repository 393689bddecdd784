"""run_candidates on the NPU keeps the card-retry rule (R5, issue #12), over MCP stdio on the emulated Ascend box.

The box has four chips: chip 0 fails its first run (the baseline moves on to chip 1, R5), chip 2 hangs on every run.
A batch of two candidates, two at a time, must

* never hand chip 0 to a trial: it failed in this session and healthy chips remain;
* take chip 2 for the second trial (it has not failed yet), see that run hang until the timeout, and run the same
  trial once more on another healthy chip rather than record it failed — the ledger names the chip that hung and
  the chip that ran the trial;
* leave chip 2 alone afterwards (the trial's measurement runs and the other trial's).

The box's launch log (``box_runs``) is the ground truth of which chip ran what.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import OPERATORS
from tests.npu_emulator.box import FIXTURE_REFERENCES, box_runs, emulated_box
from tests.server.mcp_client import Session, connect

pytestmark = pytest.mark.sim

CMD = [sys.executable, "softmax.py", "--run-mode", "npu"]
# long enough for a healthy run of the softmax fixture on a busy 2-core machine (about 5 s alone), short enough
# that the hung chip costs little
TIMEOUT_S = 30


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy2(OPERATORS / "softmax" / "softmax.py", ws / "softmax.py")
    return ws


async def _ledger(s: Session, sid: str) -> dict[str, list[dict[str, Any]]]:
    text = (await s.client.read_resource(f"pypto-tune://sessions/{sid}/ledger")).contents[0].text
    return json.loads(text)["tables"]


def _info(row: dict[str, Any]) -> dict[str, Any]:
    return json.loads(row["info"]) if isinstance(row["info"], str) else row["info"]


def test_a_batch_avoids_a_failed_chip_and_retries_a_hung_trial_on_a_healthy_one(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    env = emulated_box(tmp_path, chips=4, faults={0: {"fail_first_runs": 1}, 2: {"hang": True}}, noise_pct=0.0,
                       references=FIXTURE_REFERENCES, config={"cache_sim": True})

    async def scenario() -> None:
        async with connect(ws, env=env) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"], test_command=CMD,
                              run_mode="npu", goal_speedup=100.0, device_ids=["0", "1", "2", "3"],
                              timeout_s=TIMEOUT_S))["session_id"]
            p1 = await s.ok("run_precision_check", session_id=sid)
            assert p1["device_id"] == "0" and p1["verdict"] != "passed"
            p2 = await s.ok("run_precision_check", session_id=sid)
            assert p2["device_id"] == "1" and p2["verdict"] == "passed"
            await s.ok("enable_runtime_debug", session_id=sid)
            assert (await s.ok("collect_swimlane", session_id=sid))["valid"]
            assert (await s.ok("analyze_bubbles", session_id=sid, lang="en"))["stage"] == "FRONTEND"
            before = len(box_runs(env))

            cands = (await s.ok("propose_candidates", session_id=sid, limit=8))["candidates"]
            # the box's derived artifacts of a [4, 8, 256] or a [1, 32, 256] run disagree on an AI-CPU lane's
            # schedule, and the server rightly refuses that measurement — not this test's subject
            cands = [c for c in cands if c["value"] not in ([4, 8, 256], [1, 32, 256])][:2]
            assert len(cands) == 2
            ran = await s.ok("run_candidates", session_id=sid, candidates=[c["id"] for c in cands], parallel=2)
            assert ran["parallel"] == 2 and ran["refused"] == [], ran
            trials = {t["round"]: t for t in ran["trials"]}
            assert all(t["verdict"] == "passed" and t["operator_time_us"] for t in trials.values()), trials

            launches = box_runs(env)[before:]
            chips = [r["device"] for r in launches]
            # (a) chip 0 failed the first baseline run: no trial is handed it while chips 1-3 are healthy
            assert 0 not in chips, launches
            # (b) one trial's precision run hung on chip 2 and was run again on another healthy chip
            hung = [r for r in launches if r["device"] == 2]
            assert [r["outcome"] for r in hung] == ["hang"], launches
            retried = [t for t in trials.values() if t["retried_from"]]
            assert len(retried) == 1, trials
            t = retried[0]
            assert t["retried_from"] == ["2"] and t["device_id"] in ("1", "3"), t
            assert "chip 2" in t["reason"] or "chip 2" in ran["message"], (t, ran["message"])

            tables = await _ledger(s, sid)
            # the ledger says which chip failed and which one ran it: both precision records of the round ...
            precs = [p for p in tables["precision_records"] if p["round"] == t["round"]]
            assert [(p["device_id"], p["verdict"]) for p in precs] == [("2", "timeout"), (t["device_id"], "passed")]
            # ... and the trial row
            row = next(r for r in tables["trials"] if r["round"] == t["round"])
            info = _info(row)
            assert info["device_id"] == t["device_id"]
            assert [f["device_id"] for f in info["chip_failures"]] == ["2"]
            assert info["chip_failures"][0]["result_type"] == "timeout"
            # every run of the batch after the hang avoided chip 2 (the measurement runs included)
            runs = [r for r in tables["runs"] if r["batch"] == ran["batch"]]
            hung_run = next(r for r in runs if r["timed_out"])
            assert hung_run["device_id"] == "2"
            assert all(r["device_id"] not in ("0", "2") for r in runs if r["id"] != hung_run["id"]), runs

    anyio.run(scenario)
