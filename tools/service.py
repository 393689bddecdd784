"""The tuning session: every operation an agent can ask for, with the rules enforced before anything happens.

Each public method (1) loads the session state from the ledger, (2) runs the gates (``tools/gates.py``) — a refusal is
recorded and raised as ``GateRefusal`` —, (3) does the work (run the test, parse artifacts, edit source), and
(4) records the outcome as one ledger transaction. Numbers in the ledger come only from artifacts this module parsed.
"""

from __future__ import annotations

import gzip
import logging
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from pypto_tune.tools import gates, rules
from pypto_tune.tools.analysis import analyze_runs, find_run_dirs, load_catalog, validate_run, write_report
from pypto_tune.tools.artifacts import archive_run_dirs
from pypto_tune.tools.environment import check_environment
from pypto_tune.tools.errors import GateRefusal, InputError, PyptoTuneError
from pypto_tune.tools.ledger import LEDGER_DIR, Ledger, now_iso
from pypto_tune.tools.patching import (
    extract_knobs,
    functional_sources,
    hash_sources,
    knob_delta,
    plan_diff_edit,
    plan_knob_edit,
    read_sources,
    set_runtime_debug,
    unified_diff,
    write_sources,
)
from pypto_tune.tools.results import (
    AnalyzeResult,
    ChecklistResult,
    CollectResult,
    DebugResult,
    KnobOut,
    KnobsResult,
    PatchResult,
    PrecisionResult,
    RecordResult,
    ReportResult,
    RevertResult,
    StartSessionResult,
    StatusResult,
    SuggestionOut,
)
from pypto_tune.tools.runner import RunResult, build_child_env, run_command, split_command
from pypto_tune.tools.snapshot import EnvCheck
from pypto_tune.tools.state import SessionState, derive_state, load_rows
from pypto_tune.tools.verdict import judge_precision
from pypto_tune.tools.workspace import WorkspaceLock, inside, relative_operator_files, resolve_workspace

log = logging.getLogger("pypto_tune.service")

Progress = Callable[[float, str], Awaitable[None]] | None


def render_status_board(snap: Any, lang: str = "en") -> str:
    from pypto_tune.tools.report import render_status_board as render

    return render(snap, lang)


def render_report_file(snap: Any, fmt: str, lang: str, out_dir: Path) -> Path:
    from pypto_tune.tools.report import render_report as render

    return render(snap, fmt, lang, out_dir)


def code_hash(sources: dict[str, str]) -> str:
    """The hash a precision verdict binds to: runtime-debug additions do not change numerics, so they are stripped."""
    return hash_sources(functional_sources(sources))


class _Handle:
    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.ledger = Ledger.for_workspace(workspace)
        self.lock = WorkspaceLock(workspace)
        self.busy: str | None = None  # name of the long operation in progress


