"""A SIM run longer than the simulator's swimlane limit is named as such, not as "file missing".

PyPTO's cost model writes ``merged_swimlane.json`` and ``bubble_analysis.log`` only while the simulated time stays
within ``drawPngThresholdCycle`` (500 000 cycles, 277.8 µs, in the run's own ``_simulate.config.ini``). Above it
the run passes precision and its folder holds ``_simulate.swim.json`` and nothing to measure; a user of a larger
kernel used to read "bubble_analysis.log is missing" and look for a collection mistake. Here softmax runs ten times
its fixture's batch (B = 320: 576 149 cycles, 320.1 µs). Real server, real sandbox, real simulator.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from tests.conftest import OPERATORS
from tests.server.mcp_client import connect

pytestmark = pytest.mark.sim


def test_a_sim_run_above_the_swimlane_limit_is_invalid_and_the_limit_is_named(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    source = (OPERATORS / "softmax" / "softmax.py").read_text()
    assert "B, N, D = 32, 32, 256" in source
    (ws / "softmax.py").write_text(source.replace("B, N, D = 32, 32, 256", "B, N, D = 320, 32, 256"))
    cmd = [sys.executable, "softmax.py", "--run-mode", "sim"]

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"], test_command=cmd,
                              run_mode="sim", goal_speedup=2.0))["session_id"]
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            await s.ok("enable_runtime_debug", session_id=sid)
            text = await s.refused("collect_swimlane", session_id=sid)
            assert "measurement is INVALID" in text and "drawPngThresholdCycle = 500000" in text, text
            assert "576149 cycles (320.1 µs)" in text and "Tune a smaller case" in text, text
            # the cause, not its symptoms, and not the advice for another cause
            assert "bubble_analysis.log is missing" not in text and "stitch_function_max_num" not in text, text
            status = await s.ok("get_status", session_id=sid)
            assert status["best_us"] is None, status  # no baseline was kept from it

    anyio.run(scenario)
