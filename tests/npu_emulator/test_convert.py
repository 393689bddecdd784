"""SIM run folder → NPU run folder (convert.py), on recorded SIM runs: no kernel runs here."""

from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from pypto_tune.tools.analysis.aicpu_trace import read_aicpu_trace
from tests.npu_emulator.box import load_convert

pytestmark = pytest.mark.process

RUNS = Path(__file__).resolve().parents[2] / "fixtures" / "runs"
conv = load_convert()
BASE = 5_000_000_000_000  # a 50 MHz counter after ~28 h of uptime: float µs then carry ~1e-5 µs of rounding


def recorded(name: str, tmp_path: Path) -> Path:
    (src,) = (RUNS / name / "output").iterdir()
    dest = tmp_path / "output" / src.name
    shutil.copytree(src, dest)
    return dest


def sim_inputs(run: Path):
    blocks = json.loads((run / "CostModelSimulationOutput" / "_simulate.swim.json").read_text())
    return blocks, conv.parse_dyn_topo(run / "dyn_topo.txt")


def test_noise_off_reproduces_the_sim_times_within_the_quantum(tmp_path) -> None:
    blocks, succ = sim_inputs(recorded("softmax_base", tmp_path))
    record, ratios = conv.npu_record(blocks, succ, conv.Options(noise_pct=0, tick_base=BASE))
    active = [b for b in blocks if b["tasks"]]
    assert [(b["blockIdx"], b["coreType"]) for b in record] == [
        (b["blockIdx"], "AI-CPU" if b["coreType"] == "HUB" else b["coreType"]) for b in active]
    assert len(record) < len(blocks)  # the idle cores SIM lists are gone (A.3, A.8)
    assert set(ratios.values()) == {1.0}
    for sim, npu in zip(active, record):
        for s, n in zip(sim["tasks"], npu["tasks"]):
            assert set(n) == {"seqNo", "subGraphId", "taskId", "execStart", "execEnd"}  # no SIM completeSeq
            assert (n["seqNo"], n["taskId"]) == (s["seqNo"], s["taskId"])
            assert abs((n["execStart"] - BASE) / 50 - s["execStart"] / 1800) <= 0.01 + 1e-12
            assert abs((n["execEnd"] - BASE) / 50 - s["execEnd"] / 1800) <= 0.01 + 1e-12
    dropped, _ = conv.npu_record(blocks, succ, conv.Options(hub_lane="drop"))
    assert "AI-CPU" not in {b["coreType"] for b in dropped} and len(dropped) == len(record) - 1


def test_noise_is_seeded_per_run_and_has_the_configured_spread() -> None:
    opts = conv.Options(noise_pct=2.0, noise_run_share=0.5, rng_seed="7/0/0")
    first = conv.duration_factors(5000, opts)
    assert first == conv.duration_factors(5000, opts)  # same seed, same run → same noise
    assert first != conv.duration_factors(5000, conv.Options(noise_pct=2.0, rng_seed="7/0/1"))
    assert statistics.pstdev(first) == pytest.approx(0.02 * 0.5 ** 0.5, rel=0.1)  # within a run: √(1−ρ)·σ
    means = [statistics.fmean(conv.duration_factors(50, conv.Options(noise_pct=2.0, rng_seed=f"7/0/{r}")))
             for r in range(400)]
    # between runs each task varies by σ; the shared part moves a whole run by σ·√ρ
    assert statistics.pstdev(means) == pytest.approx(0.02 * (0.5 + 0.5 / 50) ** 0.5, rel=0.15)
    assert conv.duration_factors(10, conv.Options(noise_pct=0)) == [1.0] * 10
    assert conv.duration_factors(3, conv.Options(noise_pct=0, slowdown=1.5)) == [1.5] * 3


