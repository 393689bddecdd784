"""Rounds family: one change opens a round; the server judges it from its own measurement, or rolls it back."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from pypto_tune.server.wiring import EDITS, SessionId, SessionLang, Wiring
from pypto_tune.tools.operations.results import JsonValue, PatchResult, RecordResult, RevertResult


def register(w: Wiring) -> None:
    @w.reg.tool(title="Apply one tuning change", annotations=EDITS, result=PatchResult)
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
        return await w.sync(lambda s: s.apply_tuning_patch(
            session_id, catalog_id=catalog_id, rationale=rationale, knob=knob, value=value, target=target, diff=diff,
            algorithm=algorithm))

    @w.reg.tool(title="Roll the open round back", annotations=EDITS, result=RevertResult)
    async def revert_patch(session_id: SessionId,
                           notes: Annotated[str, Field(description="why the round is abandoned")] = "",
                           ) -> RevertResult:
        """Roll the open round back to the last kept state byte-for-byte (or undo an external edit)."""
        return await w.sync(lambda s: s.revert_patch(session_id, notes=notes))

    @w.reg.tool(title="Record and judge the round", annotations=EDITS, result=RecordResult)
    async def record_round(session_id: SessionId,
                           notes: Annotated[str, Field(description="free notes kept in the ledger")] = "",
                           lang: SessionLang = None,
                           ) -> RecordResult:
        """Let the server judge the open round from its own measurement: keep it, or roll it back."""
        return await w.sync(lambda s: s.record_round(session_id, notes=notes, lang=lang))