class TuningService:
    """Owns the sessions this server process serves (one workspace each)."""

    def __init__(self, *, default_workspace: Path | None = None, python: str = sys.executable) -> None:
        self.default_workspace = default_workspace
        self.python = python
        self._handles: dict[Path, _Handle] = {}
        self._session_ws: dict[str, Path] = {}

    # ---------------------------------------------------------------------------------------------- plumbing
    def _handle(self, workspace: Path) -> _Handle:
        if workspace not in self._handles:
            self._handles[workspace] = _Handle(workspace)
        return self._handles[workspace]

    def _find(self, session_id: str) -> _Handle:
        if not session_id or not isinstance(session_id, str):
            raise InputError("session_id is required", hint="call start_session first; it returns the id")
        ws = self._session_ws.get(session_id)
        if ws is None:
            candidates = [self.default_workspace] if self.default_workspace else []
            for cand in candidates:
                ledger_file = cand / LEDGER_DIR / "ledger.sqlite3"
                if ledger_file.exists():
                    h = self._handle(cand)
                    if h.ledger.rows("sessions", session_id):
                        ws = cand
                        self._session_ws[session_id] = cand
        if ws is None:
            raise InputError(
                f"unknown session_id {session_id!r}",
                hint="call start_session with the workspace to resume it (the ledger lives in WORKSPACE/.pypto-tune/)",
            )
        return self._handle(ws)

    def _state(self, h: _Handle, session_id: str) -> SessionState:
        return derive_state(load_rows(h.ledger, session_id))

    def _refuse(self, h: _Handle, session_id: str | None, tool: str, refusal: GateRefusal) -> GateRefusal:
        try:
            h.ledger.insert("refusals", session_id=session_id, at=now_iso(), tool=tool, rule=refusal.rule,
                            message=refusal.message)
        except PyptoTuneError:
            log.exception("could not record a refusal")
        return refusal

    def _gate(self, h: _Handle, st: SessionState, tool: str, *, mutating: bool = True, **kw: Any) -> None:
        """Run the gates for ``tool``; record and raise the first refusal."""
        try:
            if mutating:
                if h.busy:
                    raise GateRefusal("busy", f"{h.busy} is still running for this session",
                                      allowed=["wait_job", "get_status"], hint="wait for the job to finish")
                h.lock.acquire()
                st = self._heal(h, st)
                if (not st.finished and st.open_round is None and st.level1 == "S4_TUNE"
                        and gates.time_limit_exceeded(st)):
                    self._finish(h, st, f"time limit of {st.session['time_limit_h']} h reached")
                    st = self._state(h, st.id)
            disk = self._disk_sources(h, st)
            gates.check(tool, st, disk_raw_hash=hash_sources(disk), **kw)
        except GateRefusal as refusal:
            raise self._refuse(h, st.id, tool, refusal) from None

    def _disk_sources(self, h: _Handle, st: SessionState) -> dict[str, str]:
        try:
            return read_sources(h.workspace, list(st.session["operator_files"]))
        except FileNotFoundError as exc:
            raise GateRefusal("drift", f"an operator file is missing on disk: {exc}",
                              allowed=["revert_patch", "get_status"],
                              hint="call revert_patch to restore the server's last known sources") from None

    def _base(self, st: SessionState, message: str = "") -> dict[str, Any]:
        return {"session_id": st.id, "state": st.level1, "stage": st.stage, "message": message,
                "next_actions": gates.allowed_actions(st)}

    def _write(self, h: _Handle, st: SessionState, sources: dict[str, str], tool: str) -> str:
        """Write operator sources, with the intent on record first (ledger migration 2, see ``_heal``)."""
        h.ledger.insert("write_intents", session_id=st.id, at=now_iso(), tool=tool,
                        before_sources=st.expected_sources, after_sources=sources)
        return write_sources(h.workspace, sources)

    def _heal(self, h: _Handle, st: SessionState) -> SessionState:
        """Undo this server's own write if a crash cut it off before it was recorded.

        The sign: the last write intent started from the sources the ledger still expects, and every file on disk
        holds either its before or its after bytes. Those bytes were never accepted by any rule, so the ledger's
        state is restored (recorded as a drift-revert) instead of being reported as an external edit. Any other
        difference stays drift for the agent to resolve.
        """
        # only the newest intent matters, and each row holds two full copies of the sources: fetch just that one
        intents = h.ledger.rows("write_intents", st.id, "id = (SELECT MAX(id) FROM write_intents WHERE session_id = ?)",
                                (st.id,))
        if not intents:
            return st
        last = intents[0]
        before, after = dict(last["before_sources"]), dict(last["after_sources"])
        if hash_sources(before) != st.expected_raw_hash:
            return st  # that write was recorded (or superseded): nothing of ours is pending
        try:
            disk = read_sources(h.workspace, list(st.session["operator_files"]))
        except FileNotFoundError:
            return st
        if hash_sources(disk) == st.expected_raw_hash:
            return st
        if not all(disk.get(f) in (before.get(f), after.get(f)) for f in disk):
            return st
        self._write(h, st, st.expected_sources, "heal")  # also supersedes the interrupted intent
        h.ledger.insert("patches", **_patch_row(st.id, kind="drift-revert", round_no=None, before=disk,
                                                after=st.expected_sources,
                                                note=f"undid {last['tool']}'s write of {last['at']}, interrupted "
                                                "before it was recorded (server crash)"))
        return self._state(h, st.id)

    # ---------------------------------------------------------------------------------------------- start
    def start_session(
        self, *, workspace: str, operator_files: list[str], test_command: str | list[str], run_mode: str,
        goal_speedup: float | None = None, goal_target_us: float | None = None, timeout_s: float = 300.0,
        device_ids: list[str] | None = None, time_limit_h: float = 12.0, repeats: int | None = None,
        shell: bool = False,
    ) -> StartSessionResult:
        """Start (or resume) the session of a workspace. The goal is mandatory (R1); the command is fixed here."""
        ws = resolve_workspace(workspace)
        if run_mode not in ("sim", "npu"):
            raise InputError(f"run_mode must be 'sim' or 'npu', got {run_mode!r}",
                             hint="use 'sim' without an NPU (PyPTO cost-model simulator)")
        if (goal_speedup is None) == (goal_target_us is None):
            h = self._handle(ws)
            raise self._refuse(h, None, "start_session", GateRefusal(
                "goal", "exactly one of goal_speedup or goal_target_us is required (the agent must ask the user, "
                "not guess)", allowed=["start_session"],
                hint="ask the user: 'how many times faster?' or 'which time in µs?' and pass it"))
        if goal_speedup is not None and not goal_speedup > 1.0:
            raise InputError(f"goal_speedup must be > 1, got {goal_speedup}", hint="e.g. goal_speedup=2 for 2x faster")
        if goal_target_us is not None and not goal_target_us > 0:
            raise InputError(f"goal_target_us must be > 0, got {goal_target_us}", hint="a time in microseconds")
        if not 1 <= float(timeout_s) <= 24 * 3600:
            raise InputError(f"timeout_s must be between 1 and 86400, got {timeout_s}", hint="default is 300")
        if not 0 < float(time_limit_h) <= 24 * 7:
            raise InputError(f"time_limit_h must be in (0, 168], got {time_limit_h}", hint="default is 12")
        reps = repeats if repeats is not None else (1 if run_mode == "sim" else 3)
        if not 1 <= int(reps) <= 20:
            raise InputError(f"repeats must be 1..20, got {reps}", hint="NPU default 3, SIM 1 (deterministic)")
        files = relative_operator_files(ws, list(operator_files))
        if shell:
            if not isinstance(test_command, str):
                raise InputError("shell=true needs test_command as one string", hint="or pass an argv list")
            argv = ["/bin/sh", "-c", test_command]
        else:
            argv = split_command(test_command)
        devices = [str(d) for d in (device_ids or ["0"])]
        if not devices or any(not d.strip() for d in devices):
            raise InputError("device_ids must be non-empty strings", hint="e.g. ['0', '1']")

        h = self._handle(ws)
        h.lock.acquire()
        for row in reversed(h.ledger.rows("sessions")):
            st = self._state(h, row["id"])
            if st.level1 != "DONE":
                same = (list(row["operator_files"]) == files and list(row["test_command"]) == argv
                        and row["run_mode"] == run_mode)
                if not same:
                    raise InputError(
                        f"session {row['id']} is still open on this workspace with different operator files, "
                        f"test command or run mode ({row['operator_files']}, {row['test_command']}, {row['run_mode']})",
                        hint=f"resume it with the same arguments, or finish it: stop_session('{row['id']}') then "
                        "render_report",
                    )
                self._session_ws[row["id"]] = ws
                st = self._heal(h, st)
                return StartSessionResult(
                    **self._base(st, f"resumed session {row['id']} at {st.level1}" + (f"/{st.stage}" if st.stage
                                                                                     else "")),
                    resumed=True, operator_files=files, test_command=argv, run_mode=run_mode,
                    goal=_goal_text(row),
                )
            break

        sources = read_sources(ws, files)
        sid = f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        operator = Path(files[0]).stem
        with h.ledger.transaction() as tx:
            tx.insert(
                "sessions", id=sid, created_at=now_iso(), workspace=str(ws), operator=operator, operator_files=files,
                test_command=argv, shell=shell, run_mode=run_mode,
                goal_kind="speedup" if goal_speedup is not None else "target_us",
                goal_value=float(goal_speedup if goal_speedup is not None else goal_target_us),
                timeout_s=float(timeout_s), device_ids=devices, time_limit_h=float(time_limit_h), repeats=int(reps),
                original_sources=sources, original_hash=code_hash(sources), original_raw_hash=hash_sources(sources),
                config={"python": self.python, "started_epoch": time.time()},
            )
            tx.insert("transitions", session_id=sid, at=now_iso(), level="state", from_value=None,
                      to_value="S1_SETUP", reason="session started with a goal (R1)", summary={})
        self._session_ws[sid] = ws
        st = self._state(h, sid)
        return StartSessionResult(
            **self._base(st, f"session {sid} started; next: run_precision_check (environment check first, R3)"),
            resumed=False, operator_files=files, test_command=argv, run_mode=run_mode,
            goal=_goal_text(st.session),
        )

    # ---------------------------------------------------------------------------------------------- runs
    def _child_env(self, st: SessionState, device_id: str | None) -> dict[str, str]:
        return build_child_env(run_mode=st.run_mode, device_id=device_id)

    async def _run(self, h: _Handle, st: SessionState, *, purpose: str, round_no: int | None,
                   device_id: str | None, sources: dict[str, str], progress: Progress) -> tuple[RunResult, int,
                                                                                               list[Path]]:
        env = self._child_env(st, device_id)
        argv = list(st.session["test_command"])
        result = await run_command(argv, cwd=h.workspace, env=env, timeout_s=float(st.session["timeout_s"]),
                                   on_progress=progress)
        # a folder another run of this session already claimed is never ours, whatever its timestamp says
        claimed = {d for r in h.ledger.rows("runs", st.id) for d in r["output_dirs"]}
        dirs = [d for d in find_run_dirs(h.workspace, created_after=result.started_at) if str(d) not in claimed]
        run_id = h.ledger.insert(
            "runs", session_id=st.id, at=now_iso(), purpose=purpose, round=round_no, argv=argv,
            env={k: v for k, v in env.items()}, cwd=str(h.workspace), exit_code=result.exit_code,
            signal=result.signal, timed_out=result.timed_out, cancelled=result.cancelled,
            duration_s=result.duration_s, started_epoch=result.started_at, output_head=result.output_head,
            output_tail=result.output_tail, output_bytes=result.output_bytes,
            output_dirs=[str(d) for d in dirs], code_hash=code_hash(sources), raw_hash=hash_sources(sources),
            device_id=device_id,
        )
        return result, run_id, dirs

    # ---------------------------------------------------------------------------------------------- precision
    async def run_precision_check(self, session_id: str, *, confirm_retry: bool = False, adopt_drift: bool = False,
                                  progress: Progress = None) -> PrecisionResult:
        """Run the fixed test command on the current code and record the verdict bound to its hash (R4/R6)."""
        h = self._find(session_id)
        st = self._state(h, session_id)
        self._gate(h, st, "run_precision_check", confirm_retry=confirm_retry, adopt_drift=adopt_drift)
        h.busy = "run_precision_check"
        try:
            if confirm_retry and st.awaiting_user:
                last = max(int(r["id"]) for r in st.rows["precision_records"])
                h.ledger.insert("confirmations", session_id=st.id, at=now_iso(), kind="baseline-retry",
                                detail=str(last))
                st = self._state(h, session_id)
            disk = self._disk_sources(h, st)
            if adopt_drift and hash_sources(disk) != st.expected_raw_hash:
                self._adopt_drift(h, st, disk)
                st = self._state(h, session_id)

            env_checks: list[EnvCheck] = []
            if st.level1 == "S1_SETUP" and st.env_ok is not True:
                env_checks = await check_environment(
                    run_mode=st.run_mode, workspace=h.workspace, operator_files=list(st.session["operator_files"]),
                    env=self._child_env(st, self._device_for(st)), python=self.python,
                    device_ids=list(st.session["device_ids"]),
                )
                batch = st.env_batches + 1
                with h.ledger.transaction() as tx:
                    for c in env_checks:
                        tx.insert("env_checks", session_id=st.id, at=c.at or now_iso(), batch=batch, name=c.name,
                                  ok=c.ok, detail=c.detail)
                st = self._state(h, session_id)
                if not st.env_ok:
                    bad = [f"{c.name}: {c.detail}" for c in env_checks if not c.ok]
                    raise self._refuse(h, st.id, "run_precision_check", GateRefusal(
                        "env-check", "the environment checklist failed: " + "; ".join(bad),
                        allowed=["run_precision_check", "get_status"],
                        hint="fix the failing items (see get_status for the whole checklist), then call "
                        "run_precision_check again"))

            round_no = st.open_round.number if st.open_round else None
            device = self._device_for(st)
            sources = st.expected_sources
            result, run_id, dirs = await self._run(h, st, purpose="precision", round_no=round_no, device_id=device,
                                                   sources=sources, progress=progress)
            verdict = judge_precision(result, st.run_mode)
            v, key, reason = verdict.verdict, verdict.key_output, verdict.reason
            if v == "passed" and st.run_mode == "sim" and not dirs:
                v, reason = "failed", "the test exited 0 but the simulator wrote no output folder: nothing was " \
                    "simulated (is the jit run_mode SIM and the test calling the kernel?)"
            result_type = None if v == "passed" else rules.classify_failure(v, key + "\n" + reason)
            rec_id = h.ledger.insert(
                "precision_records", session_id=st.id, at=now_iso(), run_id=run_id, command=list(result.argv),
                verdict=v, numerics_checked=verdict.numerics_checked, exit_code=result.exit_code,
                duration_s=result.duration_s, key_output=key, reason=reason, code_hash=st.current_hash,
                round=round_no, device_id=device, result_type=result_type,
            )
            st2 = self._state(h, session_id)
            if v == "passed" and st2.level1 == "S1_SETUP":
                self._transition(h, st2, "state", "S2_COLLECT", "baseline precision passed (S1b)")
                st2 = self._state(h, session_id)
            msg = f"precision {v}" + ("" if verdict.numerics_checked else
                                      " — SIM: compiled and simulated only, output values were NOT checked")
            if v != "passed" and round_no is None and st2.level1 == "S1_SETUP":
                left = max(rules.BASELINE_ATTEMPTS - st2.baseline_failures, 0)
                msg += (f"; baseline failure {st2.baseline_failures}/{rules.BASELINE_ATTEMPTS}: do not fix the "
                        f"operator (R5); the next attempt uses device {self._device_for(st2)}" if left else
                        "; 3 baseline failures: the user must confirm before another attempt (R5)")
            elif v != "passed" and round_no is not None:
                msg += (f" ({result_type}); one quick correction of the same knob is allowed, or revert_patch /"
                        " record_round to roll back" if st2.open_round and st2.open_round.corrections == 0 else
                        f" ({result_type}); call record_round (it rolls back) or revert_patch")
            return PrecisionResult(
                **self._base(st2, msg), verdict=v, numerics_checked=verdict.numerics_checked,
                exit_code=result.exit_code, duration_s=result.duration_s, key_output=key,
                code_hash=st.current_hash, record_id=rec_id, round=round_no, device_id=device,
                env_checks=env_checks,
                attempts_left=(max(rules.BASELINE_ATTEMPTS - st2.baseline_failures, 0)
                               if round_no is None else None),
            )
        finally:
            h.busy = None

    def _device_for(self, st: SessionState) -> str:
        pool = list(st.session["device_ids"])
        # R5: a failing baseline moves to the next device of the pool.
        return pool[st.baseline_failures % len(pool)] if st.level1 == "S1_SETUP" else pool[0]

    def _adopt_drift(self, h: _Handle, st: SessionState, disk: dict[str, str]) -> None:
        """Record an external edit as a manual round (in S4) or a manual adoption (before tuning)."""
        changes = knob_delta(st.expected_sources, disk)
        diff = unified_diff(st.expected_sources, disk)
        round_no = None
        with h.ledger.transaction() as tx:
            if st.level1 == "S4_TUNE":
                round_no = _next_round(st)
                tx.insert("rounds", session_id=st.id, number=round_no, opened_at=now_iso(), stage=st.stage or "",
                          outer_round=st.outer_round, kind="manual", catalog_id="MANUAL",
                          change="external edit adopted: " + (_describe(changes) or "structural edit"),
                          rationale="source changed outside the server; adopted through a precision run",
                          before_hash=st.kept_hash, before_raw_hash=st.kept_raw_hash, before_us=st.kept_us)
            tx.insert("patches", **_patch_row(st.id, kind="manual-adopt", round_no=round_no,
                                              before=st.expected_sources, after=disk, note="drift adopted",
                                              catalog_id="MANUAL", diff=diff, changes=changes))

    def _transition(self, h: _Handle, st: SessionState, level: str, to: str, reason: str,
                    summary: dict[str, Any] | None = None) -> None:
        h.ledger.insert("transitions", session_id=st.id, at=now_iso(), level=level,
                        from_value=st.level1 if level == "state" else st.stage, to_value=to, reason=reason,
                        summary=summary or {})

    # ---------------------------------------------------------------------------------------------- debug
    def enable_runtime_debug(self, session_id: str, enabled: bool = True) -> DebugResult:
        """Add (or remove) ``debug_options={"runtime_debug_mode": 1}`` on every jit (R7/R22)."""
        h = self._find(session_id)
        st = self._state(h, session_id)
        self._gate(h, st, "enable_runtime_debug", enabled=enabled)
        before = st.expected_sources
        if enabled:
            after = set_runtime_debug(before, True)
            kind = "debug-on"
        else:
            after = set_runtime_debug(before, False, baseline=st.debug_baseline)
            kind = "debug-off"
        changed = sorted(p for p in after if after[p] != before.get(p))
        diff = unified_diff(before, after)
        if changed:
            self._write(h, st, after, "enable_runtime_debug")
        h.ledger.insert("patches", **_patch_row(st.id, kind=kind, round_no=None, before=before, after=after,
                                                diff=diff, note="runtime debug " + ("enabled" if enabled
                                                                                   else "restored")))
        st2 = self._state(h, session_id)
        return DebugResult(**self._base(st2, f"runtime_debug_mode {'enabled' if enabled else 'restored'} in "
                                        f"{len(changed)} file(s); the precision verdict still applies (the switch "
                                        "does not change numerics)"),
                           enabled=enabled, changed_files=changed, diff=diff)

    # ---------------------------------------------------------------------------------------------- collect
    async def collect_swimlane(self, session_id: str, *, progress: Progress = None) -> CollectResult:
        """Run the test with runtime_debug_mode 1, parse the new output folders and record a measurement."""
        h = self._find(session_id)
        st = self._state(h, session_id)
        self._gate(h, st, "collect_swimlane")
        h.busy = "collect_swimlane"
        try:
            if st.open_round is not None:
                round_no, purpose = st.open_round.number, "measure"
            elif st.level1 == "S2_COLLECT":
                round_no, purpose = 0, "baseline"
            else:
                round_no, purpose = -1, "stage-baseline"
            reps = int(st.session["repeats"])
            samples: list[float] = []
            e2es: list[float] = []
            run_ids: list[int] = []
            all_dirs: list[Path] = []
            invalid: list[str] = []
            analysis_json: dict[str, Any] = {}
            for i in range(reps):
                async def rep_progress(elapsed: float, line: str, i: int = i) -> None:
                    if progress:
                        await progress(elapsed, f"repeat {i + 1}/{reps}: {line}")
                result, run_id, dirs = await self._run(h, st, purpose=purpose, round_no=round_no,
                                                       device_id=self._device_for(st), sources=st.expected_sources,
                                                       progress=rep_progress)
                run_ids.append(run_id)
                if result.timed_out or result.exit_code != 0:
                    invalid.append(f"repeat {i + 1}: the test command failed (exit {result.exit_code}, timeout "
                                   f"{result.timed_out}): {result.output_tail[-400:]}")
                    break
                if not dirs:
                    invalid.append(f"repeat {i + 1}: no output folder was created under {h.workspace / 'output'}")
                    break
                reasons = [r for d in dirs for r in validate_run(d, st.run_mode)]
                if reasons:
                    invalid.extend(f"repeat {i + 1}: {r}" for r in reasons)
                    all_dirs.extend(dirs)
                    break
                analysis = analyze_runs(dirs, run_mode=st.run_mode, source_root=h.workspace)
                samples.append(float(analysis.operator_time_us))
                e2es.append(float(analysis.e2e_us))
                all_dirs.extend(dirs)
                analysis_json = analysis.model_dump(mode="json")
            valid = not invalid and bool(samples)
            art_dir = h.workspace / LEDGER_DIR / "artifacts" / st.id
            label = f"round{round_no}" if round_no >= 0 else f"{(st.stage or 'stage').lower()}-entry"
            archive = ""
            traces: list[str] = []
            if all_dirs:
                stamp = datetime.now().strftime("%H%M%S%f")
                archive = str(archive_run_dirs(all_dirs, art_dir / f"{label}-{stamp}.tar.gz"))
                traces = _keep_traces(all_dirs, art_dir / "traces" / f"{label}-{stamp}")
            analysis_json["trace_copies"] = traces
            op_time = statistics.median(samples) if valid else None
            e2e = statistics.median(e2es) if valid else None
            mid = h.ledger.insert(
                "measurements", session_id=st.id, at=now_iso(), round=round_no, code_hash=st.current_hash,
                valid=valid, invalid_reasons=invalid, operator_time_us=op_time, e2e_us=e2e, samples=samples,
                analysis=analysis_json, archive=archive, run_ids=run_ids, stage=st.stage,
            )
            st2 = self._state(h, session_id)
            if not valid:
                msg = ("the measurement is INVALID and was not used: " + "; ".join(invalid)
                       + (" — in SIM keep stitch_function_max_num ≥ the number of loop iterations (domain B.9.3)"
                          if st.run_mode == "sim" else ""))
                if st.open_round is None:
                    raise self._refuse(h, st.id, "collect_swimlane", GateRefusal(
                        "measure-first", msg, allowed=gates.allowed_actions(st2),
                        hint="fix the cause (the source was not changed by this call) and collect again"))
            else:
                msg = f"operator time {op_time:.3f} µs (median of {len(samples)}; E2E {e2e:.3f} µs)"
                if purpose == "baseline":
                    self._transition(h, st2, "state", "S3_ANALYZE", "baseline collected (S2)")
                    st2 = self._state(h, session_id)
                    msg += f"; baseline set, target {st2.target_us:.3f} µs"
            return CollectResult(
                **self._base(st2, msg), output_dirs=[str(d) for d in all_dirs],
                artifacts=[a for a in [archive] if a] + traces, operator_time_us=op_time, e2e_us=e2e,
                samples_us=samples, valid=valid, invalid_reasons=invalid, measurement_id=mid, round=round_no,
                target_us=st2.target_us, baseline_us=st2.baseline_us,
            )
        finally:
            h.busy = None

    # ---------------------------------------------------------------------------------------------- analyze
    def analyze_bubbles(self, session_id: str | None = None, *, output_dir: str | None = None,
                        lang: str = "zh", outer_loops: int | None = None) -> AnalyzeResult:
        """Analyse the latest valid measurement of the session (or any output folder, without a session)."""
        if lang not in ("zh", "en"):
            raise InputError(f"lang must be 'zh' or 'en', got {lang!r}", hint="zh is the default")
        if session_id is None:
            if not output_dir:
                raise InputError("give session_id, or output_dir to analyse a folder without a session",
                                 hint="e.g. output_dir='/path/to/output/output_2026...'")
            base = Path(output_dir).expanduser()
            if not base.is_absolute() and self.default_workspace:
                base = self.default_workspace / base
            base = base.resolve()
            if self.default_workspace is None:
                # Without a workspace there is no boundary to check against, and the analysis writes a report
                # file next to the run: refuse rather than write anywhere on the machine.
                raise InputError("analyze_bubbles(output_dir=...) needs a server started with --workspace DIR",
                                 hint="restart the server with --workspace, or run `pypto-tune analyze DIR`")
            inside(self.default_workspace, base, what="output_dir")
            dirs = find_run_dirs(base)
            if not dirs:
                raise InputError(f"no PyPTO run folder (output_<timestamp>) found at {base}",
                                 hint="pass a run folder, its output/ parent, or a workspace holding output/")
            picked = [dirs[-1]]
            analysis = analyze_runs(picked, outer_loops=outer_loops)
            report = write_report(analysis, _report_dir(picked[0]) / "performance_analysis_report.md", lang)
            note = f"analysed the newest run {picked[0].name}" + (f" of {len(dirs)} found" if len(dirs) > 1 else "")
            return _analysis_result(analysis, report, {"session_id": None, "message": note, "next_actions": []})

        h = self._find(session_id)
        st = self._state(h, session_id)
        self._gate(h, st, "analyze_bubbles", mutating=False)
        m = st.last_valid_measurement()
        if m is None:
            raise self._refuse(h, st.id, "analyze_bubbles", GateRefusal(
                "sequence", "there is no valid measurement to analyse yet", allowed=gates.allowed_actions(st),
                hint="collect_swimlane first"))
        dirs = [Path(d) for d in m["analysis"].get("run_dirs", [])]
        missing = [d for d in dirs if not d.exists()]
        if missing:
            raise InputError(f"the run folders of measurement {m['id']} are gone: {missing[0]}",
                             hint=f"the compressed copy is {m['archive']}; collect_swimlane again for fresh data")
        analysis = analyze_runs(dirs, run_mode=st.run_mode, outer_loops=outer_loops, source_root=h.workspace)
        report = write_report(analysis, _report_dir(dirs[0]) / "performance_analysis_report.md", lang)
        h.ledger.insert("analyses", session_id=st.id, at=now_iso(), measurement_id=m["id"], stage=st.stage,
                        report_path=str(report),
                        suggestions=[s.model_dump(mode="json") for s in analysis.suggestions])
        msg = f"analysed measurement {m['id']} (round {m['round']})"
        st2 = self._state(h, session_id)
        if st2.level1 == "S3_ANALYZE":
            h.lock.acquire()
            self._transition(h, st2, "state", "S4_TUNE", "baseline analysed (S3)")
            st2 = self._state(h, session_id)
            self._transition(h, st2, "stage", "FRONTEND", "tuning starts with the frontend stage")
            st2 = self._state(h, session_id)
            msg += "; tuning starts: stage FRONTEND"
        return _analysis_result(analysis, report, self._base(st2, msg))

    # ---------------------------------------------------------------------------------------------- patch
    def apply_tuning_patch(self, session_id: str, *, catalog_id: str, rationale: str, knob: str | None = None,
                           value: Any = None, target: str | None = None, diff: str | None = None,
                           algorithm: bool = False) -> PatchResult:
        """Change exactly one knob (structured ``knob``+``value``, or a unified ``diff``) and open a round."""
        h = self._find(session_id)
        st = self._state(h, session_id)
        self._gate(h, st, "apply_tuning_patch", catalog_id=catalog_id, algorithm=algorithm)
        if not rationale or not rationale.strip():
            raise InputError("rationale is required: say which analysis row or symptom led to this change (R10)",
                             hint="e.g. 'AIV util 12 %, tasks 0.9 µs: bigger vector tile (F-10)'")
        if (diff is None) == (knob is None):
            raise InputError("give either knob (+ value, optional target) or diff, not both/neither",
                             hint="list_knobs shows the knob ids")
        correction = st.open_round is not None
        base_sources = st.expected_sources
        if diff is not None:
            plan = plan_diff_edit(base_sources, diff)
        else:
            plan = plan_knob_edit(base_sources, knob, value, target)
        if plan.new_sources == base_sources:
            raise InputError("the patch changes nothing", hint="choose a different value; list_knobs shows current ones")
        # The one-change rule compares the candidate with the last KEPT state (E.1.2), not the failed attempt.
        reference = st.open_round.patches[0]["before_sources"] if correction else st.kept_sources
        delta = knob_delta(reference, plan.new_sources)
        kind = "algorithm" if algorithm else "config"
        try:
            gates.check_one_change(delta, algorithm=algorithm,
                                   first_knobs=[c["knob_id"] for c in st.open_round.patches[0]["knob_changes"]]
                                   if correction else None)
        except GateRefusal as refusal:
            raise self._refuse(h, st.id, "apply_tuning_patch", refusal) from None
        if not algorithm and len(delta) == 1:
            served = _knob_catalog_ids(plan.new_sources, delta[0].knob_id)
            if served and catalog_id not in served:
                raise self._refuse(h, st.id, "apply_tuning_patch", GateRefusal(
                    "catalog-stage", f"knob {delta[0].knob_id} serves {', '.join(served)}, not {catalog_id}",
                    allowed=["apply_tuning_patch", "list_knobs"],
                    hint="cite the catalogue id the change belongs to (list_knobs shows each knob's ids)"))
        new_hash = code_hash(plan.new_sources)
        self._write(h, st, plan.new_sources, "apply_tuning_patch")
        round_no = st.open_round.number if correction else _next_round(st)
        with h.ledger.transaction() as tx:
            if not correction:
                tx.insert("rounds", session_id=st.id, number=round_no, opened_at=now_iso(), stage=st.stage or "",
                          outer_round=st.outer_round, kind=kind, catalog_id=catalog_id,
                          change=_describe(delta) or f"algorithm change ({catalog_id})", rationale=rationale,
                          before_hash=st.kept_hash, before_raw_hash=st.kept_raw_hash, before_us=st.kept_us)
            tx.insert("patches", **_patch_row(st.id, kind="correction" if correction else "tuning",
                                              round_no=round_no, before=base_sources, after=plan.new_sources,
                                              note=rationale, catalog_id=catalog_id, diff=plan.diff,
                                              changes=delta))
        st2 = self._state(h, session_id)
        return PatchResult(
            **self._base(st2, f"round {round_no}: {_describe(delta) or 'algorithm change'}; verify it with "
                         "run_precision_check"),
            round=round_no, kind="correction" if correction else kind, knob_changes=delta, diff=plan.diff,
            code_hash=new_hash,
        )

    # ---------------------------------------------------------------------------------------------- revert
    def revert_patch(self, session_id: str, *, notes: str = "") -> RevertResult:
        """Roll the open round back to the last kept state byte-for-byte (or undo an external edit)."""
        h = self._find(session_id)
        st = self._state(h, session_id)
        self._gate(h, st, "revert_patch")
        disk = self._disk_sources(h, st)
        if st.open_round is None:
            # Only reachable under drift (the gate refuses otherwise): restore what the server last wrote.
            self._write(h, st, st.expected_sources, "revert_patch")
            h.ledger.insert("patches", **_patch_row(st.id, kind="drift-revert", round_no=None, before=disk,
                                                    after=st.expected_sources, note="external edit reverted"))
            st2 = self._state(h, session_id)
            return RevertResult(**self._base(st2, "external edit reverted; the server's sources are restored"),
                                round=None, restored_hash=st.current_hash)
        decision, result_type, error = _abandon_outcome(st)
        restored = self._close_round(h, st, disk, decision=decision, result_type=result_type, after_us=None,
                                     delta_pct=None, error=error, notes=notes or "reverted by revert_patch")
        st2 = self._state(h, session_id)
        self._judge_stage(h, st2)
        st2 = self._state(h, session_id)
        return RevertResult(**self._base(st2, f"round {st.open_round.number} rolled back ({result_type}); "
                                         "source restored to the last kept state"),
                            round=st.open_round.number, restored_hash=restored, decision=decision)

    def _close_round(self, h: _Handle, st: SessionState, disk: dict[str, str], *, decision: str, result_type: str,
                     after_us: float | None, delta_pct: float | None, error: str, notes: str) -> str:
        """Write the decision; when not kept, restore the kept sources (with the current debug state) first."""
        assert st.open_round is not None
        n = st.open_round.number
        restored_hash = st.current_hash
        target = st.kept_sources if decision != "kept" else None
        if target is not None:
            self._write(h, st, target, "revert")  # before the transaction: the intent must be on record first
        with h.ledger.transaction() as tx:
            if target is not None:
                restored_hash = code_hash(target)
                tx.insert("patches", **_patch_row(st.id, kind="revert", round_no=n, before=disk, after=target,
                                                  note=f"round {n} rolled back ({result_type})"))
            tx.insert("round_decisions", session_id=st.id, number=n, at=now_iso(), decision=decision,
                      result_type=result_type, after_us=after_us, delta_pct=delta_pct, error_output=error[-4000:],
                      notes=notes, restored_hash=restored_hash)
            cat = st.open_round.row["catalog_id"]
            group = rules.STAGES_BY_NAME.get(st.open_round.row["stage"])
            if group and group.group in ("frontend", "swimlane", "incore") and cat != "MANUAL":
                tx.insert("checklist_marks", session_id=st.id, at=now_iso(), stage_group=group.group,
                          catalog_id=cat, status="tried" if decision != "failed" else "failed",
                          reason=f"round {n}: {result_type}", round=n)
        return restored_hash

    # ---------------------------------------------------------------------------------------------- record
    def record_round(self, session_id: str, *, notes: str = "") -> RecordResult:
        """Judge the open round from the server's own measurement and keep or roll back (R12/R13/R14)."""
        h = self._find(session_id)
        st = self._state(h, session_id)
        self._gate(h, st, "record_round")
        assert st.open_round is not None
        r = st.open_round
        disk = self._disk_sources(h, st)
        last_prec = r.precision[-1] if r.precision else None
        measurement = next((m for m in reversed(r.measurements) if m["code_hash"] == st.current_hash), None)
        before = st.kept_us
        after = delta = None
        if last_prec is not None and last_prec["code_hash"] == st.current_hash and last_prec["verdict"] != "passed":
            decision, result_type = "failed", last_prec["result_type"] or "precision-failure"
            error = last_prec["key_output"] + ("\n" + last_prec["reason"] if last_prec["reason"] else "")
        elif measurement is not None and not measurement["valid"]:
            decision, result_type = "failed", "runtime-error"
            error = "invalid measurement: " + "; ".join(measurement["invalid_reasons"])
        else:
            assert measurement is not None and before is not None
            j = rules.judge_measurement(before, list(measurement["samples"]), st.run_mode)
            after, delta, result_type = j.after_us, j.delta_pct, j.result_type
            decision = "kept" if j.result_type == "gain" else "reverted"
            error = ""
            notes = "; ".join(x for x in [notes, j.note, f"noise margin {j.margin_pct:.2f} %"
                                          if st.run_mode == "npu" else ""] if x)
        self._close_round(h, st, disk, decision=decision, result_type=result_type, after_us=after,
                          delta_pct=delta, error=error, notes=notes)
        st2 = self._state(h, session_id)
        verdict = self._judge_stage(h, st2)
        st2 = self._state(h, session_id)
        c = st2.counters.get(r.row["stage"])
        sdef = rules.STAGES_BY_NAME.get(r.row["stage"])
        msg = f"round {r.number}: {decision} ({result_type}"
        msg += f", {delta:+.2f} %)" if delta is not None else ")"
        if verdict:
            msg += f"; {verdict}"
        try:
            board = render_status_board(self.snapshot(session_id), "en")
        except Exception:  # the decision is recorded; a rendering bug must not turn it into an error
            log.exception("status board rendering failed")
            board = ""
        return RecordResult(
            **self._base(st2, msg), round=r.number, before_us=before, after_us=after, delta_pct=delta,
            decision=decision, result_type=result_type, finished=st2.finished, best_us=st2.kept_us,
            target_us=st2.target_us, stage_consecutive_no_gain=c.consecutive_no_gain if c else 0,
            stage_threshold=sdef.no_gain_threshold if sdef else 0, board=board,
        )

    def _judge_stage(self, h: _Handle, st: SessionState) -> str:
        """JUDGE: global termination (R14b) first, then the stage's own exit (R14). Returns what happened."""
        reason = gates.global_stop_reason(st)
        if reason:
            self._finish(h, st, reason)
            return f"session finished: {reason}"
        if st.stage is None:
            return ""
        sdef = rules.STAGES_BY_NAME[st.stage]
        c = st.counters.get(st.stage)
        if c and c.consecutive_no_gain >= sdef.no_gain_threshold:
            return self._leave_stage(h, st, f"{c.consecutive_no_gain} consecutive rounds without gain "
                                           f"(threshold {sdef.no_gain_threshold})")
        return ""

    def _leave_stage(self, h: _Handle, st: SessionState, reason: str) -> str:
        assert st.stage is not None
        nxt = rules.next_stage(st.stage)
        summary = gates.stage_summary(st)
        if nxt is None and st.stage != rules.ALGORITHM_STAGE.name:
            # R23: the configuration stages converged without reaching the target; algorithm-level changes may
            # follow (stop_session ends the session instead).
            self._transition(h, st, "stage", rules.ALGORITHM_STAGE.name,
                             f"{st.stage} left: {reason}; configuration stages converged (R23)", summary)
            return ("configuration stages converged without reaching the target: stage ALGORITHM (declared "
                    "algorithm-level changes, algorithm=true), or stop_session + render_report")
        if nxt is None:
            self._finish(h, st, f"algorithm stage done ({reason})", summary)
            return "all stages done: reporting only"
        self._transition(h, st, "stage", nxt.name, f"{st.stage} left: {reason}", summary)
        return f"stage {st.stage} left ({reason}); now {nxt.name}: collect_swimlane + analyze_bubbles first (R15)"

    def _finish(self, h: _Handle, st: SessionState, reason: str, summary: dict[str, Any] | None = None) -> None:
        self._transition(h, st, "state", "S5_REPORT", reason, summary or gates.stage_summary(st))

    # ---------------------------------------------------------------------------------------------- stage control
    def mark_checklist(self, session_id: str, *, catalog_id: str, status: str, reason: str) -> ChecklistResult:
        """Mark a catalogue item of the current stage as not-applicable (with a reason) or tried (R10)."""
        h = self._find(session_id)
        st = self._state(h, session_id)
        self._gate(h, st, "mark_checklist", catalog_id=catalog_id)
        if status != "not-applicable":
            # Rounds mark items tried/failed themselves (R10); an agent could otherwise satisfy the early-exit
            # rule without trying anything.
            raise InputError(f"only 'not-applicable' can be marked by hand, got {status!r}",
                             hint="items become tried/failed when a round citing them is recorded")
        if not reason or len(reason.strip()) < 5:
            raise InputError("a reason is required (at least a few words)", hint="say why the item does not apply")
        group = rules.STAGES_BY_NAME[st.stage].group  # type: ignore[index]
        h.ledger.insert("checklist_marks", session_id=st.id, at=now_iso(), stage_group=group, catalog_id=catalog_id,
                        status=status, reason=reason.strip(), round=None)
        st2 = self._state(h, session_id)
        return ChecklistResult(**self._base(st2, f"{catalog_id} marked {status}"), stage_group=group,
                               items=self._checklist(st2, group))

    def _checklist(self, st: SessionState, group: str) -> list[dict[str, str]]:
        items = [i for i in load_catalog().items if i.stage == group]
        out = []
        for i in items:
            mark = st.checklist.get((group, i.id))
            out.append({"catalog_id": i.id, "title": i.title_en, "status": mark["status"] if mark else "untried",
                        "reason": mark["reason"] if mark else ""})
        return out

    def advance_stage(self, session_id: str, *, reason: str) -> ChecklistResult:
        """Leave the current stage early: allowed only when its checklist is fully marked (R14)."""
        h = self._find(session_id)
        st = self._state(h, session_id)
        self._gate(h, st, "advance_stage")
        group = rules.STAGES_BY_NAME[st.stage].group  # type: ignore[index]
        items = self._checklist(st, group)
        untried = [i["catalog_id"] for i in items if i["status"] == "untried"]
        if untried:
            raise self._refuse(h, st.id, "advance_stage", GateRefusal(
                "stage-exit", f"{st.stage} cannot be left early: checklist items untried: {', '.join(untried)}",
                allowed=["apply_tuning_patch", "mark_checklist", "get_status"],
                hint="try them, or mark_checklist(catalog_id, 'not-applicable', reason) for each"))
        msg = self._leave_stage(h, st, f"checklist complete; {reason}")
        st2 = self._state(h, session_id)
        return ChecklistResult(**self._base(st2, msg), stage_group=group, items=items)

    def stop_session(self, session_id: str, *, reason: str) -> StatusResult:
        """The user's explicit stop (R14b): the session moves to reporting."""
        h = self._find(session_id)
        st = self._state(h, session_id)
        self._gate(h, st, "stop_session")
        if not reason or not reason.strip():
            raise InputError("reason is required", hint="e.g. 'user asked to stop'")
        if st.open_round is not None:
            disk = self._disk_sources(h, st)
            self._close_round(h, st, disk, decision="reverted" if not st.open_round.precision or
                              st.open_round.precision[-1]["verdict"] == "passed" else "failed",
                              result_type="abandoned", after_us=None, delta_pct=None, error="",
                              notes="session stopped with the round open")
            st = self._state(h, session_id)
        self._finish(h, st, f"user stop: {reason.strip()}")
        return self.get_status(session_id)

    # ---------------------------------------------------------------------------------------------- report
    def render_report(self, session_id: str, *, fmt: str = "md", lang: str = "zh") -> ReportResult:
        """Write the final report (R21) after restoring debug options (R22)."""
        h = self._find(session_id)
        st = self._state(h, session_id)
        if fmt not in ("md", "html", "both"):
            raise InputError(f"format must be md, html or both, got {fmt!r}", hint="md is the default")
        if lang not in ("zh", "en"):
            raise InputError(f"lang must be zh or en, got {lang!r}", hint="zh is the default")
        self._gate(h, st, "render_report")
        restored_now = False
        if st.debug_enabled:
            before = st.expected_sources
            after = set_runtime_debug(before, False, baseline=st.debug_baseline)
            self._write(h, st, after, "render_report")
            h.ledger.insert("patches", **_patch_row(st.id, kind="debug-restore", round_no=None, before=before,
                                                    after=after, note="debug_options restored by render_report "
                                                    "(R22)"))
            restored_now = True
            st = self._state(h, session_id)
        snap = self.snapshot(session_id)
        out_dir = (h.workspace / st.session["operator_files"][0]).parent
        paths = []
        for f in (["md", "html"] if fmt == "both" else [fmt]):
            paths.append(str(render_report_file(snap, f, lang, out_dir)))
        if st.level1 != "DONE":
            self._transition(h, st, "state", "DONE", "final report rendered")
        # A finished session writes nothing more: free the workspace so another server can start the next one
        # (rendering again re-takes the lock if it is still free).
        h.lock.release()
        st2 = self._state(h, session_id)
        return ReportResult(**self._base(st2, "report written: " + ", ".join(paths)
                                         + ("; debug options restored first (R22)" if restored_now else "")),
                            paths=paths, debug_restored_now=restored_now)

    # ---------------------------------------------------------------------------------------------- read-only
    def get_status(self, session_id: str, lang: str = "en") -> StatusResult:
        h = self._find(session_id)
        st = self._state(h, session_id)
        drift = False
        try:
            drift = hash_sources(self._disk_sources(h, st)) != st.expected_raw_hash
        except GateRefusal:
            drift = True
        snap = self.snapshot(session_id)
        decided = [d for d in st.decisions.values()]
        kept = sum(1 for d in decided if d["decision"] == "kept")
        return StatusResult(
            **self._base(st, f"{st.level1}" + (f" / {st.stage}" if st.stage else "")
                         + (" — DRIFT: operator files changed outside the server" if drift else "")),
            board=render_status_board(snap, lang), baseline_us=st.baseline_us, target_us=st.target_us,
            best_us=st.kept_us, rounds=len(decided), kept=kept,
            success_rate_pct=(kept / len(decided) * 100.0) if decided else None, finished=st.finished,
            running_job=h.busy, drift=drift,
        )

    def list_knobs(self, session_id: str) -> KnobsResult:
        h = self._find(session_id)
        st = self._state(h, session_id)
        knobs = extract_knobs(st.expected_sources)
        return KnobsResult(**self._base(st, f"{len(knobs)} knobs in {len(st.expected_sources)} file(s)"),
                           knobs=[KnobOut(id=k.id, kind=k.kind, file=k.file, line=k.line, value=k.value,
                                          catalog_ids=list(k.catalog_ids), legal=k.legal) for k in knobs])

    def ledger_json(self, session_id: str) -> dict[str, Any]:
        h = self._find(session_id)
        rows = load_rows(h.ledger, session_id)
        return {"schema_version": h.ledger.schema_version(),
                "tables": {k: [dict(r) for r in v] for k, v in rows.items()}}

    def snapshot(self, session_id: str) -> Any:
        from pypto_tune.tools.snapshot_builder import build_snapshot

        h = self._find(session_id)
        return build_snapshot(self._state(h, session_id))


