"""A third-party client: the official MCP Inspector's CLI (npm ``@modelcontextprotocol/inspector``, the version pinned
in tools-npm/package.json, installed there by scripts/test.sh) against the real server, over stdio and over HTTP.

Over both transports it lists tools (with ``--strict``: no schema-portability error), prompts, resources and resource
templates, gets a prompt, reads a session's ledger, calls get_status and sees an error a client must be able to show
(an unknown session) with its reason. Over HTTP, where one server answers every call, it also gets every prompt in both
languages, reads every resource, calls the other read-only tools (list_knobs on a started session, analyze_bubbles on
a recorded run), sees a bad prompt argument's error, and starts a long tool with ``wait=false`` and cancels the job.
Over stdio each Inspector call starts a server of its own, so that pass makes one call of each kind; each of those
servers is forked from the warm interpreter the other stdio tests' servers come from (``tests/warm_interpreter.py``:
the Inspector starts the launcher, which hands the child its pipes), where a fresh ``pypto-tune serve`` spent most of
its CPU importing what every one of them imports again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import OPERATORS, ROOT, RUNS, require_real, sim_command
from tests.reliability.helpers import running_http
from tests.warm_interpreter import server_command

pytestmark = pytest.mark.process

NPM_DIR = ROOT / "tools-npm"
INSPECTOR = NPM_DIR / "node_modules" / ".bin" / "mcp-inspector"
PINNED = json.loads((NPM_DIR / "package.json").read_text())["dependencies"]["@modelcontextprotocol/inspector"]
PROMPTS = ("perf_tune", "tune_frontend", "tune_swimlane", "tune_incore", "analyze_perf")


@pytest.fixture(scope="module")
def inspector() -> Path:
    require_real(INSPECTOR.exists() and shutil.which("node") is not None,
                 "the MCP Inspector CLI is not installed: scripts/test.sh runs npm ci in tools-npm/")
    installed = json.loads((NPM_DIR / "node_modules" / "@modelcontextprotocol" / "inspector" / "package.json")
                           .read_text())["version"]
    assert installed == PINNED, f"tools-npm/node_modules has inspector {installed}, package.json pins {PINNED}"
    return INSPECTOR


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("inspector-ws")
    shutil.copy2(OPERATORS / "softmax" / "softmax.py", ws / "softmax.py")
    shutil.copytree(RUNS / "softmax_base" / "output", ws / "output")
    return ws


class Inspector:
    """One ``mcp-inspector --cli`` call per method, JSON out; a failure carries the Inspector's stderr."""

    def __init__(self, exe: Path, target: list[str]) -> None:
        self.exe = exe
        self.target = target

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        # Inspector options first, then `--` and the target: our server's own flags (--log-level, --workspace)
        # must not be read as the Inspector's.
        # --connect-timeout: three servers start at once, and on a loaded 2-core machine a Python start alone can
        # take 7 s; the Inspector's default (15 s) then reports a working server unreachable
        return subprocess.run([str(self.exe), "--cli", "--format", "json", "-q", "--connect-timeout", "90000", *args,
                               "--", *self.target],
                              capture_output=True, text=True, timeout=180, check=False)

    def ok(self, *args: str) -> dict[str, Any]:
        r = self._run(*args)
        assert r.returncode == 0, f"inspector {' '.join(args)} exited {r.returncode}: {r.stderr[-2000:]}"
        return json.loads(r.stdout)["result"]

    def error(self, *args: str) -> str:
        r = self._run(*args)
        assert r.returncode != 0, f"inspector {' '.join(args)} was expected to fail: {r.stdout[:500]}"
        return json.loads(r.stderr.strip().splitlines()[-1])["error"]["message"]

    def tool(self, name: str, **arguments: Any) -> dict[str, Any]:
        res = self.ok("--method", "tools/call", "--tool-name", name, "--tool-args-json", json.dumps(arguments))
        text = "".join(b.get("text", "") for b in res["content"])
        assert not res.get("isError"), f"{name} failed: {text}"
        return res


def _session(insp: Inspector, ws: Path) -> str:
    started = insp.tool("start_session", workspace=str(ws), operator_files=["softmax.py"],
                        test_command=sim_command(), run_mode="sim", goal_speedup=2.0)
    return started["structuredContent"]["session_id"]


