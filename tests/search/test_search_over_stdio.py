"""Issue #12's "Done when" for the search, over MCP stdio against the real server and the real simulator (softmax
fixture operator, run mode sim):

* proposals are legal (each one run is admitted and passes) and a change that failed, or was tried and not kept, from
  this kept state is neither proposed again nor run again, by id or by object (GATE no-retry);
* a batch with a failing, a data-less and an improving candidate keeps only the improving one, with one ledger round
  per trial and, in SIM, one run per trial (its precision run is its measurement's sample, and a probe-free run of
  the kept bytes measures the same);
* cancelling a batch started in job mode leaves no process of its trials and keeps nothing.

The failing and data-less candidates are written by the test in ``propose_candidates``' shape (the search never
proposes them, which is the point): ``vec_nbuffer_setting {-2: 1, -1: 0}`` fails to compile in SIM (the unified
buffer count 0), and ``stitch_function_max_num 1`` compiles and runs but splits the 8 loop iterations over several
device tasks, so SIM's swimlane records collide and the measurement is invalid (B.9.3) — the kernel ran, no data.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import OPERATORS, sim_command
from tests.server.mcp_client import Session, connect

pytestmark = pytest.mark.sim

SM = "softmax.py:softmax_kernel."
VEC = SM + "set_vec_tile_shapes#1"
NBUF = SM + "pass_options.vec_nbuffer_setting"
STITCH = SM + "runtime_options.stitch_function_max_num"
# fails to compile in SIM: zero buffers for the vector pipeline (tests/admission attack 7 uses the same value)
FAILING = {"id": "hand-nbuf-0", "knob": NBUF, "value": {"-2": 1, "-1": 0}, "catalog_id": "S-5",
           "why": "written by the test: a value that fails to compile", "evidence": {}}
# runs and passes its precision check, but 8 loop iterations on 1 stitched function make several device tasks:
# the simulator's swimlane is invalid (Fake Task > 0), so the trial has no measurement
DATALESS = {"id": "hand-stitch-1", "knob": STITCH, "value": 1, "catalog_id": "S-9",
            "why": "written by the test: a value whose run produces no valid swimlane", "evidence": {}}


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy2(OPERATORS / "softmax" / "softmax.py", ws / "softmax.py")
    return ws


async def _to_frontend(s: Session, ws: Path) -> tuple[str, float]:
    sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"], test_command=sim_command(),
                      run_mode="sim", goal_speedup=100.0))["session_id"]
    assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
    await s.ok("enable_runtime_debug", session_id=sid)
    base = await s.ok("collect_swimlane", session_id=sid)
    assert base["valid"]
    assert (await s.ok("analyze_bubbles", session_id=sid, lang="en"))["stage"] == "FRONTEND"
    return sid, float(base["operator_time_us"])


async def _to_swimlane(s: Session, sid: str) -> None:
    """Leave FRONTEND untouched (every item marked with its own reason) and run SWIMLANE_1's entry analysis."""
    status = await s.ok("get_status", session_id=sid)
    items = (await s.ok("mark_checklist", session_id=sid, catalog_id="F-3", status="not-applicable",
                        reason="F-3 TILE_B already blocks the batch loop; left as shipped for this test"))["items"]
    for cid in [i["catalog_id"] for i in items if i["status"] == "untried"]:
        await s.ok("mark_checklist", session_id=sid, catalog_id=cid, status="not-applicable",
                   reason=f"{cid}: knob measured at baseline {status['baseline_us']:.3f} µs, left as shipped "
                   f"({cid.lower()})")
    assert (await s.ok("advance_stage", session_id=sid, reason="frontend left as shipped"))["stage"] == "SWIMLANE_1"
    await s.ok("collect_swimlane", session_id=sid)
    await s.ok("analyze_bubbles", session_id=sid, lang="en")


