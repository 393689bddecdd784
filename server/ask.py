"""Asking a person mid-call (R5: retry a baseline that failed three times), the protocol's own way on each era.

* 2025-11-25 and earlier: an ``elicitation/create`` request to the client while the call waits (``ctx.elicit``).
* 2026-07-28: no server-to-client requests; the call answers with an ``InputRequiredResult`` that carries the same
  elicitation form, and the client retries the call with the person's answer in ``inputResponses`` and our
  ``requestState`` echoed. The SDK seals that state (``RequestStateBoundary``), so a state we did not mint never
  reaches us; we also check that it names this session and this question.
* A client that declared no elicitation: nobody can be asked in the client; the refusal stands and names
  ``pypto-tune confirm`` (a person at a terminal).

An answer counts only when it comes through one of these channels. ``confirm_retry=true`` from the agent is never
an answer (the gate says so), and ``inputResponses`` sent without our sealed state — an answer to a question nobody
was shown — are ignored.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from mcp.server.elicitation import render_elicitation_schema
from mcp.server.mcpserver import Context
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, Field
from pypto_tune.tools.errors import GateRefusal

log = logging.getLogger("pypto_tune.server")

MULTI_ROUND_VERSION = "2026-07-28"  # the first protocol revision without server-to-client requests
KEY = "r5-retry"  # our key in inputRequests / inputResponses


class Confirm(BaseModel):
    retry: bool = Field(description="retry the baseline precision check once more")


@dataclass(frozen=True)
class Answer:
    """``retry`` is the person's answer, None when they dismissed the question (nothing is recorded then);
    ``channel`` is how it came (for the log)."""

    retry: bool | None
    channel: str


def question(refusal: GateRefusal) -> str:
    return f"{refusal.message}. Retry the baseline precision check once more?"


def multi_round(ctx: Context | None) -> bool:
    version = _protocol_version(ctx)
    return version is not None and is_version_at_least(version, MULTI_ROUND_VERSION)


def can_elicit(ctx: Context | None) -> bool:
    if ctx is None:
        return False
    try:
        caps = ctx.client_capabilities
    except Exception:  # noqa: BLE001 - no request (an in-process call): nobody to ask
        return False
    elicitation = getattr(caps, "elicitation", None) if caps is not None else None
    # a bare `elicitation: {}` (before modes existed) means form support; url-only does not
    return elicitation is not None and (getattr(elicitation, "form", None) is not None
                                        or getattr(elicitation, "url", None) is None)


def input_required(ctx: Context, session_id: str, refusal: GateRefusal) -> InputRequiredResult | None:
    """Round one on a 2026-07-28 connection: the question as an ``InputRequiredResult``, or None when the client
    cannot show a form."""
    if not can_elicit(ctx):
        return None
    form = ElicitRequestFormParams(message=question(refusal), requested_schema=render_elicitation_schema(Confirm))
    state = json.dumps({"session": session_id, "rule": refusal.rule, "question": question(refusal)})
    return InputRequiredResult(input_requests={KEY: ElicitRequest(params=form)}, request_state=state)


def answer_from_retry(ctx: Context | None, session_id: str, refusal: GateRefusal) -> Answer | None:
    """Round two: the person's answer, if this retry carries our own state for this very question."""
    if ctx is None or not multi_round(ctx):
        return None
    raw, responses = ctx.request_state, ctx.input_responses or {}
    if not raw:
        return None  # an answer to a question nobody was shown: ignored
    try:
        state = json.loads(raw)
    except ValueError:
        return None
    if state != {"session": session_id, "rule": refusal.rule, "question": question(refusal)}:
        log.info("R5: a retry's state names another session or question; asking again")
        return None
    result = responses.get(KEY)
    if not isinstance(result, ElicitResult):
        return Answer(retry=None, channel="input-required")  # our question came back unanswered
    return _decode(result.action, result.content, "input-required")


async def elicit(ctx: Context | None, refusal: GateRefusal) -> Answer | None:
    """2025-11-25 and earlier: ask while the call waits. None: nobody could be asked."""
    if ctx is None or multi_round(ctx) or not can_elicit(ctx):
        return None
    try:
        result = await ctx.elicit(question(refusal), Confirm)
    except Exception:  # noqa: BLE001 - the client failed to answer: the refusal stands, nothing is retried
        log.warning("R5: the client's elicitation failed; the refusal stands", exc_info=True)
        return None
    data = getattr(result, "data", None)
    return _decode(getattr(result, "action", ""), {"retry": getattr(data, "retry", False)}, "elicitation")


def _decode(action: str, content: dict | None, channel: str) -> Answer:
    if action == "accept":
        return Answer(retry=bool((content or {}).get("retry", False)), channel=channel)
    if action == "decline":
        return Answer(retry=False, channel=channel)
    return Answer(retry=None, channel=channel)  # dismissed: no answer, nothing recorded


def _protocol_version(ctx: Context | None) -> str | None:
    if ctx is None:
        return None
    try:
        return ctx.protocol_version
    except Exception:  # noqa: BLE001 - no request context
        return None