def test_noisy_retiming_keeps_every_dependency_and_core_order(tmp_path) -> None:
    blocks, succ = sim_inputs(recorded("matmul_base", tmp_path))
    record, _ = conv.npu_record(blocks, succ, conv.Options(noise_pct=20.0, rng_seed="1/0/0"))
    sim_at = {(t["seqNo"], t["taskId"]): t for b in blocks for t in b["tasks"]}
    npu_at = {(t["seqNo"], t["taskId"]): t for b in record for t in b["tasks"]}
    edges = [((seq, a), (seq, b)) for (seq, a), nexts in succ.items() for b in nexts]
    held = [(p, q) for p, q in edges if p in sim_at and q in sim_at and sim_at[p]["execEnd"] <= sim_at[q]["execStart"]]
    assert held, "the recorded run has dependency edges"
    assert all(npu_at[p]["execEnd"] <= npu_at[q]["execStart"] for p, q in held)
    for b in record:
        ts = sorted(b["tasks"], key=lambda t: t["execStart"])
        assert all(x["execEnd"] <= y["execStart"] for x, y in zip(ts, ts[1:]))
    moved = sum(npu_at[k]["execEnd"] - npu_at[k]["execStart"] != round(sim_at[k]["execEnd"] / 36)
                - round(sim_at[k]["execStart"] / 36) for k in npu_at)
    assert moved > len(npu_at) // 2  # the noise reached the durations


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """The recorded SIM matmul turned into an NPU folder (noise off, AICPU trace on)."""
    tmp = tmp_path_factory.mktemp("conv")
    sim = recorded("matmul_base", tmp)
    summary = conv.convert_run(sim, conv.Options(noise_pct=0, tick_base=BASE, aicpu_trace=True,
                                                 python3=sys.executable))
    return sim, sim.parent / summary["npu_dir"], summary


def test_the_npu_folder_replaces_the_sim_folder(converted) -> None:
    sim, npu, summary = converted
    assert not sim.exists() and not list(npu.parent.rglob("CostModelSimulationOutput"))
    m = re.fullmatch(r"output_(\d{8})_(\d{6})_(\d{6})_(\d+)_C0000202", npu.name)
    assert m and int(m.group(4)) > 0 and npu.name > sim.name  # a fresh timestamp, the SIM folder's tag
    assert {p.name for p in npu.iterdir()} == {
        "program.json", "dyn_topo.txt", "tilefwk_L1_prof_data.json", "bubble_analysis.log", "merged_swimlane.json",
        "machine_trace_perf_data_0.json", "machine_runtime_operator_trace_0.json"}
    log = (npu / "bubble_analysis.log").read_text()
    assert "[AIC_1] Execute task num:" in log and "[AI-CPU_80]" in log and "HUB" not in log
    events = json.loads((npu / "merged_swimlane.json").read_text())["traceEvents"]
    assert events[0]["args"]["name"] == "AICPU View" and events[0]["pid"] == 0  # prepended by gen_perfetto (A.2)
    assert {e["pid"] for e in events} == {0, 1}


def test_the_aicpu_trace_gives_the_aicore_span_and_agrees_with_the_reference(converted) -> None:
    _, npu, summary = converted
    record = json.loads((npu / "tilefwk_L1_prof_data.json").read_text())
    core = [t for b in record if b["coreType"] in ("AIC", "AIV") for t in b["tasks"]]
    span_us = (max(t["execEnd"] for t in core) - min(t["execStart"] for t in core)) / 50
    perfetto = read_aicpu_trace(npu / "machine_runtime_operator_trace_0.json")
    raw = read_aicpu_trace(npu / "machine_trace_perf_data_0.json")
    assert (perfetto.form, raw.form) == ("perfetto", "raw")
    assert perfetto.e2e_us == pytest.approx(span_us, abs=1e-4) and raw.e2e_us == pytest.approx(span_us, abs=1e-9)
    cores_with_tasks = sum(1 for b in record if b["coreType"] in ("AIC", "AIV") and b["tasks"])
    assert [r.round for r in raw.rounds] == [0] and raw.aicore_threads == cores_with_tasks == 24
    script = Path(conv._script(conv.Options(), "machine_perf_trace.py"))
    out = subprocess.run([sys.executable, str(script), "analyze", str(npu / "machine_trace_perf_data_0.json")],
                         capture_output=True, text=True, timeout=60).stdout
    row = next(ln for ln in out.splitlines() if ln.startswith("| AICore "))
    assert row.split("|")[8].strip() == f"{raw.e2e_us:.2f}"  # the reference's End-to-End time column