async def _ledger(s: Session, sid: str) -> dict[str, list[dict[str, Any]]]:
    text = (await s.client.read_resource(f"pypto-tune://sessions/{sid}/ledger")).contents[0].text
    return json.loads(text)["tables"]


def _key(knob: str, value: Any) -> tuple[str, str]:
    """A (knob, value) pair whatever the spelling of a dict's keys ({"-1": 0} and {-1: 0} are the same setting)."""
    if isinstance(value, dict):
        value = {str(k): v for k, v in value.items()}
    return knob, json.dumps(value, sort_keys=True)


def test_proposals_pass_admission_and_a_change_not_kept_is_never_proposed_or_run_again(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)

    async def scenario() -> None:
        async with connect(ws) as s:
            sid, base_us = await _to_frontend(s, ws)
            prop = await s.ok("propose_candidates", session_id=sid, limit=8)
            cands = prop["candidates"]
            assert cands and prop["stage"] == "FRONTEND"
            assert len({c["id"] for c in cands}) == len(cands)
            for c in cands:
                assert set(c) >= {"id", "knob", "value", "catalog_id", "why", "evidence"}
                assert c["catalog_id"].startswith("F-") and c["why"]
            # the top two, by id: each admitted again by run_candidates, run, verified and measured
            ran = await s.ok("run_candidates", session_id=sid, candidates=[c["id"] for c in cands[:2]])
            assert ran["refused"] == [] and len(ran["trials"]) == 2, ran
            for t in ran["trials"]:
                assert t["verdict"] == "passed" and t["operator_time_us"] and t["operator_time_us"] > 0, t
            assert ran["winner_round"] is not None and ran["best_us"] < base_us

            await _to_swimlane(s, sid)
            kept_us = (await s.ok("get_status", session_id=sid))["best_us"]
            before = (ws / "softmax.py").read_text()
            stitch = (await s.ok("propose_candidates", session_id=sid, knob=STITCH, limit=8))["candidates"]
            tried = next(c for c in stitch if c["value"] > 128)  # no effect on the time in SIM: tried, not kept
            batch = await s.ok("run_candidates", session_id=sid, candidates=[FAILING, tried["id"]])
            by_knob = {t["knob"]: t for t in batch["trials"]}
            assert by_knob[NBUF]["decision"] == "failed" and by_knob[NBUF]["result_type"] == "compile-failure"
            assert by_knob[NBUF]["operator_time_us"] is None
            assert by_knob[STITCH]["verdict"] == "passed" and by_knob[STITCH]["decision"] != "kept"
            assert batch["winner_round"] is None and batch["best_us"] == kept_us
            assert (ws / "softmax.py").read_text() == before  # the kept state is still the workspace
            # the ledger keeps each candidate as it ran — admitted, with the diff that ran — whatever the proposal
            # said (a hand-written object carries neither; a proposal past the answer budget says admitted=false)
            cands = [json.loads(r["candidate"]) if isinstance(r["candidate"], str) else r["candidate"]
                     for r in (await _ledger(s, sid))["trials"] if r["batch"] == batch["batch"]]
            rows = {c["knob"]: c for c in cands}
            assert rows[NBUF]["admitted"] is True and "vec_nbuffer_setting" in rows[NBUF]["diff"], rows[NBUF]
            assert rows[STITCH]["admitted"] is True and "stitch_function_max_num" in rows[STITCH]["diff"]

            # from the same kept state: neither is proposed again, whatever the knob filter or the limit
            again = {_key(c["knob"], c["value"]): c["id"] for c in
                     (await s.ok("propose_candidates", session_id=sid, limit=64))["candidates"]}
            for knob in (NBUF, STITCH):
                again.update({_key(c["knob"], c["value"]): c["id"] for c in
                              (await s.ok("propose_candidates", session_id=sid, knob=knob, limit=64))["candidates"]})
            assert _key(NBUF, FAILING["value"]) not in again
            assert _key(STITCH, tried["value"]) not in again and tried["id"] not in again.values()
            # and run_candidates refuses both again: by id, by the same object, and re-spelled
            respelled = {**FAILING, "id": "respelled", "value": {"-1": 0, "-2": 1}}
            refused = await s.ok("run_candidates", session_id=sid, candidates=[tried["id"], FAILING, respelled])
            assert refused["trials"] == [] and len(refused["refused"]) == 3, refused
            assert all("GATE no-retry" in r for r in refused["refused"]), refused["refused"]
            assert (await s.ok("get_status", session_id=sid))["best_us"] == kept_us

    anyio.run(scenario)


