"""A campaign: every operator of a spec driven to its end, several at once, within budgets, resumable.

* **Where runs execute.** One ``TuningService`` serves every session of the campaign; its executor (the local pool
  by default, or a Ray cluster) runs every run of every session — baselines, stage-entry collections, trials — so
  the sessions' work spreads over the cluster's nodes (NPU runs claim an ``NPU`` resource there, SIM runs a CPU).
  A session's bookkeeping (gates, ledger, the analysis of its artifacts) stays with its ledger, on the driver. The
  executor is wrapped (:mod:`.resilient`) so that a run lost with its node runs again elsewhere.
* **How many at once.** ``concurrency`` sessions (default: twice the executor's slots, so a session busy with its
  own bookkeeping leaves no slot idle); operators start in the spec's order as sessions end. Each batch is
  ``batch`` candidates whatever the executor (the trials a session runs must not depend on where it runs).
* **Budgets.** Per operator: trials (the driver stops the session when they are used) and wall time (the session's
  own time limit, R14b, counted by the server). Overall: trials (a shared pool) and wall time (counted from the
  campaign's creation; when it is up, every running session is stopped after its current step).
* **Stopping.** A stop request (``stop`` file, ``stop_campaign``) lets each running step finish, then stops each
  running session (``stop_session``, recorded as the campaign's stop) and writes its reports; operators not started
  stay so. SIGINT (Ctrl-C) or SIGTERM pauses instead: each running step finishes and its session is left as its
  ledger has it, resumable, with the operator file at the kept state; the CLI prints one line with the command that
  resumes. A second signal, or ``force``, cancels the running steps (their runs are killed; nothing half is
  recorded) and leaves those sessions resumable.
* **Resuming.** A killed driver leaves ledgers and the journal. ``resume=True`` continues: a session whose ledger
  says DONE is done; any other is resumed by ``start_session`` and driven on from the state its ledger gives.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

from pypto_tune.tools.campaign.board import Board, build_board, write_board
from pypto_tune.tools.campaign.driver import DriverContext, OperatorDriver, OperatorOutcome, TrialPool
from pypto_tune.tools.campaign.facts import SessionFacts, latest_session, ledger_signature
from pypto_tune.tools.campaign.journal import CampaignDir
from pypto_tune.tools.campaign.manifest import CampaignSpec
from pypto_tune.tools.campaign.resilient import ResilientExecutor
from pypto_tune.tools.errors import InputError

log = logging.getLogger("pypto_tune.campaign")

BOARD_EVERY_S = 3.0


@dataclass
class CampaignOptions:
    executor: str = "local"
    ray_address: str | None = None
    resume: bool = False
    knowledge: Path | None = None
    handle_signals: bool = False
    show: Callable[[str], None] | None = None  # terminal board (the CLI prints it)
    show_every_s: float = 15.0
    notify: Callable[[str], None] | None = None  # one line when a signal arrives (the CLI prints it on stderr)
    sim_slots: int | None = None  # local pool size (default: the usable cores)


@dataclass
class CampaignResult:
    campaign_id: str
    folder: Path
    board: Board
    outcomes: list[OperatorOutcome] = field(default_factory=list)
    reports: list[Path] = field(default_factory=list)
    knowledge: str = ""
    stop_reason: str | None = None


class StopState:
    """Why the campaign is ending. A stop ends each running session after its step (recorded as the campaign's
    stop); a pause (the first SIGINT/SIGTERM) leaves each after its step as its ledger has it, resumable; a forced
    one cancels the running steps, sessions resumable too."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.force = False
        self.pause = False

    def request(self, reason: str, *, force: bool = False, pause: bool = False) -> None:
        if self.reason is None:
            self.reason = reason
            self.pause = pause
        self.force = self.force or force