def _patch_row(session_id: str, *, kind: str, round_no: int | None, before: dict[str, str], after: dict[str, str],
               note: str, catalog_id: str | None = None, diff: str | None = None,
               changes: list[Any] | None = None) -> dict[str, Any]:
    """One ``patches`` row: both source states, their functional and raw hashes, the diff and the knob delta."""
    return dict(session_id=session_id, at=now_iso(), round=round_no, kind=kind, catalog_id=catalog_id,
                diff=unified_diff(before, after) if diff is None else diff, before_hash=code_hash(before),
                after_hash=code_hash(after), before_raw_hash=hash_sources(before),
                after_raw_hash=hash_sources(after), before_sources=before, after_sources=after,
                knob_changes=[c.model_dump(mode="json") for c in (changes or [])], note=note)


# ---------------------------------------------------------------------------------------------------- helpers
def _goal_text(row: Any) -> str:
    return (f"{row['goal_value']:g}x faster" if row["goal_kind"] == "speedup" else f"≤ {row['goal_value']:g} µs")


def _next_round(st: SessionState) -> int:
    return max((int(r["number"]) for r in st.rounds), default=0) + 1


def _describe(changes: list[Any]) -> str:
    return "; ".join(f"{c.knob_id}: {c.before!r} → {c.after!r}" for c in changes)


