"""``pypto-tune analyze`` on emulated NPU run folders reads the same figures as on the SIM runs they came from.

With the noise off, an emulated NPU folder is its SIM run re-expressed in the NPU layout and in 50 ticks per µs
(tests/npu_emulator/README.md), so every time may differ from SIM's by the 0.02 µs quantum per task boundary and
no more. What legitimately differs is stated per assertion: the NPU record lists no idle core, so the reference
averages that count idle cores at 0 % (E.2.4) are not compared; the corrected (active-core) figures are.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.npu_emulator.box import FIXTURE_REFERENCES, copy_operator, emulated_box, load_convert

pytestmark = pytest.mark.process

RUNS = Path(__file__).resolve().parents[2] / "fixtures" / "runs"
PYPTO_TUNE = Path(sys.executable).parent / "pypto-tune"
QUANTUM_US = 0.02  # one A2/A3 counter tick (A.2)


def analyze_json(path: Path) -> dict:
    res = subprocess.run([str(PYPTO_TUNE), "analyze", str(path), "--json", "--no-report"], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def tasks_per_core(npu_dir: Path) -> dict[str, int]:
    record = json.loads((npu_dir / "tilefwk_L1_prof_data.json").read_text())
    return {f"{b['coreType']}_{b['blockIdx'] + 1}": len(b["tasks"]) for b in record}


def assert_same_figures(sim: dict, npu: dict, npu_dir: Path) -> None:
    assert (sim["run_mode"], npu["run_mode"]) == ("sim", "npu")
    assert npu["invalid_reasons"] == [] and npu["crosscheck"]["agrees"]
    assert npu["task_count"] == sim["task_count"] and npu["fake_task_count"] == 0
    # max_work_time and the writer's E2E: two task boundaries each, both rounded to the tick
    assert abs(npu["operator_time_us"] - sim["operator_time_us"]) <= QUANTUM_US + 1e-6
    assert abs(npu["e2e_us"] - sim["e2e_us"]) <= QUANTUM_US + 1e-6
    n_tasks = tasks_per_core(npu_dir)
    sim_cores = {c["name"]: c for c in sim["cores"] if c["active"]}
    npu_cores = {c["name"]: c for c in npu["cores"]}
    assert set(npu_cores) == set(sim_cores)  # the NPU record lists exactly the cores that ran tasks
    util_bound = 0.0
    for name, n in ((k, n_tasks[k]) for k in npu_cores):
        s, e = sim_cores[name], npu_cores[name]
        assert abs(e["work_us"] - s["work_us"]) <= QUANTUM_US + 1e-6, name
        # busy time sums n durations and each duration has two rounded ends
        assert abs(e["busy_us"] - s["busy_us"]) <= n * QUANTUM_US + 1e-6, name
        assert abs(e["wait_schedule_us"] - s["wait_schedule_us"]) <= (n + 1) * QUANTUM_US + 1e-6, name
        bound = 100 * (n + 1) * QUANTUM_US / s["work_us"]
        assert abs(e["utilization_pct"] - s["utilization_pct"]) <= bound, name
        util_bound = max(util_bound, bound)
    assert abs(npu["active_core_utilization_pct"] - sim["active_core_utilization_pct"]) <= util_bound
    assert abs(npu["active_bubble_rate_pct"] - sim["active_bubble_rate_pct"]) <= util_bound
    # the AICPU-side time (A.5) sits beside max_work_time; the emulator derives it from the same core spans
    assert npu["aicpu_e2e_us"] == pytest.approx(npu["e2e_us"], abs=1e-4)
    assert npu["per_dir"][0]["aicpu_trace_paths"] == [str(npu_dir / "machine_runtime_operator_trace_0.json")]
    assert sim["aicpu_e2e_us"] is None and sim["pipe_usage"] == []


@pytest.mark.parametrize("recorded", ["softmax_base", "matmul_base"])
def test_a_recorded_sim_run_and_its_npu_folder_give_the_same_figures(tmp_path, recorded) -> None:
    conv = load_convert()
    (src,) = (RUNS / recorded / "output").iterdir()
    sim_copy = tmp_path / "output" / src.name
    shutil.copytree(src, sim_copy)
    summary = conv.convert_run(sim_copy, conv.Options(noise_pct=0, tick_base=5_000_000_000_000, aicpu_trace=True,
                                                      python3=sys.executable, keep_sim_in=tmp_path / "kept"))
    npu_dir = tmp_path / "output" / summary["npu_dir"]
    npu = analyze_json(npu_dir)
    assert_same_figures(analyze_json(tmp_path / "kept" / src.name), npu, npu_dir)
    text = subprocess.run([str(PYPTO_TUNE), "analyze", str(npu_dir), "--no-report"], capture_output=True, text=True,
                          timeout=300).stdout
    assert f"AICPU-side E2E: {npu['aicpu_e2e_us']:.3f} µs" in text.splitlines()[1]


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """The softmax fixture run with --run-mode npu on the box (noise off, runtime_debug_mode 1,
    DUMP_DEVICE_PERF=true), keeping the SIM folder it came from."""
    tmp = tmp_path_factory.mktemp("live")
    env = emulated_box(tmp, noise_pct=0, references=FIXTURE_REFERENCES, config={"keep_sim_runs": True})
    ws = copy_operator("softmax", tmp / "ws")
    src = ws / "softmax.py"
    src.write_text(src.read_text().replace("@pypto.frontend.jit(",
                                           '@pypto.frontend.jit(debug_options={"runtime_debug_mode": 1}, '))
    res = subprocess.run([sys.executable, "softmax.py", "--run-mode", "npu"], cwd=ws, env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    (npu_dir,) = (ws / "output").iterdir()
    (sim_dir,) = (tmp / "npu-box" / "sim-runs").iterdir()
    return sim_dir, npu_dir


@pytest.mark.sim
def test_a_live_npu_run_reads_like_its_sim_run_with_pipe_usage(live) -> None:
    sim_dir, npu_dir = live
    sim, npu = analyze_json(sim_dir), analyze_json(npu_dir.parent.parent)  # the workspace: newest run
    assert npu["picked_run"] == str(npu_dir)
    assert_same_figures(sim, npu, npu_dir)
    (pipes,) = npu["pipe_usage"]
    assert pipes["path"] == str(npu_dir / "pipe_usage.csv") and npu["per_dir"][0]["pipe_usage"] == pipes
    n_aiv = sum(1 for c in npu["cores"] if c["core_type"] == "AIV")
    assert (pipes["total_cores"], pipes["aic_cores"], pipes["aiv_cores"]) == (n_aiv, 0, n_aiv)
    # The averages equal the simulator's own pipe statistics (cycles over the used pipes, ÷ 1800 µs⁻¹ as A.6)
    stat = (sim_dir / "CostModelSimulationOutput" / "_simulate.stat.report.txt").read_text()
    for pipe, label in (("VECTOR_ALU", "Vector"), ("MTE_IN", "MTE_IN"), ("MTE_OUT", "MTE_OUT")):
        used = int(re.search(rf"Used {label} Pipe Number\.*:\s*(\d+)", stat).group(1))
        cycles = float(re.search(rf"Average {label} Usage\.*:\s*([\d.]+)", stat).group(1))
        assert used == n_aiv
        total = next(t for t in pipes["totals"] if t["pipe"] == pipe)
        assert total["avg_time_us"] * 1800 == pytest.approx(cycles, abs=0.01)
    # per core: usage = pipe time ÷ that core's own first-start-to-last-end span (A.6)
    record = json.loads((npu_dir / "tilefwk_L1_prof_data.json").read_text())
    first = next(b for b in record if b["coreType"] == "AIV")
    row = next(c for c in pipes["cores"] if c["core"] == f"AIV_{first['blockIdx'] + 1}")
    own = (max(t["execEnd"] for t in first["tasks"]) - min(t["execStart"] for t in first["tasks"])) / 50
    assert row["usage_pct"]["MTE_IN"] == pytest.approx(row["time_us"]["MTE_IN"] / own * 100, rel=1e-3)
    assert row["total_time_us"] == pytest.approx(next(t for t in pipes["totals"])["total_execute_time_us"])
