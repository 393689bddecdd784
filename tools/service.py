"""The tuning session: every operation an agent can ask for, with the rules enforced before anything happens.

Each public method (1) loads the session state from the ledger, (2) runs the gates (``tools/rules/gates.py``) — a refusal is
recorded and raised as ``GateRefusal`` —, (3) does the work (run the test, parse artifacts, edit source), and
(4) records the outcome as one ledger transaction. Numbers in the ledger come only from artifacts the server parsed.

The operations live in ``tools/operations/`` by group, one object each, built here with what it needs:

    SessionContext (sessions, ledgers, gates, writes, runner)      operations/base.py
    ├── ReportOps          render_report, get_status, list_knobs…    operations/reporting.py
    ├── RunWorldOps        the recorded run world, its questions     operations/run_world.py
    ├── StageControl       the JUDGE step, the server's own marks    operations/stages.py
    ├── RunOps             ← worlds, stages                         operations/runs.py
    ├── RoundOps           ← stages, reports                        operations/rounds.py
    ├── StageOps           ← stage control, rounds, reports          operations/stages.py
    ├── SetupOps           ← worlds, runs                            operations/setup.py
    └── SearchOps          ← runs, stages                            operations/search.py

This class is the one entry point of the MCP adapter and the CLI: each public method hands the call to the object
that owns it, with the same signature (``tests/operations/test_service_facade.py`` holds them equal).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pypto_tune.tools.operations.base import Progress, SessionContext
from pypto_tune.tools.operations.reporting import ReportOps
from pypto_tune.tools.operations.results import (
    AnalyzeResult, ChecklistResult, CandidatesResult, CollectResult, DebugResult, KnobsResult, PatchResult,
    PrecisionResult, RecordResult, ReportResult, RevertResult, StartSessionResult, StatusResult, TrialsResult,
)
from pypto_tune.tools.operations.rounds import RoundOps
from pypto_tune.tools.operations.run_world import RunWorldOps
from pypto_tune.tools.operations.runs import RunOps
from pypto_tune.tools.operations.search import SearchOps
from pypto_tune.tools.operations.setup import SetupOps
from pypto_tune.tools.operations.stages import StageControl, StageOps

if TYPE_CHECKING:
    from pypto_tune.tools.running.executors import Executor


class TuningService:
    """Owns the sessions this server process serves (one workspace each), through the operation objects."""

    def __init__(self, *, default_workspace: Path | None = None, python: str = sys.executable,
                 executor: Executor | None = None) -> None:
        self.ctx = SessionContext(default_workspace=default_workspace, python=python, executor=executor)
        self.reports = ReportOps(self.ctx)
        self.worlds = RunWorldOps(self.ctx)
        self.stage_control = StageControl(self.ctx)
        self.runs = RunOps(self.ctx, worlds=self.worlds, stages=self.stage_control)
        self.rounds = RoundOps(self.ctx, stages=self.stage_control, reports=self.reports)
        self.stages = StageOps(self.ctx, control=self.stage_control, rounds=self.rounds, reports=self.reports)
        self.setup = SetupOps(self.ctx, worlds=self.worlds, runs=self.runs)
        self.search = SearchOps(self.ctx, runs=self.runs, stages=self.stage_control)

    @property
    def executor(self) -> Executor:
        """Where isolated runs execute (``tools/running/executors/``)."""
        return self.ctx.executor

    @property
    def default_workspace(self) -> Path | None:
        return self.ctx.default_workspace

    # ------------------------------------------------------------------------------------------- SetupOps (setup)
    def start_session(self, *, workspace: str, operator_files: list[str], test_command: str | list[str],
                      run_mode: str, goal_speedup: float | None = None, goal_target_us: float | None = None,
                      timeout_s: float = 300.0, device_ids: list[str] | None = None, time_limit_h: float = 12.0,
                      repeats: int | None = None, shell: bool = False, pass_pattern: str | None = None,
                      fail_pattern: str | None = None, lang: str | None = None) -> StartSessionResult:
        return self.setup.start_session(
            workspace=workspace, operator_files=operator_files, test_command=test_command,
            run_mode=run_mode, goal_speedup=goal_speedup, goal_target_us=goal_target_us,
            timeout_s=timeout_s, device_ids=device_ids, time_limit_h=time_limit_h, repeats=repeats,
            shell=shell, pass_pattern=pass_pattern, fail_pattern=fail_pattern, lang=lang)

    def confirm(self, session_id: str, *, source: str, answer: bool = True) -> str:
        return self.setup.confirm(session_id, source=source, answer=answer)

    async def run_precision_check(self, session_id: str, *, confirm_retry: bool = False, adopt_drift: bool = False,
                                  progress: Progress = None) -> PrecisionResult:
        return await self.setup.run_precision_check(
            session_id, confirm_retry=confirm_retry, adopt_drift=adopt_drift, progress=progress)

    def enable_runtime_debug(self, session_id: str, enabled: bool = True) -> DebugResult:
        return self.setup.enable_runtime_debug(session_id, enabled)

    # --------------------------------------------------------------------------------------- RunWorldOps (worlds)
    def pending_environment_question(self, session_id: str) -> dict[str, Any] | None:
        return self.worlds.pending_environment_question(session_id)

    def environment_question_in(self, workspace: str) -> tuple[str, dict[str, Any]] | None:
        return self.worlds.environment_question_in(workspace)

    def confirm_environment(self, session_id: str, *, source: str, accept: bool) -> str:
        return self.worlds.confirm_environment(session_id, source=source, accept=accept)

    # ---------------------------------------------------------------------------------------------- RunOps (runs)
    async def collect_swimlane(self, session_id: str, *, progress: Progress = None) -> CollectResult:
        return await self.runs.collect_swimlane(session_id, progress=progress)

    def analyze_bubbles(self, session_id: str | None = None, *, output_dir: str | None = None, lang: str = "zh",
                        outer_loops: int | None = None, measurement: int | None = None, round: int | None = None
                       ) -> AnalyzeResult:
        return self.runs.analyze_bubbles(
            session_id, output_dir=output_dir, lang=lang, outer_loops=outer_loops, measurement=measurement, round=round)

    # ------------------------------------------------------------------------------------------ RoundOps (rounds)
    def apply_tuning_patch(self, session_id: str, *, catalog_id: str, rationale: str, knob: str | None = None,
                           value: Any = None, target: str | None = None, diff: str | None = None,
                           algorithm: bool = False) -> PatchResult:
        return self.rounds.apply_tuning_patch(
            session_id, catalog_id=catalog_id, rationale=rationale, knob=knob, value=value, target=target,
            diff=diff, algorithm=algorithm)

    def revert_patch(self, session_id: str, *, notes: str = "") -> RevertResult:
        return self.rounds.revert_patch(session_id, notes=notes)

    def record_round(self, session_id: str, *, notes: str = "", lang: str | None = None) -> RecordResult:
        return self.rounds.record_round(session_id, notes=notes, lang=lang)

    # ----------------------------------------------------------------------------------------- SearchOps (search)
    def propose_candidates(self, session_id: str, *, limit: int = 8, knob: str | None = None) -> CandidatesResult:
        return self.search.propose_candidates(session_id, limit=limit, knob=knob)

    async def run_candidates(self, session_id: str, candidates: list[Any], *, parallel: int | None = None,
                             progress: Progress = None) -> TrialsResult:
        return await self.search.run_candidates(session_id, candidates, parallel=parallel, progress=progress)

    # ------------------------------------------------------------------------------------------ StageOps (stages)
    def mark_checklist(self, session_id: str, *, catalog_id: str, status: str, reason: str) -> ChecklistResult:
        return self.stages.mark_checklist(session_id, catalog_id=catalog_id, status=status, reason=reason)

    def advance_stage(self, session_id: str, *, reason: str) -> ChecklistResult:
        return self.stages.advance_stage(session_id, reason=reason)

    def stop_session(self, session_id: str, *, reason: str, lang: str | None = None) -> StatusResult:
        return self.stages.stop_session(session_id, reason=reason, lang=lang)

    # ---------------------------------------------------------------------------------------- ReportOps (reports)
    def render_report(self, session_id: str, *, fmt: str = "md", lang: str | None = None) -> ReportResult:
        return self.reports.render_report(session_id, fmt=fmt, lang=lang)

    def get_status(self, session_id: str, lang: str | None = None) -> StatusResult:
        return self.reports.get_status(session_id, lang)

    def list_knobs(self, session_id: str, detail: str = "summary") -> KnobsResult:
        return self.reports.list_knobs(session_id, detail)

    def ledger_json(self, session_id: str) -> dict[str, Any]:
        return self.reports.ledger_json(session_id)

    def analysis_json(self, session_id: str, measurement_id: int) -> dict[str, Any]:
        return self.reports.analysis_json(session_id, measurement_id)

    def last_analysed_measurement(self, session_id: str) -> int | None:
        return self.reports.last_analysed_measurement(session_id)

    def measurement_ids(self, session_id: str) -> list[int]:
        return self.reports.measurement_ids(session_id)

    def session_ids(self) -> list[str]:
        return self.reports.session_ids()

    def snapshot(self, session_id: str) -> Any:
        return self.reports.snapshot(session_id)

    # --------------------------------------------------------------------------------------- SessionContext (ctx)
    def know_session(self, workspace: Path, session_id: str) -> None:
        return self.ctx.know_session(workspace, session_id)

    def session_lang(self, session_id: str | None, lang: str | None = None) -> str:
        return self.ctx.session_lang(session_id, lang)


__all__ = ["TuningService"]
