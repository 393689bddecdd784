"""Steps many session tests share: reach the FRONTEND stage, leave a stage with a checklist the server accepts, wait
for a campaign to reach a state, tell one long session in chapters that tests of their own check."""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.server.mcp_client import Session


async def to_frontend(s: Session, ws: Path, files: list[str], cmd: list[str], **start: Any) -> str:
    """start_session → precision → debug on → baseline collection → analysis: returns the session id in FRONTEND."""
    args: dict[str, Any] = dict(workspace=str(ws), operator_files=files, test_command=cmd, run_mode="sim",
                                goal_speedup=100.0)
    args.update(start)
    sid = (await s.ok("start_session", **args))["session_id"]
    assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
    await s.ok("enable_runtime_debug", session_id=sid)
    assert (await s.ok("collect_swimlane", session_id=sid))["valid"]
    assert (await s.ok("analyze_bubbles", session_id=sid, lang="en"))["stage"] == "FRONTEND"
    return sid


async def leave_stage_by_checklist(s: Session, sid: str) -> dict[str, Any]:
    """Mark every untried item of the current stage with a specific reason (it names the item and a measured
    figure, as the server requires for items whose knobs exist), then advance_stage."""
    status = await s.ok("get_status", session_id=sid)
    for item in status["checklist"]:
        if item["status"] == "untried":
            await s.ok("mark_checklist", session_id=sid, catalog_id=item["catalog_id"], status="not-applicable",
                       reason=f"{item['catalog_id']} left for later: kept time {status['best_us']:.3f} µs "
                       f"over {status['kept_samples']} samples")
    return await s.ok("advance_stage", session_id=sid, reason="checklist marked; next stage")


async def campaign_until(s: Session, folder: str, done: Callable[[dict[str, Any]], bool], what: str, *,
                         wait_s: float, poll_s: float) -> dict[str, Any]:
    """``campaign_status`` every ``poll_s`` until ``done`` holds for it; after ``wait_s``, fail naming ``what``."""
    deadline = time.monotonic() + wait_s
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        last = await s.ok("campaign_status", campaign=folder)
        if done(last):
            return last
        await anyio.sleep(poll_s)
    raise AssertionError(f"timed out waiting for {what}: {last.get('board')}")


class Chapters:
    """One long session told in chapters, each checked by a test of its own: a module fixture plays the session once,
    where tests that each started from the same point paid for the server and the runs that reach it every time.

    A chapter that fails keeps its exception, and its test raises it (the same traceback and message). The chapters
    after it would start from where it should have left the session, so they are not played: their tests fail
    naming the chapter that stopped them."""

    def __init__(self) -> None:
        self.outcomes: dict[str, BaseException | str | None] = {}
        self.stopped_by: str | None = None

    async def play(self, name: str, chapter: Callable[[], Awaitable[None] | None]) -> None:
        if self.stopped_by is not None:
            self.outcomes[name] = f"not played: chapter {self.stopped_by!r} failed before it"
            return
        try:
            done = chapter()
            if done is not None:
                await done
        except Exception as exc:  # noqa: BLE001 - kept for the chapter's test, which raises it
            self.outcomes[name] = exc
            self.stopped_by = name
        else:
            self.outcomes[name] = None

    def check(self, name: str) -> None:
        """In the calling test: pass if the chapter passed, else raise what it raised."""
        outcome = self.outcomes.get(name, f"chapter {name!r} was never played")
        if isinstance(outcome, BaseException):
            raise outcome
        if outcome is not None:
            pytest.fail(outcome)


def run_in_pty(argv: list[str], typed: str, prompt: bytes = b"Type RETRY") -> str:
    """Run ``argv`` on a pseudo-terminal (``pypto-tune confirm`` wants a person's TTY) and type ``typed`` once its
    ``prompt`` appears; returns everything it printed."""
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - child
        os.execv(argv[0], argv)
    out = b""
    deadline = time.monotonic() + 60
    sent = False
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
        if not sent and prompt in out:
            os.write(fd, typed.encode())
            sent = True
    os.waitpid(pid, 0)
    return out.decode(errors="replace")


def _ledger_history(ws: Path) -> Path:
    """Where the server keeps, outside the workspace, how many sealed rows the workspace's ledger held."""
    from pypto_tune.tools.session.ledger import HistoryRecord

    return HistoryRecord(ws / ".pypto-tune" / "ledger.sqlite3").path


def keep_copy(ws: Path, at: Path) -> Path:
    """Copy workspace ``ws`` (operator files and ledger; its server stopped, so the ledger is complete) to ``at``,
    with the server's record of how many sealed rows that ledger held; ``put_back`` returns both to this point."""
    shutil.copytree(ws, at / "ws", symlinks=True)
    history = _ledger_history(ws)
    if history.exists():
        shutil.copy2(history, at / "ledger-history.json")
    return at


def put_back(copy: Path, ws: Path) -> None:
    """Put a workspace kept with ``keep_copy`` back at its own path (its ledger and code state name that path), and
    the ledger's row record with it (a ledger that shrinks under its record is refused as lost history), where a
    fresh server resumes the session: tests that start from the same point share the runs that reach it."""
    if ws.exists():
        shutil.rmtree(ws)
    shutil.copytree(copy / "ws", ws, symlinks=True)
    history = _ledger_history(ws)
    if (copy / "ledger-history.json").exists():
        shutil.copy2(copy / "ledger-history.json", history)
    else:
        history.unlink(missing_ok=True)


def own_interpreter(at: Path) -> tuple[str, Path]:
    """A virtual environment of the test's own at ``at/venv`` whose site-packages reaches the project's (so pypto
    imports) and may be attacked or changed — the real .venv is never touched: its python and site-packages folder."""
    venv = at / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "project.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python, site
