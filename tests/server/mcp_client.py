"""Drive the real server over stdio with the official MCP client, as Claude Code or Codex would."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from tests.warm_interpreter import server_command


def server_params(workspace: Path, env: dict[str, str] | None = None) -> StdioServerParameters:
    """``env``: the server's environment (e.g. an emulated NPU box); the stdio client otherwise passes only HOME,
    PATH and a few basics (mcp2.md). The server is forked from a warm interpreter where that behaves as a fresh one
    (``tests/warm_interpreter.py``)."""
    command, args = server_command(["serve", "--workspace", str(workspace), "--log-level", "WARNING"], env)
    return StdioServerParameters(command=command, args=args, cwd=str(workspace), env=env)


class Session:
    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, tool: str, **args: Any) -> Any:
        """The whole CallToolResult (content blocks and structured content), which must not be an error."""
        res = await self.client.call_tool(tool, args)
        text = "".join(getattr(b, "text", "") for b in res.content)
        assert not res.is_error, f"{tool} refused unexpectedly: {text}"
        return res

    async def ok(self, tool: str, **args: Any) -> dict[str, Any]:
        return (await self.call(tool, **args)).structured_content

    async def refused(self, tool: str, **args: Any) -> str:
        res = await self.client.call_tool(tool, args)
        text = "".join(getattr(b, "text", "") for b in res.content)
        assert res.is_error, f"{tool} was expected to be refused, got {res.structured_content}"
        return text


@asynccontextmanager
async def connect(workspace: Path, mode: str = "legacy", env: dict[str, str] | None = None) -> AsyncIterator[Session]:
    async with Client(server_params(workspace, env), mode=mode) as client:  # type: ignore[arg-type]
        yield Session(client)
