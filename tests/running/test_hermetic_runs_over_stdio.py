"""Issue #16: a file the ledger does not record cannot influence a measured number — tried from five directions over
MCP stdio, against the real server, the real simulator and the real sandbox (bubblewrap).

Each test plays a hostile agent with nothing but its ordinary powers (write files as its own user, choose the test
command, call the tools) and asserts on the numbers the server KEEPS: every kept time must be the one the recorded
code gives. The expected times are the simulator's own, measured once on the fixture softmax with the recorded knob
values (SIM is deterministic; 2026-12-03, `pypto-tune analyze` on a plain run of each configuration):

    TILE_B  vec tile      operator time µs
    4       (1, 4, 256)   36.405   (the shipped baseline)
    4       (1, 8, 256)   21.031
    4       (1, 16, 256)  15.463
    4       (1, 32, 256)   8.546
    1       (1, 32, 256)   2.726

Classes (the issue's list) and the test that covers each. Two sessions carry them all, one attack per round (a session
and its baseline cost two simulator runs and a server start): b, c and d; a, e and f (a module fixture, ``aef``).
a  the live workspace spelled another way than the literal prefix ... test_a_differently_spelled_workspace_path_...
b  a data file outside the workspace ................................. test_b_c_d_files_outside_the_workspace_...
c  a sitecustomize.py on the command's PYTHONPATH, and on the
   server's after a restart and resume ................................ test_b_c_d_files_outside_the_workspace_...
d  a config file found by walking upward from the run copy ........... test_b_c_d_files_outside_the_workspace_...
e  a transplanted output folder ....................................... test_e_an_output_folder_from_another_kernel_...
f  bytecode planted beside the running copy .......................... test_f_bytecode_planted_beside_a_running_...
Each failed on the code before the sandbox (checked on a scratch worktree of main, when each attack had a session
of its own): the attack's number was kept.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp.client.stdio import get_default_environment

from tests.conftest import OPERATORS
from tests.server.mcp_client import Session, connect
from tests.sessions import to_frontend

pytestmark = pytest.mark.sim

VEC = "softmax.py:softmax_kernel.set_vec_tile_shapes#1"
US = {"base": 36.405, "vec8": 21.031, "vec16": 15.463, "vec32": 8.546, "tb1_vec32": 2.726}
SOFTMAX = (OPERATORS / "softmax" / "softmax.py").read_text()


def _approx(us: float) -> object:
    return pytest.approx(us, abs=2e-3)


def _ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "softmax.py").write_text(SOFTMAX)
    return ws


async def _runs(s: Session, sid: str) -> list[dict]:
    text = (await s.client.read_resource(f"pypto-tune://sessions/{sid}/ledger")).contents[0].text
    return json.loads(text)["tables"]["runs"]


async def _round(s: Session, sid: str, *, before_run=None, during_run=None, after_run=None, **patch) -> dict:
    """One gated round, the agent acting around the run whose output becomes the round's number. In SIM that is the
    change's precision run: it is also the measurement's sample (``runs.sim_run_serves_both``; the round's
    ``collect_swimlane`` makes no run of its own, checked here, so an attack aimed elsewhere could not pass for one
    that failed). ``before_run()`` runs once the change is applied, ``during_run()`` once the run started (the agent
    acting while it executes), ``after_run()`` once it ended, before the measurement and the round's record."""
    await s.ok("apply_tuning_patch", session_id=sid, rationale="attack test", **patch)
    if before_run is not None:
        before_run()
    job = await s.ok("run_precision_check", session_id=sid, wait=False)
    if during_run is not None:
        await during_run()
    done = await s.ok("wait_job", job_id=job["job_id"], timeout_s=50)
    while done["status"] != "done":
        done = await s.ok("wait_job", job_id=job["job_id"], timeout_s=50)
    assert done["result"]["verdict"] == "passed", done["result"]
    if after_run is not None:
        after_run()
    runs = len(await _runs(s, sid))
    measured = await s.ok("collect_swimlane", session_id=sid)
    assert len(await _runs(s, sid)) == runs, "collect_swimlane ran the test again: the hooks missed the measured run"
    rec = await s.ok("record_round", session_id=sid)
    rec["measurement"] = measured
    return rec


async def _run_started(ws: Path) -> None:
    """Until the round's precision run has its private copy (the run executes from there)."""
    deadline = time.monotonic() + 60
    while not any((ws / ".pypto-tune" / "exec").glob("precision-r*")) and time.monotonic() < deadline:
        await anyio.sleep(0.02)
    assert any((ws / ".pypto-tune" / "exec").glob("precision-r*")), "the round's run never started"


