"""One operator's session, driven to its end by the server's own search — no LLM, the same gated tools.

The driver is an agent that reads the rules: before every step it derives the session's state from the ledger and
asks the gates what is allowed now (``gates.allowed_actions``), then makes that call on the ``TuningService`` facade,
exactly as the MCP tools do — the same gates, refusals and ledger. Because each step is chosen from the ledger alone,
a driver started on a session a killed driver left behind simply continues it (``--resume``).

The steps, in the order the rules allow them: start_session (a resumed one if unfinished) → run_precision_check
(environment check, baseline; R5 rotation on failure) → enable_runtime_debug → collect_swimlane → analyze_bubbles
→ per stage: the entry collection and analysis, then ``propose_candidates`` → ``run_candidates`` batches until the
stage's own exit (no-gain threshold, target, limits) — a stage whose candidates are exhausted is left with its
checklist marked, naming the knobs the search ran out of — → render_report (zh and en, Markdown and HTML).

What a driver never does: answer a person's question (a baseline that failed three times waits for a person, R5:
the campaign stops that session and says why), make an algorithm-level change (R23: stopped with the reason), or
change anything the gates refuse. A refusal or error it cannot act on ends that operator as *failed* with the
message; its session is left as it was, so a person can look and a resumed campaign can try again.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import anyio

from pypto_tune.tools.session.discarded import invalid_next_step
from pypto_tune.tools.campaign.facts import SessionFacts, facts_of, session_state
from pypto_tune.tools.campaign.manifest import OperatorSpec
from pypto_tune.tools.errors import InputError, PyptoTuneError
from pypto_tune.tools.rules import gates
from pypto_tune.tools.rules import tuning_loop
from pypto_tune.tools.session.ledger import Ledger

if TYPE_CHECKING:
    from pypto_tune.tools.service import TuningService

log = logging.getLogger("pypto_tune.campaign")

Status = Literal["done", "failed", "stopped", "not-started"]
#: the same step chosen this many times in a row without a new ledger row: the session is stuck
STALL_LIMIT = 3
#: tables whose row counts show a step did something
_PROGRESS_TABLES = ("runs", "precision_records", "measurements", "analyses", "patches", "rounds", "round_decisions",
                    "transitions", "checklist_marks", "confirmations")
COPY_IGNORE = shutil.ignore_patterns(".pypto-tune", "output", "__pycache__", "*.pyc", ".pytest_cache")


@dataclass
class OperatorOutcome:
    name: str
    status: Status
    session_id: str | None = None
    reason: str = ""
    reports: list[str] = field(default_factory=list)


class TrialPool:
    """The campaign's overall trial budget, shared by every operator (None: unlimited)."""

    def __init__(self, total: int | None, used: int = 0) -> None:
        self.total = total
        self.used = used

    def take(self, want: int) -> int:
        if self.total is None:
            self.used += want
            return want
        n = max(0, min(want, self.total - self.used))
        self.used += n
        return n

    def give_back(self, n: int) -> None:
        self.used -= max(n, 0)


PAUSED = "paused between two steps by a signal; its session resumes where it stopped"


@dataclass
class DriverContext:
    """What every operator's driver shares: the service, the journal, the batch size and the stop state."""

    service: "TuningService"
    log: Callable[..., Any]  # CampaignDir.log
    batch: int
    pool: TrialPool
    stop_reason: Callable[[], str | None]  # why the campaign is stopping, or None
    paused: Callable[[], bool] = lambda: False  # leave the session after its current step, resumable (a signal)
    # whether the journal holds this operator's "reports" event (the campaign report links what that event names)
    reported: Callable[[str], bool] = lambda _name: False
    activity: dict[str, str] = field(default_factory=dict)  # operator -> what it is doing now (the board shows it)


