"""Runs family: the server runs the operator's test itself (precision, swim-lane collection) and analyses what it
wrote. R5's question to a person is asked here, the protocol's own way (server/ask.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context
from pydantic import Field
from pypto_tune.server import ask
from pypto_tune.server.tooling import Progress
from pypto_tune.server.wiring import EDITS_IDEMPOTENT, LEDGER_IDEMPOTENT, RUNS, SessionId, SessionLang, Wiring
from pypto_tune.tools.errors import GateRefusal
from pypto_tune.tools.operations.result_views import summarize_analysis
from pypto_tune.tools.operations.results import AnalysisSummary, CollectResult, DebugResult, PrecisionResult

Detail = Annotated[Literal["summary", "full"], Field(
    description="summary: ≤ 8 KB, top items and counts of what was left out; full: the whole analysis too (tens of "
    "KB)")]


def analysis_uri(session_id: str, measurement_id: int) -> str:
    return f"pypto-tune://sessions/{session_id}/analyses/{measurement_id}"


def register(w: Wiring) -> None:
    @w.reg.long_tool(title="Run the precision check", annotations=RUNS, result=PrecisionResult)
    async def run_precision_check(
        session_id: SessionId,
        progress: Progress,
        ctx: Context,
        confirm_retry: Annotated[bool, Field(description="only after the USER confirmed: retry a baseline that "
                                             "failed 3 times (R5)")] = False,
        adopt_drift: Annotated[bool, Field(description="adopt an external edit of the operator files as a manual "
                                           "round, verified by this run")] = False,
    ) -> Any:
        """Run the fixed test command on the current code; record the verdict bound to its hash (R4/R6)."""
        service = await w.holder.aget()
        try:
            return await service.run_precision_check(session_id, confirm_retry=confirm_retry,
                                                     adopt_drift=adopt_drift, progress=progress)
        except GateRefusal as refusal:
            if refusal.rule != "baseline-retry":
                raise
            # R5: the person answers in the client; their answer is recorded as theirs, and only then is the
            # baseline run again. The agent's confirm_retry is not an answer (the gate says so).
            if ask.multi_round(ctx):
                answer = ask.answer_from_retry(ctx, session_id, refusal)
                if answer is None:
                    question = ask.input_required(ctx, session_id, refusal)
                    if question is not None:
                        return question  # the client shows it and calls again with the answer
            else:
                answer = await ask.elicit(ctx, refusal)
            if answer is None or answer.retry is None:
                raise refusal  # nobody could be asked, or they dismissed it: the refusal (naming the CLI) stands
            retry = answer.retry
            await anyio.to_thread.run_sync(lambda: service.confirm(session_id, source="elicitation", answer=retry))
            if not retry:
                raise refusal
            return await service.run_precision_check(session_id, progress=progress)

    @w.reg.tool(title="Switch swim-lane collection on or off", annotations=EDITS_IDEMPOTENT, result=DebugResult)
    async def enable_runtime_debug(
        session_id: SessionId,
        enabled: Annotated[bool, Field(description="true: add runtime_debug_mode 1 to every jit; false: restore "
                                       "exactly what was there before")] = True,
    ) -> DebugResult:
        """Switch swim-lane collection on (or off) in every jit of the operator files (R7/R22)."""
        return await w.sync(lambda s: s.enable_runtime_debug(session_id, enabled))

    @w.reg.long_tool(title="Collect a swim-lane measurement", annotations=RUNS, result=CollectResult)
    async def collect_swimlane(session_id: SessionId, progress: Progress) -> CollectResult:
        """Run the test with runtime_debug_mode 1, parse the new output folders, record the operator time."""
        service = await w.holder.aget()
        return await service.collect_swimlane(session_id, progress=progress)

    # not read-only: in a session it records the analysis and the baseline's analysis opens tuning (S3 -> S4); a
    # client that trusts readOnlyHint to skip confirmation must not be told otherwise (issue #11)
    @w.reg.tool(title="Analyse bubbles, utilisation and load balance", annotations=LEDGER_IDEMPOTENT,
                result=AnalysisSummary)
    async def analyze_bubbles(
        session_id: Annotated[str | None, Field(description="analyse this session's kept state (default)")] = None,
        output_dir: Annotated[str | None, Field(description="or: any run folder / output folder, no session "
                                                "needed (the newest run is picked)")] = None,
        lang: SessionLang = None,
        outer_loops: Annotated[int | None, Field(description="product of the non-innermost pypto.loop trip counts, "
                                                 "for t/iter (inferred when omitted)")] = None,
        detail: Detail = "summary",
        measurement: Annotated[int | None, Field(description="or this measurement id")] = None,
        round: Annotated[int | None, Field(description="or this round's measurement (0 = baseline)")] = None,  # noqa: A002
    ) -> AnalysisSummary:
        """Bubble / utilisation / load-balance analysis with catalogue suggestions and evidence. Returns a summary
        (top items first, counts of what was left out); the whole analysis is a resource (detail_uri) or
        detail='full'."""
        def work(s: Any) -> AnalysisSummary:
            lang_ = s.session_lang(session_id, lang)
            full = s.analyze_bubbles(session_id, output_dir=output_dir, lang=lang_, outer_loops=outer_loops,
                                     measurement=measurement, round=round)
            if full.session_id and full.measurement_id is None:
                # the analysis just recorded in the ledger names its measurement
                full.measurement_id = s.last_analysed_measurement(full.session_id)
            uri = (analysis_uri(full.session_id, full.measurement_id)
                   if full.session_id and full.measurement_id is not None else None)
            return summarize_analysis(full, lang=lang_, detail_uri=uri, include_full=detail == "full")

        return await w.sync(work)
