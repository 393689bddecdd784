"""Server lifecycle over stdio: resume after SIGKILL, timeouts and cancellation leave no process,
and long calls work as background jobs for clients that time tool calls out."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import anyio
import pytest

from tests.conftest import sim_command
from tests.running.runner_helpers import is_alive, processes_mentioning
from tests.server.mcp_client import connect

pytestmark = pytest.mark.process

# Runs execute in the run sandbox (tools/running/sandbox.py): their own pid namespace, and no file outside the
# workspace's copy reaches the host. So the grandchild cannot report its pid; it carries a marker on its command line
# instead (it re-executes itself with one), and the test finds it in the host's /proc.
HANG = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, "-c",
             "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)", MARKER])
time.sleep(600)
"""


def _hang_script(ws: Path) -> str:
    """Write hang.py; returns the marker its grandchild carries."""
    marker = f"pypto-tune-grandchild-{os.getpid()}-{abs(hash(str(ws)))}"
    (ws / "hang.py").write_text(f"MARKER = {marker!r}\n" + HANG)
    return marker


async def _grandchild(marker: str, within_s: float) -> int:
    deadline = time.monotonic() + within_s
    while not (pids := processes_mentioning(marker)) and time.monotonic() < deadline:
        await anyio.sleep(0.1)
    assert pids, f"the grandchild ({marker}) never started"
    return pids[0]


@pytest.mark.sim
def test_wait_false_returns_the_result_through_wait_job_and_a_killed_server_is_resumed_by_a_new_one(
        softmax_ws: Path) -> None:
    args = dict(workspace=str(softmax_ws), operator_files=["softmax.py"], test_command=sim_command(),
                run_mode="sim", goal_speedup=2.0)

    recorded: dict[str, str] = {}

    async def first() -> None:
        async with connect(softmax_ws) as s:
            recorded["sid"] = (await s.ok("start_session", **args))["session_id"]
            # the baseline precision run as a background job: wait_job hands back the same result a waiting call
            # gives (the verdict, and the next actions of the result, not of the job)
            job = await s.ok("run_precision_check", session_id=recorded["sid"], wait=False)
            done = None
            for _ in range(20):
                done = await s.ok("wait_job", job_id=job["job_id"], timeout_s=10)
                if done["status"] != "running":
                    break
            assert done and done["status"] == "done"
            assert done["result"]["verdict"] == "passed" and done["result"]["numerics_checked"] is False
            assert done["next_actions"] == done["result"]["next_actions"]
            await s.ok("enable_runtime_debug", session_id=recorded["sid"])
            children = _server_children()
            assert len(children) == 1, f"expected our one server child, found {children}"
            # Kill our own server child the hard way, mid-session.
            os.kill(children[0], signal.SIGKILL)
            recorded["killed"] = str(children[0])

    try:
        anyio.run(first)
    except Exception:
        # Leaving the client after its server died may raise (the stream broke): that is the point. Anything that
        # went wrong before the kill is a real failure.
        if "killed" not in recorded:
            raise
    assert recorded.get("killed"), "the server was never killed: the test did not test resuming"

    async def second() -> None:
        async with connect(softmax_ws) as s:
            again = await s.ok("start_session", **args)
            assert again["resumed"] is True
            assert again["session_id"] == recorded["sid"], "resuming must continue the same session"
            assert again["state"] == "S2_COLLECT" and again["next_actions"][0] == "collect_swimlane"
            status = await s.ok("get_status", session_id=again["session_id"])
            assert status["drift"] is False

    anyio.run(second)


def _server_children() -> list[int]:
    me = os.getpid()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            # the name in parentheses may hold spaces ("tmux: server"): the fields start after its last ")"
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and "pypto_tune.server.cli" in cmd:
            out.append(int(d.name))
    return out


def _start(ws: Path, cmd: list[str], timeout_s: float = 300.0) -> dict:
    return dict(workspace=str(ws), operator_files=["softmax.py"], test_command=cmd, run_mode="sim",
                goal_speedup=2.0, timeout_s=timeout_s)


def test_a_timeout_kills_the_whole_process_group_including_grandchildren(softmax_ws: Path) -> None:
    marker = _hang_script(softmax_ws)

    async def scenario() -> None:
        async with connect(softmax_ws) as s:
            sid = (await s.ok("start_session", **_start(softmax_ws, [sys.executable, "hang.py"], 3)))["session_id"]
            t = time.monotonic()
            async with anyio.create_task_group() as tg:
                seen: list[int] = []

                async def watch() -> None:
                    seen.append(await _grandchild(marker, 60))
                tg.start_soon(watch)
                res = await s.ok("run_precision_check", session_id=sid)
            assert res["verdict"] == "timeout"
            assert time.monotonic() - t < 60
            pid = seen[0]
            deadline = time.monotonic() + 5
            while is_alive(pid) and time.monotonic() < deadline:
                await anyio.sleep(0.1)
            assert not is_alive(pid), "the grandchild that ignores SIGTERM survived the timeout"

    anyio.run(scenario)