def open_campaign(spec: CampaignSpec, folder: Path, *, resume: bool) -> tuple[CampaignDir, str]:
    """The campaign's folder, created (a new campaign) or checked (a resumed one)."""
    cdir = CampaignDir(folder)
    if not resume:
        if cdir.exists():
            holder = cdir.driver_holder()
            raise InputError(f"a campaign already exists in {cdir.path} ({cdir.campaign_id})"
                             + (f", driven now by {holder}" if holder else ""),
                             hint="pass --resume to continue it (once its driver has ended), or --out to start "
                             "another campaign elsewhere")
        return cdir, cdir.create(spec)
    if not cdir.exists():
        raise InputError(f"no campaign to resume in {cdir.path}", hint="start it first (without --resume), or pass "
                         "the --out folder it was started with")
    rec = cdir.record()
    if rec.get("digest") != spec.digest():
        old = {o["name"] for o in rec["spec"]["operators"]}
        new = {o.name for o in spec.operators}
        what = (f"operators added {sorted(new - old)}, removed {sorted(old - new)}" if old != new
                else "an operator's settings or the batch size changed")
        raise InputError(f"the campaign in {cdir.path} was started with another spec ({what})",
                         hint="resume it with the manifest it was started with, or start a new campaign with --out")
    pid = cdir.driver_pid()
    if pid is not None and pid != os.getpid():
        raise InputError(f"campaign {rec['id']} is being driven by {cdir.driver_holder() or f'pid {pid}'}",
                         hint="watch it (campaign_status), stop it (stop_campaign), or wait until it ends")
    return cdir, str(rec["id"])


def _build_executor(opts: CampaignOptions, on_loss: Callable[..., Any]) -> ResilientExecutor:
    from pypto_tune.tools.running.executors import LocalExecutor, make_executor

    if opts.executor == "local":
        inner = LocalExecutor(sim_slots=opts.sim_slots)
    else:
        inner = make_executor(opts.executor, ray_address=opts.ray_address)
    return ResilientExecutor(inner, on_loss=on_loss)