def _knob_catalog_ids(sources: dict[str, str], knob_id: str) -> list[str]:
    for k in extract_knobs(sources):
        if k.id == knob_id:
            return list(k.catalog_ids)
    return []


def _abandon_outcome(st: SessionState) -> tuple[str, str, str]:
    r = st.open_round
    assert r is not None
    last = r.precision[-1] if r.precision else None
    if last is not None and last["verdict"] != "passed" and last["code_hash"] == st.current_hash:
        return "failed", last["result_type"] or "precision-failure", last["key_output"]
    return "reverted", "abandoned", ""


def _report_dir(run_dir: Path) -> Path:
    sim = run_dir / "CostModelSimulationOutput"
    return sim if sim.is_dir() else run_dir


def _keep_traces(dirs: list[Path], dest: Path) -> list[str]:
    """Keep a gzip copy of each run's merged_swimlane.json so reports can draw lanes after output/ is cleaned."""
    out = []
    dest.mkdir(parents=True, exist_ok=True)
    for i, d in enumerate(dirs):
        for cand in (d / "CostModelSimulationOutput" / "merged_swimlane.json", d / "merged_swimlane.json"):
            if cand.is_file():
                target = dest / f"{i:02d}-{d.name}-merged_swimlane.json.gz"
                with cand.open("rb") as src, gzip.open(target, "wb", compresslevel=5) as dst:
                    shutil.copyfileobj(src, dst)
                out.append(str(target))
                break
    return out


