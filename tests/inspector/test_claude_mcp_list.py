"""A third-party client as a user meets it: Claude Code's own CLI (npm ``@anthropic-ai/claude-code``, pinned in
tools-npm/package.json) adds the server exactly as the README says and reports it Connected, over stdio and over HTTP.

``claude mcp add`` and ``claude mcp list`` work offline and without an API key: ``list`` starts every configured server
and completes the MCP handshake. Its configuration lives in a HOME of the test's own. The npm package's own
``claude`` is a stub until its postinstall runs (``npm ci --ignore-scripts`` skips it); the native binary ships in the
platform package, which is what runs here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, require_real
from tests.reliability.helpers import running_http

pytestmark = pytest.mark.process

NPM_DIR = ROOT / "tools-npm"
PINNED = json.loads((NPM_DIR / "package.json").read_text())["dependencies"]["@anthropic-ai/claude-code"]
PLATFORM = NPM_DIR / "node_modules" / "@anthropic-ai" / "claude-code-linux-x64"
SERVER = ROOT / ".venv" / "bin" / "pypto-tune"
# nothing leaves the machine: no telemetry, error reports or update checks (the network has only package registries)
QUIET = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
         "DISABLE_AUTOUPDATER": "1"}


@pytest.fixture(scope="module")
def claude() -> Path:
    exe = PLATFORM / "claude"
    require_real(exe.exists(), "Claude Code's CLI is not installed: scripts/test.sh runs npm ci in tools-npm/")
    installed = json.loads((PLATFORM / "package.json").read_text())["version"]
    assert installed == PINNED, f"tools-npm has claude-code {installed}, package.json pins {PINNED}"
    return exe


@pytest.fixture
def http_port(tmp_path: Path) -> Iterator[int]:
    with running_http(tmp_path) as port:
        yield port


def test_claude_mcp_list_reports_the_server_connected_over_stdio_and_http(claude: Path, tmp_path: Path,
                                                                        http_port: int) -> None:
    home, project, ws = tmp_path / "home", tmp_path / "project", tmp_path / "operator"
    for d in (home, project, ws):
        d.mkdir(exist_ok=True)
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), **QUIET}

    def claude_cli(*args: str) -> str:
        proc = subprocess.run([str(claude), *args], cwd=project, env=env, capture_output=True, text=True, timeout=180,
                              check=False)
        assert proc.returncode == 0, f"claude {' '.join(args)}: {proc.stdout[-1500:]}{proc.stderr[-1500:]}"
        return proc.stdout

    # the README's line, with this checkout and a real operator folder in place of the placeholders
    claude_cli("mcp", "add", "pypto-tune", "--", str(SERVER), "serve", "--workspace", str(ws))
    claude_cli("mcp", "add", "--transport", "http", "pypto-http", f"http://127.0.0.1:{http_port}/mcp")
    # a control that cannot connect: the health check really starts what it lists
    claude_cli("mcp", "add", "broken", "--", shutil.which("false") or "/bin/false")
    listed = {line.split(":", 1)[0]: line for line in claude_cli("mcp", "list").splitlines() if ":" in line}
    assert listed["pypto-tune"].endswith("✔ Connected"), listed
    assert "(HTTP)" in listed["pypto-http"] and listed["pypto-http"].endswith("✔ Connected"), listed
    assert "Connected" not in listed["broken"].replace("Failed to connect", ""), listed
