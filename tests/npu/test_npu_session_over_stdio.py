"""The NPU path end to end over MCP stdio, on the emulated Ascend box (tests/npu_emulator/): the server sees what an
NPU box shows — npu-smi, torch_npu, a PTO-ISA tree, TILE_FWK_DEVICE_ID, NPU-layout run folders with noisy times —
and every NPU rule must hold: the six R3 checks, R5 rotation by chip, a hung chip killed and left behind, repeats
with a median, decisions beyond the noise, the kept time as the median of all samples, and an honest NPU report.

The "true" changes: the box makes a kernel whose jit sets ``device_sched_mode`` 1 run 5 % faster and 2 run 0.5 %
faster (``option_effects``); in SIM the option has no effect at all (domain C S-10), so only the box's factor moves
the time. The box caches the SIM run of identical code (an NPU re-runs the same binary; noise is drawn afresh).
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
from pathlib import Path

import anyio
import pytest

from tests.conftest import OPERATORS
from tests.npu_emulator.box import FIXTURE_REFERENCES, box_runs, emulated_box
from tests.server.mcp_client import connect
from tests.sessions import leave_stage_by_checklist

pytestmark = pytest.mark.sim

CMD = [sys.executable, "softmax.py", "--run-mode", "npu"]
DSM = "softmax.py:softmax_kernel.runtime_options.device_sched_mode"
EFFECTS = {"device_sched_mode": {"1": 0.95, "2": 0.995}}


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy2(OPERATORS / "softmax" / "softmax.py", ws / "softmax.py")
    return ws


def _box(tmp_path: Path, **kw) -> dict[str, str]:
    config = {"cache_sim": True, "option_effects": EFFECTS}
    config.update(kw.pop("config", {}))
    return emulated_box(tmp_path, references=FIXTURE_REFERENCES, config=config, **kw)


def test_a_full_npu_session_rotates_chips_measures_beyond_noise_and_reports_npu(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    # chip 0 fails its first run (R5: retry on another card), chip 1 hangs (killed at the timeout, left behind). The
    # timeout, as in test_npu_trials_over_stdio.py: room for a healthy run on a busy 2-core machine (about 5 s alone),
    # while the hung chip's wait stays short.
    env = _box(tmp_path, chips=4, faults={0: {"fail_first_runs": 1}, 1: {"hang": True}}, noise_pct=2.0, seed=11)

    async def scenario() -> None:
        async with connect(ws, env=env) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"], test_command=CMD,
                              run_mode="npu", goal_speedup=100.0, device_ids=["0", "1", "2", "3"],
                              timeout_s=30))["session_id"]
            p1 = await s.ok("run_precision_check", session_id=sid)
            checks = {c["name"]: c for c in p1["env_checks"]}
            assert len(checks) >= 6 and all(c["ok"] for c in checks.values()), checks
            assert p1["verdict"] != "passed" and p1["device_id"] == "0" and p1["attempts_left"] == 2
            p2 = await s.ok("run_precision_check", session_id=sid)  # chip 1: hangs until the timeout
            assert p2["device_id"] == "1" and p2["verdict"] == "timeout" and p2["attempts_left"] == 1
            p3 = await s.ok("run_precision_check", session_id=sid)
            assert p3["device_id"] == "2" and p3["verdict"] == "passed" and p3["numerics_checked"] is True
            assert p3["state"] == "S2_COLLECT"

            await s.ok("enable_runtime_debug", session_id=sid)
            base = await s.ok("collect_swimlane", session_id=sid)
            assert base["valid"] and len(base["samples_us"]) == 3
            assert base["operator_time_us"] == pytest.approx(statistics.median(base["samples_us"]))
            assert len(set(base["samples_us"])) > 1, "2 % noise: repeats differ"
            assert base["operator_time_us"] == pytest.approx(36.40, rel=0.08)
            # the chip that works stays in use (it used to fall back to chip 0)
            launches = box_runs(env)
            assert {r["device"] for r in launches[-3:]} == {2}

            await s.ok("analyze_bubbles", session_id=sid, lang="en")
            assert (await leave_stage_by_checklist(s, sid))["stage"] == "SWIMLANE_1"
            await s.ok("collect_swimlane", session_id=sid)
            await s.ok("analyze_bubbles", session_id=sid, lang="en")

            # a true 0.5 % change is not kept; the server measured until it was sure (or gave up not keeping it)
            await s.ok("apply_tuning_patch", session_id=sid, knob=DSM, value=2, catalog_id="S-10",
                       rationale="half a percent")
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            small = await s.ok("collect_swimlane", session_id=sid)
            r_small = await s.ok("record_round", session_id=sid)
            assert r_small["decision"] != "kept", (small["samples_us"], r_small)
            # a true 5 % change is kept
            await s.ok("apply_tuning_patch", session_id=sid, knob=DSM, value=1, catalog_id="S-10",
                       rationale="five percent")
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            await s.ok("collect_swimlane", session_id=sid)
            r_big = await s.ok("record_round", session_id=sid)
            assert r_big["decision"] == "kept" and -9.0 < r_big["delta_pct"] < -1.0, r_big

            # re-collecting the kept code does not pick a number: the kept time is the median of all its samples
            st1 = await s.ok("get_status", session_id=sid)
            again = await s.ok("collect_swimlane", session_id=sid)
            st2 = await s.ok("get_status", session_id=sid)
            assert st2["kept_samples"] == st1["kept_samples"] + len(again["samples_us"])
            assert st2["best_us"] != min(again["samples_us"]) or len(set(again["samples_us"])) == 1
            # ... and it is exactly that median: every valid sample of the kept code, read back from the ledger
            ledger = json.loads((await s.client.read_resource(f"pypto-tune://sessions/{sid}/ledger")).contents[0].text)
            kept_hash = next(m for m in ledger["tables"]["measurements"] if m["id"] == again["measurement_id"])
            samples = [x for m in ledger["tables"]["measurements"]
                       if m["code_hash"] == kept_hash["code_hash"] and m["valid"]
                       for x in (json.loads(m["samples"]) if isinstance(m["samples"], str) else m["samples"])]
            assert len(samples) == st2["kept_samples"] > len(again["samples_us"])
            assert st2["best_us"] == pytest.approx(statistics.median(samples))

            await s.ok("stop_session", session_id=sid, reason="test done")
            rep = await s.ok("render_report", session_id=sid, format="md", lang="en")
            text = Path(next(p for p in rep["paths"] if p.endswith(".md"))).read_text()
            assert "NPU" in text and "numerics not checked" not in text.lower()

    anyio.run(scenario)


def test_three_baseline_failures_on_every_chip_wait_for_a_person(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    env = _box(tmp_path, chips=3, faults={i: {"fail_first_runs": 9} for i in range(3)}, noise_pct=0.0)

    async def scenario() -> None:
        async with connect(ws, env=env) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"], test_command=CMD,
                              run_mode="npu", goal_speedup=2.0, device_ids=["0", "1", "2"]))["session_id"]
            devices = []
            for _ in range(3):
                r = await s.ok("run_precision_check", session_id=sid)
                assert r["verdict"] != "passed"
                devices.append(r["device_id"])
            assert devices == ["0", "1", "2"]
            msg = await s.refused("run_precision_check", session_id=sid, confirm_retry=True)
            assert "GATE confirmation:" in msg and "pypto-tune confirm" in msg
            msg = await s.refused("run_precision_check", session_id=sid)
            assert "GATE baseline-retry:" in msg

    anyio.run(scenario)


def test_an_environment_without_npu_smi_is_refused_naming_the_check(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    env = _box(tmp_path, chips=2, npu_smi=False)

    async def scenario() -> None:
        async with connect(ws, env=env) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"], test_command=CMD,
                              run_mode="npu", goal_speedup=2.0))["session_id"]
            msg = await s.refused("run_precision_check", session_id=sid)
            assert "GATE env-check:" in msg and "npu-smi" in msg

    anyio.run(scenario)