def _analysis_result(analysis: Any, report: Path, base: dict[str, Any]) -> AnalyzeResult:
    a = analysis
    details = {}
    for key in ("leaves", "core_usage", "crosscheck", "aiv_chains", "per_dir", "task_count", "invalid_reasons"):
        if hasattr(a, key):
            val = getattr(a, key)
            details[key] = val.model_dump(mode="json") if hasattr(val, "model_dump") else (
                [v.model_dump(mode="json") if hasattr(v, "model_dump") else v for v in val]
                if isinstance(val, list) else val)
    return AnalyzeResult(
        **base, output_dirs=list(a.run_dirs), operator_time_us=a.operator_time_us, e2e_us=a.e2e_us,
        avg_core_utilization=a.avg_core_utilization_pct, avg_bubble_rate=a.avg_bubble_rate_pct,
        load_balance=a.load_balance_pct, active_core_utilization=a.active_core_utilization_pct,
        active_bubble_rate=a.active_bubble_rate_pct, active_load_balance=a.active_load_balance_pct,
        cores=list(a.cores), ratings=dict(a.ratings),
        bottlenecks=[b.model_dump(mode="json") if hasattr(b, "model_dump") else b for b in a.bottlenecks],
        suggestions=[SuggestionOut(catalog_id=s.catalog_id, stage=s.stage, priority=str(getattr(s, "priority", "")),
                                   reason=s.reason, evidence=dict(getattr(s, "evidence", {}) or {}))
                     for s in a.suggestions],
        warnings=list(getattr(a, "warnings", [])), report_path=str(report), details=details,
    )
