"""Session setup: start (or resume) a session, the environment check and the precision runs (S1)."""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid

import anyio
from datetime import datetime
from pathlib import Path
from typing import Any

from pypto_tune.tools.rules import tuning_loop
from pypto_tune.tools.running.environment import check_environment
from pypto_tune.tools.running.import_memo import ImportMemo, memo_key
from pypto_tune.tools.running.interpreter_files import Fingerprint
from pypto_tune.tools.code.codestate import diff_trees, record_tree, scan_tree, tree_hash
from pypto_tune.tools.rules import change as change_rules, drift as drift_rules, setup as setup_rules
from pypto_tune.tools.errors import GateRefusal, InputError, LedgerError, TreeError
from pypto_tune.tools.session import ledger_seal
from pypto_tune.tools.session.ledger import now_iso
from pypto_tune.tools.patching import (
    hash_sources,
    read_sources,
    set_runtime_debug,
    unified_diff,
)
from pypto_tune.tools.operations.results import (
    DebugResult,
    PrecisionResult,
    StartSessionResult,
)
from pypto_tune.tools.running.runner import build_child_env, split_command
from pypto_tune.tools.snapshot import EnvCheck
from pypto_tune.tools.session.state import PERSON_SOURCES, SessionState
from pypto_tune.tools.code.workspace import relative_operator_files, resolve_workspace

from pypto_tune.tools.running import recorded_env, sandbox
from pypto_tune.tools.operations.base import (
    exclusive, INTERPRETER_CHECK, Progress, Handle, SessionContext, goal_text, next_round, code_hash,
)
from pypto_tune.tools.operations.run_world import RunWorldOps
from pypto_tune.tools.operations.runs import RunOps, check_run
from pypto_tune.tools.running.verdict import COMMAND_PROBLEM


log = logging.getLogger("pypto_tune.service")


def recorded_patterns(st: SessionState) -> dict[str, str | None]:
    """The session's verdict patterns as started, with the last correction made before the baseline passed."""
    cfg = st.session["config"] or {}
    pats = {k: cfg.get(k) or None for k in ("pass_pattern", "fail_pattern")}
    for c in st.rows["corrections"]:
        if c["field"] == "verdict_patterns":
            pats = {k: c["after_value"].get(k) or None for k in pats}
    return pats


def verdict_options(st: SessionState) -> dict[str, Any]:
    """Session-level verdict patterns (start_session's pass_pattern / fail_pattern), when set."""
    return {k: v for k, v in recorded_patterns(st).items() if v}


