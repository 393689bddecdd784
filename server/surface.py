"""How the server presents itself and answers what no tool body sees: identity (icons, description, website), cache
hints, the protocol errors for unknown names, and argument-validation errors in the server's own words.

Why a subclass: the SDK answers an unknown prompt with a bare ``ValueError`` (error code 0 on 2025-11-25 connections,
-32603 and a traceback on 2026-07-28), an unknown tool with an ``isError`` result, and bad arguments with pydantic's
text. The spec lists -32602 for unknown names; a model fixing its own call reads better from "argument 'run_mode'
must be one of 'sim', 'npu' (got 'cpu')" than from a pydantic dump.
"""

from __future__ import annotations

import base64
import logging
from importlib import resources
from typing import Any

from mcp.server.caching import CacheHint
from mcp.server.lowlevel.server import LifespanResultT
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    INVALID_PARAMS,
    CallToolResult,
    GetPromptResult,
    Icon,
    InputRequiredResult,
    ReadResourceRequestParams,
    ReadResourceResult,
)
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

log = logging.getLogger("pypto_tune.server")

DESCRIPTION = ("Tunes PyPTO operators with an agent while the server runs the test itself, enforces the tuning rules "
               "and keeps an append-only ledger of every round")
# pypto-tune has no site of its own (its README is the manual); the link is to the framework it tunes for
WEBSITE_URL = "https://gitcode.com/cann/pypto"

# The lists (tools, prompts, resources, templates) are fixed when the server is built and never change while it
# runs: a client may keep them for an hour and share them across users (nothing in them depends on who asks).
STATIC_TTL_MS = 3_600_000
STATIC = CacheHint(ttl_ms=STATIC_TTL_MS, scope="public")
CACHE_HINTS = {"tools/list": STATIC, "prompts/list": STATIC, "resources/list": STATIC,
               "resources/templates/list": STATIC, "server/discover": STATIC}
# resources whose body never changes while the server runs (session resources change with every call)
STATIC_RESOURCES = ("pypto-tune://catalog", "pypto-tune://rules")


def icons() -> list[Icon]:
    """The server's icon as data URIs (no request leaves the client): PNG, which every client must render, and SVG."""
    folder = resources.files("pypto_tune.prompts").joinpath("icons")
    found = []
    for name, mime, sizes in (("pypto-tune.png", "image/png", ["48x48"]), ("pypto-tune.svg", "image/svg+xml",
                                                                         ["any"])):
        data = base64.b64encode(folder.joinpath(name).read_bytes()).decode()
        found.append(Icon(src=f"data:{mime};base64,{data}", mime_type=mime, sizes=sizes))
    return found


class PyptoServer(MCPServer[LifespanResultT]):
    """``MCPServer`` with the answers described in the module docstring."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context[LifespanResultT, Any] | None
                        = None) -> CallToolResult | InputRequiredResult:
        tool = self._tool_manager.get_tool(name)
        if tool is None:
            known = ", ".join(t.name for t in self._tool_manager.list_tools())
            raise MCPError(code=INVALID_PARAMS, message=f"unknown tool {name!r}; this server's tools: {known}",
                           data={"tool": name})
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(validation_text(name, exc.__cause__, tool.parameters)) from exc.__cause__
            raise

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None,
                         context: Context[LifespanResultT, Any] | None = None) -> GetPromptResult | InputRequiredResult:
        if self._prompt_manager.get_prompt(name) is None:
            known = ", ".join(p.name for p in self._prompt_manager.list_prompts())
            raise MCPError(code=INVALID_PARAMS, message=f"unknown prompt {name!r}; this server's prompts: {known}",
                           data={"prompt": name})
        try:
            return await super().get_prompt(name, arguments, context)
        except ValueError as exc:  # the SDK's wording for a missing or invalid argument: the caller's to fix
            raise MCPError(code=INVALID_PARAMS, message=f"prompt {name}: {exc}") from exc

    async def _handle_read_resource(self, ctx: Any, params: ReadResourceRequestParams
                                    ) -> ReadResourceResult | InputRequiredResult:
        result = await super()._handle_read_resource(ctx, params)
        if isinstance(result, ReadResourceResult) and str(params.uri) in STATIC_RESOURCES:
            return result.model_copy(update={"ttl_ms": STATIC_TTL_MS, "cache_scope": "public"})
        return result


# ---------------------------------------------------------------------------------------------------- validation
def validation_text(tool: str, error: ValidationError, schema: dict[str, Any]) -> str:
    """What is wrong with which argument, what is allowed, and the next call — in the refusals' own style."""
    props = schema.get("properties", {})
    lines = []
    for e in error.errors():
        loc = [str(p) for p in e["loc"]]
        name = loc[0] if loc else "?"
        where = name + "".join(f"[{p}]" for p in loc[1:])
        prop = props.get(name, {})
        lines.append(f"- {where}: {_problem(e, prop if len(loc) == 1 else {})}")
    required = [n for n in schema.get("required", []) if n in props]
    return (f"{tool}: {len(lines)} argument{'s' if len(lines) > 1 else ''} not accepted\n" + "\n".join(lines)
            + f"\nNext: call {tool} again with {'these' if len(lines) > 1 else 'this'} corrected"
            + (f" (required: {', '.join(required)})" if required else "") + "; the inputSchema of tools/list "
            "describes every argument")


def _problem(e: Any, prop: dict[str, Any]) -> str:
    kind, got = e["type"], e.get("input")
    shown = _shown(got)
    if kind == "missing":
        what = prop.get("description")
        return "required and missing" + (f" ({what})" if what else "")
    if kind == "value_error":  # our own validators (lang) word the whole problem
        return str(e.get("ctx", {}).get("error") or e["msg"]).removeprefix("Value error, ")
    allowed = _allowed(prop)
    if allowed:
        return f"must be one of {', '.join(repr(a) for a in allowed)} (got {shown})"
    expected = _expected(prop)
    if expected and kind.endswith(("_type", "_parsing")):
        return f"must be {expected} (got {shown})"
    return f"{e['msg'][:1].lower()}{e['msg'][1:]} (got {shown})"


def _allowed(prop: dict[str, Any]) -> list[Any]:
    if "enum" in prop:
        return list(prop["enum"])
    return [v for arm in prop.get("anyOf", []) for v in arm.get("enum", [])]


def _expected(prop: dict[str, Any]) -> str:
    types = [prop["type"]] if "type" in prop else [arm.get("type") for arm in prop.get("anyOf", []) if "type" in arm]
    words = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
             "array": "a list", "object": "an object", "null": "null"}
    return " or ".join(words.get(t, t) for t in types if t)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