def test_a_background_job_reports_progress_and_a_cancelled_job_leaves_no_process(softmax_ws: Path) -> None:
    marker = _hang_script(softmax_ws)

    async def scenario() -> None:
        async with connect(softmax_ws) as s:
            sid = (await s.ok("start_session", **_start(softmax_ws, [sys.executable, "hang.py"], 120)))["session_id"]
            job = await s.ok("run_precision_check", session_id=sid, wait=False)
            # the handle, not a result with most fields missing (the client validated it against the outputSchema)
            assert job["status"] == "running" and job["tool"] == "run_precision_check" and "verdict" not in job
            assert job["next_actions"][0] == "wait_job" and job["job_id"] in job["message"]
            polled = await s.ok("wait_job", job_id=job["job_id"], timeout_s=3)
            assert polled["status"] == "running" and polled["elapsed_s"] >= 2.5
            # where the job is, in the progress notifications' words (the first call checks the environment first)
            assert polled["progress"].startswith("run_precision_check: ") and any(
                phase in polled["progress"] for phase in ("environment checklist", "interpreter's files",
                                                          "precision run (baseline)")), polled["progress"]
            busy = await s.refused("run_precision_check", session_id=sid)
            assert "GATE busy:" in busy
            # the environment check runs first (it imports pypto): on a loaded machine that takes tens of seconds
            pid = await _grandchild(marker, 90)
            cancelled = await s.ok("cancel_job", job_id=job["job_id"])
            assert cancelled["status"] == "cancelled"
            deadline = time.monotonic() + 5
            while is_alive(pid) and time.monotonic() < deadline:
                await anyio.sleep(0.1)
            assert not is_alive(pid)
            status = await s.ok("get_status", session_id=sid)
            assert status["state"] == "S1_SETUP" and status["running_job"] is None

    anyio.run(scenario)


KNOBS_EXPECTED = {
    "softmax": {"softmax.py:TILE_B": 4, "softmax.py:softmax_kernel.set_vec_tile_shapes#1": [1, 4, 256]},
    "rmsnorm": {"rmsnorm.py:TILE_B": 1},
    "matmul": {"matmul.py:TILE_N": 256},
}


@pytest.fixture(scope="module")
def listed_knobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, dict]]:
    """Each fixture operator's session started on one server (a server holds sessions of several workspaces): the
    summary and the full list of its knobs, by operator."""
    from tests.conftest import make_workspace

    root = tmp_path_factory.mktemp("knobs")
    spaces = {op: make_workspace(root, op) for op in KNOBS_EXPECTED}

    async def scenario() -> dict[str, tuple[dict, dict]]:
        out = {}
        async with connect(spaces["softmax"]) as s:
            for operator, ws in spaces.items():
                sid = (await s.ok("start_session", workspace=str(ws), operator_files=[f"{operator}.py"],
                                  test_command=sim_command(operator), run_mode="sim",
                                  goal_speedup=2.0))["session_id"]
                out[operator] = (await s.ok("list_knobs", session_id=sid),
                                 await s.ok("list_knobs", session_id=sid, detail="full"))
        return out

    return anyio.run(scenario)


@pytest.mark.parametrize("operator", list(KNOBS_EXPECTED))
def test_list_knobs_shows_each_fixture_operators_knobs_with_locations(
        listed_knobs: dict[str, tuple[dict, dict]], operator: str) -> None:
    expected = KNOBS_EXPECTED[operator]
    listed, full_list = listed_knobs[operator]
    knobs = {k["id"]: k for k in listed["knobs"]}
    for kid, value in expected.items():  # the summary says each kind's legal values once
        assert knobs[kid]["value"] == value and knobs[kid]["line"] > 0
        assert knobs[kid].get("legal") or listed["legal_by_kind"][knobs[kid]["kind"]]
    full = {k["id"]: k for k in full_list["knobs"]}
    assert all(full[kid]["legal"] and full[kid]["file"] for kid in expected)
    kinds = {k["kind"] for k in knobs.values()}
    assert "jit_option" in kinds
    assert ("cube_tile" in kinds) == (operator == "matmul")