class Campaign:
    def __init__(self, spec: CampaignSpec, folder: Path, opts: CampaignOptions) -> None:
        self.spec = spec
        self.opts = opts
        self.cdir, self.campaign_id = open_campaign(spec, folder, resume=opts.resume)
        self.stop = StopState()
        self.outcomes: dict[str, OperatorOutcome] = {}
        self.drivers: dict[str, OperatorDriver] = {}
        self.started = datetime.fromisoformat(self.cdir.record()["created_at"])
        self.slots = 1
        self.nodes: list[str] = []
        self.losses = 0
        self._last_shown = 0.0
        self._lock = threading.Lock()
        self._last_facts: dict[str, SessionFacts] = {}
        self._facts_cache: dict[str, tuple[tuple[int, ...], SessionFacts | None]] = {}

    # ------------------------------------------------------------------------------------------------ budgets
    def _wall_left_s(self) -> float | None:
        if self.spec.wall_h is None:
            return None
        return self.spec.wall_h * 3600 - (datetime.now().astimezone() - self.started).total_seconds()

    def _stop_reason(self) -> str | None:
        if self.stop.reason is None:
            req = self.cdir.stop_request()
            if req is not None:
                self.stop.request(str(req.get("reason") or "stop requested"), force=bool(req.get("force")))
                self.cdir.log("stop-requested", reason=self.stop.reason, force=self.stop.force)
            left = self._wall_left_s()
            if left is not None and left <= 0:
                self.stop.request(f"the overall wall-time budget of {self.spec.wall_h:g} h is used")
                self.cdir.log("stop-requested", reason=self.stop.reason, force=False)
        return self.stop.reason

    def _graceful_stop_reason(self) -> str | None:
        """What a session driver is told: a graceful stop ends its session (``stop_session``); a forced one is not
        the driver's to act on — its step is cancelled and its session left as the ledger has it, resumable (a driver
        that read the forced request first used to record a user stop, and the resume found the session done)."""
        reason = self._stop_reason()
        return None if self.stop.force or self.stop.pause else reason

    def _paused(self) -> bool:
        return self.stop.pause

    def _trials_used(self) -> int:
        return sum(f.trials for f in self._facts().values() if f is not None)

    # ------------------------------------------------------------------------------------------------ the board
    def _facts(self) -> dict[str, SessionFacts | None]:
        out: dict[str, SessionFacts | None] = {}
        touched = self._touched
        for op in self.spec.operators:
            sig = ledger_signature(op.workspace)
            cached = self._facts_cache.get(op.name)
            if cached is not None and cached[0] == sig:
                out[op.name] = cached[1]
                continue
            d = self.drivers.get(op.name)
            try:
                if d is not None and (d.sid or d.final_facts):
                    out[op.name] = d.facts()
                else:
                    out[op.name] = latest_session(op.workspace) if op.name in touched else None
            except Exception:  # noqa: BLE001 - a ledger mid-migration: the board shows the last known facts
                out[op.name] = self._last_facts.get(op.name)
                continue
            self._facts_cache[op.name] = (sig, out[op.name])
        self._last_facts.update({k: v for k, v in out.items() if v is not None})
        return out

    @property
    def _touched(self) -> set[str]:
        return {e.get("operator") for e in self.cdir.events() if e.get("event") == "session"} | set(self.outcomes)

    def board(self, state: str) -> Board:
        return build_board(self.spec, self.campaign_id, self.cdir, state=state, facts=self._facts(),
                           activity=dict(self.ctx.activity) if hasattr(self, "ctx") else {},
                           executor=self.opts.executor, nodes=self.nodes, slots=self.slots,
                           wall_left_s=self._wall_left_s())

    def _publish(self, state: str) -> Board:
        with self._lock:
            b = self.board(state)
            write_board(self.cdir, b)
        if self.opts.show is not None and time.monotonic() - self._last_shown >= self.opts.show_every_s:
            self._last_shown = time.monotonic()
            from pypto_tune.tools.campaign.board import render_terminal

            self.opts.show(render_terminal(b))
        return b

    # ------------------------------------------------------------------------------------------------ running
    def _on_loss(self, spec: Any, attempt: int, exc: Any) -> None:
        self.losses += 1
        self.cdir.log("run-lost", tag=spec.tag, attempt=attempt, error=exc.message.splitlines()[0][:300])

    async def run(self) -> CampaignResult:
        from pypto_tune.tools.service import TuningService

        cdir = self.cdir
        if self.opts.resume:
            cdir.clear_stop()
        cdir.claim_driver()
        executor = _build_executor(self.opts, self._on_loss)
        try:
            await executor.prepare()
            self.slots = await anyio.to_thread.run_sync(lambda: executor.capacity("sim"))
            self.nodes = await anyio.to_thread.run_sync(lambda: _nodes(executor))
            if self.opts.knowledge is not None:
                from pypto_tune.tools.search.priors import configure_knowledge

                configure_knowledge(self.opts.knowledge)
            service = TuningService(executor=executor)
            pool = TrialPool(self.spec.trials, used=self._trials_used() if self.opts.resume else 0)
            self.ctx = DriverContext(service=service, log=cdir.log, batch=self.spec.batch, pool=pool,
                                     stop_reason=self._graceful_stop_reason, paused=self._paused,
                                     reported=lambda name: any(e.get("event") == "reports" and e.get("operator")
                                                               == name for e in cdir.events()))
            concurrency = self.spec.concurrency or max(2, 2 * self.slots)
            cdir.log("driver-started", pid=os.getpid(), resume=self.opts.resume, executor=self.opts.executor,
                     ray_address=self.opts.ray_address, slots=self.slots, nodes=self.nodes, concurrency=concurrency,
                     batch=self.spec.batch, operators=[o.name for o in self.spec.operators])
            await self._run_all(concurrency)
            state = "stopped" if self.stop.reason else "finished"
            if self.stop.force or self.stop.pause:
                state = "interrupted"
            cdir.log("campaign-ended", state=state, reason=self.stop.reason)
            from pypto_tune.tools.campaign.report import write_reports

            knowledge = self._update_knowledge()
            # the final board is written once, with its report paths: a watcher that sees the end sees the report
            board = self.board(state)
            reports = write_reports(cdir, board)
            board.reports = [str(p) for p in reports]
            write_board(cdir, board)
            if self.opts.show is not None:
                from pypto_tune.tools.campaign.board import render_terminal

                self.opts.show(render_terminal(board))
            return CampaignResult(self.campaign_id, cdir.path, board, list(self.outcomes.values()), reports, knowledge,
                                  self.stop.reason)
        finally:
            executor.close()
            cdir.release_driver()

    async def _run_all(self, concurrency: int) -> None:
        limiter = anyio.Semaphore(concurrency)

        async def one(driver: OperatorDriver) -> None:
            try:
                self.outcomes[driver.spec.name] = await driver.run()
            finally:
                limiter.release()

        async with anyio.create_task_group() as outer:
            outer.start_soon(self._watch)
            async with anyio.create_task_group() as tg:
                self._operators_scope = tg.cancel_scope
                for op in self.spec.operators:
                    await limiter.acquire()
                    if self._stop_reason():
                        limiter.release()
                        break
                    d = OperatorDriver(self.ctx, op)
                    self.drivers[op.name] = d
                    tg.start_soon(one, d)
            outer.cancel_scope.cancel()
        for op in self.spec.operators:
            if op.name in self.drivers:  # cancelled by a forced stop: its session is left as the ledger has it
                self.outcomes.setdefault(op.name, OperatorOutcome(
                    op.name, "stopped", self.drivers[op.name].sid, "interrupted by a forced stop; resume to continue"))
            self.outcomes.setdefault(op.name, OperatorOutcome(op.name, "not-started", reason=self.stop.reason or ""))

    async def _watch(self) -> None:
        """The board every couple of seconds; stop requests (file, signals, the wall budget)."""
        async with anyio.create_task_group() as tg:
            if self.opts.handle_signals and threading.current_thread() is threading.main_thread():
                tg.start_soon(self._signals)
            while True:
                self._stop_reason()
                if self.stop.force:
                    self._operators_scope.cancel()
                self._publish("stopping" if self.stop.reason else "running")
                await anyio.sleep(BOARD_EVERY_S)

    async def _signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for sig in signals:
                # Ctrl-C or a TERM pauses: each running step finishes, its session stays resumable (a person who
                # presses Ctrl-C wants the terminal back, not the sessions ended); a second signal cancels the steps.
                name = signal.Signals(sig).name
                force = self.stop.reason is not None
                self.stop.request(f"{name} received", force=force, pause=True)
                self.cdir.log("stop-requested", reason=f"{name} received", force=force, pause=True)
                if self.opts.notify is not None:
                    self.opts.notify(f"pypto-tune campaign: {name} received — " + (
                        "cancelling the running steps; their sessions stay resumable" if force else
                        "finishing the running steps, then pausing (press Ctrl-C again to cancel them)"))
                if force:
                    self._operators_scope.cancel()

    def _update_knowledge(self) -> str:
        if self.opts.knowledge is None:
            return ""
        from pypto_tune.tools.knowledge.distill import add_workspaces

        spaces = [op.workspace for op in self.spec.operators if (op.workspace / ".pypto-tune").is_dir()]
        summary = add_workspaces(self.opts.knowledge, spaces)
        self.cdir.log("knowledge-updated", path=str(self.opts.knowledge), summary=summary)
        return summary


def _nodes(executor: ResilientExecutor) -> list[str]:
    """The cluster's live nodes (Ray), or this machine."""
    inner = executor.inner
    if getattr(inner, "name", "") == "ray":
        try:
            import ray

            return sorted(f"{n['NodeManagerAddress']}:{n['NodeManagerPort']} ({int(n['Resources'].get('CPU', 0))} CPU"
                          + (f", {int(n['Resources']['NPU'])} NPU" if n["Resources"].get("NPU") else "") + ")"
                          for n in ray.nodes() if n.get("Alive"))
        except Exception:  # noqa: BLE001 - the board shows what it can
            return []
    import socket

    return [f"{socket.gethostname()} (local pool)"]


def run_campaign(spec: CampaignSpec, folder: Path, opts: CampaignOptions) -> CampaignResult:
    """Run (or resume) a campaign to its end in this thread (the CLI's entry point)."""
    campaign = Campaign(spec, folder, opts)
    return anyio.run(campaign.run)
