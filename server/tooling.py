"""How a tool is published: one place for the rules every tool follows, so ``app.py`` only declares tools.

* the result is structured content validated against the tool's ``outputSchema``, with a short text beside it
  (``tools/operations/result_views.py``), never the same JSON twice;
* domain errors become an ``isError`` result whose text is the full reason and the allowed next calls (an uncaught
  exception would reach the client as a bare "Error executing tool", hiding the reason from the agent);
* long tools (``long_tool``) get ``wait``: ``true`` runs inline with progress at once and then every ≤ 2 s
  (``server/progress.py``), ``false`` starts a job and returns a ``JobHandle`` at once; their ``outputSchema`` is
  ``anyOf [final result, JobHandle]`` so that clients which validate structured content (the official SDK's client
  does) accept both shapes;
* schemas lose pydantic's ``title`` keywords, which only repeat each name in every ``tools/list``.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Union

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, InputRequiredResult, ResourceLink, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, RootModel
from pypto_tune.server.jobs import JobRegistry
from pypto_tune.server.progress import ProgressReporter, Send
from pypto_tune.tools.errors import PyptoTuneError, domain_error
from pypto_tune.tools.operations.result_views import result_text
from pypto_tune.tools.operations.results import JobHandle

log = logging.getLogger("pypto_tune.server")

Progress = ProgressReporter | Callable[..., Awaitable[None]]

Wait = Annotated[bool, Field(description="false: return a job handle at once and poll wait_job (for clients that time "
                              "calls out near 60 s)")]


def error_text(exc: BaseException) -> str:
    """The one mapping from a failure to what the agent reads."""
    if isinstance(exc, ToolError):
        return str(exc)
    known = domain_error(exc)
    if known is not None:
        if known is not exc:
            log.warning("%s: %s", type(exc).__name__, known, exc_info=exc)
        return str(known)
    log.exception("internal error")
    return (f"internal error ({type(exc).__name__}: {exc}). Every ledger event is one transaction, so nothing is "
            "recorded half. Next: get_status shows what was recorded; report the bug if it repeats")


def refusal(exc: BaseException) -> CallToolResult:
    """An ``isError`` result whose text is the reason itself. Raising ``ToolError`` instead would reach the agent as
    "Error executing tool X: GATE ..." — the rule id buried behind the SDK's prefix."""
    text = error_text(exc)
    log.info("refused: %s", text.splitlines()[0] if text else "")
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def progress_sender(ctx: Context | None) -> Send | None:
    """Progress notifications to the caller (only delivered when it sent a progress token; see server/progress.py)."""
    if ctx is None:
        return None

    async def send(progress: float, total: float | None, message: str) -> None:
        await ctx.report_progress(progress=progress, total=total, message=message)

    return send


def reply(result: BaseModel) -> CallToolResult:
    """Structured content plus a short reading of it; a ``detail_uri`` field is also offered as a resource link."""
    content: list[Any] = [TextContent(type="text", text=result_text(result))]
    uri = getattr(result, "detail_uri", None)
    if isinstance(uri, str) and uri:
        content.append(ResourceLink(type="resource_link", uri=uri, name=uri.rsplit("/", 2)[-2] + "-" +
                                    uri.rsplit("/", 1)[-1], mime_type="application/json",
                                    description="the whole result as JSON"))
    return CallToolResult(content=content, structured_content=result.model_dump(mode="json"))


def job_or(result: type[BaseModel]) -> type[BaseModel]:
    """The output model of a long tool: its final result, or the handle of the job that will produce it."""

    def schema_extra(schema: dict[str, Any]) -> None:
        schema["type"] = "object"  # outputSchema needs an object root (required on the wire through 2025-11-25)
        schema["description"] = (f"{result.__name__} when the call waited; a JobHandle (job_id, status) with "
                                 "wait=false — poll wait_job")

    # RootModel of a union: validated arm by arm, published as anyOf with both definitions in $defs.
    return type(f"{result.__name__}OrJob", (RootModel[Union[result, JobHandle]],),  # noqa: UP007
                {"model_config": ConfigDict(json_schema_extra=schema_extra), "__module__": __name__})


