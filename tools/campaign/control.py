"""Start, watch and stop a campaign from another process (the MCP tools ``start_campaign`` / ``campaign_status`` /
``stop_campaign``).

A campaign runs for hours; a tool call lasts seconds and an MCP server lives as long as its client. So
``start_campaign`` starts the campaign as its own process — exactly ``pypto-tune campaign TARGET --out DIR ...``,
detached in a session of its own, its output in ``DIR/driver-<n>.log`` — and returns as soon as the campaign has
claimed its folder. Everything else goes through the folder: the board the driver rewrites every couple of seconds
(``board.json``), the journal, and the ``stop`` file the driver watches. ``campaign_status`` therefore works for a
campaign started by another server, from a terminal, or one that has ended; it says when the driver is gone
without having finished (a killed driver: resume it with ``resume=true``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from pypto_tune.tools.campaign.board import Board, read_board, render_terminal
from pypto_tune.tools.campaign.journal import CampaignDir, default_out
from pypto_tune.tools.errors import InputError

START_WAIT_S = 60.0


class CampaignView(BaseModel):
    """A campaign, as its folder shows it."""

    campaign_id: str
    folder: str
    state: str = Field(description="starting, running, stopping, finished, stopped, interrupted or driver-gone")
    driver_pid: int | None
    message: str
    counts: dict[str, int]
    board: str
    operators: list[dict[str, Any]]
    reports: list[str]
    next_actions: list[str]


def view(cdir: CampaignDir, message: str = "") -> CampaignView:
    board: Board | None = read_board(cdir)
    pid = cdir.driver_pid()
    state = board.state if board else "starting"
    if pid is None and state in ("running", "stopping", "starting"):
        state = "driver-gone"
    msg = message or {
        "starting": "the campaign is starting", "running": "the campaign is running",
        "stopping": "the campaign is stopping: running sessions finish their step, then are stopped and reported",
        "finished": "the campaign has finished", "stopped": "the campaign was stopped",
        "interrupted": "the campaign was interrupted (forced stop): running sessions were left resumable",
        "driver-gone": "no driver is running this campaign and it did not finish (the driver was killed or the "
                       "machine restarted): start_campaign with resume=true continues it where the ledgers say"}[state]
    nxt = {"running": ["campaign_status", "stop_campaign"], "stopping": ["campaign_status", "stop_campaign(force)"],
           "starting": ["campaign_status"], "driver-gone": ["start_campaign(resume=true)"],
           }.get(state, ["start_campaign (a new campaign, or resume=true with more budget)"])
    out = CampaignView(campaign_id=cdir.campaign_id, folder=str(cdir.path), state=state, driver_pid=pid,
                       message=msg, counts={}, board="", operators=[], reports=[], next_actions=nxt)
    if board is not None:
        out.counts, out.reports = board.counts, list(board.reports)
        out.board = render_terminal(board) + f"\nboard page: {cdir.path / 'board.html'}"
        out.operators = [r.model_dump(include={"name", "status", "session_id", "stage", "trials", "trials_budget",
                                               "baseline_us", "best_us", "speedup", "reason", "activity"})
                         for r in board.operators]
    return out


def find(campaign: str, known: dict[str, Path] | None = None) -> CampaignDir:
    """A campaign by id (one this process started) or by folder."""
    if known and campaign in known:
        return CampaignDir(known[campaign])
    path = Path(campaign).expanduser()
    if path.is_absolute() and CampaignDir(path).exists():
        return CampaignDir(path)
    raise InputError(f"unknown campaign {campaign!r}",
                     hint="pass the campaign's folder (absolute path, as start_campaign returned it); ids are "
                     "known only to the server that started the campaign")


def _absolute(path: str, base: Path | None, what: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_absolute():
        if base is None:
            raise InputError(f"{what} must be an absolute path, got {path!r}", hint="pass the full path")
        p = base / p
    return p.resolve()


def start(target: str, *, base: Path | None = None, out: str | None = None, executor: str = "local",
          ray_address: str | None = None, resume: bool = False, knowledge: str | None = None,
          options: dict[str, Any] | None = None, wait_s: float = START_WAIT_S) -> CampaignView:
    """Check the spec now (a bad manifest is refused at once), start the driver process, and return once it has
    claimed the campaign's folder. ``options``: the CLI's flags by their long names (goal_speedup, copy_to, trials,
    wall_h, batch, concurrency, trials_total, wall_h_total, run_mode)."""
    from pypto_tune.tools.campaign.manifest import load
    from pypto_tune.tools.running.executors import EXECUTOR_KINDS

    if executor not in EXECUTOR_KINDS:
        raise InputError(f"unknown executor {executor!r}", hint=f"one of: {', '.join(EXECUTOR_KINDS)}")
    tgt = _absolute(target, base, "manifest")
    if not tgt.exists():
        raise InputError(f"{tgt} does not exist", hint="pass a manifest (.toml / .yaml) or a folder of operators")
    opts = {k: v for k, v in (options or {}).items() if v is not None}
    if "copy_to" in opts:
        opts["copy_to"] = _absolute(str(opts["copy_to"]), base, "copy_to")
    folder_keys = {"copy_to", "goal_speedup", "goal_target_us", "trials", "wall_h", "run_mode"}
    if not tgt.is_dir() and folder_keys & set(opts):
        raise InputError(f"{', '.join(sorted(folder_keys & set(opts)))} apply to a folder of operators",
                         hint="with a manifest, set them in its [defaults] or [[operator]] tables")
    spec = load(tgt, **opts)
    folder = _absolute(out, base, "out") if out else default_out(spec)
    cdir = CampaignDir(folder)
    if not resume and cdir.exists():
        raise InputError(f"a campaign already exists in {folder} ({cdir.campaign_id})",
                         hint="resume=true continues it; or pass another out folder")
    if resume and not cdir.exists():
        raise InputError(f"no campaign to resume in {folder}", hint="start it without resume first")
    pid = cdir.driver_pid() if cdir.exists() else None
    if pid is not None:
        raise InputError(f"campaign {cdir.campaign_id} is already being driven by pid {pid}",
                         hint="campaign_status to watch it, stop_campaign to stop it")
    argv = [sys.executable, "-m", "pypto_tune.server.cli", "campaign", str(tgt), "--out", str(folder), "--quiet",
            "--executor", executor]
    if ray_address:
        argv += ["--ray-address", ray_address]
    if resume:
        argv.append("--resume")
    if knowledge:
        argv += ["--knowledge", str(_absolute(knowledge, base, "knowledge"))]
    for key, value in opts.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    folder.mkdir(parents=True, exist_ok=True)
    n = len(list(folder.glob("driver-*.log"))) + 1
    log_path = folder / f"driver-{n}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=str(tgt if tgt.is_dir() else tgt.parent), start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if cdir.exists() and cdir.driver_pid() == proc.pid:
            return view(cdir, f"campaign {cdir.campaign_id} started (driver pid {proc.pid}, log {log_path})")
        if proc.poll() is not None:
            if proc.returncode == 0 and cdir.exists() and any(
                    e.get("event") == "driver-started" and e.get("pid") == proc.pid for e in cdir.events()):
                # A resume with nothing left to do (every operator done) ends before the first look: not a failure
                return view(cdir, f"campaign {cdir.campaign_id}: the driver (pid {proc.pid}) ran and finished at "
                            f"once — nothing was left to do but the reports (log {log_path})")
            tail = log_path.read_text(errors="replace")[-1500:]
            raise InputError(f"the campaign's driver exited at once (exit {proc.returncode}): {tail.strip()}",
                             hint=f"see {log_path}")
        time.sleep(0.2)
    raise InputError(f"the campaign's driver (pid {proc.pid}) did not claim {folder} within {wait_s:.0f} s",
                     hint=f"see {log_path}; campaign_status(folder) shows it once it does")


def stop(cdir: CampaignDir, *, force: bool = False, reason: str = "stop_campaign") -> CampaignView:
    """Ask the driver to stop (it watches the folder): running sessions finish their current step, are stopped and
    reported; with ``force`` the running steps are cancelled instead (runs killed, sessions left resumable)."""
    if cdir.driver_pid() is None:
        return view(cdir, "no driver is running this campaign: nothing to stop")
    cdir.request_stop(reason, force=force)
    return view(cdir, "stop requested" + (" (forced)" if force else "") + ": the board says when it has stopped")