def _everything(insp: Inspector, ws: Path, *, whole: bool) -> str:
    """The read-only surface through the Inspector; calls run three at a time (each is a Node process and, over
    stdio, a server). ``whole``: every prompt in both languages, every resource, every read-only tool and both errors.
    Otherwise one call of each kind (each list, a prompt, a resource read, a tool call, an error): over stdio every
    call starts a server of its own, and what the server answers does not depend on the transport — the transport is
    what that pass proves. Returns the session id it started."""
    sid = _session(insp, ws)
    prompts = PROMPTS if whole else PROMPTS[:1]
    langs = ("zh", "en") if whole else ("en",)
    uris = (("pypto-tune://catalog", "pypto-tune://rules", f"pypto-tune://sessions/{sid}/status",
             f"pypto-tune://sessions/{sid}/ledger") if whole else (f"pypto-tune://sessions/{sid}/ledger",))
    calls = {
        "tools": ("--method", "tools/list", "--strict"),
        "prompts": ("--method", "prompts/list"),
        "resources": ("--method", "resources/list"),
        "templates": ("--method", "resources/templates/list"),
        **{f"prompt {p} {lang}": ("--method", "prompts/get", "--prompt-name", p, "--prompt-args", f"lang={lang}")
           for p in prompts for lang in langs},
        **{f"read {uri}": ("--method", "resources/read", "--uri", uri) for uri in uris},
    }
    tool_calls = {"get_status": {"session_id": sid}}
    if whole:
        tool_calls.update({"list_knobs": {"session_id": sid},
                           "analyze_bubbles": {"output_dir": str(ws / "output"), "lang": "en"}})
    bad = [("--method", "resources/read", "--uri", "pypto-tune://sessions/nope/status")]
    if whole:
        bad.insert(0, ("--method", "prompts/get", "--prompt-name", "perf_tune", "--prompt-args", "lang=fr"))
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = dict(zip(calls, pool.map(lambda a: insp.ok(*a), calls.values())))
        tools = dict(zip(tool_calls, pool.map(lambda kv: insp.tool(kv[0], **kv[1]), tool_calls.items())))
        errors = list(pool.map(lambda a: insp.error(*a), bad))

    names = {t["name"] for t in results["tools"]["tools"]}
    assert {"start_session", "run_precision_check", "analyze_bubbles", "wait_job", "cancel_job"} <= names
    assert all(t.get("title") for t in results["tools"]["tools"])
    assert {p["name"] for p in results["prompts"]["prompts"]} == set(PROMPTS)
    assert {r["uri"] for r in results["resources"]["resources"]} == {"pypto-tune://catalog", "pypto-tune://rules"}
    assert {t["uriTemplate"] for t in results["templates"]["resourceTemplates"]} == {
        "pypto-tune://sessions/{session_id}/status", "pypto-tune://sessions/{session_id}/ledger",
        "pypto-tune://sessions/{session_id}/analyses/{measurement_id}"}
    for p in prompts:
        texts = [results[f"prompt {p} {lang}"]["messages"][0]["content"]["text"] for lang in langs]
        assert all(texts) and len(set(texts)) == len(texts), p  # zh and en are two texts
    assert sid in results[f"read pypto-tune://sessions/{sid}/ledger"]["contents"][0]["text"]
    assert tools["get_status"]["structuredContent"]["state"] == "S1_SETUP"
    assert "unknown session_id 'nope'" in errors[-1]
    if not whole:
        return sid
    assert '"F-1"' in results["read pypto-tune://catalog"]["contents"][0]["text"]
    assert results[f"read pypto-tune://sessions/{sid}/status"]["contents"][0]["text"].strip()
    knobs = {k["id"] for k in tools["list_knobs"]["structuredContent"]["knobs"]}
    assert "softmax.py:TILE_B" in knobs
    an = tools["analyze_bubbles"]
    assert an["structuredContent"]["operator_time_us"] == pytest.approx(36.405, abs=1e-3)
    assert len(json.dumps(an)) <= 8 * 1024
    assert "lang must be 'zh' or 'en' (got 'fr')" in errors[0]
    return sid


def test_inspector_over_stdio(inspector: Path, workspace: Path) -> None:
    command, args = server_command(["serve", "--workspace", str(workspace), "--log-level", "WARNING"],
                                   dict(os.environ))
    _everything(Inspector(inspector, [command, *args]), workspace, whole=False)


@pytest.fixture
def http_server(workspace: Path) -> Iterator[int]:
    with running_http(workspace) as port:
        yield port


def test_inspector_over_http(inspector: Path, workspace: Path, http_server: int) -> None:
    insp = Inspector(inspector, [f"http://127.0.0.1:{http_server}/mcp"])  # the /mcp path selects streamable HTTP
    sid = _everything(insp, workspace, whole=True)  # one server for every call: the whole surface is cheap here
    # a third-party client accepts a long tool's job handle (validated against the tool's anyOf outputSchema)
    job = insp.tool("run_precision_check", session_id=sid, wait=False)["structuredContent"]
    assert job["status"] == "running" and job["tool"] == "run_precision_check" and "verdict" not in job
    cancelled = insp.tool("cancel_job", job_id=job["job_id"])["structuredContent"]
    assert cancelled["status"] in ("cancelled", "done", "failed")
