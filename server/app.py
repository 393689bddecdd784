"""The MCP surface: the tools, prompts, resources and completions of pypto-tune.

Thin on purpose: every decision is made in ``pypto_tune.tools``; this module declares what is published and
translates. How a tool is published (structured content, short text, error mapping, the ``wait`` / job pattern of
long tools) lives in ``server/tooling.py``.

Imports are light on purpose: ``initialize`` and the listings need only the result models and the rules. The
``TuningService`` (and with it numpy, libcst, msgspec, jinja2 and the analysis engine) is built on the first call that
needs it, in a worker thread, so a client's connect is not held up by a second of imports.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import anyio
import orjson
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    Completion,
    CompletionArgument,
    CompletionContext,
    PromptReference,
    ResourceTemplateReference,
    ToolAnnotations,
)
from pydantic import BaseModel, BeforeValidator, Field
from pypto_tune.server.jobs import JobRegistry
from pypto_tune.server.tooling import Progress, ToolRegistry
from pypto_tune.tools.session import rules
from pypto_tune.tools.errors import GateRefusal, InputError, PyptoTuneError
from pypto_tune.tools.operations.result_views import summarize_analysis
from pypto_tune.tools.operations.results import (
    AnalysisSummary,
    CandidatesResult,
    ChecklistResult,
    CollectResult,
    DebugResult,
    JobHandle,
    JsonValue,
    KnobsResult,
    PatchResult,
    PrecisionResult,
    RecordResult,
    ReportResult,
    RevertResult,
    StartSessionResult,
    StatusResult,
    TrialsResult,
)

from pypto_tune import __version__

if TYPE_CHECKING:
    from pypto_tune.tools.service import TuningService

log = logging.getLogger("pypto_tune.server")
T = TypeVar("T")

LANGS = ("zh", "en")
DEFAULT_LANG = "zh"  # the one default of every lang argument (tools, prompts, the status resource)

# name → (title, description)
PROMPTS = {
    "perf_tune": ("Tune a PyPTO operator (whole workflow)",
                  "The whole tuning workflow through this server's tools, with the rules it enforces"),
    "tune_frontend": ("Stage FRONTEND checklist", "Stage FRONTEND: checklist F-1…F-15 and how to try each item"),
    "tune_swimlane": ("Stage SWIMLANE checklist",
                      "Stage SWIMLANE_n: checklist S-1…S-13, ordering rules, merge pitfalls"),
    "tune_incore": ("Stage INCORE checklist", "Stage INCORE_n: checklist I-1…I-9"),
    "analyze_perf": ("Read an analysis",
                     "How to read analyze_bubbles: reference vs corrected figures, ratings, suggestions"),
}

SESSION_URIS = ("pypto-tune://sessions/{session_id}/status", "pypto-tune://sessions/{session_id}/ledger",
                "pypto-tune://sessions/{session_id}/analyses/{measurement_id}")

INSTRUCTIONS = (
    "pypto-tune runs a PyPTO operator's test itself, binds every precision verdict and measurement to the exact "
    "source hash, keeps an append-only ledger and refuses what the tuning rules forbid (refusals start with "
    "'GATE <rule-id>:' and list the allowed calls). Start with start_session (a goal is mandatory), then follow "
    "next_actions in every result. Read the perf_tune prompt for the workflow and pypto-tune://catalog for the "
    "optimisation catalogue. In run_mode sim, numerics are NOT checked (the simulator computes no outputs)."
)

# Annotations say what a tool does to the user's machine. The ledger and archives under WORKSPACE/.pypto-tune/ are
# the server's own bookkeeping: writing them does not make a tool "not read-only".
RO = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
RUNS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
LEDGER = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
LEDGER_IDEMPOTENT = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                    open_world_hint=False)
EDITS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
EDITS_IDEMPOTENT = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                   open_world_hint=False)


def _check_lang(value: Any) -> Any:
    # A clearer refusal than pydantic's literal_error, and never a silent fallback to the default.
    if value not in LANGS:
        raise ValueError(f"lang must be 'zh' or 'en' (got {value!r}); zh is the default")
    return value


SessionId = Annotated[str, Field(description="id returned by start_session")]
Lang = Annotated[Literal["zh", "en"], BeforeValidator(_check_lang),
                 Field(description="language of figures' labels and messages: zh (default) or en")]
Detail = Annotated[Literal["summary", "full"], Field(
    description="summary (default, ≤ 8 KB: top items and counts of what was left out) or full (the whole analysis "
    "in the 'full' field; tens of KB)")]


class Confirm(BaseModel):
    retry: bool = Field(description="retry the baseline precision check once more")


class ServiceHolder:
    """The ``TuningService``, built once on first use (see the module docstring for why it is lazy)."""

    def __init__(self, service: TuningService | None = None, workspace: Path | None = None) -> None:
        self._service = service
        self._workspace = workspace
        self._lock = threading.Lock()

    def get(self) -> TuningService:
        with self._lock:
            if self._service is None:
                from pypto_tune.tools.service import TuningService

                self._service = TuningService(default_workspace=self._workspace)
            return self._service

    @property
    def built(self) -> bool:
        return self._service is not None

    async def aget(self) -> TuningService:
        return self._service if self._service is not None else await anyio.to_thread.run_sync(self.get)


def analysis_uri(session_id: str, measurement_id: int) -> str:
    return f"pypto-tune://sessions/{session_id}/analyses/{measurement_id}"


def build_server(service: TuningService | None = None, *, workspace: Path | None = None,
                 name: str = "pypto-tune") -> MCPServer:
    """The server. Pass a ``TuningService`` (tests), or nothing and ``workspace`` to build one on first use."""
    holder = ServiceHolder(service, workspace)
    jobs = JobRegistry()
    reg = ToolRegistry(jobs)

    async def sync(work: Callable[[TuningService], T]) -> T:
        """A synchronous domain operation, off the event loop (errors are mapped by the registry)."""
        return await anyio.to_thread.run_sync(lambda: work(holder.get()))

    # ------------------------------------------------------------------------------------------------ tools
    @reg.tool(title="Start (or resume) a tuning session", annotations=LEDGER_IDEMPOTENT, result=StartSessionResult)
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
    ) -> StartSessionResult:
        """Start a tuning session with a goal (or resume the unfinished one of this workspace)."""
        return await sync(lambda s: s.start_session(
            workspace=workspace, operator_files=operator_files, test_command=test_command, run_mode=run_mode,
            goal_speedup=goal_speedup, goal_target_us=goal_target_us, timeout_s=timeout_s, device_ids=device_ids,
            time_limit_h=time_limit_h, repeats=repeats, pass_pattern=pass_pattern, fail_pattern=fail_pattern))

    @reg.long_tool(title="Run the precision check", annotations=RUNS, result=PrecisionResult)
    async def run_precision_check(
        session_id: SessionId,
        progress: Progress,
        ctx: Context,
        confirm_retry: Annotated[bool, Field(description="only after the USER confirmed: retry a baseline that "
                                             "failed 3 times (R5)")] = False,
        adopt_drift: Annotated[bool, Field(description="adopt an external edit of the operator files as a manual "
                                           "round, verified by this run")] = False,
    ) -> PrecisionResult:
        """Run the fixed test command on the current code; record the verdict bound to its hash (R4/R6)."""
        service = await holder.aget()
        try:
            return await service.run_precision_check(session_id, confirm_retry=confirm_retry,
                                                     adopt_drift=adopt_drift, progress=progress)
        except GateRefusal as refusal:
            # R5: the person answers in the client (elicitation); their answer is recorded as theirs, and only
            # then is the baseline run again. The agent's confirm_retry is not an answer (the gate says so).
            if refusal.rule == "baseline-retry" and ctx is not None:
                answer = await _ask_user(ctx, refusal)
                if answer is not None:
                    await anyio.to_thread.run_sync(lambda: service.confirm(session_id, source="elicitation",
                                                                           answer=answer))
                    if answer:
                        return await service.run_precision_check(session_id, progress=progress)
            raise

    @reg.tool(title="Switch swim-lane collection on or off", annotations=EDITS_IDEMPOTENT, result=DebugResult)
    async def enable_runtime_debug(
        session_id: SessionId,
        enabled: Annotated[bool, Field(description="true: add runtime_debug_mode 1 to every jit; false: restore "
                                       "exactly what was there before")] = True,
    ) -> DebugResult:
        """Switch swim-lane collection on (or off) in every jit of the operator files (R7/R22)."""
        return await sync(lambda s: s.enable_runtime_debug(session_id, enabled))

    @reg.long_tool(title="Collect a swim-lane measurement", annotations=RUNS, result=CollectResult)
    async def collect_swimlane(session_id: SessionId, progress: Progress) -> CollectResult:
        """Run the test with runtime_debug_mode 1, parse the new output folders, record the operator time."""
        service = await holder.aget()
        return await service.collect_swimlane(session_id, progress=progress)

    # not read-only: in a session it records the analysis and the baseline's analysis opens tuning (S3 -> S4); a
    # client that trusts readOnlyHint to skip confirmation must not be told otherwise (issue #11)
    @reg.tool(title="Analyse bubbles, utilisation and load balance", annotations=LEDGER_IDEMPOTENT,
              result=AnalysisSummary)
    async def analyze_bubbles(
        session_id: Annotated[str | None, Field(description="analyse this session's kept state (default)")] = None,
        output_dir: Annotated[str | None, Field(description="or: any run folder / output folder, no session "
                                                "needed (the newest run is picked)")] = None,
        lang: Lang = DEFAULT_LANG,
        outer_loops: Annotated[int | None, Field(description="product of the non-innermost pypto.loop trip counts, "
                                                 "for t/iter (inferred when omitted)")] = None,
        detail: Detail = "summary",
        measurement: Annotated[int | None, Field(description="or this measurement id")] = None,
        round: Annotated[int | None, Field(description="or this round's measurement (0 = baseline)")] = None,  # noqa: A002
    ) -> AnalysisSummary:
        """Bubble / utilisation / load-balance analysis with catalogue suggestions and evidence. Returns a summary
        (top items first, counts of what was left out); the whole analysis is a resource (detail_uri) or
        detail='full'."""
        def work(s: TuningService) -> AnalysisSummary:
            full = s.analyze_bubbles(session_id, output_dir=output_dir, lang=lang, outer_loops=outer_loops,
                                     measurement=measurement, round=round)
            if full.session_id and full.measurement_id is None:
                # the analysis just recorded in the ledger names its measurement
                full.measurement_id = s.last_analysed_measurement(full.session_id)
            uri = (analysis_uri(full.session_id, full.measurement_id)
                   if full.session_id and full.measurement_id is not None else None)
            return summarize_analysis(full, lang=lang, detail_uri=uri, include_full=detail == "full")

        return await sync(work)

    @reg.tool(title="Apply one tuning change", annotations=EDITS, result=PatchResult)
    async def apply_tuning_patch(
        session_id: SessionId,
        catalog_id: Annotated[str, Field(description="catalogue id of the current stage (F-*, S-*, I-*)")],
        rationale: Annotated[str, Field(description="the analysis evidence that led to this change (R10)")],
        knob: Annotated[str | None, Field(description="knob id from list_knobs (structured edit)")] = None,
        value: Annotated[JsonValue, Field(description="new value for the knob (JSON: number, list, dict, "
                                          "bool)")] = None,
        target: Annotated[str | None, Field(description="optional selector when a knob id matches several call "
                                            "sites")] = None,
        diff: Annotated[str | None, Field(description="or: a unified diff of the operator files, applied "
                                          "strictly")] = None,
        algorithm: Annotated[bool, Field(description="declare an algorithm-level change (R23; only in the "
                                         "ALGORITHM stage)")] = False,
    ) -> PatchResult:
        """Change exactly one knob and open a round (refused with GATE one-change otherwise)."""
        return await sync(lambda s: s.apply_tuning_patch(
            session_id, catalog_id=catalog_id, rationale=rationale, knob=knob, value=value, target=target, diff=diff,
            algorithm=algorithm))

    # a long tool for its wait=false job mode only (issue #17): it reads and ranks, it runs nothing, but admitting
    # candidates on a large operator can outlast a client's patience
    @reg.long_tool(title="Propose concrete candidates", annotations=RO, result=CandidatesResult)
    async def propose_candidates(
        session_id: SessionId,
        progress: Progress,
        limit: Annotated[int, Field(description="how many candidates (1–64), best first")] = 8,
        knob: Annotated[str | None, Field(description="only candidates of this knob (id or name)")] = None,
    ) -> CandidatesResult:
        """Concrete, legal trials for the current stage, each one knob away from the kept state and never a change
        that already failed, ranked with the reason and this operator's evidence. Pass them to run_candidates."""
        return await sync(lambda s: s.propose_candidates(session_id, limit=limit, knob=knob))

    @reg.long_tool(title="Run candidates as parallel gated rounds", annotations=EDITS, result=TrialsResult)
    async def run_candidates(
        session_id: SessionId,
        candidates: Annotated[list[JsonValue], Field(description="objects from propose_candidates (unchanged) or "
                                                     "their ids")],
        progress: Progress,
        parallel: Annotated[int | None, Field(description="trials at once (default: what the executor can run: "
                                              "SIM the machine's cores, NPU one per chip of the pool)")] = None,
    ) -> TrialsResult:
        """Each candidate is a full round: admitted from the kept state, verified and measured on its own private
        copy, judged and recorded; the best one that beats the kept state is written and kept."""
        service = await holder.aget()
        return await service.run_candidates(session_id, list(candidates), parallel=parallel, progress=progress)

    @reg.tool(title="Roll the open round back", annotations=EDITS, result=RevertResult)
    async def revert_patch(session_id: SessionId,
                           notes: Annotated[str, Field(description="why the round is abandoned")] = "",
                           ) -> RevertResult:
        """Roll the open round back to the last kept state byte-for-byte (or undo an external edit)."""
        return await sync(lambda s: s.revert_patch(session_id, notes=notes))

    @reg.tool(title="Record and judge the round", annotations=EDITS, result=RecordResult)
    async def record_round(session_id: SessionId,
                           notes: Annotated[str, Field(description="free notes kept in the ledger")] = "",
                           ) -> RecordResult:
        """Let the server judge the open round from its own measurement: keep it, or roll it back."""
        return await sync(lambda s: s.record_round(session_id, notes=notes))

    @reg.tool(title="Mark a checklist item", annotations=LEDGER, result=ChecklistResult)
    async def mark_checklist(
        session_id: SessionId,
        catalog_id: Annotated[str, Field(description="an item of the current stage's checklist")],
        status: Annotated[Literal["not-applicable", "tried", "failed"], Field(description="usually "
                                                                               "not-applicable")],
        reason: Annotated[str, Field(description="why (required)")],
    ) -> ChecklistResult:
        """Mark a checklist item (rounds mark themselves; use this for not-applicable with a reason)."""
        return await sync(lambda s: s.mark_checklist(session_id, catalog_id=catalog_id, status=status, reason=reason))

    @reg.tool(title="Leave the stage early", annotations=LEDGER, result=ChecklistResult)
    async def advance_stage(session_id: SessionId,
                            reason: Annotated[str, Field(description="why the stage is done")]) -> ChecklistResult:
        """Leave the current stage early (only with a fully marked checklist, R14)."""
        return await sync(lambda s: s.advance_stage(session_id, reason=reason))

    @reg.tool(title="Stop tuning (the user's decision)", annotations=EDITS, result=StatusResult)
    async def stop_session(session_id: SessionId,
                           reason: Annotated[str, Field(description="the user's reason to stop")]) -> StatusResult:
        """The user's explicit stop: an open round is rolled back, then only reporting is allowed."""
        return await sync(lambda s: s.stop_session(session_id, reason=reason))

    @reg.tool(title="Write the final report", annotations=EDITS_IDEMPOTENT, result=ReportResult)
    async def render_report(
        session_id: SessionId,
        format: Annotated[Literal["md", "html", "both"], Field(description="md, html (with charts) or both")] = "md",
        lang: Lang = DEFAULT_LANG,
    ) -> ReportResult:
        """Write the final tuning report next to the operator (restores debug options first, R22)."""
        return await sync(lambda s: s.render_report(session_id, fmt=format, lang=lang))

    @reg.tool(title="Session status board", annotations=RO, result=StatusResult)
    async def get_status(session_id: SessionId, lang: Lang = DEFAULT_LANG) -> StatusResult:
        """The live status board: goal, stage, rounds, best time, progress, success rate."""
        result = await sync(lambda s: s.get_status(session_id, lang))
        running = [j.id for j in jobs.running()]
        if running:
            result.running_job = running[0]
        return result

    @reg.tool(title="List the operator's knobs", annotations=RO, result=KnobsResult)
    async def list_knobs(session_id: SessionId) -> KnobsResult:
        """Every tunable knob in the operator files, with location, current value and legal range."""
        return await sync(lambda s: s.list_knobs(session_id))

    @reg.tool(title="Wait for a background job", annotations=RO, result=JobHandle)
    async def wait_job(job_id: Annotated[str, Field(description="job_id from a wait=false call")],
                       timeout_s: Annotated[float, Field(description="how long to wait now (≤ 50 s keeps within "
                                                         "client timeouts)")] = 30.0) -> JobHandle:
        """Wait for a background job; returns its result when done, else its status."""
        return await jobs.wait(job_id, min(float(timeout_s), 50.0))

    @reg.tool(title="Cancel a background job", annotations=EDITS_IDEMPOTENT, result=JobHandle)
    async def cancel_job(job_id: Annotated[str, Field(description="job_id from a wait=false call")]) -> JobHandle:
        """Cancel a background job; its whole process group is killed and nothing half is recorded."""
        jobs.cancel(job_id)
        return await jobs.wait(job_id, 10.0)

    # ------------------------------------------------------------------------------------------------ server
    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[dict[str, Any]]:
        async with anyio.create_task_group() as tg:
            jobs.attach(tg)
            try:
                yield {"jobs": jobs}
            finally:
                jobs.attach(None)
                tg.cancel_scope.cancel()  # kills running children through their cancellation cleanup

    mcp = MCPServer(name=name, title="pypto-tune", version=__version__, instructions=INSTRUCTIONS,
                    lifespan=lifespan, tools=reg.tools)

    # ------------------------------------------------------------------------------------------------ prompts
    def _register_prompt(pname: str, title: str, description: str) -> None:
        def prompt(lang: Annotated[str, Field(description="zh (default) or en")] = DEFAULT_LANG) -> str:
            if lang not in LANGS:
                # a protocol error with the reason: a bad argument is the caller's to fix, not a server failure
                raise MCPError(code=INVALID_PARAMS, message=f"prompt {pname}: lang must be 'zh' or 'en' (got "
                               f"{lang!r}); zh is the default")
            path = resources.files("pypto_tune.prompts").joinpath("workflow", f"{pname}.{lang}.md")
            return path.read_text(encoding="utf-8")

        prompt.__name__ = pname
        prompt.__doc__ = description
        mcp.prompt(name=pname, title=title, description=description)(prompt)

    for pname, (ptitle, pdesc) in PROMPTS.items():
        _register_prompt(pname, ptitle, pdesc)

    # ------------------------------------------------------------------------------------------------ resources
    def session_read(work: Callable[[TuningService], str]) -> str:
        """A session resource's body; an unknown session or measurement reaches the client as -32602 with the
        reason (a plain exception would arrive as the generic 'Error creating resource from template')."""
        try:
            return work(holder.get())
        except InputError as exc:
            raise ResourceNotFoundError(str(exc)) from exc
        except PyptoTuneError as exc:
            raise ResourceError(str(exc)) from exc

    @mcp.resource("pypto-tune://catalog", title="Optimisation catalogue", mime_type="application/json",
                  description="the optimisation catalogue F-1…F-15, S-1…S-13, I-1…I-9 as data")
    def catalog() -> str:
        from pypto_tune.tools.analysis import load_catalog

        return load_catalog().model_dump_json(indent=2)

    @mcp.resource("pypto-tune://rules", title="Enforced rules", mime_type="application/json",
                  description="the rules the server enforces, with the ids refusals cite")
    def rules_resource() -> str:
        return orjson.dumps([r.model_dump() for r in rules.RULES], option=orjson.OPT_INDENT_2).decode()

    @mcp.resource(SESSION_URIS[0], title="Session status board", mime_type="text/markdown",
                  description="the live status board of a session (Markdown, zh)")
    def status_resource(session_id: str) -> str:
        return session_read(lambda s: s.get_status(session_id, DEFAULT_LANG).board)

    @mcp.resource(SESSION_URIS[1], title="Session ledger", mime_type="application/json",
                  description="every ledger row of a session (JSON, append-only)")
    def ledger_resource(session_id: str) -> str:
        return session_read(lambda s: orjson.dumps(s.ledger_json(session_id), option=orjson.OPT_INDENT_2).decode())

    @mcp.resource(SESSION_URIS[2], title="Whole analysis of a measurement", mime_type="application/json",
                  description="everything analyze_bubbles summarises for one measurement: every core, leaf, chain, "
                  "suggestion and the cross-check (JSON)")
    def analysis_resource(session_id: str, measurement_id: str) -> str:
        if not measurement_id.isdigit():
            raise ResourceNotFoundError(f"measurement id must be a number, got {measurement_id!r}; "
                                        "collect_swimlane and analyze_bubbles name it (measurement_id)")
        return session_read(lambda s: orjson.dumps(s.analysis_json(session_id, int(measurement_id)),
                                                   option=orjson.OPT_INDENT_2).decode())

    # ------------------------------------------------------------------------------------------------ completions
    @mcp.completion()
    async def complete(ref: PromptReference | ResourceTemplateReference, argument: CompletionArgument,
                       context: CompletionContext | None) -> Completion | None:
        """lang for the prompts; session ids (and measurement ids) of the workspace's ledger for the templates."""
        prefix = argument.value or ""
        if isinstance(ref, PromptReference) and ref.name in PROMPTS and argument.name == "lang":
            return _completion([x for x in LANGS if x.startswith(prefix)])
        if isinstance(ref, ResourceTemplateReference) and ref.uri in SESSION_URIS:
            service = await holder.aget()
            if argument.name == "session_id":
                ids = await anyio.to_thread.run_sync(service.session_ids)
                return _completion([x for x in ids if x.startswith(prefix)])
            if argument.name == "measurement_id":
                sid = (context.arguments or {}).get("session_id") if context else None
                if not sid:
                    return _completion([])
                try:
                    mids = await anyio.to_thread.run_sync(service.measurement_ids, sid)
                except PyptoTuneError:
                    return _completion([])  # an unknown session has nothing to complete
                return _completion([str(m) for m in reversed(mids) if str(m).startswith(prefix)])
        return None

    mcp._pypto_jobs = jobs  # type: ignore[attr-defined]  # for tests that inspect running jobs
    mcp._pypto_service = holder  # type: ignore[attr-defined]  # for tests that check the lazy build
    return mcp


def _completion(values: list[str]) -> Completion:
    return Completion(values=values[:100], total=len(values), has_more=len(values) > 100)


async def _ask_user(ctx: Context, refusal: GateRefusal) -> bool | None:
    """R5 through MCP elicitation when the client supports it: True/False is the person's answer, None means
    nobody was asked (no elicitation, or the request failed) and the refusal stands."""
    caps = None
    try:
        caps = ctx.client_capabilities
    except Exception:  # noqa: BLE001 - no session to ask (in-process call): the refusal stands
        return None
    if caps is None or getattr(caps, "elicitation", None) is None:
        return None
    try:
        answer = await ctx.elicit(f"{refusal.message}. Retry the baseline precision check once more?", Confirm)
    except Exception:  # noqa: BLE001 - the client failed to answer: the refusal stands, nothing is retried
        return None
    action = getattr(answer, "action", "")
    if action == "accept":
        return bool(getattr(getattr(answer, "data", None), "retry", False))
    return False if action == "decline" else None

