"""Session setup: start (or resume) a session, the environment check and the precision runs (S1)."""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime
from pathlib import Path

from pypto_tune.tools import rules
from pypto_tune.tools.environment import check_environment
from pypto_tune.tools.errors import GateRefusal, InputError
from pypto_tune.tools.ledger import now_iso
from pypto_tune.tools.patching import (
    hash_sources,
    knob_delta,
    read_sources,
    set_runtime_debug,
    unified_diff,
)
from pypto_tune.tools.results import (
    DebugResult,
    PrecisionResult,
    StartSessionResult,
)
from pypto_tune.tools.runner import build_child_env, split_command
from pypto_tune.tools.snapshot import EnvCheck
from pypto_tune.tools.state import SessionState
from pypto_tune.tools.verdict import judge_precision
from pypto_tune.tools.workspace import relative_operator_files, resolve_workspace

from pypto_tune.tools.operations.base import (
    OperationsBase, Progress, _Handle, _describe, _goal_text, _next_round, _patch_row, code_hash,
)


log = logging.getLogger("pypto_tune.service")


class SetupOps(OperationsBase):
    """start_session, run_precision_check, enable_runtime_debug."""

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

    def _child_env(self, st: SessionState, device_id: str | None) -> dict[str, str]:
        return build_child_env(run_mode=st.run_mode, device_id=device_id)

    def _device_for(self, st: SessionState) -> str:
        pool = list(st.session["device_ids"])
        # R5: a failing baseline moves to the next device of the pool.
        return pool[st.baseline_failures % len(pool)] if st.level1 == "S1_SETUP" else pool[0]

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

