"""What a person and an ordinary agent do to a session while the server runs, over MCP stdio on a workspace of its
own file system (a small tmpfs, so that the disk can fill):

* SIGINT during a run and during a batch: the pending call ends within 5 s (the connection closes), the server
  exits with its runs, and a resumed session carries on to the result an uninterrupted one reaches;
* an edit of the operator file while a batch runs — a comment, then a knob: the batch never writes over it (its
  decision is held), and revert_patch keeps a copy before it restores the recorded state;
* the disk filling while a batch runs: a message that names the cause and the file, nothing charged to a value,
  and the session goes on once space is back.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import OPERATORS, require_real, sim_command
from tests.reliability.crash_harness import processes_in, server_pids
from tests.running.runner_helpers import is_alive
from tests.server.mcp_client import Session, connect
from tests.sessions import to_frontend

pytestmark = pytest.mark.sim

TILE_B = "softmax.py:TILE_B"


@pytest.fixture
def tmpfs(tmp_path: Path):
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=384m", "tmpfs", str(mnt)], capture_output=True)
    require_real(r.returncode == 0, f"cannot mount a tmpfs here ({r.stderr.decode().strip()}): needs root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(mnt: Path) -> Path:
    """Take every free byte of the file system."""
    filler = mnt / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        free = shutil.disk_usage(mnt).free
        try:
            os.posix_fallocate(fd, 0, max(free - 65536, 1))
        except OSError:
            pass
        os.lseek(fd, 0, os.SEEK_END)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
    finally:
        os.close(fd)
    return filler


async def _until_a_run_executes(ws: Path) -> None:
    deadline = time.monotonic() + 180
    while not processes_in(ws / ".pypto-tune" / "exec"):
        assert time.monotonic() < deadline, "no run started under .pypto-tune/exec"
        await anyio.sleep(0.1)


async def _wait(s: Session, job: dict[str, Any]) -> dict[str, Any]:
    while True:
        done = await s.ok("wait_job", job_id=job["job_id"], timeout_s=20)
        if done["status"] != "running":
            return done


async def _interrupted(ws: Path, start: dict[str, Any], tool: str, args: dict[str, Any],
                       before: Callable[[Session], Awaitable[dict[str, Any]]] | None = None) -> tuple[float, str]:
    """Resume, call ``tool``, SIGINT the server once a run of it executes. Returns the seconds from the signal to
    the call's end (an answer or the closed connection) and what the call got. ``before``, when given, acts on the
    resumed session first and returns more arguments for ``tool``."""
    ended: list[float] = []
    got: list[str] = []
    sent: list[float] = []
    failed: list[Exception] = []
    pid = 0
    try:
        async with connect(ws) as s:
            assert (await s.ok("start_session", **start))["resumed"]
            (pid,) = server_pids(ws)
            if before is not None:
                try:
                    args = {**args, **await before(s)}
                except Exception as exc:  # noqa: BLE001 - raised below, not taken for the closed connection
                    failed.append(exc)
                    raise

            async def call() -> None:
                try:
                    res = await s.client.call_tool(tool, args)
                    got.append("".join(getattr(b, "text", "") for b in res.content))
                except Exception as exc:  # noqa: BLE001 - the connection closing is one of the two right answers
                    got.append(f"{type(exc).__name__}: {exc}")
                ended.append(time.monotonic())

            with anyio.fail_after(240):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    await _until_a_run_executes(ws)
                    os.kill(pid, signal.SIGINT)
                    sent.append(time.monotonic())
    except Exception:  # noqa: BLE001 - closing a client whose server is gone may fail; the checks follow
        if failed:
            raise failed[0] from None
    assert sent and ended, f"the call never ended after SIGINT: {got}"
    deadline = time.monotonic() + 5
    while is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not is_alive(pid), "the server is still alive 5 s after SIGINT"
    deadline = time.monotonic() + 5
    while processes_in(ws / ".pypto-tune" / "exec") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not processes_in(ws / ".pypto-tune" / "exec"), "runs of the interrupted call survive the server"
    return ended[0] - sent[0], got[0] if got else ""


def _quarantined(ws: Path, text: str) -> bool:
    return any(p.read_text() == text for p in (ws / ".pypto-tune" / "quarantine").rglob("softmax.py"))


async def _batch_meets_an_edit(s: Session, ws: Path, sid: str, ids: list[str], edit: Any) -> dict[str, Any]:
    """run_candidates while ``edit`` changes softmax.py under it: the edit survives the batch, the workspace shows
    drift, and revert_patch keeps a copy of the edit before restoring the recorded state."""
    job = await s.ok("run_candidates", session_id=sid, candidates=ids, wait=False)
    await _until_a_run_executes(ws)
    edited = edit((ws / "softmax.py").read_text())
    (ws / "softmax.py").write_text(edited)
    res = (await _wait(s, job))["result"]
    assert (ws / "softmax.py").read_text() == edited, "the batch wrote over an edit nobody recorded"
    if res["winner_round"] is not None:
        assert "NOT WRITTEN" in res["message"] and "softmax.py changed since" in res["message"], res["message"]
    status = await s.ok("get_status", session_id=sid)
    assert status["drift"], status["message"]
    reverted = await s.ok("revert_patch", session_id=sid)
    assert _quarantined(ws, edited), "revert_patch restored the file without keeping the edit"
    assert ".pypto-tune/quarantine/" in reverted["message"], reverted["message"]
    assert not (await s.ok("get_status", session_id=sid))["drift"], reverted
    return res


def test_signals_edits_and_a_full_disk_during_runs(tmpfs: Path) -> None:
    ws = tmpfs / "ws"
    ws.mkdir()
    shutil.copy2(OPERATORS / "softmax" / "softmax.py", ws / "softmax.py")
    cmd = sim_command()
    start = dict(workspace=str(ws), operator_files=["softmax.py"], test_command=cmd, run_mode="sim",
                 goal_speedup=100.0)

    async def baseline() -> tuple[str, float, list[dict[str, Any]]]:
        async with connect(ws) as s:
            sid = await to_frontend(s, ws, ["softmax.py"], cmd, goal_speedup=100.0)
            base = (await s.ok("get_status", session_id=sid))["best_us"]
            await s.ok("apply_tuning_patch", session_id=sid, knob=TILE_B, value=8, catalog_id="F-3",
                       rationale="a larger batch block, verified while a person presses Ctrl-C")
            cands = (await s.ok("propose_candidates", session_id=sid, limit=4))["candidates"]
            return sid, base, cands

    sid, base_us, _ = anyio.run(baseline)

    # SIGINT during a run (the round's precision check), then during a batch
    took, got = anyio.run(_interrupted, ws, start, "run_precision_check", {"session_id": sid})
    assert took < 5, (took, got)

    ids: list[str] = []

    async def after_the_run(s: Session) -> dict[str, Any]:
        """The resumed session carries on after the interrupted run (on the server the batch below interrupts)."""
        assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
        await s.ok("revert_patch", session_id=sid, notes="the person wanted the batch instead")
        ids.extend(c["id"] for c in (await s.ok("propose_candidates", session_id=sid, limit=4))["candidates"][:2])
        return {"candidates": ids}

    took, got = anyio.run(_interrupted, ws, start, "run_candidates", {"session_id": sid}, after_the_run)
    assert took < 5, (took, got)
    assert len(ids) == 2, ids

    async def resumed() -> None:
        async with connect(ws) as s:
            await s.ok("start_session", **start)
            # the interrupted batch left runs and no decision: the same candidates run again, and the one change
            # a batch from the baseline keeps is found — while a comment is written into the file under it
            res = await _batch_meets_an_edit(s, ws, sid, ids, lambda t: t + "\n# a note written during the batch\n")
            assert res["refused"] == [] and len(res["trials"]) == 2, res
            assert all(t["verdict"] == "passed" for t in res["trials"]), res["trials"]
            assert res["winner_round"] is not None and res["best_us"] < base_us, res["message"]
            # the decided batch was checkpointed: the ledger file alone holds its decisions
            alone = tmpfs / "alone.sqlite3"
            shutil.copy2(ws / ".pypto-tune" / "ledger.sqlite3", alone)
            with sqlite3.connect(alone) as db:
                decided = {r[0] for r in db.execute("SELECT number FROM round_decisions")}
            alone.unlink()
            assert {t["round"] for t in res["trials"]} <= decided, decided

            # a knob edited during the next batch (one candidate: a batch of one runs and decides as a batch does,
            # and the edit, not the number of trials, is what this step checks)
            cands = (await s.ok("propose_candidates", session_id=sid, limit=4))["candidates"][:1]
            # a value the candidate does not set itself (an edit equal to the batch's own change is no conflict)
            to = next(v for v in (2, 16, 32) if not (cands[0]["knob"] == TILE_B and cands[0]["value"] == v))
            await _batch_meets_an_edit(s, ws, sid, [c["id"] for c in cands],
                                       lambda t: re.sub(r"^TILE_B = \d+", f"TILE_B = {to}", t, flags=re.M))

            # the disk fills during a batch
            rounds = (await s.ok("get_status", session_id=sid))["rounds"]
            cands = (await s.ok("propose_candidates", session_id=sid, limit=4))["candidates"][:1]
            job = await s.ok("run_candidates", session_id=sid, candidates=[c["id"] for c in cands], wait=False)
            await _until_a_run_executes(ws)
            filler = _fill(tmpfs)
            try:
                done = await _wait(s, job)
            finally:
                filler.unlink()
            text = done.get("error") or (done.get("result") or {}).get("message", "")
            assert "internal error" not in text and "TaskGroup" not in text, text
            if done["status"] == "failed":  # the batch could not be recorded: the cause and the file, named
                assert "full" in text and str(ws) in text, text
            else:  # recorded: every trial the full disk touched is invalid, none failed
                assert all(t["decision"] in ("invalid", "kept", "reverted") for t in done["result"]["trials"]), text
            assert (await s.ok("get_status", session_id=sid))["rounds"] <= rounds + 1
            again = {(c["knob"], repr(c["value"])) for c in
                     (await s.ok("propose_candidates", session_id=sid, limit=64))["candidates"]}
            invalid = [t for t in (done.get("result") or {}).get("trials", []) if t["decision"] == "invalid"]
            assert {(t["knob"], repr(t["value"])) for t in invalid} <= again

    anyio.run(resumed)
