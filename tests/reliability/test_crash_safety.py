"""SIGKILL at a random point of a real SIM session must never corrupt the ledger, half-record a round or tear the
operator file, and a new server must resume and finish the session. A sample of the benchmark's trials
(``benchmarks/reliability_trials.py`` runs 100)."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import anyio
import pytest

from tests.reliability import crash_harness as ch
from tests.running.runner_helpers import kill_leftovers, wait_dead

pytestmark = pytest.mark.sim

# New seeds every run; under pytest-xdist every worker must collect the same ones, so they come from the run's id.
# One per run: each is a whole SIM session up to its kill point (the suite's costliest trial), a new point comes with
# every run, the kill during the simulator's run (the step drawn most often) is tried every run by the test below, and
# benchmarks/reliability_trials.py is the place for a large sample (CRASH_SEEDS=a,b,c for more here).
_RUN = random.Random(os.environ.get("PYTEST_XDIST_TESTRUNUID") or None)
SEEDS = [int(s) for s in os.environ.get("CRASH_SEEDS", "").split(",") if s] or [_RUN.randrange(1_000_000)]


@pytest.mark.parametrize("seed", SEEDS)
def test_sigkill_at_a_random_point_leaves_a_resumable_ledger(tmp_path: Path, seed: int) -> None:
    trial = ch.run_trial(seed, tmp_path)
    assert trial.killed, f"seed {seed}: the server was never killed"
    assert trial.ok, f"seed {seed} (CRASH_SEEDS={seed} reproduces), killed in {trial.kill_step} after " \
                     f"{trial.kill_delay_s} s: {trial.problems}"


def test_a_server_sigkilled_while_the_simulator_runs_leaves_no_orphan_and_a_resumable_ledger(tmp_path: Path) -> None:
    """The baseline's SIM run killed half a second in: no process of it is left, and the ledger and the operator file
    pass the same checks as a random trial's, with a fresh server resuming and finishing the session."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "softmax.py").write_text(ch.SOFTMAX.read_text())

    async def go() -> None:
        async def killer() -> None:
            servers = set(ch.server_pids(ws))
            for _ in range(400):  # wait until the SIM test itself runs (a child running softmax.py)
                kids = [p for p in ch.processes_in(ws) if p not in servers
                        and b"softmax.py" in Path(f"/proc/{p}/cmdline").read_bytes()]
                if kids:
                    break
                await anyio.sleep(0.025)
            await anyio.sleep(0.5)
            ch.kill_server_group(ws)

        try:
            async with ch.Client(ch.params(ws), mode="legacy") as c, anyio.create_task_group() as tg:
                sid = (await c.call_tool("start_session", ch.session_args(ws))).structured_content["session_id"]
                tg.start_soon(killer)
                await c.call_tool("run_precision_check", {"session_id": sid})
        except BaseException:  # noqa: BLE001 - the server died under the client
            pass

    anyio.run(go)
    time.sleep(0.3)
    left = ch.processes_in(ws)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes still running in the workspace after the server was SIGKILLed: {left}"
    trial = ch.Trial(seed=-1, kill_step="run_precision_check#1", killed=True)
    ch.check_and_recover(ws, trial)
    assert trial.resumed is True, trial
    assert trial.ok, f"killed during the baseline's SIM run: {trial.problems}"


_TEST_WITH_A_HELPER = """
import os, signal, sys, time
pid = os.fork()
if pid == 0:  # a helper process of the test (PyPTO starts some), deaf to SIGTERM
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(120)
    os._exit(0)
open(sys.argv[1], "w").write(str(pid))
time.sleep(120)
"""

_SERVER = """
import os, sys, anyio
from pathlib import Path
from pypto_tune.tools.running.runner import run_command

async def main():
    await run_command([sys.executable, "-c", sys.argv[1], sys.argv[2]], cwd=Path.cwd(), env=dict(os.environ),
                      timeout_s=120)

anyio.run(main)
"""


def test_sigkilled_server_takes_the_tests_helper_processes_with_it(tmp_path: Path) -> None:
    import subprocess
    import sys

    pid_file = tmp_path / "helper.pid"
    server = subprocess.Popen([sys.executable, "-c", _SERVER, _TEST_WITH_A_HELPER, str(pid_file)], cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()):
            assert time.monotonic() < deadline and server.poll() is None, "the test never started its helper"
            time.sleep(0.05)
        helper = int(pid_file.read_text())
        os.kill(server.pid, signal.SIGKILL)
        server.wait()
        left = wait_dead([helper], timeout_s=10)
        kill_leftovers(left)
        assert not left, "the test's helper process outlived the SIGKILLed server"
    finally:
        if server.poll() is None:
            server.kill()

