"""Search family: the server proposes concrete legal candidates and runs them as parallel gated rounds."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from pypto_tune.server.tooling import Progress
from pypto_tune.server.wiring import EDITS, RO, SessionId, Wiring
from pypto_tune.tools.operations.results import CandidatesResult, JsonValue, TrialsResult


def register(w: Wiring) -> None:
    # a long tool for its wait=false job mode (issue #17): it reads and ranks, it runs nothing, but admitting
    # candidates on a large operator can outlast a client's patience
    @w.reg.long_tool(title="Propose concrete candidates", annotations=RO, result=CandidatesResult)
    async def propose_candidates(
        session_id: SessionId,
        progress: Progress,
        limit: Annotated[int, Field(description="how many candidates (1–64), best first")] = 8,
        knob: Annotated[str | None, Field(description="only candidates of this knob (id or name)")] = None,
    ) -> CandidatesResult:
        """Concrete, legal trials for the current stage, each one knob away from the kept state and never a change
        that already failed, ranked with the reason and this operator's evidence. Pass them to run_candidates."""
        return await w.sync(lambda s: s.propose_candidates(session_id, limit=limit, knob=knob))

    @w.reg.long_tool(title="Run candidates as parallel gated rounds", annotations=EDITS, result=TrialsResult)
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
        service = await w.holder.aget()
        return await service.run_candidates(session_id, list(candidates), parallel=parallel, progress=progress)
