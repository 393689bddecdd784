"""Crash-safety harness: drive a real SIM session through a stdio server, SIGKILL the server's process group at a
random point, then check the ledger and the operator file and prove a fresh server resumes and finishes.

Used by ``tests/reliability/test_crash_safety.py`` (a small sample) and ``benchmarks/reliability_trials.py`` (N
trials and a table). Everything is real: the server binary, the MCP client, the PyPTO simulator.
"""

from __future__ import annotations

import ast
import os
import random
import shutil
import signal
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from tests.running.runner_helpers import is_alive

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "fixtures" / "operators" / "softmax" / "softmax.py"
VEC = "softmax.py:softmax_kernel.set_vec_tile_shapes#1"

# (tool, arguments builder, how long the step usually takes in seconds: the kill delay is drawn inside it)
STEPS: list[tuple[str, dict[str, Any], float]] = [
    ("start_session", {}, 0.05),
    ("run_precision_check", {}, 6.0),
    ("enable_runtime_debug", {}, 0.05),
    ("collect_swimlane", {}, 6.0),
    ("analyze_bubbles", {"lang": "en"}, 1.0),
    ("apply_tuning_patch", {"knob": VEC, "value": [1, 8, 256], "catalog_id": "F-10",
                            "rationale": "crash trial: bigger vector tile"}, 0.1),
    ("run_precision_check", {}, 5.0),
    ("collect_swimlane", {}, 5.0),
    ("record_round", {"notes": "crash trial"}, 0.1),
    ("stop_session", {"reason": "crash trial done"}, 0.05),
    ("render_report", {"format": "md", "lang": "en"}, 0.5),
]


@dataclass
class Trial:
    seed: int
    kill_step: str = ""
    kill_delay_s: float = 0.0
    killed: bool = False
    orphans: int = 0
    problems: list[str] = field(default_factory=list)
    recovery_s: float = 0.0
    resumed: bool | None = None
    notes: list[str] = field(default_factory=list)  # legal but noteworthy states (not failures)

    @property
    def ok(self) -> bool:
        return not self.problems


def session_args(ws: Path) -> dict[str, Any]:
    return dict(workspace=str(ws), operator_files=["softmax.py"],
                test_command=[sys.executable, "softmax.py", "--run-mode", "sim"], run_mode="sim", goal_speedup=50.0,
                timeout_s=120)


def params(ws: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "pypto_tune.server.cli", "serve", "--workspace", str(ws),
                                       "--log-level", "ERROR"], cwd=str(ws))


def _procs() -> list[int]:
    return [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]


def server_pids(ws: Path) -> list[int]:
    out = []
    for pid in _procs():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"pypto_tune.server.cli" in cmd and str(ws).encode() in cmd and is_alive(pid):
            out.append(pid)
    return out


def processes_in(ws: Path) -> list[int]:
    """Live processes whose working directory is the workspace (the server and any test child it started)."""
    out = []
    for pid in _procs():
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if (cwd == str(ws) or cwd.startswith(str(ws) + "/")) and is_alive(pid):
            out.append(pid)
    return out


def kill_server_group(ws: Path) -> list[int]:
    pids = server_pids(ws)
    for pid in pids:  # the stdio client starts the server with start_new_session: pgid == pid
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def _text(res: Any) -> str:
    return "".join(getattr(b, "text", "") for b in res.content)


async def _drive(ws: Path, kill_at: int, delay: float, trial: Trial) -> None:
    sid: str | None = None

    async def killer() -> None:
        await anyio.sleep(delay)
        trial.killed = bool(kill_server_group(ws))

    try:
        with anyio.fail_after(90):
            async with Client(params(ws), mode="legacy") as c, anyio.create_task_group() as tg:
                for i, (tool, extra, _) in enumerate(STEPS):
                    if i == kill_at:
                        tg.start_soon(killer)
                    args = dict(session_args(ws)) if tool == "start_session" else {"session_id": sid, **extra}
                    res = await c.call_tool(tool, args)
                    if res.is_error:
                        if trial.killed:
                            return
                        raise RuntimeError(f"{tool} refused before the kill: {_text(res)}")
                    if tool == "start_session":
                        sid = res.structured_content["session_id"]
                await anyio.sleep(delay + 1)  # the session finished early: still let the killer fire
    except BaseException as exc:  # noqa: BLE001 - the server died under the client: expected
        if isinstance(exc, KeyboardInterrupt):
            raise
        if not trial.killed:
            trial.problems.append(f"session failed before the kill: {type(exc).__name__}: {exc}"[:300])