def _trial_processes(roots: list[Path]) -> list[int]:
    """Pids whose working directory or command line lies under one of ``roots`` (this test's own tree)."""
    found = []
    me = os.getpid()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == me:
            continue
        try:
            cwd = os.readlink(p / "cwd")
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(cwd.startswith(str(r)) or str(r) in cmd for r in roots):
            found.append(int(p.name))
    return found


async def _cancel_a_batch_in_job_mode(s: Session, sid: str, ws: Path, tmp_path: Path, base_us: float) -> None:
    """From FRONTEND with nothing kept yet: a batch started with ``wait=False`` and cancelled once its trials'
    simulators run leaves no process of its trials and keeps nothing, and the session goes on."""
    exec_root = ws / ".pypto-tune" / "exec"
    server_pids = set(_trial_processes([tmp_path]))  # the server itself runs with cwd = the workspace
    rounds_before = len((await _ledger(s, sid))["rounds"])
    before = (ws / "softmax.py").read_text()
    cands = (await s.ok("propose_candidates", session_id=sid, limit=3))["candidates"]
    job = await s.ok("run_candidates", session_id=sid, candidates=[c["id"] for c in cands], wait=False)
    assert job["status"] == "running" and job["tool"] == "run_candidates" and "trials" not in job
    # wait until the trials' simulator processes run in their private copies
    deadline = time.monotonic() + 120
    running: list[int] = []
    while time.monotonic() < deadline:
        running = [p for p in _trial_processes([exec_root]) if p not in server_pids]
        if running:
            break
        await anyio.sleep(0.1)
    assert running, "no trial process started under .pypto-tune/exec"
    cancelled = await s.ok("cancel_job", job_id=job["job_id"])
    assert cancelled["status"] == "cancelled"
    deadline = time.monotonic() + 10
    left = running
    while time.monotonic() < deadline:
        left = [p for p in _trial_processes([exec_root, tmp_path]) if p not in server_pids]
        if not left:
            break
        await anyio.sleep(0.1)
    assert left == [], f"processes of the cancelled batch still alive: {left}"
    # nothing kept, nothing decided: the workspace and the kept time are the baseline's
    status = await s.ok("get_status", session_id=sid)
    assert status["running_job"] is None and status["best_us"] == base_us and status["kept"] == 0
    assert (ws / "softmax.py").read_text() == before
    tables = await _ledger(s, sid)
    assert len(tables["rounds"]) == rounds_before and tables.get("trials", []) == []
    # the session goes on: the same candidates can be run again
    assert (await s.ok("propose_candidates", session_id=sid, limit=3))["candidates"]


