"""Every client configuration the README offers starts the server exactly as written (with the placeholder paths
filled in) and completes initialize + tools/list over stdio: Claude Code (`claude mcp add`, `.mcp.json`) and Codex
(`config.toml`). (VS Code and Cursor take the `.mcp.json` entry's command and args, the README says.)"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import anyio
import pytest
import tomllib
from mcp import Client, StdioServerParameters

from tests.conftest import ROOT

pytestmark = pytest.mark.process

README = (ROOT / "README.md").read_text(encoding="utf-8")
SECTION = README[README.index("## Connect your client"):README.index("## Tools, prompts and rules")]


def _block_after(label: str) -> tuple[str, str]:
    """The first fenced block after the first line of the agent section that contains ``label``."""
    at = SECTION.index(label)
    m = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL).search(SECTION, at)
    assert m, f"no code block after {label!r} in the README"
    return m.group(1), m.group(2)


def _fill(text: str, workspace: Path) -> str:
    return text.replace("/path/to/pypto-tune", str(ROOT)).replace("/path/to/operator", str(workspace))


def _claude_cli(ws: Path) -> dict[str, Any]:
    lang, body = _block_after("Claude Code:")
    assert lang == "bash" and body.startswith("claude mcp add pypto-tune -- ")
    argv = shlex.split(_fill(body, ws))
    argv = argv[argv.index("--") + 1:]
    return {"command": argv[0], "args": argv[1:]}


def _claude_json(ws: Path) -> dict[str, Any]:
    lang, body = _block_after("`.mcp.json`")
    assert lang == "json"
    entry = json.loads(_fill(body, ws))["mcpServers"]["pypto-tune"]
    assert entry["type"] == "stdio"
    return entry


def _codex(ws: Path) -> dict[str, Any]:
    lang, body = _block_after("`~/.codex/config.toml`")
    assert lang == "toml"
    entry = tomllib.loads(_fill(body, ws))["mcp_servers"]["pypto-tune"]
    assert entry["tool_timeout_sec"] >= 300 and entry["startup_timeout_sec"] >= 10
    return entry


CONFIGS = {"claude mcp add": _claude_cli, "claude .mcp.json": _claude_json, "codex config.toml": _codex}


@pytest.mark.parametrize("client", list(CONFIGS))
def test_the_readme_config_starts_the_server_and_lists_its_tools(client: str, tmp_path: Path) -> None:
    ws = tmp_path / "operator"
    ws.mkdir()
    entry = CONFIGS[client](ws)
    assert Path(entry["command"]).is_file(), f"{entry['command']} does not exist (bash scripts/setup.sh makes it)"
    assert "--workspace" in entry["args"] and str(ws) in entry["args"]
    params = StdioServerParameters(command=entry["command"], args=list(entry["args"]),
                                   env=entry.get("env"), cwd=entry.get("cwd"))

    async def go() -> tuple[str, set[str]]:
        # the classic initialize handshake: what Claude Code, Codex, VS Code and Cursor speak
        async with Client(params, mode="legacy") as c:
            names = {t.name for t in (await c.list_tools()).tools}
            return c.server_info.name if c.server_info else "", names

    server, names = anyio.run(go)
    assert server == "pypto-tune"
    assert {"start_session", "run_precision_check", "analyze_bubbles", "wait_job"} <= names
