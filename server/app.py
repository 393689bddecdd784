"""The MCP surface: tool registration, schemas, progress, jobs, prompts, resources, error mapping.

Thin on purpose: every decision is made in ``pypto_tune.tools``; this module only translates. Domain errors become a
``ToolError`` whose text is the full reason plus the allowed next calls (any other exception would reach the client as
a bare "Error executing tool", hiding the reason from the agent).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import anyio
import orjson
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from pypto_tune import __version__
from pypto_tune.server.jobs import JobRegistry
from pypto_tune.tools import rules
from pypto_tune.tools.errors import GateRefusal, PyptoTuneError
from pypto_tune.tools.results import (
    AnalyzeResult,
    ChecklistResult,
    CollectResult,
    DebugResult,
    JobResult,
    KnobsResult,
    PatchResult,
    PrecisionResult,
    RecordResult,
    ReportResult,
    RevertResult,
    StartSessionResult,
    StatusResult,
)
from pypto_tune.tools.service import TuningService

log = logging.getLogger("pypto_tune.server")
T = TypeVar("T")

PROMPT_NAMES = {
    "perf_tune": "The whole tuning workflow through this server's tools, with the rules it enforces",
    "tune_frontend": "Stage FRONTEND: checklist F-1…F-15 and how to try each item",
    "tune_swimlane": "Stage SWIMLANE_n: checklist S-1…S-13, ordering rules, merge pitfalls",
    "tune_incore": "Stage INCORE_n: checklist I-1…I-9",
    "analyze_perf": "How to read analyze_bubbles: reference vs corrected figures, ratings, suggestions",
}

INSTRUCTIONS = (
    "pypto-tune runs a PyPTO operator's test itself, binds every precision verdict and measurement to the exact "
    "source hash, keeps an append-only ledger and refuses what the tuning rules forbid (refusals start with "
    "'GATE <rule-id>:' and list the allowed calls). Start with start_session (a goal is mandatory), then follow "
    "next_actions in every result. Read the perf_tune prompt for the workflow and pypto-tune://catalog for the "
    "optimisation catalogue. In run_mode sim, numerics are NOT checked (the simulator computes no outputs)."
)

RO = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
RUNS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
EDITS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
EDITS_IDEMPOTENT = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                   open_world_hint=False)

SessionId = Annotated[str, Field(description="id returned by start_session")]
Wait = Annotated[bool, Field(description="true: block until done (progress every ≤ 2 s). false: return a job id "
                              "at once and poll wait_job — use it when the client times tool calls out (~60 s)")]
Lang = Annotated[Literal["zh", "en"], Field(description="language: zh (default) or en")]


class Confirm(BaseModel):
    retry: bool = Field(description="retry the baseline precision check once more")


def _tool_error(exc: BaseException) -> ToolError:
    if isinstance(exc, PyptoTuneError):
        return ToolError(str(exc))
    log.exception("internal error")
    return ToolError(f"internal error ({type(exc).__name__}: {exc}). Every ledger event is one transaction, so "
                     "nothing is recorded half. Next: get_status shows what was recorded; report the bug if it repeats")


async def _call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a synchronous domain operation off the event loop; map errors."""
    try:
        return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))
    except Exception as exc:  # noqa: BLE001 - mapped for the agent
        raise _tool_error(exc) from exc


def _progress_reporter(ctx: Context | None) -> Callable[[float, str], Awaitable[None]]:
    started = time.monotonic()

    async def report(elapsed: float, line: str) -> None:
        if ctx is None:
            return
        try:
            await ctx.report_progress(progress=round(time.monotonic() - started, 1), total=None,
                                      message=(line or "running")[-200:])
        except Exception:  # a client without a progress token, or a closed stream: progress is best-effort
            pass

    return report


