"""The NPU path end to end over MCP stdio, on the emulated Ascend box (tests/npu_emulator/): the server sees what an
NPU box shows — npu-smi, torch_npu, a PTO-ISA tree, TILE_FWK_DEVICE_ID, NPU-layout run folders with noisy times —
and every NPU rule must hold: the six R3 checks, R5 rotation by chip, a hung chip killed and left behind, repeats
with a median, decisions beyond the noise, the kept time as the median of all samples, and an honest NPU report.

The "true" changes: the box makes a kernel whose jit sets ``device_sched_mode`` 1 run 5 % faster and 2 run 0.5 %
faster (``option_effects``); in SIM the option has no effect at all (domain C S-10), so only the box's factor moves
the time. The box caches the SIM run of identical code (an NPU re-runs the same binary; noise is drawn afresh).

One server on one box for the module (a server start and its environment probe cost seconds of CPU each): first its
npu-smi is missing (the first precision check is refused naming it), then it is put back and the same session runs
the full NPU session to its report, then every chip is set to fail and a second session shows three baseline
failures waiting for a person. Each part's assertions run inline; each test function below reports its part's
outcome, so a broken promise fails the test named after it (a part that cannot start because an earlier one broke
says so).
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import OPERATORS
from tests.npu_emulator.box import FIXTURE_REFERENCES, SMI, box_dir, box_runs, emulated_box, set_faults
from tests.server.mcp_client import Session, connect
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


async def _without_npu_smi(s: Session, ws: Path, env: dict[str, str]) -> str:
    """The box's npu-smi is gone: the first precision check is refused naming it; put back, the session goes on.
    Returns the session id."""
    smi = box_dir(env) / "bin" / "npu-smi"
    smi.unlink()
    try:
        # the timeout, as in test_npu_trials_over_stdio.py: room for a healthy run on a busy 2-core machine (about
        # 5 s alone), while the hung chip's wait (the full session) stays short
        sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"], test_command=CMD,
                          run_mode="npu", goal_speedup=100.0, device_ids=["0", "1", "2", "3"],
                          timeout_s=30))["session_id"]
        msg = await s.refused("run_precision_check", session_id=sid)
        assert "GATE env-check:" in msg and "npu-smi" in msg
        assert box_runs(env) == []  # refused before any launch
    finally:
        smi.symlink_to(SMI)
    return sid


async def _full_session(s: Session, sid: str, env: dict[str, str]) -> None:
    # chip 0 fails its first run (R5: retry on another card), chip 1 hangs (killed at the timeout, left behind)
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


async def _every_chip_fails(s: Session, ws: Path, env: dict[str, str], first_sid: str) -> None:
    """A new session of the same workspace (the first one is finished) on a box whose chips 0-2 now fail every
    launch: three failed baselines, one per chip, and then only a person may allow another try."""
    set_faults(env, {i: {"fail_first_runs": 10**6} for i in range(3)})
    sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"], test_command=CMD,
                      run_mode="npu", goal_speedup=2.0, device_ids=["0", "1", "2"]))["session_id"]
    assert sid != first_sid
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


PARTS = ("without_npu_smi", "full_session", "every_chip_fails")


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, BaseException | None]:
    """Each part's outcome (None: its assertions held), in order, on one server and one box."""
    tmp = tmp_path_factory.mktemp("npu-box")
    ws = _workspace(tmp)
    # chip 0 fails its first run, chip 1 hangs; 2 % noise (seeded)
    env = _box(tmp, chips=4, faults={0: {"fail_first_runs": 1}, 1: {"hang": True}}, noise_pct=2.0, seed=11)
    out: dict[str, BaseException | None] = {}

    async def step(name: str, part: Callable[[], Awaitable[Any]]) -> Any:
        if any(out.values()):
            out[name] = RuntimeError(f"not reached: an earlier part failed ({[k for k, v in out.items() if v]})")
            return None
        try:
            result = await part()
        except Exception as exc:  # noqa: BLE001 - re-raised by the test named after the part
            out[name] = exc
            return None
        out[name] = None
        return result

    async def scenario() -> None:
        async with connect(ws, env=env) as s:
            sid = await step("without_npu_smi", lambda: _without_npu_smi(s, ws, env))
            await step("full_session", lambda: _full_session(s, sid, env))
            await step("every_chip_fails", lambda: _every_chip_fails(s, ws, env, sid))

    anyio.run(scenario)
    return out


def _held(parts: dict[str, BaseException | None], name: str) -> None:
    if parts[name] is not None:
        raise parts[name]


def test_an_environment_without_npu_smi_is_refused_naming_the_check(parts) -> None:
    _held(parts, "without_npu_smi")


def test_a_full_npu_session_rotates_chips_measures_beyond_noise_and_reports_npu(parts) -> None:
    _held(parts, "full_session")


def test_three_baseline_failures_on_every_chip_wait_for_a_person(parts) -> None:
    _held(parts, "every_chip_fails")