def check_after_kill(ws: Path, trial: Trial) -> dict[str, Any]:
    """Ledger integrity, no half round, operator file whole; returns the offline view of the state."""
    info: dict[str, Any] = {"sid": None, "open_round": False, "drift": False, "level1": None}
    db = ws / ".pypto-tune" / "ledger.sqlite3"
    src = (ws / "softmax.py").read_text()
    try:
        ast.parse(src)
    except SyntaxError as exc:
        trial.problems.append(f"softmax.py is not whole Python after the kill: {exc}")
    if not db.exists():
        return info
    con = sqlite3.connect(db)
    try:
        ic = con.execute("PRAGMA integrity_check").fetchall()
        if ic != [("ok",)]:
            trial.problems.append(f"integrity_check: {ic}")
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"rounds", "round_decisions", "patches"} <= tables:
            # killed while the first server created the ledger: each migration is one transaction, so the file
            # holds either nothing or whole migrations; the next server finishes them
            trial.notes.append("ledger-not-migrated")
            return info
        orphan_dec = con.execute("SELECT d.session_id, d.number FROM round_decisions d LEFT JOIN rounds r ON "
                                 "r.session_id = d.session_id AND r.number = d.number WHERE r.id IS NULL").fetchall()
        if orphan_dec:
            trial.problems.append(f"round_decisions without rounds: {orphan_dec}")
        no_patch = con.execute("SELECT r.session_id, r.number FROM rounds r LEFT JOIN patches p ON "
                               "p.session_id = r.session_id AND p.round = r.number WHERE p.id IS NULL").fetchall()
        if no_patch:
            trial.problems.append(f"rounds without their patch: {no_patch}")
    finally:
        con.close()
    from pypto_tune.tools.session.ledger import Ledger
    from pypto_tune.tools.session.state import derive_state, load_rows

    ledger = Ledger.for_workspace(ws)
    try:
        sessions = ledger.rows("sessions")
        if not sessions:
            return info
        st = derive_state(load_rows(ledger, sessions[-1]["id"]))
    finally:
        ledger.close()
    info.update(sid=st.id, open_round=st.open_round is not None, level1=st.level1,
                drift=st.expected_sources.get("softmax.py") != src)
    if info["drift"]:
        # Legal only as the server's own write cut off by the kill: the file must hold the after-bytes of the last
        # write intent, recorded (before the write) from the sources the ledger still expects.
        ledger = Ledger.for_workspace(ws)
        try:
            intents = ledger.rows("write_intents", st.id)
        finally:
            ledger.close()
        last = intents[-1] if intents else None
        if (last is None or dict(last["before_sources"]) != st.expected_sources
                or dict(last["after_sources"]).get("softmax.py") != src):
            trial.problems.append("softmax.py differs from the ledger and is not the pending write of a recorded "
                                  "intent")
        else:
            trial.notes.append("cut-off-write")
    return info


async def _recover(ws: Path, info: dict[str, Any], trial: Trial) -> None:
    with anyio.fail_after(120):
        async with Client(params(ws), mode="legacy") as c:
            async def call(tool: str, **kw: Any) -> dict[str, Any]:
                res = await c.call_tool(tool, kw)
                if res.is_error:
                    raise RuntimeError(f"recovery: {tool} refused: {_text(res)[:400]}")
                return res.structured_content or {}

            st = await call("start_session", **session_args(ws))
            trial.resumed = st["resumed"]
            expect_resume = info["sid"] is not None and info["level1"] != "DONE"
            if st["resumed"] != expect_resume:
                trial.problems.append(f"start_session resumed={st['resumed']}, expected {expect_resume} "
                                      f"(ledger state {info['level1']})")
            sid = st["session_id"]
            if st["resumed"] and sid != info["sid"]:
                trial.problems.append(f"resumed {sid}, expected {info['sid']}")
            status = await call("get_status", session_id=sid)
            finished = status["state"] in ("S5_REPORT", "DONE")
            if info["drift"] and not status["drift"]:
                trial.notes.append("write-undone")  # the new server recognised its predecessor's cut-off write
            if not finished and (info["open_round"] or status["drift"] or "revert_patch" in status["next_actions"][:1]):
                await call("revert_patch", session_id=sid, notes="recovery after SIGKILL")
            status = await call("get_status", session_id=sid)
            if status["state"] not in ("S5_REPORT", "DONE"):
                await call("stop_session", session_id=sid, reason="recovery after SIGKILL")
            await call("render_report", session_id=sid, format="md", lang="en")
            final = await call("get_status", session_id=sid)
            if final["state"] not in ("S5_REPORT", "DONE"):
                trial.problems.append(f"after recovery the session is at {final['state']}")


def check_and_recover(ws: Path, trial: Trial) -> None:
    """After the kill (its processes gone): check the ledger and the operator file, let a fresh server resume and
    finish the session, and check them again; every problem goes into ``trial.problems``."""
    info = check_after_kill(ws, trial)
    t0 = time.monotonic()
    try:
        anyio.run(_recover, ws, info, trial)
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        inner = exc
        while isinstance(inner, BaseExceptionGroup):
            inner = inner.exceptions[0]
        trial.problems.append(f"{type(inner).__name__}: {inner}"[:500])
    trial.recovery_s = round(time.monotonic() - t0, 2)
    check_after_kill(ws, trial)


def run_trial(seed: int, base: Path) -> Trial:
    rng = random.Random(seed)
    trial = Trial(seed=seed)
    ws = base / f"trial-{seed}"
    if ws.exists():
        shutil.rmtree(ws)
    ws.mkdir(parents=True)
    shutil.copy2(SOFTMAX, ws / "softmax.py")
    weights = [dur + 0.5 for _, _, dur in STEPS]  # every step can be hit, long ones more often
    kill_at = rng.choices(range(len(STEPS)), weights=weights)[0]
    trial.kill_step = STEPS[kill_at][0] + f"#{kill_at}"
    trial.kill_delay_s = round(rng.uniform(0, STEPS[kill_at][2]), 3)
    try:
        anyio.run(_drive, ws, kill_at, trial.kill_delay_s, trial)
        if not trial.killed:
            trial.killed = bool(kill_server_group(ws))
        deadline = time.monotonic() + 5
        while server_pids(ws) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        left = processes_in(ws)
        trial.orphans = len(left)
        for pid in left:  # a test child in its own session survives its server: clean up what we started
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        check_and_recover(ws, trial)
    finally:
        for pid in processes_in(ws):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return trial