# ====================================================================================================== b, c, d
# A stranger's operator may take a tile from an optional data file; this one names a file outside the workspace.
OVERRIDE = """TILE_B = 4
if os.path.exists({data!r}):  # an optional override of the rows per block
    TILE_B = int(open({data!r}).read())
"""

SITECUSTOMIZE = """# Whenever the trigger file names a tile, every vector tile the kernel sets becomes that tile.
import os

_TRIGGER = {trigger!r}
if os.path.exists(_TRIGGER):
    import pypto

    _forced = tuple(int(v) for v in open(_TRIGGER).read().split(","))
    _orig = pypto.set_vec_tile_shapes
    pypto.set_vec_tile_shapes = lambda *shape, **kw: _orig(*_forced, **kw)
"""

PYTEST_HARNESS = """import sys

sys.argv = ["softmax.py", "--run-mode", "sim"]
import softmax  # noqa: E402  (reads its run mode from sys.argv at import)


def test_softmax_simulates():
    assert softmax.main() == 0
"""

CONFTEST = """import pypto

_orig = pypto.set_vec_tile_shapes
pypto.set_vec_tile_shapes = lambda *shape, **kw: _orig(1, 32, 256, **kw)
"""


def test_b_c_d_files_outside_the_workspace_or_above_the_copy_cannot_move_a_kept_number(tmp_path: Path) -> None:
    """b: the operator reads a tile from a data file outside the workspace; c: a folder on the command's own
    PYTHONPATH holds a sitecustomize.py that forces a tile — and the same folder on the server's PYTHONPATH after a
    restart and resume. The agent edits the outside files between rounds; none is a file of the recorded tree, so
    the old server fingerprinted none of them and kept what they produced.

    d: the test runs under pytest. The old run copy lived in ``WORKSPACE/.pypto-tune/exec/``: a ``pytest.ini`` and a
    ``conftest.py`` dropped into ``.pypto-tune/`` (never drift: the server's own folder) made that folder pytest's
    rootdir, and its conftest forced a tile. In the sandbox nothing exists above the workspace's own path. (Files
    the server did not write in its folder are drift at every gate — tools/code/server_files.py — so the agent drops
    them while the round's run executes and takes them away before recording the round.)

    One session: each round's honest time is a different one, and each attack aims at another."""
    ws = _ws(tmp_path)
    outside = tmp_path / "outside"
    site = outside / "site"
    site.mkdir(parents=True)
    data, trigger = outside / "tile_b.txt", outside / "forced_tile.txt"
    (ws / "softmax.py").write_text(SOFTMAX.replace("TILE_B = 4\n", OVERRIDE.format(data=str(data)), 1))
    (ws / "test_softmax.py").write_text(PYTEST_HARNESS)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(trigger=str(trigger)))
    cmd = ["env", f"PYTHONPATH={site}", sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
           "test_softmax.py"]
    start = dict(workspace=str(ws), operator_files=["softmax.py"], test_command=cmd, run_mode="sim",
                 goal_speedup=100.0)
    server_dir = ws / ".pypto-tune"
    wrong: list[str] = []

    def check(r: dict, honest: float, what: str) -> None:
        if r["after_us"] != _approx(honest):
            wrong.append(f"{what}: round {r['round']} recorded {r['after_us']} µs ({r['decision']}), the recorded "
                         f"code gives {honest} µs")

    async def dropped() -> None:  # d: once the run passed its gate (a file there at a gate is drift now)
        await _run_started(ws)
        (server_dir / "pytest.ini").write_text("[pytest]\n")
        (server_dir / "conftest.py").write_text(CONFTEST)

    def removed() -> None:
        (server_dir / "pytest.ini").unlink()
        (server_dir / "conftest.py").unlink()

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = await to_frontend(s, ws, ["softmax.py"], cmd)
            assert (await s.ok("get_status", session_id=sid))["baseline_us"] == _approx(US["base"])
            # c: the command's own PYTHONPATH holds the sitecustomize, the trigger forces the tile (1, 32, 256) —
            # twice, from two kept states
            trigger.write_text("1,32,256")
            check(await _round(s, sid, knob=VEC, value=[1, 8, 256], catalog_id="F-10"), US["vec8"], "c")
            # c again, and d: the conftest above the copy forces (1, 32, 256) too
            check(await _round(s, sid, knob=VEC, value=[1, 16, 256], catalog_id="F-10", during_run=dropped,
                               after_run=removed), US["vec16"], "c or d")
            if (await s.ok("get_status", session_id=sid)).get("drift"):
                wrong.append("d: the files dropped into .pypto-tune/ and taken away again left drift")
            trigger.unlink()
            # b: the data file says TILE_B = 1 while the recorded code has TILE_B = 4
            check(await _round(s, sid, knob=VEC, value=[1, 32, 256], catalog_id="F-10",
                               before_run=lambda: data.write_text("1"), after_run=lambda: data.unlink()),
                  US["vec32"], "b")
            if not wrong:
                assert (await s.ok("get_status", session_id=sid))["best_us"] == _approx(US["vec32"])

        # c': a server restarted with the folder on its own PYTHONPATH resumes the session; the sitecustomize forces
        # the tile (1, 32, 256) while the round records (1, 8, 256). Last, so that the rounds above share the
        # baseline's server (a resumed session's server, when c' is refused as it must be, would cost one more start)
        trigger.write_text("1,32,256")
        env = {**get_default_environment(), "PYTHONPATH": str(site)}
        async with connect(ws, env=env) as s:
            res = await s.client.call_tool("start_session", start)
            text = "".join(getattr(b, "text", "") for b in res.content)
            if res.is_error:
                assert "GATE environment:" in text and "PYTHONPATH" in text and str(site) in text, text
                assert "pypto-tune confirm" in text
            else:
                wrong.append("c': a server whose PYTHONPATH differs from the recorded one resumed the session")
                check(await _round(s, sid, knob=VEC, value=[1, 8, 256], catalog_id="F-10"), US["vec8"], "c'")

    anyio.run(scenario)
    assert not wrong, "numbers recorded that the recorded code did not produce:\n" + "\n".join(wrong)


