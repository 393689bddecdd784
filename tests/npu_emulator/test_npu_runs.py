"""Fixture operators run with ``--run-mode npu`` on the emulated box: SIM underneath, NPU folders out, faults."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pypto_tune.tools.running.runner import build_child_env
from tests.npu_emulator.box import FIXTURE_REFERENCES, box_runs, copy_operator, emulated_box

pytestmark = pytest.mark.sim

NPU_FILES = {"program.json", "dyn_topo.txt", "tilefwk_L1_prof_data.json", "bubble_analysis.log",
             "merged_swimlane.json", "machine_trace_perf_data_0.json", "machine_runtime_operator_trace_0.json",
             "pipe_usage.csv"}


def workspace(tmp_path: Path, operator: str, debug: bool = True) -> Path:
    ws = copy_operator(operator, tmp_path / f"ws-{operator}")
    if debug:  # what enable_runtime_debug does to every jit (R2/R7)
        src = ws / f"{operator}.py"
        src.write_text(src.read_text().replace("@pypto.frontend.jit(",
                                               '@pypto.frontend.jit(debug_options={"runtime_debug_mode": 1}, '))
    return ws


def run_npu(env: dict[str, str], ws: Path, device: int | None = None) -> subprocess.CompletedProcess:
    if device is not None:
        env = {**env, "TILE_FWK_DEVICE_ID": str(device)}
    (script,) = ws.glob("*.py")
    return subprocess.run([sys.executable, script.name, "--run-mode", "npu"], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=600)


def verdict(res: subprocess.CompletedProcess) -> str:
    return next(ln for ln in res.stdout.splitlines() if ln.startswith("PRECISION:"))


def run_folders(ws: Path) -> list[Path]:
    out = ws / "output"
    return sorted(out.iterdir()) if out.is_dir() else []


def relative_record(folder: Path) -> list[tuple]:
    record = json.loads((folder / "tilefwk_L1_prof_data.json").read_text())
    t0 = min(t["execStart"] for b in record for t in b["tasks"])
    return [(b["blockIdx"], t["taskId"], t["execStart"] - t0, t["execEnd"] - t0) for b in record for t in b["tasks"]]


@pytest.mark.parametrize("operator", ["rmsnorm", "matmul"])
def test_fixture_operators_pass_their_npu_check_with_the_registered_reference(tmp_path, operator) -> None:
    env = emulated_box(tmp_path, chips=4, references=FIXTURE_REFERENCES, noise_pct=0)
    ws = workspace(tmp_path, operator)
    res = run_npu(env, ws, device=2)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert verdict(res).startswith("PRECISION: passed")
    assert "NOT computed by the kernel" in res.stderr  # the emulator says where the numbers came from
    (folder,) = run_folders(ws)
    assert {p.name for p in folder.iterdir()} >= NPU_FILES
    assert not list(ws.rglob("CostModelSimulationOutput"))
    (run,) = box_runs(env)
    assert (run["kernel"], run["device"], run["run"], run["outcome"], run["outputs"]) == (
        f"{operator}_kernel", 2, 0, "ok", "reference")


def test_a_chip_that_fails_its_first_run_works_on_the_second(tmp_path) -> None:
    box = emulated_box(tmp_path, faults={1: {"fail_first_runs": 1}}, references=FIXTURE_REFERENCES)
    # the environment the server gives the test (PYPTO_NPU_EMU_CONFIG dropped: the box is found via PATH)
    env = build_child_env(run_mode="npu", device_id="1", base=box)
    assert "PYPTO_NPU_EMU_CONFIG" not in env
    ws = workspace(tmp_path, "softmax", debug=False)
    first = run_npu(env, ws, device=1)
    assert first.returncode == 2
    assert verdict(first) == ("PRECISION: error: RuntimeError: NPU emulator: runtime error on device 1 (emulated "
                              "fault: run 1 of the first 1 failing runs of this chip)")
    assert run_folders(ws) == []  # the runtime refused before anything ran
    second = run_npu(env, ws, device=1)
    assert second.returncode == 0 and verdict(second).startswith("PRECISION: passed")
    (folder,) = run_folders(ws)
    # without runtime_debug_mode there is no swim record: only the compile products (A.1)
    assert {"program.json", "dyn_topo.txt"} <= {p.name for p in folder.iterdir()}
    assert not (folder / "tilefwk_L1_prof_data.json").exists() and not (folder / "merged_swimlane.json").exists()
    assert [(r["run"], r["outcome"]) for r in box_runs(box)] == [(0, "runtime-error"), (1, "ok")]


def test_an_alarm_chip_and_a_device_id_out_of_range_fail_at_once(tmp_path) -> None:
    env = emulated_box(tmp_path, chips=4, faults={3: {"health": "Alarm"}})
    ws = workspace(tmp_path, "softmax", debug=False)
    alarm = run_npu(env, ws, device=3)
    assert alarm.returncode == 2 and "device 3 health is Alarm" in verdict(alarm)
    beyond = run_npu(env, ws, device=7)
    assert beyond.returncode == 2 and "TILE_FWK_DEVICE_ID=7 but the box has 4 chip(s)" in verdict(beyond)
    assert run_folders(ws) == [] and [r["outcome"] for r in box_runs(env)] == ["alarm"]


def test_a_hanging_chip_never_returns_until_its_process_group_is_killed(tmp_path) -> None:
    env = {**emulated_box(tmp_path, faults={0: {"hang": True}}), "TILE_FWK_DEVICE_ID": "0"}
    ws = workspace(tmp_path, "softmax", debug=False)
    proc = subprocess.Popen([sys.executable, "softmax.py", "--run-mode", "npu"], cwd=ws, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not box_runs(env) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [r["outcome"] for r in box_runs(env)] == ["hang"]
        time.sleep(2)
        assert proc.poll() is None  # still running: it only ends when killed
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert "device 0 hangs (emulated fault)" in proc.stderr.read().decode()
    assert run_folders(ws) == []


def test_wrong_numerics_fail_the_operators_own_precision_check(tmp_path) -> None:
    env = emulated_box(tmp_path, faults={0: {"wrong_numerics": True}}, references=FIXTURE_REFERENCES)
    ws = workspace(tmp_path, "softmax", debug=False)
    res = run_npu(env, ws, device=0)
    assert res.returncode == 1 and verdict(res).startswith("PRECISION: failed (max abs diff")
    assert "'wrong_numerics' fault" in res.stderr
    assert box_runs(env)[0]["outputs"] == "wrong-numerics"


def test_a_busy_chip_is_shown_busy_and_runs_slower(tmp_path) -> None:
    env = emulated_box(tmp_path, faults={1: {"busy": True}}, noise_pct=0, references=FIXTURE_REFERENCES,
                       config={"keep_sim_runs": True, "busy_slowdown": 1.5})
    ws = workspace(tmp_path, "softmax")
    res = run_npu(env, ws, device=1)
    assert res.returncode == 0, res.stderr[-2000:]
    (folder,) = run_folders(ws)
    (sim,) = (tmp_path / "npu-box" / "sim-runs").iterdir()
    npu_busy = sum(e - s for _, _, s, e in relative_record(folder)) / 50
    sim_blocks = json.loads((sim / "CostModelSimulationOutput" / "_simulate.swim.json").read_text())
    sim_busy = sum(t["execEnd"] - t["execStart"] for b in sim_blocks for t in b["tasks"]) / 1800
    assert npu_busy == pytest.approx(1.5 * sim_busy, rel=0.01)  # every task took 1.5× as long


def test_noise_differs_run_to_run_and_repeats_per_seed(tmp_path) -> None:
    env_a = emulated_box(tmp_path / "a", seed=5, noise_pct=2.0, references=FIXTURE_REFERENCES)
    env_b = emulated_box(tmp_path / "b", seed=5, noise_pct=2.0, references=FIXTURE_REFERENCES)
    ws_a, ws_b = workspace(tmp_path / "a", "softmax"), workspace(tmp_path / "b", "softmax")
    for env, ws in ((env_a, ws_a), (env_a, ws_a), (env_b, ws_b)):
        res = run_npu(env, ws, device=0)
        assert res.returncode == 0, res.stderr[-2000:]
    a0, a1 = (relative_record(f) for f in run_folders(ws_a))
    (b0,) = (relative_record(f) for f in run_folders(ws_b))
    assert a0 == b0  # same seed, chip and run number → the same times
    assert a0 != a1  # the next run on that chip draws new noise
    assert [r["run"] for r in box_runs(env_a)] == [0, 1]
