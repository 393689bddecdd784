"""A run the server discards for its own reasons is no result of the code it ran.

An unrelated package installed into the test's interpreter while a batch runs (or the set-up script run again) makes
the server discard the batch's runs — rightly: the interpreter's files are no longer those scanned before the
baseline. The trials are *invalid*: no failed decision, no value excluded by the no-retry rule (R19) or by the
search, in the same session and after a resume. A ledger written by the server before this rule charged such trials
to their values (``failed / runtime-error``); it is repaired on resume by one correction row that names the rounds.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from pypto_tune.tools.session.recorder import patch_row
from pypto_tune.tools.patching import plan_knob_edit
from pypto_tune.tools.session.ledger import Ledger, now_iso
from pypto_tune.tools.session.state import derive_state, load_rows
from tests.conftest import OPERATORS
from tests.server.mcp_client import Session, connect
from tests.sessions import own_interpreter, to_frontend

pytestmark = pytest.mark.sim


def _pip_install_unrelated(site: Path) -> None:
    """What `pip install` of a package the test never imports leaves in site-packages."""
    (site / "unrelated_pkg").mkdir()
    (site / "unrelated_pkg" / "__init__.py").write_text("VERSION = '1.0'\n")
    info = site / "unrelated_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: unrelated-pkg\nVersion: 1.0\n")


def _key(knob: str, value: Any) -> tuple[str, str]:
    return knob, repr(value)


async def _proposed(s: Session, sid: str) -> set[tuple[str, str]]:
    prop = await s.ok("propose_candidates", session_id=sid, limit=64)
    return {_key(c["knob"], c["value"]) for c in prop["candidates"]}


async def _wait(s: Session, job: dict[str, Any]) -> dict[str, Any]:
    while True:
        done = await s.ok("wait_job", job_id=job["job_id"], timeout_s=20)
        if done["status"] != "running":
            return done


def _charge_as_the_server_did(ws: Path, sid: str, batch: str) -> list[int]:
    """Append the rows the server wrote for such a batch before the rule: each discarded trial a round with its
    trial patch, decided ``failed / runtime-error`` (sealed like the server's own rows). Returns the rounds."""
    ledger = Ledger.for_workspace(ws)
    try:
        st = derive_state(load_rows(ledger, sid))
        trials = [t for t in st.rows["trials"] if t["batch"] == batch]
        with ledger.transaction() as tx:
            for t in trials:
                cand, n = t["candidate"], int(t["round"])
                plan = plan_knob_edit(st.kept_sources, cand["knob"], cand["value"])
                change = plan.changes[0]
                tx.insert("rounds", session_id=sid, number=n, opened_at=now_iso(), stage=st.stage,
                          outer_round=st.outer_round, kind="trial", catalog_id=cand["catalog_id"],
                          change=f"{change.knob_id}: {change.before!r} → {change.after!r}",
                          rationale=f"candidate {cand['id']} of batch {batch}", before_hash=st.kept_hash,
                          before_raw_hash=st.kept_raw_hash, before_us=st.kept_us)
                tx.insert("patches", **patch_row(sid, kind="trial", round_no=n, before=st.kept_sources,
                                                  after=plan.new_sources, note=f"candidate of batch {batch}",
                                                  catalog_id=cand["catalog_id"], changes=[change]))
                tx.insert("round_decisions", session_id=sid, number=n, at=now_iso(), decision="failed",
                          result_type="runtime-error", after_us=None, delta_pct=None,
                          error_output=t["info"]["reason"], notes="", restored_hash=st.kept_hash)
        return sorted(int(t["round"]) for t in trials)
    finally:
        ledger.close()


def test_a_package_installed_during_a_batch_charges_no_value(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy2(OPERATORS / "softmax" / "softmax.py", ws / "softmax.py")
    python, site = own_interpreter(tmp_path)
    cmd = [python, "softmax.py", "--run-mode", "sim"]
    start = dict(workspace=str(ws), operator_files=["softmax.py"], test_command=cmd, run_mode="sim",
                 goal_speedup=100.0)

    async def scenario() -> tuple[str, str, list[tuple[str, str]]]:
        async with connect(ws) as s:
            sid = await to_frontend(s, ws, ["softmax.py"], cmd, goal_speedup=100.0)
            # a batch of one: what the server does with a discarded trial does not depend on how many ran beside it
            cands = (await s.ok("propose_candidates", session_id=sid, limit=4))["candidates"][:1]
            tried = [_key(c["knob"], c["value"]) for c in cands]
            job = await s.ok("run_candidates", session_id=sid, candidates=[c["id"] for c in cands], wait=False)
            await anyio.sleep(1.0)
            _pip_install_unrelated(site)
            res = (await _wait(s, job))["result"]
            assert res["winner_round"] is None and len(res["trials"]) == 1, res
            for t in res["trials"]:
                assert t["decision"] == "invalid" and "interpreter's files changed" in t["reason"], t
            assert "INVALID" in res["message"] and "start a new session" in res["message"], res["message"]
            status = await s.ok("get_status", session_id=sid)
            assert status["rounds"] == 0 and "INVALID: 1 trial(s)" in status["message"], status["message"]
            assert set(tried) <= await _proposed(s, sid)  # nothing excluded in the same session

            # a manual round meets the same: its run is discarded, the round cannot be judged failed, and rolling
            # it back charges nothing — the same change is admitted again
            patch = dict(session_id=sid, knob="softmax.py:TILE_B", value=8, catalog_id="F-3",
                         rationale="a larger batch block, tried by hand after the batch")
            await s.ok("apply_tuning_patch", **patch)
            prec = await s.ok("run_precision_check", session_id=sid)
            assert prec["verdict"] == "error" and "interpreter's files changed" in prec["reason"], prec
            refused = await s.refused("record_round", session_id=sid)
            assert "GATE discarded-run" in refused and "start a new session" in refused, refused
            assert (await s.ok("revert_patch", session_id=sid))["decision"] == "reverted"
            await s.ok("apply_tuning_patch", **patch)  # not refused by R19
            await s.ok("revert_patch", session_id=sid)
            return sid, res["batch"], tried

    sid, batch, tried = anyio.run(scenario)

    async def resumed() -> str:
        async with connect(ws) as s:
            again = await s.ok("start_session", **start)
            assert again["resumed"] and "repaired" not in again["message"], again["message"]
            assert set(tried) <= await _proposed(s, sid)
        return again["message"]

    anyio.run(resumed)

    # the same batch as the server recorded it before the rule: charged to the values
    rounds = _charge_as_the_server_did(ws, sid, batch)

    async def repaired() -> None:
        async with connect(ws) as s:
            again = await s.ok("start_session", **start)
            assert "repaired the ledger" in again["message"], again["message"]
            assert f"round(s) {', '.join(map(str, rounds))}" in again["message"]
            assert set(tried) <= await _proposed(s, sid)
            # the two manual rounds rolled back; the voided batch rounds count nowhere
            assert (await s.ok("get_status", session_id=sid))["rounds"] == 2

    anyio.run(repaired)
    ledger = Ledger.for_workspace(ws)
    try:
        fixes = [c for c in ledger.rows("corrections", sid) if c["field"] == "discarded-runs"]
        decisions = ledger.rows("round_decisions", sid)
    finally:
        ledger.close()
    assert len(fixes) == 1 and fixes[0]["after_value"]["rounds"] == rounds, fixes
    assert "interpreter's files changed" in fixes[0]["reason"]
    # the old decisions stay as they were written (append-only): the correction voids them
    assert [int(d["number"]) for d in decisions if d["decision"] == "failed"] == rounds