# ======================================================================================================= a, e, f
# One session, one harness, three rounds, one attack each: the harness imports the operator as a module (after pypto,
# whose import takes a while), as most harnesses do; the command names it through a spelled path (a); for the tile
# (1, 8, 256) a recorded hook also runs another kernel and leaves only that kernel's output folder (e). The rounds:
#   e  (1, 8, 256)   the transplanted folder                      → invalid, not kept; best stays the baseline
#   f  (1, 16, 256)  bytecode planted beside the running copy     → kept at 15.463 µs
#   a  (1, 32, 256)  the live file swapped while the run executes → kept at 8.546 µs
# Each attack aims at a number no honest round of this session gives (2.726 µs, TILE_B = 1 with (1, 32, 256)), and
# the live files hold no attack outside its own round.
HARNESS = '''"""Runs the softmax kernel as an imported module; a test-side hook swaps in another kernel's run folder for one
tile value."""
import os
import shutil
import sys

import pypto  # noqa: F401

import softmax

rc = softmax.main()
if "set_vec_tile_shapes(1, 8, 256)" in open(softmax.__file__).read():
    own = set(os.listdir("output"))
    import fast_softmax

    fast_softmax.main()
    for name in own:  # only the other kernel's genuine, well-formed folder is left
        shutil.rmtree(os.path.join("output", name))
sys.exit(rc)
'''