def build_server(service: TuningService, *, name: str = "pypto-tune") -> MCPServer:
    jobs = JobRegistry()

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[dict[str, Any]]:
        async with anyio.create_task_group() as tg:
            jobs.attach(tg)
            try:
                yield {"service": service, "jobs": jobs}
            finally:
                jobs.attach(None)
                tg.cancel_scope.cancel()  # kills running children through their cancellation cleanup

    mcp = MCPServer(name=name, version=__version__, instructions=INSTRUCTIONS, lifespan=lifespan)

    async def long_call(tool: str, wait: bool, ctx: Context | None, model: type[BaseModel],
                        run: Callable[[Callable[[float, str], Awaitable[None]]], Awaitable[Any]]) -> Any:
        if not wait:
            try:
                job = jobs.start(tool, run)
            except PyptoTuneError as exc:
                raise _tool_error(exc) from exc
            return model(message=f"{tool} started as {job.id}; poll wait_job(job_id='{job.id}')",
                         next_actions=["wait_job", "cancel_job", "get_status"], job=job.view())
        try:
            return await run(_progress_reporter(ctx))
        except Exception as exc:  # noqa: BLE001
            raise _tool_error(exc) from exc

    # ------------------------------------------------------------------------------------------------ tools
    @mcp.tool(annotations=EDITS_IDEMPOTENT)
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
        repeats: Annotated[int | None, Field(description="runs per measurement; median kept (NPU default 3, SIM "
                                             "1)")] = None,
    ) -> StartSessionResult:
        """Start a tuning session with a goal (or resume the unfinished one of this workspace)."""
        return await _call(service.start_session, workspace=workspace, operator_files=operator_files,
                           test_command=test_command, run_mode=run_mode, goal_speedup=goal_speedup,
                           goal_target_us=goal_target_us, timeout_s=timeout_s, device_ids=device_ids,
                           time_limit_h=time_limit_h, repeats=repeats)

    @mcp.tool(annotations=RUNS)
    async def run_precision_check(
        session_id: SessionId,
        wait: Wait = True,
        confirm_retry: Annotated[bool, Field(description="only after the USER confirmed: retry a baseline that "
                                             "failed 3 times (R5)")] = False,
        adopt_drift: Annotated[bool, Field(description="adopt an external edit of the operator files as a manual "
                                           "round, verified by this run")] = False,
        ctx: Context = None,  # type: ignore[assignment]
    ) -> PrecisionResult:
        """Run the fixed test command on the current code; record the verdict bound to its hash (R4/R6)."""
        async def run(progress: Callable[[float, str], Awaitable[None]]) -> PrecisionResult:
            try:
                return await service.run_precision_check(session_id, confirm_retry=confirm_retry,
                                                         adopt_drift=adopt_drift, progress=progress)
            except GateRefusal as refusal:
                if refusal.rule == "baseline-retry" and ctx is not None and await _ask_user(ctx, refusal):
                    return await service.run_precision_check(session_id, confirm_retry=True, progress=progress)
                raise

        return await long_call("run_precision_check", wait, ctx, PrecisionResult, run)

    @mcp.tool(annotations=EDITS_IDEMPOTENT)
    async def enable_runtime_debug(
        session_id: SessionId,
        enabled: Annotated[bool, Field(description="true: add runtime_debug_mode 1 to every jit; false: restore "
                                       "exactly what was there before")] = True,
    ) -> DebugResult:
        """Switch swim-lane collection on (or off) in every jit of the operator files (R7/R22)."""
        return await _call(service.enable_runtime_debug, session_id, enabled)

    @mcp.tool(annotations=RUNS)
    async def collect_swimlane(session_id: SessionId, wait: Wait = True,
                               ctx: Context = None) -> CollectResult:  # type: ignore[assignment]
        """Run the test with runtime_debug_mode 1, parse the new output folders, record the operator time."""
        async def run(progress: Callable[[float, str], Awaitable[None]]) -> CollectResult:
            return await service.collect_swimlane(session_id, progress=progress)

        return await long_call("collect_swimlane", wait, ctx, CollectResult, run)

    @mcp.tool(annotations=RO)
    async def analyze_bubbles(
        session_id: Annotated[str | None, Field(description="analyse the session's latest measurement")] = None,
        output_dir: Annotated[str | None, Field(description="or: any run folder / output folder, no session "
                                                "needed (the newest run is picked)")] = None,
        lang: Lang = "zh",
        outer_loops: Annotated[int | None, Field(description="product of the non-innermost pypto.loop trip counts, "
                                                 "for t/iter (inferred when omitted)")] = None,
    ) -> AnalyzeResult:
        """Bubble / utilisation / load-balance analysis with catalogue suggestions and evidence."""
        return await _call(service.analyze_bubbles, session_id, output_dir=output_dir, lang=lang,
                           outer_loops=outer_loops)

    @mcp.tool(annotations=EDITS)
    async def apply_tuning_patch(
        session_id: SessionId,
        catalog_id: Annotated[str, Field(description="catalogue id of the current stage (F-*, S-*, I-*)")],
        rationale: Annotated[str, Field(description="the analysis evidence that led to this change (R10)")],
        knob: Annotated[str | None, Field(description="knob id from list_knobs (structured edit)")] = None,
        value: Annotated[Any, Field(description="new value for the knob (JSON: number, list, dict, bool)")] = None,
        target: Annotated[str | None, Field(description="optional selector when a knob id matches several call "
                                            "sites")] = None,
        diff: Annotated[str | None, Field(description="or: a unified diff of the operator files, applied "
                                          "strictly")] = None,
        algorithm: Annotated[bool, Field(description="declare an algorithm-level change (R23; only in the "
                                         "ALGORITHM stage)")] = False,
    ) -> PatchResult:
        """Change exactly one knob and open a round (refused with GATE one-change otherwise)."""
        return await _call(service.apply_tuning_patch, session_id, catalog_id=catalog_id, rationale=rationale,
                           knob=knob, value=value, target=target, diff=diff, algorithm=algorithm)

    @mcp.tool(annotations=EDITS)
    async def revert_patch(session_id: SessionId,
                           notes: Annotated[str, Field(description="why the round is abandoned")] = "",
                           ) -> RevertResult:
        """Roll the open round back to the last kept state byte-for-byte (or undo an external edit)."""
        return await _call(service.revert_patch, session_id, notes=notes)

    @mcp.tool(annotations=EDITS)
    async def record_round(session_id: SessionId,
                           notes: Annotated[str, Field(description="free notes kept in the ledger")] = "",
                           ) -> RecordResult:
        """Let the server judge the open round from its own measurement: keep it, or roll it back."""
        return await _call(service.record_round, session_id, notes=notes)

    @mcp.tool(annotations=EDITS)
    async def mark_checklist(
        session_id: SessionId,
        catalog_id: Annotated[str, Field(description="an item of the current stage's checklist")],
        status: Annotated[Literal["not-applicable", "tried", "failed"], Field(description="usually "
                                                                               "not-applicable")],
        reason: Annotated[str, Field(description="why (required)")],
    ) -> ChecklistResult:
        """Mark a checklist item (rounds mark themselves; use this for not-applicable with a reason)."""
        return await _call(service.mark_checklist, session_id, catalog_id=catalog_id, status=status, reason=reason)

    @mcp.tool(annotations=EDITS)
    async def advance_stage(session_id: SessionId,
                            reason: Annotated[str, Field(description="why the stage is done")]) -> ChecklistResult:
        """Leave the current stage early (only with a fully marked checklist, R14)."""
        return await _call(service.advance_stage, session_id, reason=reason)

    @mcp.tool(annotations=EDITS)
    async def stop_session(session_id: SessionId,
                           reason: Annotated[str, Field(description="the user's reason to stop")]) -> StatusResult:
        """The user's explicit stop: an open round is rolled back, then only reporting is allowed."""
        return await _call(service.stop_session, session_id, reason=reason)

    @mcp.tool(annotations=EDITS_IDEMPOTENT)
    async def render_report(
        session_id: SessionId,
        format: Annotated[Literal["md", "html", "both"], Field(description="md, html (with charts) or both")] = "md",
        lang: Lang = "zh",
    ) -> ReportResult:
        """Write the final tuning report next to the operator (restores debug options first, R22)."""
        return await _call(service.render_report, session_id, fmt=format, lang=lang)

    @mcp.tool(annotations=RO)
    async def get_status(session_id: SessionId, lang: Lang = "en") -> StatusResult:
        """The live status board: goal, stage, rounds, best time, progress, success rate."""
        result = await _call(service.get_status, session_id, lang)
        running = [j.id for j in jobs.running()]
        if running:
            result.running_job = running[0]
        return result

    @mcp.tool(annotations=RO)
    async def list_knobs(session_id: SessionId) -> KnobsResult:
        """Every tunable knob in the operator files, with location, current value and legal range."""
        return await _call(service.list_knobs, session_id)

    @mcp.tool(annotations=RO)
    async def wait_job(job_id: Annotated[str, Field(description="id from a wait=false call")],
                       timeout_s: Annotated[float, Field(description="how long to wait now (≤ 50 s keeps within "
                                                         "client timeouts)")] = 30.0) -> JobResult:
        """Wait for a background job; returns its result when done, else its status."""
        try:
            return await jobs.wait(job_id, min(float(timeout_s), 50.0))
        except PyptoTuneError as exc:
            raise _tool_error(exc) from exc

    @mcp.tool(annotations=EDITS_IDEMPOTENT)
    async def cancel_job(job_id: Annotated[str, Field(description="id from a wait=false call")]) -> JobResult:
        """Cancel a background job; its whole process group is killed and nothing half is recorded."""
        try:
            job = jobs.cancel(job_id)
            await jobs.wait(job_id, 10.0)
            return jobs.get(job.job_id).view()
        except PyptoTuneError as exc:
            raise _tool_error(exc) from exc

    # ------------------------------------------------------------------------------------------------ prompts
    def _prompt_text(name: str, lang: str) -> str:
        if lang not in ("zh", "en"):
            lang = "zh"
        path = resources.files("pypto_tune.prompts").joinpath("workflow", f"{name}.{lang}.md")
        return path.read_text(encoding="utf-8")

    def _register_prompt(name: str, description: str) -> None:
        def prompt(lang: Annotated[str, Field(description="zh (default) or en")] = "zh") -> str:
            return _prompt_text(name, lang)

        prompt.__name__ = name
        prompt.__doc__ = description
        mcp.prompt(name=name, description=description)(prompt)

    for pname, pdesc in PROMPT_NAMES.items():
        _register_prompt(pname, pdesc)

    # ------------------------------------------------------------------------------------------------ resources
    @mcp.resource("pypto-tune://catalog", mime_type="application/json",
                  description="the optimisation catalogue F-1…F-15, S-1…S-13, I-1…I-9 as data")
    def catalog() -> str:
        from pypto_tune.tools.analysis import load_catalog

        return load_catalog().model_dump_json(indent=2)

    @mcp.resource("pypto-tune://rules", mime_type="application/json",
                  description="the rules the server enforces, with the ids refusals cite")
    def rules_resource() -> str:
        return orjson.dumps([r.model_dump() for r in rules.RULES], option=orjson.OPT_INDENT_2).decode()

    @mcp.resource("pypto-tune://sessions/{session_id}/status", mime_type="text/markdown",
                  description="the live status board of a session (Markdown)")
    def status_resource(session_id: str) -> str:
        try:
            return service.get_status(session_id).board
        except PyptoTuneError as exc:
            raise ValueError(str(exc)) from exc

    @mcp.resource("pypto-tune://sessions/{session_id}/ledger", mime_type="application/json",
                  description="every ledger row of a session (JSON, append-only)")
    def ledger_resource(session_id: str) -> str:
        try:
            return orjson.dumps(service.ledger_json(session_id), option=orjson.OPT_INDENT_2).decode()
        except PyptoTuneError as exc:
            raise ValueError(str(exc)) from exc

    mcp._pypto_jobs = jobs  # type: ignore[attr-defined]  # for tests that inspect running jobs
    return mcp


async def _ask_user(ctx: Context, refusal: GateRefusal) -> bool:
    """R5 through MCP elicitation when the client supports it; otherwise the refusal stands."""
    caps = None
    try:
        caps = ctx.client_capabilities
    except Exception:
        return False
    if caps is None or getattr(caps, "elicitation", None) is None:
        return False
    try:
        answer = await ctx.elicit(f"{refusal.message}. Retry the baseline precision check once more?", Confirm)
    except Exception:
        return False
    return getattr(answer, "action", "") == "accept" and bool(getattr(getattr(answer, "data", None), "retry", False))


def default_service(workspace: Path | None) -> TuningService:
    return TuningService(default_workspace=workspace)
