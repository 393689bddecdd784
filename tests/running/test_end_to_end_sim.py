"""The pieces together on a real simulator run: build_child_env → run_command → judge_precision → archive."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pypto_tune.tools.running.artifacts import archive_run_dirs, extract_member, list_members
from pypto_tune.tools.running.runner import build_child_env, run_command
from pypto_tune.tools.rules.precision import judge_precision
from tests.running.runner_helpers import DATA

pytestmark = [pytest.mark.anyio, pytest.mark.sim]


async def test_a_real_sim_run_passes_writes_its_swimlane_and_round_trips_through_the_archive(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    progress: list[float] = []

    async def on_progress(elapsed_s: float, last_line: str) -> None:
        progress.append(elapsed_s)

    result = await run_command([sys.executable, str(DATA / "probe_add_verdict.py"), "--verdict"], cwd=ws,
                               env=build_child_env(run_mode="sim"), timeout_s=120, on_progress=on_progress,
                               progress_interval_s=1.0)
    verdict = judge_precision(result, "sim")
    assert result.exit_code == 0, result.output
    assert verdict.verdict == "passed" and verdict.numerics_checked is False
    assert progress  # the run takes a few seconds: at least one progress report
    # With the interpreter directory first on PATH, pypto's helper scripts found a python3 and wrote the
    # swimlane (domain A.2b); the run folder is newer than started_at, which is how the caller finds it.
    runs = sorted((ws / "output").glob("output_*"))
    assert len(runs) == 1 and runs[0].stat().st_mtime >= result.started_at - 1
    sim = runs[0] / "CostModelSimulationOutput"
    assert (sim / "merged_swimlane.json").is_file() and (sim / "bubble_analysis.log").is_file()

    archive = archive_run_dirs(runs, tmp_path / "store" / "baseline.tar.gz")
    members = list_members(archive)
    assert not [m for m in members if "/kernel_aicore/" in m or "/kernel_aicpu/" in m or "/graphs/" in m]
    assert f"{runs[0].name}/program.json" in members
    back = extract_member(archive, "CostModelSimulationOutput/merged_swimlane.json", tmp_path / "back")
    assert back.read_bytes() == (sim / "merged_swimlane.json").read_bytes()
    assert json.loads(back.read_text())["traceEvents"]