def test_a_cancelled_batch_keeps_nothing_and_a_failing_a_dataless_and_an_improving_candidate_keep_only_the_last(
        tmp_path: Path) -> None:
    """One session: first a batch cancelled in job mode (see ``_cancel_a_batch_in_job_mode``), then in SWIMLANE_1
    a batch with a failing, a data-less and an improving candidate keeps only the improving one."""
    ws = _workspace(tmp_path)

    async def scenario() -> None:
        async with connect(ws) as s:
            sid, base_us = await _to_frontend(s, ws)
            await _cancel_a_batch_in_job_mode(s, sid, ws, tmp_path, base_us)
            await _to_swimlane(s, sid)
            rounds_before = {r["number"] for r in (await _ledger(s, sid))["rounds"]}
            vec = (await s.ok("propose_candidates", session_id=sid, knob=VEC, limit=4))["candidates"]
            assert vec, "the search proposes vector tiles in SWIMLANE_1"
            improving = vec[0]
            res = await s.ok("run_candidates", session_id=sid, candidates=[FAILING, DATALESS, improving["id"]])
            assert res["refused"] == [] and len(res["trials"]) == 3, res
            by_id = {t["candidate"]: t for t in res["trials"]}
            failing, dataless, good = by_id[FAILING["id"]], by_id[DATALESS["id"]], by_id[improving["id"]]
            assert failing["verdict"] != "passed" and failing["decision"] == "failed"
            assert failing["result_type"] == "compile-failure" and failing["operator_time_us"] is None
            # the data-less one passed its precision check: only its measurement is missing
            assert dataless["verdict"] == "passed" and dataless["decision"] == "failed"
            assert dataless["operator_time_us"] is None and "invalid" in dataless["reason"]
            assert good["decision"] == "kept" and good["result_type"] == "gain" and good["delta_pct"] < 0
            assert [t["decision"] for t in res["trials"]].count("kept") == 1
            assert res["winner_round"] == good["round"]
            assert res["best_us"] == pytest.approx(good["operator_time_us"]) and res["best_us"] < base_us
            status = await s.ok("get_status", session_id=sid)
            assert status["best_us"] == pytest.approx(good["operator_time_us"])

            # the workspace holds the improving candidate's bytes, nothing of the other two
            src = (ws / "softmax.py").read_text()
            assert "stitch_function_max_num\": 128" in src and "vec_nbuffer_setting" not in src
            knobs = {k["id"]: k["value"] for k in (await s.ok("list_knobs", session_id=sid))["knobs"]}
            assert knobs[VEC] == improving["value"]

            # one ledger round per trial, each with its own decision and trial row
            tables = await _ledger(s, sid)
            new = sorted(r["number"] for r in tables["rounds"] if r["number"] not in rounds_before)
            assert new == sorted(t["round"] for t in res["trials"])
            assert all(r["kind"] == "trial" for r in tables["rounds"] if r["number"] in new)
            decisions = {d["number"]: d for d in tables["round_decisions"] if d["number"] in new}
            assert {n: d["decision"] for n, d in decisions.items()} == {t["round"]: t["decision"]
                                                                        for t in res["trials"]}
            assert decisions[good["round"]]["after_us"] == pytest.approx(good["operator_time_us"])
            assert decisions[failing["round"]]["after_us"] is None and decisions[dataless["round"]]["after_us"] is None
            trials = [t for t in tables["trials"] if t["batch"] == res["batch"]]
            assert sorted(t["round"] for t in trials) == new
            assert {t["round"]: t["outcome"] for t in trials}[good["round"]] == "kept"

            # SIM: one run per trial — its precision run (probed) is also its measurement's sample
            # (runs.sim_run_serves_both); the failing trial stopped at that run, the other two were measured on it
            runs = {n: [r for r in tables["runs"] if r["round"] == n] for n in new}
            assert all([r["purpose"] for r in rs] == ["trial-precision"] for rs in runs.values()), runs
            measured = {m["round"]: m for m in tables["measurements"] if m["round"] in new}
            for t in (dataless, good):
                ids = measured[t["round"]]["run_ids"]
                ids = json.loads(ids) if isinstance(ids, str) else ids
                assert ids == [runs[t["round"]][0]["id"]]
            # and its figure is a probe-free run's: a manual measurement of the kept bytes (a run of its own,
            # without the probe) gives the same time to the last digit — the simulator does not see the host's Python
            again = await s.ok("collect_swimlane", session_id=sid)
            assert again["valid"] and again["operator_time_us"] == good["operator_time_us"]
            tables = await _ledger(s, sid)
            last = max(tables["runs"], key=lambda r: r["id"])
            assert last["purpose"] not in ("precision", "trial-precision")  # it carried no probe

    anyio.run(scenario)
