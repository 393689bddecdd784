"""Two servers on one workspace: the first to mutate holds the session lock, the other is refused with
GATE session-lock but keeps its read-only calls; a SIGKILLed holder releases the lock to its successor."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import anyio

from tests.conftest import make_workspace, sim_command
from tests.running.runner_helpers import is_alive
from tests.server.mcp_client import connect

import pytest

pytestmark = pytest.mark.process



def test_second_server_is_refused_by_session_lock_until_the_holder_dies(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    args = dict(workspace=str(ws), operator_files=["softmax.py"], test_command=sim_command(), run_mode="sim",
                goal_speedup=2.0)

    async def go() -> None:
        async with connect(ws) as a, connect(ws) as b:
            st = await a.ok("start_session", **args)
            sid = st["session_id"]
            holder = int((ws / ".pypto-tune" / "server.lock").read_text().split()[0])
            assert holder != os.getpid() and is_alive(holder)

            # a second window attaches read-only, told who holds the workspace and since when
            att = await b.ok("start_session", **args)
            assert att["read_only"] is True and att["session_id"] == sid
            assert f"pid {holder}" in att["message"] and "since" in att["message"]
            for tool, kw in (("stop_session", {"reason": "hijack"}), ("mark_checklist",
                             {"catalog_id": "F-1", "status": "not-applicable", "reason": "x"}),
                             ("run_precision_check", {})):
                t = await b.refused(tool, session_id=sid, **kw)
                assert "GATE session-lock:" in t, (tool, t)
            board = await b.ok("get_status", session_id=sid)
            assert board["session_id"] == sid and board["state"] == "S1_SETUP"
            await b.ok("list_knobs", session_id=sid)

            # The holder still works while the other is refused: no interleaving.
            await a.ok("get_status", session_id=sid)
            os.kill(holder, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while is_alive(holder) and time.monotonic() < deadline:
                await anyio.sleep(0.05)

            # The kernel drops the flock only once the killed process has fully exited; on a loaded machine that
            # can trail the signal (a SIGKILLed process first finishes an fsync in progress). Bounded wait.
            while True:
                res = await b.client.call_tool("start_session", args)
                text = "".join(getattr(c, "text", "") for c in res.content)
                if res.is_error or not res.structured_content.get("read_only") or time.monotonic() > deadline:
                    break
                await anyio.sleep(0.2)
            assert not res.is_error, text
            st2 = res.structured_content
            assert st2["resumed"] is True and st2["session_id"] == sid and not st2["read_only"]
            assert int((ws / ".pypto-tune" / "server.lock").read_text().split()[0]) != holder
            stop = await b.ok("stop_session", session_id=sid, reason="taken over after the holder was killed")
            assert stop["state"] == "S5_REPORT"

    try:
        anyio.run(go)
    except BaseExceptionGroup as eg:  # the killed server's client raises on exit: only that is acceptable
        def benign(e: BaseException) -> bool:
            return type(e).__name__ in {"ClosedResourceError", "BrokenResourceError", "EndOfStream",
                                        "BrokenPipeError", "ConnectionResetError", "McpError", "MCPError"}
        rest = eg.subgroup(lambda e: not isinstance(e, BaseExceptionGroup) and not benign(e))
        if rest is not None:
            raise


def test_http_server_and_stdio_server_on_one_workspace_one_is_refused(tmp_path: Path) -> None:
    from mcp import Client

    from tests.reliability.helpers import free_port, kill_group, start_http

    ws = make_workspace(tmp_path)
    args = dict(workspace=str(ws), operator_files=["softmax.py"], test_command=sim_command(), run_mode="sim",
                goal_speedup=2.0)
    port = free_port()
    proc = start_http(ws, port, fresh=True)  # the lock names the server's pid: the process started must be it

    async def go() -> None:
        async with Client(f"http://127.0.0.1:{port}/mcp") as h, connect(ws) as s:
            res = await h.call_tool("start_session", args)
            assert not res.is_error
            sid = res.structured_content["session_id"]
            att = await s.ok("start_session", **args)
            assert att["read_only"] is True and f"pid {proc.pid}" in att["message"]
            assert (await s.ok("get_status", session_id=sid))["state"] == "S1_SETUP"
            res = await h.call_tool("stop_session", {"session_id": sid, "reason": "http holder stops"})
            assert not res.is_error and res.structured_content["state"] == "S5_REPORT"
            # the stdio server still cannot write: the session is not finished, its server keeps the lock
            assert "GATE session-lock:" in await s.refused("render_report", session_id=sid)
            res = await h.call_tool("render_report", {"session_id": sid, "format": "md", "lang": "en"})
            assert not res.is_error and res.structured_content["state"] == "DONE"
            # a finished session frees the workspace: the other server may start the next session
            nxt = await s.ok("start_session", **args)
            assert nxt["session_id"] != sid and not nxt["resumed"]
            again = await h.call_tool("start_session", args)
            assert not again.is_error and again.structured_content["read_only"] is True

    try:
        anyio.run(go)
    finally:
        kill_group(proc.pid)
        proc.wait()