def lean_schema(node: Any) -> Any:
    """A JSON schema without pydantic's ``title`` keyword (a property *named* title maps to a dict and is kept).

    Nullable types stay spelled ``anyOf [{type: X}, {type: null}]``: the shorter ``type: [X, null]`` is legal but
    less portable (single-``type`` dialects such as Gemini's function declarations reject it; the Inspector's
    ``--strict`` flags it)."""
    if isinstance(node, dict):
        if isinstance(node.get("title"), str):
            node.pop("title")
        for value in node.values():
            lean_schema(value)
    elif isinstance(node, list):
        for value in node:
            lean_schema(value)
    return node


def input_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The arguments' schema: lean, and an optional argument's ``default: null`` dropped (leaving it out says the
    same)."""
    lean_schema(schema)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict) and "default" in prop and prop["default"] is None:
            prop.pop("default")
    return schema


def output_schema(schema: Any) -> Any:
    """The result schema clients validate against: types and required fields, without what only repeats them.

    Dropped: field descriptions (for reading a result, which the short text beside it does; in ``tools/list`` they
    were a third of the listing: 47.8 KB with them, 16 tools — input parameters keep theirs, they tell the agent what
    to pass), ``default`` values (a validator ignores them; every result carries every field) and
    ``additionalProperties: true`` (JSON Schema's default)."""
    lean_schema(schema)

    def strip(node: Any, top: bool) -> None:
        if isinstance(node, dict):
            if not top and isinstance(node.get("description"), str):
                node.pop("description")
            node.pop("default", None)
            if node.get("additionalProperties") is True:
                node.pop("additionalProperties")
            for key, value in node.items():
                if key in ("properties", "$defs") and isinstance(value, dict):
                    for sub in value.values():
                        strip(sub, False)
                elif key != "description":
                    strip(value, False)
        elif isinstance(node, list):
            for value in node:
                strip(value, False)

    strip(schema, True)
    return shallow_schema(schema)


def shallow_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The result's own fields typed, a nested result model only as ``{"type": "object"}``.

    Nested models (a knob, a candidate, a trial, a core of the analysis) were most of ``tools/list`` and an agent
    pays for it on every turn; what a nested object holds is what the tool's answer shows (and the field's meaning is
    in the input descriptions and the text beside each result). A small enum or alias definition is written inline.
    The long tools' two arms (the result, the job handle) stay definitions, each shallow."""
    defs = schema.pop("$defs", {})
    arms = {ref.rsplit("/", 1)[-1] for arm in schema.get("anyOf", []) if isinstance(arm, dict)
            for ref in [arm.get("$ref", "")] if ref}

    def flat(node: Any) -> Any:
        if isinstance(node, list):
            return [flat(x) for x in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            target = defs.get(ref.rsplit("/", 1)[-1], {})
            return {"type": "object"} if target.get("type") == "object" or "properties" in target else flat(target)
        if "properties" in node and node is not top:  # an inline nested object: its type is enough
            return {"type": "object"}
        return {k: flat(v) if k in ("items", "anyOf", "oneOf", "allOf", "additionalProperties") else v
                for k, v in node.items()}

    def own(model: dict[str, Any]) -> dict[str, Any]:
        return {**model, "properties": {k: flat(v) for k, v in model.get("properties", {}).items()}}

    top = schema
    if arms:
        schema["$defs"] = {name: own(defs[name]) for name in sorted(arms) if name in defs}
        return schema
    return own(schema)


class ToolRegistry:
    """Collects the server's tools (``MCPServer(tools=registry.tools)``)."""

    def __init__(self, jobs: JobRegistry) -> None:
        self.jobs = jobs
        self.tools: list[Tool] = []

    def tool(self, *, title: str, annotations: ToolAnnotations, result: type[BaseModel]
             ) -> Callable[[Callable[..., Awaitable[BaseModel]]], Callable[..., Awaitable[BaseModel]]]:
        """A tool whose body returns ``result`` (or raises). The docstring is the description."""

        def register(fn: Callable[..., Awaitable[BaseModel]]) -> Callable[..., Awaitable[BaseModel]]:
            sig = inspect.signature(fn, eval_str=True)

            async def call(**kwargs: Any) -> CallToolResult:
                try:
                    return reply(await fn(**kwargs))
                except MCPError:
                    raise  # a protocol error stays one
                except Exception as exc:  # noqa: BLE001 - every failure reaches the agent with its reason
                    return refusal(exc)

            self._add(call, fn, list(sig.parameters.values()), result, title, annotations)
            return fn

        return register

    def long_tool(self, *, title: str, annotations: ToolAnnotations, result: type[BaseModel]
                  ) -> Callable[[Callable[..., Awaitable[BaseModel]]], Callable[..., Awaitable[BaseModel]]]:
        """A tool that runs the operator (minutes): the body takes ``progress`` (and may take ``ctx``); the published
        tool adds ``wait`` and returns the result, or a ``JobHandle`` at once when ``wait=false``."""

        def register(fn: Callable[..., Awaitable[BaseModel]]) -> Callable[..., Awaitable[BaseModel]]:
            sig = inspect.signature(fn, eval_str=True)
            if "progress" not in sig.parameters:
                raise TypeError(f"long tool {fn.__name__} must take a 'progress' parameter")
            wants_ctx = "ctx" in sig.parameters
            params = [p for n, p in sig.parameters.items() if n not in ("progress", "ctx")]
            params.append(inspect.Parameter("wait", inspect.Parameter.KEYWORD_ONLY, default=True, annotation=Wait))
            params.append(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Context))
            name = fn.__name__

            async def call(**kwargs: Any) -> CallToolResult:
                wait = kwargs.pop("wait", True)
                ctx = kwargs.pop("ctx", None)
                if wants_ctx:
                    # a job outlives its call: nobody is there to answer a question, so it gets no context to ask
                    # through (a refusal that needs a person says so in the job's error)
                    kwargs["ctx"] = ctx if wait else None

                async def run(progress: Progress) -> Any:
                    return await fn(progress=progress, **kwargs)

                try:
                    if not wait:
                        return reply(self.jobs.start(name, run).view())
                    reporter = ProgressReporter(name, progress_sender(ctx))
                    failure: Exception | None = None
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(reporter.heartbeat)
                        try:
                            result = await run(reporter)
                        except Exception as exc:  # noqa: BLE001 - re-raised below as itself, not in an ExceptionGroup
                            failure = exc
                        finally:
                            tg.cancel_scope.cancel()
                    if failure is not None:
                        raise failure
                    # the multi-round-trip question of a 2026-07-28 connection (server/ask.py) goes out as it is
                    return result if isinstance(result, InputRequiredResult) else reply(result)
                except MCPError:
                    raise  # a protocol error stays one
                except Exception as exc:  # noqa: BLE001 - every failure reaches the agent with its reason
                    return refusal(exc)

            self._add(call, fn, params, job_or(result), title, annotations)
            return fn

        return register

    def _add(self, call: Callable[..., Awaitable[CallToolResult]], fn: Callable[..., Any],
             params: list[inspect.Parameter], output: type[BaseModel], title: str,
             annotations: ToolAnnotations) -> None:
        # keyword-only, in the body's order: the SDK calls tools with keyword arguments only
        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]
        ret = Annotated[CallToolResult, output]
        call.__signature__ = inspect.Signature(params, return_annotation=ret)  # type: ignore[attr-defined]
        call.__annotations__ = {p.name: p.annotation for p in params} | {"return": ret}
        call.__name__ = call.__qualname__ = fn.__name__
        call.__doc__ = inspect.cleandoc(fn.__doc__ or "")
        tool = Tool.from_function(call, name=fn.__name__, title=title, annotations=annotations)
        tool.parameters = input_schema(tool.parameters)
        # read once by Tool.output_schema (a cached property), so set before anyone lists the tools
        tool.fn_metadata.output_schema = output_schema(tool.fn_metadata.output_schema)
        self.tools.append(tool)