@pytest.fixture(scope="module")
def aef(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The session of attacks a, e and f; returns each round's record and what the agent saw."""
    from tests.attacker import host_copies, plant_pyc, sandboxed_copies

    ws = _ws(tmp_path_factory.mktemp("aef"))
    op = ws / "softmax.py"
    fast = SOFTMAX.replace("TILE_B = 4", "TILE_B = 1").replace("set_vec_tile_shapes(1, 4, 256)",
                                                               "set_vec_tile_shapes(1, 32, 256)")
    # e: another kernel (TILE_B = 1, tile (1, 32, 256)), with the debug switch so its folder is a full trace
    transplant = fast.replace("def softmax_kernel(", "def fast_softmax_kernel(").replace(
        "softmax_kernel(x_dev, y_dev)", "fast_softmax_kernel(x_dev, y_dev)").replace(
        '"stitch_function_max_num": 128}', '"stitch_function_max_num": 128}, debug_options={"runtime_debug_mode": 1}')
    (ws / "fast_softmax.py").write_text(transplant)
    (ws / "run_softmax.py").write_text(HARNESS)
    cmd = [sys.executable, "/." + str(ws) + "/run_softmax.py", "--run-mode", "sim"]
    out: dict = {"outcomes": {}}

    async def plant_while_it_runs() -> None:  # f
        outcomes = out["outcomes"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            targets = host_copies(ws, "softmax.py") + sandboxed_copies(ws, "softmax.py")
            for module in targets:
                if str(module) not in outcomes:
                    outcomes[str(module)] = plant_pyc(module, fast, compiled_as=str(op))
            if any("/proc/" in t for t in outcomes):
                return
            await anyio.sleep(0.01)

    patched: list[str] = []

    async def swap_while_measuring() -> None:  # a
        patched.append(op.read_text())
        await _run_started(ws)
        op.write_text(patched[0].replace("TILE_B = 4", "TILE_B = 1"))

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = await to_frontend(s, ws, ["softmax.py"], cmd)
            out["e"] = await _round(s, sid, knob=VEC, value=[1, 8, 256], catalog_id="F-10")
            out["e_status"] = await s.ok("get_status", session_id=sid)
            out["f"] = await _round(s, sid, knob=VEC, value=[1, 16, 256], catalog_id="F-10",
                                    during_run=plant_while_it_runs)
            out["f_status"] = await s.ok("get_status", session_id=sid)
            out["a"] = await _round(s, sid, knob=VEC, value=[1, 32, 256], catalog_id="F-10",
                                    during_run=swap_while_measuring, after_run=lambda: op.write_text(patched[0]))
            out["a_status"] = await s.ok("get_status", session_id=sid)

    anyio.run(scenario)
    return out


def test_a_differently_spelled_workspace_path_reaches_the_copy_not_the_live_files(aef: dict) -> None:
    """The command names the harness as ``/./<workspace>/run_softmax.py``: the old argument rewriting matched the
    literal prefix only, so the run executed the LIVE files — the harness imports the live ``softmax.py``, which the
    agent swaps for a faster one (TILE_B = 1) while the round's run executes and puts back before anyone looks (the
    board shows no drift)."""
    r = aef["a"]
    assert r["after_us"] == _approx(US["vec32"]), (
        f"kept {r['after_us']} µs: the run executed the live (swapped) file, not the recorded bytes "
        f"({US['vec32']} µs)")
    assert r["decision"] == "kept"
    st = aef["a_status"]
    assert st["best_us"] == _approx(US["vec32"]) and not st.get("drift")


def test_e_an_output_folder_from_another_kernel_is_not_this_rounds(aef: dict) -> None:
    """A recorded harness hook runs another kernel (``fast_softmax.py``, TILE_B = 1, tile (1, 32, 256)) in the same
    run and leaves only its output folder — a real, well-formed trace, compiled in this run, of other code. It is not
    the operator's: the measurement must not count it."""
    r = aef["e"]
    m = r["measurement"]
    assert m["operator_time_us"] != _approx(US["tb1_vec32"]), (
        f"measured {m['operator_time_us']} µs: fast_softmax.py's folder was analysed as this round's")
    assert not (r["decision"] == "kept" and r["after_us"] == _approx(US["tb1_vec32"]))
    assert m["valid"] is False and "fast_softmax.py" in " ".join(m["invalid_reasons"]), m["invalid_reasons"]
    assert aef["e_status"]["best_us"] == _approx(US["base"])


def test_f_bytecode_planted_beside_a_running_copy_never_yields_a_kept_number(aef: dict) -> None:
    """The agent, as the server's own account, polls ``.pypto-tune/exec/`` for the round's new private copy, reads
    the operator module's size and modification time with ``stat`` and writes a matching
    ``__pycache__/softmax.cpython-311.pyc`` compiled from another tiling (TILE_B = 1, tile (1, 32, 256): 2.726 µs);
    the harness imports the module, and Python prefers valid-looking bytecode. It tries every path it can name: the
    host run folders, and ``/proc/<pid>/root`` of the sandbox's processes. On the unsealed sandbox the host copy took
    it (the round was kept at the planted tiling's time); sealed, the host folder holds no copy and the copy inside
    is read-only: the round keeps the recorded code's 15.463 µs."""
    r, outcomes = aef["f"], aef["outcomes"]
    assert r["after_us"] == _approx(US["vec16"]), f"kept {r['after_us']} µs: the planted bytecode ran ({outcomes})"
    assert r["decision"] == "kept"
    st = aef["f_status"]
    assert st["best_us"] == _approx(US["vec16"]) and not st.get("drift")
    inside = {t: o for t, o in outcomes.items() if t.startswith("/proc/")}
    assert inside and set(inside.values()) == {"Read-only file system"}, outcomes
    assert not [t for t in outcomes if not t.startswith("/proc/")], f"a host folder held the copy: {outcomes}"