class SetupOps:
    """start_session, run_precision_check, enable_runtime_debug; the run world (``worlds``) and the runs (``runs``)
    it starts from are its collaborators."""

    def __init__(self, ctx: SessionContext, *, worlds: RunWorldOps, runs: RunOps) -> None:
        self.ctx = ctx
        self.worlds = worlds
        self.runs = runs

    def start_session(
        self, *, workspace: str, operator_files: list[str], test_command: str | list[str], run_mode: str,
        goal_speedup: float | None = None, goal_target_us: float | None = None, timeout_s: float = 300.0,
        device_ids: list[str] | None = None, time_limit_h: float = 12.0, repeats: int | None = None,
        shell: bool = False, pass_pattern: str | None = None, fail_pattern: str | None = None, lang: str | None = None,
    ) -> StartSessionResult:
        """Start (or resume) the session of a workspace. The goal is mandatory (R1); the command is fixed here."""
        ws = resolve_workspace(workspace)
        if run_mode not in ("sim", "npu"):
            raise InputError(f"run_mode must be 'sim' or 'npu', got {run_mode!r}",
                             hint="use 'sim' without an NPU (PyPTO cost-model simulator)")
        if (goal_speedup is None) == (goal_target_us is None):
            h = self.ctx.handle(ws)
            raise self.ctx.refuse(h, None, "start_session", setup_rules.no_goal())
        if goal_speedup is not None and not goal_speedup > 1.0:
            raise InputError(f"goal_speedup must be > 1, got {goal_speedup}", hint="e.g. goal_speedup=2 for 2x faster")
        if goal_target_us is not None and not goal_target_us > 0:
            raise InputError(f"goal_target_us must be > 0, got {goal_target_us}", hint="a time in microseconds")
        if not 1 <= float(timeout_s) <= 24 * 3600:
            raise InputError(f"timeout_s must be between 1 and 86400, got {timeout_s}", hint="default is 300")
        if not 0 < float(time_limit_h) <= 24 * 7:
            raise InputError(f"time_limit_h must be in (0, 168], got {time_limit_h}", hint="default is 12")
        reps = tuning_loop.repeats_for(run_mode, repeats)
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
        if pass_pattern or fail_pattern:
            from pypto_tune.tools.running.verdict import compile_verdict_patterns

            compile_verdict_patterns(pass_pattern, fail_pattern)  # InputError names the bad pattern and where
        goal_kind = "speedup" if goal_speedup is not None else "target_us"
        goal_value = float(goal_speedup if goal_speedup is not None else goal_target_us)  # type: ignore[arg-type]

        h = self.ctx.handle(ws)
        try:
            h.lock.acquire()
        except GateRefusal as held:
            return self._attach_read_only(h, held, files, argv, run_mode)
        for row in reversed(h.ledger.rows("sessions")):
            st = self.ctx.state(h, row["id"])
            if st.level1 == "DONE":
                break
            return self._resume(h, st, files=files, argv=argv, run_mode=run_mode, goal_kind=goal_kind,
                                goal_value=goal_value, patterns={"pass_pattern": pass_pattern or None,
                                                                 "fail_pattern": fail_pattern or None})

        self._check_command(argv, ws, run_mode)
        # the world every run of this session executes in (refused here when this server cannot sandbox a run)
        world = self.worlds.current_world(h, None, argv, run_mode)
        sources = read_sources(ws, files)
        try:
            tree = scan_tree(ws)
        except TreeError as exc:
            raise InputError(exc.message, hint=exc.hint) from None
        missing = [f for f in files if f not in tree]
        if missing:
            raise InputError(f"operator files not found in the workspace tree: {missing}",
                             hint="operator files must be regular files inside the workspace (not in output/, "
                             ".git/ or a virtual environment)")
        record_tree(ws, tree)  # copies of every file, before the session that refers to them exists
        sid = f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        operator = Path(files[0]).stem
        with h.record(sid).transaction() as rec:
            rec.session(workspace=str(ws), operator=operator, operator_files=files, test_command=argv, shell=shell,
                        run_mode=run_mode, goal_kind=goal_kind, goal_value=goal_value, timeout_s=float(timeout_s),
                        device_ids=devices, time_limit_h=float(time_limit_h), repeats=int(reps),
                        original_sources=sources, original_hash=code_hash(sources),
                        original_raw_hash=hash_sources(sources),
                        config={"python": self.ctx.python, "started_epoch": time.time(), "tree_hash": tree_hash(tree),
                        "pass_pattern": pass_pattern, "fail_pattern": fail_pattern, "lang": lang or "zh",
                        recorded_env.CONFIG_KEY: world.as_json()})
            for e in tree.values():
                rec.tree_file(path=e.path, sha256=e.sha256, size=e.size, executable=e.executable, link=e.link,
                              role="operator" if e.path in files else "fixed")
            rec.transition(level="state", from_value=None, to_value="S1_SETUP",
                           reason="session started with a goal (R1)", summary={})
        self.ctx.remember(sid, ws)
        st = self.ctx.state(h, sid)
        others = len(tree) - len(files)
        return StartSessionResult(
            **self.ctx.result_base(st, f"session {sid} started; {len(files)} operator file(s) and {others} other workspace "
                         "file(s) recorded (every run executes exactly these bytes); next: run_precision_check "
                         "(environment check first, R3)"),
            resumed=False, operator_files=files, test_command=argv, run_mode=run_mode,
            goal=goal_text(st.session),
        )

    def _check_command(self, argv: list[str], ws: Path, run_mode: str) -> None:
        """Refuse a test command that cannot work (missing file, wrong run-mode flag) before anything is recorded."""
        try:
            from pypto_tune.tools.running.command_check import check_command
        except ImportError:  # pragma: no cover - the module ships with the package
            return
        problems = check_command(argv, workspace=ws, run_mode=run_mode, env=build_child_env(run_mode=run_mode))
        if problems:
            raise InputError("the test command cannot be used: " + "; ".join(p.message for p in problems),
                             hint=" / ".join(dict.fromkeys(p.hint for p in problems if p.hint))
                             or "fix the command and call start_session again")

    def _resume(self, h: Handle, st: SessionState, *, files: list[str], argv: list[str], run_mode: str,
                goal_kind: str, goal_value: float, patterns: dict[str, str | None]) -> StartSessionResult:
        row = st.session
        sid = st.id
        finish = (f"finish it first (stop_session('{sid}') then render_report) and start a new session, or resume "
                  "it with its own arguments")
        if list(row["operator_files"]) != files or row["run_mode"] != run_mode:
            raise InputError(f"session {sid} is still open on this workspace with other operator files or run mode "
                             f"({row['operator_files']}, {row['run_mode']})", hint=finish)
        if (row["goal_kind"], float(row["goal_value"])) != (goal_kind, goal_value):
            raise InputError(f"session {sid} is still open with the goal {goal_text(row)}; a resumed session keeps "
                             "its goal", hint=finish)
        ws = h.workspace
        self.ctx.remember(sid, ws)
        msg = f"resumed session {sid} at {st.level1}" + (f"/{st.stage}" if st.stage else "")
        if argv != st.test_command:
            if not setup_rules.command_correctable(st.level1, st.passed_hashes):
                raise self.ctx.refuse(h, sid, "start_session", setup_rules.command_fixed(sid, st.test_command, finish))
            self._check_command(argv, ws, run_mode)
            h.record(sid).correction(field="test_command", before_value=st.test_command, after_value=argv,
                                     reason="corrected before the baseline precision passed")
            st = self.ctx.state(h, sid)
            msg += f"; test command corrected to {argv} (recorded; allowed until the baseline precision passes)"
        # The verdict patterns are corrected like the command (issue #11). They used to be dropped silently on resume,
        # yet "start the session with a pass_pattern" is exactly what a no-verdict-line failure tells the agent to do,
        # and the session it failed in is still open: the advice then changed nothing.
        current = recorded_patterns(st)
        if patterns != current:
            if not setup_rules.command_correctable(st.level1, st.passed_hashes):
                raise self.ctx.refuse(h, sid, "start_session", setup_rules.patterns_fixed(sid, current, finish))
            h.record(sid).correction(field="verdict_patterns", before_value=current, after_value=patterns,
                                     reason="verdict patterns corrected before the baseline precision passed")
            st = self.ctx.state(h, sid)
            msg += (f"; verdict patterns corrected to {patterns} (recorded; allowed until the baseline precision "
                    "passes)")
        st, note = self.worlds.check_world(h, st)
        msg += note
        st = self.ctx.heal(h, st)
        st, note = self.ctx.void_discarded(h, st)
        msg += note
        return StartSessionResult(**self.ctx.result_base(st, msg), resumed=True, operator_files=files,
                                  test_command=st.test_command, run_mode=run_mode, goal=goal_text(row))

    def _attach_read_only(self, h: Handle, held: GateRefusal, files: list[str], argv: list[str],
                          run_mode: str) -> StartSessionResult:
        """Another server holds this workspace: a second window may still read (status, ledger, knobs, report
        resources); everything that changes the session stays with the holder."""
        rows = h.ledger.rows("sessions")
        if not rows:
            raise held
        st = self.ctx.state(h, rows[-1]["id"])
        self.ctx.remember(st.id, h.workspace)
        base = self.ctx.result_base(st, f"{held.message}; attached READ-ONLY to session {st.id} ({st.level1}"
                          + (f"/{st.stage}" if st.stage else "") + "): get_status, list_knobs, analyze_bubbles and "
                          "the session resources work here; every call that changes the session is refused")
        base["next_actions"] = ["get_status", "list_knobs", "analyze_bubbles"]
        return StartSessionResult(**base, resumed=True, operator_files=list(st.session["operator_files"]),
                                  test_command=st.test_command, run_mode=st.run_mode, goal=goal_text(st.session),
                                  read_only=True)

    @exclusive
    def confirm(self, session_id: str, *, source: str, answer: bool = True) -> str:
        """Record a person's answer to the pending question (R5 retry). ``source`` is how it was given: "elicitation"
        (the MCP client asked its user) or "cli" (``pypto-tune confirm`` typed at a terminal). Never called with the
        agent's own say-so."""
        if source not in PERSON_SOURCES:
            raise InputError(f"confirmation source must be one of {PERSON_SOURCES}, got {source!r}")
        h = self.ctx.find(session_id)
        st = self.ctx.state(h, session_id)
        q = st.pending_question
        if q is None:
            raise InputError("there is no question waiting for an answer",
                             hint="questions appear after three failed baseline precision checks (R5)")
        if not answer:
            h.record(st.id).confirmation(kind="declined", detail="0", source=source, question_id=int(q["id"]))
            return "declined: no further baseline attempt; stop_session and render_report, or fix the environment"
        last = max(int(r["id"]) for r in st.rows["precision_records"])
        h.record(st.id).confirmation(kind="baseline-retry", detail=str(last), source=source, question_id=int(q["id"]))
        return f"retry confirmed by a person ({source}); run_precision_check may run the baseline again"

    @exclusive
    async def run_precision_check(self, session_id: str, *, confirm_retry: bool = False, adopt_drift: bool = False,
                                  progress: Progress = None) -> PrecisionResult:
        """Run the fixed test command on the current code and record the verdict bound to its hash (R4/R6)."""
        h = self.ctx.find(session_id)
        st = self.ctx.state(h, session_id)
        self.ctx.gate(h, st, "run_precision_check", confirm_retry=confirm_retry, adopt_drift=adopt_drift)
        h.busy = "run_precision_check"
        try:
            if adopt_drift and self.ctx.drift(h, st):
                self._adopt_drift(h, st)
                st = self.ctx.state(h, session_id)

            env_checks: list[EnvCheck] = []
            scanned: Fingerprint | None = None
            if st.level1 == "S1_SETUP" and st.env_ok is not True:
                if progress:
                    await progress(0.0, "", phase="environment checklist (first call of the session)")
                # the fingerprint first: its digest keys the remembered answer of `import pypto` (import_memo.py),
                # and once the checklist passes it is the one recorded — taken before the checklist, any change
                # made while the checklist ran shows at the first run
                scanned = await anyio.to_thread.run_sync(lambda: self.worlds.scan_interpreter_sync(h, st))
                env = self.worlds.child_env(st, st.device)
                # the checks import with the interpreter the runs start (`python` in the command: the one the
                # recorded PATH finds), not the server's: that one having pypto says nothing about the runs
                python = self.worlds.run_world(h, st).python
                if not os.path.isabs(python):
                    python = shutil.which(python, path=env.get("PATH")) or python
                env_checks = await check_environment(
                    run_mode=st.run_mode, workspace=h.workspace, operator_files=list(st.session["operator_files"]),
                    env=env, python=python, device_ids=list(st.session["device_ids"]),
                    test_command=list(st.session["test_command"]),
                    memo=self._import_memo(h, python=python, digest=scanned.digest, env=env),
                )
                batch = st.env_batches + 1
                with h.record(st.id).transaction() as rec:
                    for c in env_checks:
                        rec.env_check(at=c.at or now_iso(), batch=batch, name=c.name, ok=c.ok, detail=c.detail)
                st = self.ctx.state(h, session_id)
                if not st.env_ok:
                    bad = [f"{c.name}: {c.detail}" for c in env_checks if not c.ok]
                    raise self.ctx.refuse(h, st.id, "run_precision_check", setup_rules.env_check_failed(bad))

            if st.level1 == "S1_SETUP" and st.env_ok and not any(
                    r["name"] == INTERPRETER_CHECK for r in st.rows.get("env_checks", [])):
                if progress:
                    await progress(0.0, "", phase="recording the interpreter's files (first call of the session)")
                await self._record_interpreter(h, st, scanned)
                st = self.ctx.state(h, session_id)

            round_no = st.open_round.number if st.open_round else None
            device = st.device
            sources = st.expected_sources
            async def run_progress(elapsed: float, line: str, **_: object) -> None:
                if progress:
                    await progress(elapsed, line, phase="precision run" + (f" of round {round_no}" if round_no
                                                                           else " (baseline)"), step=0, steps=1)

            out = await self.runs.run(h, st, purpose="precision", round_no=round_no, device_id=device,
                                  sources=sources, progress=run_progress)
            result, run_id = out.result, out.run_id
            checked = check_run(out, st.run_mode, **verdict_options(st))
            verdict, key = checked.judged, checked.judged.key_output
            v, reason, command_problem = checked.verdict, checked.reason, checked.command_problem
            self.runs.offer_sample(h, st, sources, out, v)
            result_type = COMMAND_PROBLEM if command_problem else checked.result_type
            rec_id = h.record(st.id).precision_record(run_id=run_id, command=list(result.argv), verdict=v,
                                                      numerics_checked=verdict.numerics_checked,
                                                      exit_code=result.exit_code, duration_s=result.duration_s,
                                                      key_output=key, reason=reason, code_hash=st.current_hash,
                                                      round=round_no, device_id=device, result_type=result_type)
            st2 = self.ctx.state(h, session_id)
            if st2.awaiting_user and st2.pending_question is None:
                # R5: the third baseline failure asks the person, not the agent
                h.record(st.id).question(kind="baseline-retry",
                                         text=f"The baseline precision check failed {st2.baseline_failures} times "
                                              f"(last: {reason[:200]}). Retry it once more? The operator must not be "
                                              "fixed by the tuner.",
                                         info={"last_record_id": rec_id})
                st2 = self.ctx.state(h, session_id)
            if v == "passed" and st2.level1 == "S1_SETUP":
                self.ctx.transition(h, st2, "state", "S2_COLLECT", "baseline precision passed (S1b)")
                st2 = self.ctx.state(h, session_id)
            msg = f"precision {v}" + ("" if verdict.numerics_checked else
                                      " — SIM: compiled and simulated only, output values were NOT checked")
            if command_problem and round_no is None and st2.level1 == "S1_SETUP":
                # issue #17: no verdict line says nothing about the operator or a device; the command needs fixing
                msg += ("; NOT a baseline failure (not counted under R5): the test printed no verdict line, so the "
                        "command's output cannot be judged. Call start_session again with the same arguments plus "
                        "pass_pattern=<a regex for the line the test prints on success>"
                        + (f" (if its last line {verdict.deciding_lines[-1].text!r} is that line: "
                           f"{verdict.suggested_pass_pattern!r})" if verdict.suggested_pass_pattern
                           and verdict.deciding_lines else "") + ", then run_precision_check")
            elif v != "passed" and round_no is None and st2.level1 == "S1_SETUP":
                left = max(tuning_loop.BASELINE_ATTEMPTS - st2.baseline_failures, 0)
                where = (f"the next attempt uses device {st2.device}" if st2.run_mode == "npu" else
                         "SIM has no device: the next attempt runs the same command again")
                msg += (f"; baseline failure {st2.baseline_failures}/{tuning_loop.BASELINE_ATTEMPTS}: do not fix the "
                        f"operator (R5); {where}" if left else
                        "; 3 baseline failures: the user must confirm before another attempt (R5) — in a client "
                        "with elicitation the next run_precision_check asks them; otherwise they type "
                        f"`pypto-tune confirm --workspace {h.workspace}` in a terminal")
            elif v != "passed" and round_no is not None:
                msg += (f" ({result_type}); one quick correction of the same knob is allowed, or revert_patch /"
                        " record_round to roll back" if st2.open_round and st2.open_round.corrections == 0 else
                        f" ({result_type}); call record_round (it rolls back) or revert_patch")
            return PrecisionResult(
                **self.ctx.result_base(st2, msg), verdict=v, reason=reason, decided_by=str(verdict.decided_by),
                deciding_lines=[x.model_dump(mode="json") for x in verdict.deciding_lines], numerics_checked=verdict.numerics_checked,
                exit_code=result.exit_code, duration_s=result.duration_s, key_output=key,
                code_hash=st.current_hash, record_id=rec_id, round=round_no,
                device_id=device if st.run_mode == "npu" else None, env_checks=env_checks,
                command_problem=command_problem, suggested_pass_pattern=verdict.suggested_pass_pattern,
                attempts_left=(max(tuning_loop.BASELINE_ATTEMPTS - st2.baseline_failures, 0)
                               if round_no is None else None),
            )
        finally:
            h.busy = None

    async def _record_interpreter(self, h: Handle, st: SessionState, scanned: Fingerprint | None) -> None:
        """Fingerprint the closure's roots before the baseline (``run_world.py``), off the event loop: the scan
        this call's checklist was keyed by, else a new one."""
        fp = scanned or await anyio.to_thread.run_sync(lambda: self.worlds.scan_interpreter_sync(h, st))
        self.worlds.record_interpreter_scan(h, st, fp)

    @staticmethod
    def _import_memo(h: Handle, *, python: str, digest: str, env: dict[str, str]) -> ImportMemo | None:
        """Where the checklist's `import pypto` answer is remembered for the runs' interpreter (``python``, whose
        files ``digest`` covers) and environment. None — the checklist then simply imports — when the seal key
        cannot be had."""
        try:
            seal_key = ledger_seal.load_key()
        except LedgerError:
            return None
        inside = [Path(p) for p in env.get("PYTHONPATH", "").split(os.pathsep)
                  if p and sandbox.under(os.path.realpath(p), [os.path.realpath(h.workspace)])]
        return ImportMemo(key=memo_key(python=python, interpreter_digest=digest, env=env), seal_key=seal_key,
                          path_folders=[Path(h.workspace), *inside])

    def _adopt_drift(self, h: Handle, st: SessionState) -> None:
        """Adopt an external edit of the operator files as a manual round — through the same admission as every
        other change: only while tuning, only the operator files, exactly one legal knob that was not tried before
        (issue #10, attack 4: two knobs edited by hand and adopted; adopting before S4 made unmeasured code the kept
        state). Anything else stays drift: revert_patch restores the recorded state."""
        refuse = "run_precision_check(adopt_drift=true)"
        if st.level1 != "S4_TUNE" or st.stage is None:
            raise self.ctx.refuse(h, st.id, refuse, drift_rules.adopt_outside_tuning(st.level1))
        diff_tree = diff_trees(st.expected_tree, scan_tree(h.workspace, strict=False)) if st.tree else None
        others = [p for p in (diff_tree.changed + diff_tree.added + diff_tree.removed if diff_tree else [])
                  if p not in st.expected_sources]
        if others:
            raise self.ctx.refuse(h, st.id, refuse, drift_rules.adopt_other_files(others))
        disk = read_sources(h.workspace, list(st.session["operator_files"]))  # a missing file or a link: refused
        stage = tuning_loop.STAGES_BY_NAME[st.stage]
        adm = self.ctx.admit(h, st, refuse, st.kept_sources, disk, catalog_id="", path="drift",
                          algorithm=stage.group == "algorithm")
        served = [c for c in adm.catalog_ids if c.startswith(stage.catalog_prefix)] if stage.catalog_prefix else []
        if stage.group != "algorithm" and not served:
            raise self.ctx.refuse(h, st.id, refuse,
                               change_rules.adopted_edit_outside_stage(list(adm.catalog_ids), st.stage))
        catalog_id = served[0] if served else "MANUAL"
        changes = list(adm.changes) if adm.kind == "pair" else [adm.change] if adm.change is not None else []
        round_no = next_round(st)
        with h.record(st.id).transaction() as rec:
            rec.round_opened(number=round_no, stage=st.stage, outer_round=st.outer_round, kind="manual",
                             catalog_id=catalog_id, change="external edit adopted: " + adm.describe(),
                             rationale="source changed outside the server; admitted as one knob change and verified "
                                       "like any other",
                             before_hash=st.kept_hash, before_raw_hash=st.kept_raw_hash, before_us=st.kept_us)
            rec.patch(kind="manual-adopt", round_no=round_no, before=st.expected_sources, after=disk,
                      note="drift adopted", catalog_id=catalog_id, diff=unified_diff(st.expected_sources, disk),
                      changes=changes)

    @exclusive
    def enable_runtime_debug(self, session_id: str, enabled: bool = True) -> DebugResult:
        """Add (or remove) ``debug_options={"runtime_debug_mode": 1}`` on every jit (R7/R22)."""
        h = self.ctx.find(session_id)
        st = self.ctx.state(h, session_id)
        self.ctx.gate(h, st, "enable_runtime_debug", enabled=enabled)
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
            self.ctx.write(h, st, after, "enable_runtime_debug")
        h.record(st.id).patch(kind=kind, round_no=None, before=before, after=after, diff=diff,
                              note="runtime debug " + ("enabled" if enabled else "restored"))
        st2 = self.ctx.state(h, session_id)
        return DebugResult(**self.ctx.result_base(st2, f"runtime_debug_mode {'enabled' if enabled else 'restored'} in "
                                        f"{len(changed)} file(s); the precision verdict still applies (the switch "
                                        "does not change numerics)"),
                           enabled=enabled, changed_files=changed, diff=diff)

