"""The MCP surface: the server's identity, its tools (one family per module in ``server/families/``), prompts,
resources and completions.

Thin on purpose: every decision is made in ``pypto_tune.tools``; this package declares what is published and
translates. How a tool is published (structured content, short text, error mapping, the ``wait`` / job pattern of
long tools, progress) lives in ``server/tooling.py`` and ``server/progress.py``; how the server presents itself and
answers unknown names and bad arguments in ``server/surface.py``; asking a person mid-call in ``server/ask.py``.

Imports are light on purpose: ``initialize`` and the listings need only the result models and the rules. The
``TuningService`` (and with it numpy, libcst, msgspec, jinja2 and the analysis engine) is built on the first call that
needs it, in a worker thread, so a client's connect is not held up by a second of imports.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import orjson
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    Completion,
    CompletionArgument,
    CompletionContext,
    PromptReference,
    ResourceTemplateReference,
)
from pydantic import Field
from pypto_tune.server.families import FAMILIES
from pypto_tune.server.jobs import JobRegistry
from pypto_tune.server.surface import CACHE_HINTS, DESCRIPTION, WEBSITE_URL, PyptoServer, icons
from pypto_tune.server.tooling import ToolRegistry
from pypto_tune.server.wiring import DEFAULT_LANG, LANGS, ServiceHolder, Wiring
from pypto_tune.tools.errors import InputError, PyptoTuneError
from pypto_tune.tools.rules import tuning_loop

from pypto_tune import __version__

if TYPE_CHECKING:
    from pypto_tune.tools.service import TuningService

log = logging.getLogger("pypto_tune.server")

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


def build_server(service: TuningService | None = None, *, workspace: Path | None = None,
                 name: str = "pypto-tune") -> MCPServer:
    """The server. Pass a ``TuningService`` (tests), or nothing and ``workspace`` to build one on first use."""
    holder = ServiceHolder(service, workspace)
    jobs = JobRegistry()
    reg = ToolRegistry(jobs)
    wiring = Wiring(holder=holder, jobs=jobs, reg=reg)
    for register in FAMILIES:
        register(wiring)

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[dict[str, Any]]:
        async with anyio.create_task_group() as tg:
            jobs.attach(tg)
            try:
                yield {"jobs": jobs}
            finally:
                jobs.attach(None)
                tg.cancel_scope.cancel()  # kills running children through their cancellation cleanup

    # subscriptions=False: the lists never change while the server runs, so there is nothing to listen for, and
    # both protocol eras advertise the same capabilities (listChanged false)
    mcp: MCPServer = PyptoServer(name=name, title="pypto-tune", description=DESCRIPTION, version=__version__,
                                 instructions=INSTRUCTIONS, website_url=WEBSITE_URL, icons=icons(), lifespan=lifespan,
                                 tools=reg.tools, cache_hints=CACHE_HINTS, subscriptions=False)
    _register_prompts(mcp)
    _register_resources(mcp, holder)
    _register_completions(mcp, holder)
    mcp._pypto_jobs = jobs  # type: ignore[attr-defined]  # for tests that inspect running jobs
    mcp._pypto_service = holder  # type: ignore[attr-defined]  # for tests that check the lazy build
    return mcp


def _register_prompts(mcp: MCPServer) -> None:
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


def _register_resources(mcp: MCPServer, holder: ServiceHolder) -> None:
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
        return orjson.dumps([r.model_dump() for r in tuning_loop.RULES], option=orjson.OPT_INDENT_2).decode()

    @mcp.resource(SESSION_URIS[0], title="Session status board", mime_type="text/markdown",
                  description="the live status board of a session (Markdown, zh)")
    def status_resource(session_id: str) -> str:
        return session_read(lambda s: s.get_status(session_id).board)  # the session's language

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


def _register_completions(mcp: MCPServer, holder: ServiceHolder) -> None:
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


def _completion(values: list[str]) -> Completion:
    return Completion(values=values[:100], total=len(values), has_more=len(values) > 100)
