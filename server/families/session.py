"""Session family: start (or resume) a session, read its state, and the person's decisions about it."""

from __future__ import annotations

from typing import Annotated, Literal

import anyio
from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field
from pypto_tune.server import ask
from pypto_tune.server.wiring import (
    EDITS,
    EDITS_IDEMPOTENT,
    LEDGER,
    LEDGER_IDEMPOTENT,
    RO,
    SessionId,
    SessionLang,
    StartLang,
    Wiring,
)
from pypto_tune.tools.errors import GateRefusal
from pypto_tune.tools.operations.results import (
    ChecklistResult,
    KnobsResult,
    ReportResult,
    StartSessionResult,
    StatusResult,
)


class AcceptEnvironment(BaseModel):
    accept: bool = Field(description="record this server's environment as the session's new baseline environment")


def register(w: Wiring) -> None:
    @w.reg.tool(title="Start (or resume) a tuning session", annotations=LEDGER_IDEMPOTENT, result=StartSessionResult)
    async def start_session(
        workspace: Annotated[str, Field(description="absolute path of the folder the test command runs in; it holds "
                                        "the operator files; the ledger goes to WORKSPACE/.pypto-tune/")],
        operator_files: Annotated[list[str], Field(description="operator .py files, relative to the workspace")],
        test_command: Annotated[str | list[str], Field(description="the operator's test, fixed for the whole session; "
                                                       "an argv list, or a string split with shlex (never a shell)")],
        run_mode: Annotated[Literal["sim", "npu"], Field(description="sim = PyPTO cost-model simulator (no "
                                                         "numerics), npu = real device")],
        goal_speedup: Annotated[float | None, Field(description="goal as a speed-up factor (> 1); ask the user")] = None,
        goal_target_us: Annotated[float | None, Field(description="goal as a target operator time in µs")] = None,
        timeout_s: Annotated[float, Field(description="per-run timeout; the whole process group is killed")] = 300.0,
        device_ids: Annotated[list[str] | None, Field(description="NPU device pool (TILE_FWK_DEVICE_ID values); a "
                                                      "failing baseline retries on the next one")] = None,
        time_limit_h: Annotated[float, Field(description="global tuning time limit in hours (R14b)")] = 12.0,
        repeats: Annotated[int | None, Field(description="runs per measurement; median kept (NPU default and "
                                             "floor 3, SIM 1)")] = None,
        pass_pattern: Annotated[str | None, Field(description="optional regex: only lines it matches can pass the "
                                                  "precision check (when the test's success line is unusual)")] = None,
        fail_pattern: Annotated[str | None, Field(description="optional regex: a line it matches fails the precision "
                                                  "check")] = None,
        lang: StartLang = None,
        ctx: Context = None,  # type: ignore[assignment]
    ) -> StartSessionResult:
        """Start a tuning session with a goal (or resume the unfinished one of this workspace)."""
        def start(s):  # noqa: ANN001, ANN202 - the service
            return s.start_session(
                workspace=workspace, operator_files=operator_files, test_command=test_command, run_mode=run_mode,
                goal_speedup=goal_speedup, goal_target_us=goal_target_us, timeout_s=timeout_s, device_ids=device_ids,
                time_limit_h=time_limit_h, repeats=repeats, pass_pattern=pass_pattern, fail_pattern=fail_pattern,
                lang=lang)

        try:
            return await w.sync(start)
        except GateRefusal as refusal:
            # issue #16: a resume from a server in another environment. A person may accept the new one in a client
            # that can ask while the call waits (otherwise the refusal names `pypto-tune confirm`).
            if refusal.rule != "environment" or not ask.can_elicit(ctx) or ask.multi_round(ctx):
                raise
            service = w.holder.get()
            found = await anyio.to_thread.run_sync(lambda: service.environment_question_in(workspace))
            if found is None:
                raise
            sid, q = found
            try:
                reply = await ctx.elicit(q["text"], AcceptEnvironment)
            except Exception:  # noqa: BLE001 - the client failed to answer: the refusal stands
                raise refusal from None
            if getattr(reply, "action", "") not in ("accept", "decline"):
                raise  # dismissed: no answer, nothing recorded
            accepted = reply.action == "accept" and bool(getattr(getattr(reply, "data", None), "accept", False))
            await anyio.to_thread.run_sync(lambda: service.confirm_environment(sid, source="elicitation",
                                                                               accept=accepted))
            if not accepted:
                raise
            return await w.sync(start)

    @w.reg.tool(title="Session status board", annotations=RO, result=StatusResult)
    async def get_status(session_id: SessionId, lang: SessionLang = None) -> StatusResult:
        """The live status board: goal, stage, rounds, best time, progress, success rate."""
        result = await w.sync(lambda s: s.get_status(session_id, lang))
        running = [j.id for j in w.jobs.running()]
        if running:
            result.running_job = running[0]
        return result

    @w.reg.tool(title="List the operator's knobs", annotations=RO, result=KnobsResult)
    async def list_knobs(
        session_id: SessionId,
        detail: Annotated[Literal["summary", "full"], Field(description="summary (default): what choosing a knob "
                                                            "needs, each kind's legal values once; full: every field "
                                                            "of every knob (runs, kernels, tests)")] = "summary",
    ) -> KnobsResult:
        """Every tunable knob in the operator files, with location, current value and legal range."""
        return await w.sync(lambda s: s.list_knobs(session_id, detail))

    @w.reg.tool(title="Mark a checklist item", annotations=LEDGER, result=ChecklistResult)
    async def mark_checklist(
        session_id: SessionId,
        catalog_id: Annotated[str, Field(description="an item of the current stage's checklist")],
        status: Annotated[Literal["not-applicable", "tried", "failed"], Field(description="usually "
                                                                               "not-applicable")],
        reason: Annotated[str, Field(description="why (required)")],
    ) -> ChecklistResult:
        """Mark a checklist item (rounds mark themselves; use this for not-applicable with a reason)."""
        return await w.sync(lambda s: s.mark_checklist(session_id, catalog_id=catalog_id, status=status,
                                                       reason=reason))

    @w.reg.tool(title="Leave the stage early", annotations=LEDGER, result=ChecklistResult)
    async def advance_stage(session_id: SessionId,
                            reason: Annotated[str, Field(description="why the stage is done")]) -> ChecklistResult:
        """Leave the current stage early (only with a fully marked checklist, R14)."""
        return await w.sync(lambda s: s.advance_stage(session_id, reason=reason))

    @w.reg.tool(title="Stop tuning (the user's decision)", annotations=EDITS, result=StatusResult)
    async def stop_session(session_id: SessionId,
                           reason: Annotated[str, Field(description="the user's reason to stop")],
                           lang: SessionLang = None) -> StatusResult:
        """The user's explicit stop: an open round is rolled back, then only reporting is allowed."""
        return await w.sync(lambda s: s.stop_session(session_id, reason=reason, lang=lang))

    @w.reg.tool(title="Write the final report", annotations=EDITS_IDEMPOTENT, result=ReportResult)
    async def render_report(
        session_id: SessionId,
        format: Annotated[Literal["md", "html", "both"], Field(description="html has the charts")] = "md",
        lang: SessionLang = None,
    ) -> ReportResult:
        """Write the final tuning report next to the operator (restores debug options first, R22)."""
        return await w.sync(lambda s: s.render_report(session_id, fmt=format, lang=lang))