class OperatorDriver:
    def __init__(self, ctx: DriverContext, spec: OperatorSpec) -> None:
        self.ctx = ctx
        self.spec = spec
        self.sid: str | None = None
        self.ledger: Ledger | None = None
        self.failure: str = ""  # set when the session ended for a reason the campaign counts as a failure
        self.final_facts: SessionFacts | None = None

    # ------------------------------------------------------------------------------------------------ plumbing
    async def _sync(self, fn: Callable[[], Any]) -> Any:
        return await anyio.to_thread.run_sync(fn)

    def _say(self, what: str) -> None:
        self.ctx.activity[self.spec.name] = what

    def _state(self):
        assert self.ledger is not None and self.sid is not None
        return session_state(self.ledger, self.sid)

    def facts(self) -> SessionFacts | None:
        """The session's facts now (its last ones once the driver has ended)."""
        if self.ledger is None or not self.sid:
            return self.final_facts
        return facts_of(self._state())

    def _progress_mark(self, st: Any) -> tuple[int, ...]:
        return tuple(len(st.rows.get(t, [])) for t in _PROGRESS_TABLES)

    def _progress_cb(self, what: str) -> Callable[..., Awaitable[None]]:
        async def cb(elapsed: float, line: str, *, phase: str | None = None, **_: Any) -> None:
            # the operations' progress: elapsed seconds, the last output line, and a phase in words when known
            self._say(f"{what} ({elapsed:.0f} s)" + (f" {phase}" if phase else "") + f": {line.strip()[-80:]}")
        return cb

    # ------------------------------------------------------------------------------------------------ the run
    async def run(self) -> OperatorOutcome:
        name = self.spec.name
        try:
            self._prepare_workspace()
            started = await self._start()
            if isinstance(started, OperatorOutcome):
                return started
            return await self._loop()
        except PyptoTuneError as exc:
            text = str(exc)
            self.ctx.log("operator-failed", operator=name, session_id=self.sid, reason=text[:2000])
            return OperatorOutcome(name, "failed", self.sid, text.splitlines()[0][:500])
        except Exception as exc:  # noqa: BLE001 - one operator's bug must not end the others' sessions
            import traceback

            log.exception("campaign: operator %s failed with an internal error", name)
            text = f"internal error ({type(exc).__name__}: {exc}); its session is left as its ledger has it"
            self.ctx.log("operator-failed", operator=name, session_id=self.sid, reason=text[:500],
                         traceback=traceback.format_exc()[-4000:])
            return OperatorOutcome(name, "failed", self.sid, text[:500])
        finally:
            self.ctx.activity.pop(name, None)
            if self.ledger is not None:
                try:
                    self.final_facts = self.facts()
                finally:
                    self.ledger.close()
                    self.ledger = None

    def _prepare_workspace(self) -> None:
        ws, src = self.spec.workspace, self.spec.source
        if ws.exists():
            return
        if src is None:
            raise InputError(f"workspace {ws} does not exist", hint="create it, or give the operator a 'source' folder "
                             "to copy it from")
        shutil.copytree(src, ws, ignore=COPY_IGNORE, symlinks=True)
        self.ctx.log("workspace-copied", operator=self.spec.name, source=str(src), workspace=str(ws))

    async def _start(self) -> OperatorOutcome | None:
        from pypto_tune.tools.campaign.facts import latest_session

        latest = latest_session(self.spec.workspace)
        if latest is not None and latest.level1 == "DONE":
            self.sid = latest.session_id
            self.ctx.log("operator-already-done", operator=self.spec.name, session_id=self.sid)
            if not self.ctx.reported(self.spec.name):
                # The session turns DONE with its first report; a driver killed before the last language was
                # written, or before the journal heard of them, leaves a finished session the campaign report
                # cannot link. Rendering again is harmless: the same snapshot gives the same files.
                self.ctx.service.know_session(self.spec.workspace, self.sid)
                await self._reports()
            return OperatorOutcome(self.spec.name, "done", self.sid, latest.finish_reason or "")
        s = self.spec
        self._say("start_session")
        res = await self._sync(lambda: self.ctx.service.start_session(
            workspace=str(s.workspace), operator_files=list(s.operator_files), test_command=list(s.test_command),
            run_mode=s.run_mode, goal_speedup=s.goal_speedup, goal_target_us=s.goal_target_us,
            timeout_s=s.timeout_s, device_ids=s.device_ids, time_limit_h=s.wall_h, repeats=s.repeats,
            pass_pattern=s.pass_pattern, fail_pattern=s.fail_pattern))
        if res.read_only:
            raise InputError(f"another pypto-tune server holds {s.workspace}: {res.message}",
                             hint="stop that server (or finish its session), then resume the campaign")
        self.sid = res.session_id
        self.ledger = Ledger.for_workspace(s.workspace)
        self.ctx.log("session", operator=s.name, session_id=self.sid, resumed=res.resumed, goal=res.goal)
        return None

    async def _loop(self) -> OperatorOutcome:
        last: tuple[Any, ...] | None = None
        stalls = 0
        while True:
            st = self._state()
            if st.level1 == "DONE":
                return self._ended(st)
            if self.ctx.paused():
                self.ctx.log("operator-paused", operator=self.spec.name, session_id=self.sid, state=st.level1,
                             stage=st.stage)
                return OperatorOutcome(self.spec.name, "stopped", self.sid, PAUSED)
            action = self._choose(st)
            mark = (action[0], st.level1, st.stage, self._progress_mark(st))
            stalls = stalls + 1 if mark == last else 0
            last = mark
            if stalls >= STALL_LIMIT:
                raise InputError(f"the session made no progress: {action[0]} was called {stalls + 1} times in a row "
                                 f"in {st.level1}/{st.stage} without a new ledger row",
                                 hint=f"look at the session (pypto-tune status --workspace {self.spec.workspace})")
            await self._do(action, st)

    # ------------------------------------------------------------------------------------------------ choosing
    def _choose(self, st: Any) -> tuple[str, dict[str, Any]]:
        """The next call, from the state the ledger gives and what the gates allow now."""
        if st.finished:
            return ("render_report", {})
        stop = self.ctx.stop_reason()
        if stop:
            return ("stop_session", {"reason": f"campaign stopped: {stop}"})
        allowed = gates.allowed_actions(st)
        if st.level1 == "S1_SETUP":
            if st.awaiting_user:
                self.failure = (f"the baseline precision check failed {st.baseline_failures} times; a person must "
                                "decide whether to retry (R5)")
                return ("stop_session", {"reason": "campaign: " + self.failure})
            return ("run_precision_check", {})
        if st.level1 == "S2_COLLECT":
            return ("collect_swimlane" if st.debug_enabled else "enable_runtime_debug", {})
        if st.level1 == "S3_ANALYZE":
            return ("analyze_bubbles", {})
        phase = gates.round_phase(st)
        if phase in ("VERIFY", "MEASURE"):  # a round someone opened by hand before the campaign took over
            return ("revert_patch", {"notes": "campaign: a round left open is rolled back before the search goes on"})
        if phase in ("VERIFY_FAILED", "RECORD"):
            return ("record_round", {"notes": "campaign: judging a round left open"})
        if "collect_swimlane" in allowed and not st.stage_measured:
            return ("collect_swimlane", {})
        if "analyze_bubbles" in allowed and not st.stage_analyzed:
            return ("analyze_bubbles", {})
        if st.stage == tuning_loop.ALGORITHM_STAGE.name:
            return ("stop_session", {"reason": "campaign: the configuration stages converged without reaching the "
                                     "target; algorithm-level changes (R23) are a person's call"})
        left = self.spec.trials - len(st.rows.get("trials", []))
        if left <= 0:
            return ("stop_session", {"reason": f"campaign budget: {self.spec.trials} trial(s) of this operator used"})
        return ("search", {"left": left})

    # ------------------------------------------------------------------------------------------------ doing
    async def _do(self, action: tuple[str, dict[str, Any]], st: Any) -> None:
        name, kw = action
        svc, sid = self.ctx.service, self.sid
        assert sid is not None
        self._say(name)
        if name == "render_report":
            await self._reports()
        elif name == "stop_session":
            await self._sync(lambda: svc.stop_session(sid, reason=kw["reason"]))
            self.ctx.log("session-stopped", operator=self.spec.name, session_id=sid, reason=kw["reason"])
        elif name == "run_precision_check":
            r = await svc.run_precision_check(sid, progress=self._progress_cb("precision"))
            self.ctx.log("precision", operator=self.spec.name, session_id=sid, verdict=r.verdict,
                         duration_s=r.duration_s)
        elif name == "enable_runtime_debug":
            await self._sync(lambda: svc.enable_runtime_debug(sid, True))
        elif name == "collect_swimlane":
            r = await svc.collect_swimlane(sid, progress=self._progress_cb("collect"))
            self.ctx.log("collected", operator=self.spec.name, session_id=sid, stage=st.stage,
                         operator_time_us=r.operator_time_us)
        elif name == "analyze_bubbles":
            await self._sync(lambda: svc.analyze_bubbles(sid, lang="en"))
        elif name == "revert_patch":
            await self._sync(lambda: svc.revert_patch(sid, notes=kw["notes"]))
        elif name == "record_round":
            await self._sync(lambda: svc.record_round(sid, notes=kw["notes"]))
        elif name == "search":
            await self._search(st, kw["left"])
        else:  # pragma: no cover - _choose names only the calls above
            raise InputError(f"campaign driver: no handler for {name}")

    async def _search(self, st: Any, left: int) -> None:
        """One batch: the search's best candidates for this stage, run as parallel gated rounds."""
        svc, sid = self.ctx.service, self.sid
        assert sid is not None
        want = min(self.ctx.batch, left)
        n = self.ctx.pool.take(want)
        if n <= 0:
            await self._sync(lambda: svc.stop_session(sid, reason="campaign budget: the campaign's overall trial "
                                                      "budget is used"))
            self.ctx.log("session-stopped", operator=self.spec.name, session_id=sid, reason="overall trial budget")
            return
        try:
            prop = await self._sync(lambda: svc.propose_candidates(sid, limit=n))
            if not prop.candidates:
                self.ctx.pool.give_back(n)
                await self._leave_exhausted_stage(st, prop)
                return
            ids = [c.id for c in prop.candidates[:n]]
            self.ctx.pool.give_back(n - len(ids))
            self._say(f"run_candidates ×{len(ids)} ({st.stage})")
            res = await svc.run_candidates(sid, ids, parallel=len(ids), progress=self._progress_cb("trials"))
        except BaseException:
            self.ctx.pool.give_back(n)
            raise
        self.ctx.pool.give_back(len(ids) - len(res.trials))
        self.ctx.log("batch", operator=self.spec.name, session_id=sid, stage=st.stage, batch=res.batch,
                     wall_s=res.wall_s, best_us=res.best_us, winner_round=res.winner_round, refused=res.refused,
                     trials=[{"round": t.round, "knob": t.knob.split(":")[-1], "value": t.value,
                              "time_us": t.operator_time_us, "decision": t.decision, "result_type": t.result_type}
                             for t in res.trials])
        if not res.trials:
            # every candidate was refused when it came to run: nothing left that the gates admit in this stage
            await self._leave_exhausted_stage(st, prop, refused=res.refused)
            return
        invalid = [t for t in res.trials if t.decision == "invalid"]
        if len(invalid) == len(res.trials) and "interpreter's files changed" in invalid[0].reason:
            # every later run of this session would be discarded the same way: stop it, saying why and what to do,
            # rather than spend the budget on runs that cannot count
            reason = (f"campaign: the server discarded every trial of batch {res.batch} — {invalid[0].reason[:400]}"
                      f". Next: {invalid_next_step(invalid[0].reason)}")
            await self._sync(lambda: svc.stop_session(sid, reason=reason))
            self.ctx.log("session-stopped", operator=self.spec.name, session_id=sid, reason=reason)

    async def _leave_exhausted_stage(self, st: Any, prop: Any, refused: list[str] | None = None) -> None:
        """No legal, untried candidate is left in this stage: mark the checklist items nobody tried (naming the
        knobs the search ran out of, as the stage-exit rule asks) and leave the stage (R14)."""
        svc, sid = self.ctx.service, self.sid
        assert sid is not None
        knobs = await self._sync(lambda: svc.list_knobs(sid))
        group = tuning_loop.STAGES_BY_NAME[st.stage].group
        untried = [cid for (g, cid), row in _checklist_rows(st, group) if row is None]
        excluded = ", ".join(f"{k} {v}" for k, v in sorted((prop.excluded or {}).items())) or "none"
        for cid in untried:
            serving = [k.id.split(":")[-1] for k in knobs.knobs if cid in (k.catalog_ids or []) and k.tunable]
            what = ", ".join(serving[:4]) or "no knob"
            kept = f"{st.kept_us:.3f} µs" if st.kept_us is not None else "not measured"
            reason = (f"{cid}: the search found no legal untried value of {what} from the kept state "
                      f"({kept}) in {st.stage}; candidates excluded: {excluded}"
                      + (f"; refused when run: {len(refused)}" if refused else ""))
            await self._sync(lambda reason=reason, cid=cid: svc.mark_checklist(
                sid, catalog_id=cid, status="not-applicable", reason=reason))
        res = await self._sync(lambda: svc.advance_stage(sid, reason="campaign: the search has no untried legal "
                                                         "candidate left in this stage"))
        self.ctx.log("stage-exhausted", operator=self.spec.name, session_id=sid, stage=st.stage, marked=untried,
                     message=res.message)

    async def _reports(self) -> None:
        svc, sid = self.ctx.service, self.sid
        assert sid is not None
        paths: list[str] = []
        for lang in ("en", "zh"):
            r = await self._sync(lambda lang=lang: svc.render_report(sid, fmt="both", lang=lang))
            paths += [str(p) for p in r.paths]
        self.ctx.log("reports", operator=self.spec.name, session_id=sid, paths=paths)

    def _ended(self, st: Any) -> OperatorOutcome:
        f = facts_of(st)
        reason = f.finish_reason or ""
        if self.failure:
            self.ctx.log("operator-failed", operator=self.spec.name, session_id=self.sid, reason=self.failure)
            return OperatorOutcome(self.spec.name, "failed", self.sid, self.failure)
        status: Status = "stopped" if reason.startswith("user stop: campaign stopped") else "done"
        self.ctx.log("operator-done", operator=self.spec.name, session_id=self.sid, status=status, reason=reason,
                     baseline_us=f.baseline_us, best_us=f.best_us, trials=f.trials)
        return OperatorOutcome(self.spec.name, status, self.sid, reason)


def _checklist_rows(st: Any, group: str) -> list[tuple[tuple[str, str], Any]]:
    from pypto_tune.tools.analysis import load_catalog

    return [((group, it.id), st.checklist.get((group, it.id))) for it in load_catalog().items if it.stage == group]
