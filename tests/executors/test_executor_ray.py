"""RayExecutor against a real local Ray cluster, started inside a network namespace this module creates.

Ray advertises the machine's non-loopback address for its control server (domain.md F.5) and test traffic must
stay on loopback, so the cluster and its driver run in a new network namespace with only ``lo`` up (what
``unshare -n`` + ``ip link set lo up`` do; root, as in CI). One process (``ray_scenarios.py``) enters it, starts Ray
once and drives every scenario; it writes facts to a JSON file and the tests below judge them. The same runs also go
through the LocalExecutor there, to compare the two backends.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path

import pytest
from exec_helpers import kill_leftovers, processes_mentioning, ray_unavailable

from tests.conftest import require_real

SCRIPT = Path(__file__).with_name("ray_scenarios.py")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report() -> dict:
    reason = ray_unavailable()
    # CI installs the extra and runs as root: a skip there would hide a regression (require_real fails in CI,
    # judged by in_ci() like every other real part, not by any non-empty CI variable)
    require_real(not reason, reason)
    # A short private TMPDIR: Ray keeps its session (and unix socket paths, ≤ 107 bytes) under it, and the workers
    # inherit it, so their temporary folders can be checked. HOME too: Ray writes its auth token to ~/.ray/.
    base = Path(tempfile.mkdtemp(prefix="ptr", dir="/tmp"))
    (base / "tmp").mkdir()
    (base / "work").mkdir()
    out = base / "report.json"
    env = {**os.environ, "TMPDIR": str(base / "tmp"), "HOME": str(base), "PYTHONUNBUFFERED": "1"}
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, str(SCRIPT), str(out), str(base / "work")],
            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600, check=False)
        wall_s = time.monotonic() - t0
        leftovers = processes_mentioning(str(base))
        kill_leftovers(leftovers)
        if proc.returncode != 0 or not out.exists():
            pytest.fail(f"ray_scenarios.py exited {proc.returncode}:\n{proc.stderr[-4000:]}")
        data = json.loads(out.read_text())
        data.update(wall_s=round(wall_s, 1), stdout=proc.stdout, leftover_processes=leftovers)
        sys.stderr.write(f"[ray scenarios: {data['wall_s']} s in all, Ray started in {data['connect_s']} s, "
                         f"per scenario {data.get('times')}]\n")
        return data
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_every_scenario_ran_and_ray_left_nothing_behind(report: dict) -> None:
    assert report["errors"] == {}, "\n".join(report["errors"].values())
    assert report["stdout"] == ""  # on stdio, stdout belongs to MCP: Ray must print nothing there
    assert report["leftover_processes"] == []
    assert report["node_ips"] == ["127.0.0.1"]  # the cluster lived on loopback


def test_the_same_runs_give_the_same_results_and_outputs_through_both_backends(report: dict) -> None:
    local, ray = report["same"]["local"], report["same"]["ray"]
    for side in (local, ray):
        assert [r["exit_code"] for r in side["runs"]] == [0, 0, 0]
        assert all(r["exec_hash"] == side["spec_hash"] and r["tampered"] == [] for r in side["runs"])
        assert all(len(r["outputs"]) == 1 and r["outputs"][0].startswith("output/output_") for r in side["runs"])
        assert side["copies_left"] == []
        assert side["runs"][1]["argv1"] == side["workspace_arg"]  # not rewritten: the sandbox mounts the copy there
    assert local["spec_hash"] == ray["spec_hash"]
    # what landed in WORKSPACE/output/: the same folders with the same files and contents, the env's path the copy
    assert local["outputs"] == ray["outputs"]
    assert [o["label"] for o in ray["outputs"]] == ["s0", "s1", "s2"]
    assert ray["outputs"][1]["data_dir"] == "copy"
    assert all(o["files"] == ["program.json", "result.json", "sub/trace.txt"] for o in ray["outputs"])
    assert [r["executor"] for r in ray["runs"]] == ["ray"] * 3


def test_ray_runs_go_in_parallel_up_to_the_cluster_cpus(report: dict) -> None:
    ray = report["same"]["ray"]
    assert ray["overlap"] == 2, ray["queued_s"]  # num_cpus=2, three runs of one CPU each
    assert report["npu"]["cpu_capacity"] == 2


def test_progress_reaches_the_driver(report: dict) -> None:
    p = report["progress"]
    assert p["exit_code"] == 0
    assert len(p["seen"]) >= 2 and all(line.startswith("tick p") for _, line in p["seen"][:-1])
    assert p["seen"][-1][1] == "done p"  # the last line, reported once the run ended


def test_a_run_past_its_budget_times_out_on_the_worker(report: dict) -> None:
    t = report["timeout"]
    assert t["timed_out"] and t["exit_code"] is None and t["outputs"] == 0 and t["wall_s"] < 15


def test_each_npu_run_claims_one_chip_as_a_ray_resource(report: dict) -> None:
    n = report["npu"]
    assert n["resource"] == "NPU" and n["capacity"] == 2
    runs = n["runs"]
    assert all(r["exit_code"] == 0 for r in runs)
    # the child's TILE_FWK_DEVICE_ID is the chip Ray granted, and that is what comes back; the session's pool
    # ("7") is not Ray's business
    assert all(r["child_device"] == r["device_id"] for r in runs)
    assert {r["device_id"] for r in runs} == {"0", "1"}
    for chip in ("0", "1"):
        spans = sorted((r["start"], r["end"]) for r in runs if r["device_id"] == chip)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in pairwise(spans))  # one run per chip
    # Ray assigns chips: a run pinned to chip 8 runs on a chip Ray has, and reports that chip, not 8
    assert n["pinned"]["exit_code"] == 0
    assert n["pinned"]["device_id"] in ("0", "1") and n["pinned"]["child_device"] == n["pinned"]["device_id"]


def test_a_run_that_cannot_start_raises_run_error_through_ray(report: dict) -> None:
    assert report["run_error"]["raised"] == "RunError"


def test_the_probe_reports_from_a_ray_worker_in_and_out_of_the_sandbox(report: dict) -> None:
    for name in ("sandboxed", "unsandboxed"):
        run = report["probe"][name]
        assert run["exit_code"] == 0 and "pypto imported from" in run["output"], run
        assert run["executor"] == "ray" and (run["sandbox"] == "none") == (name == "unsandboxed"), run
        # one process imported pypto: one record, read back on the driver from what the worker captured
        assert run["captured"] and run["status"] == "reported" and run["processes"] == 1, run
        assert run["version"] == "0.2.0" and run["hook"] not in run["sys_path"], run
        assert run["copies_left"] == [], run
    # the script's folder heads sys.path: in the sandbox the copy is mounted at the session's workspace path; without
    # it the copy lies in the worker's own folder
    assert report["probe"]["sandboxed"]["sys_path"][0] == report["probe"]["sandboxed"]["ws"]
    assert report["probe"]["unsandboxed"]["sys_path"][0] == report["probe"]["unsandboxed"]["exec_dir"]
    assert "/pypto-tune-ray-" in report["probe"]["unsandboxed"]["exec_dir"]


@pytest.mark.parametrize("how", ["cancel_graceful", "cancel_forced"])
def test_cancelling_the_driver_kills_the_runs_on_the_workers(report: dict, how: str) -> None:
    c = report[how]
    assert c["started"] and len(c["pids"]) == 4  # two runs, each a job and a grandchild ignoring SIGTERM
    assert c["alive"] == []
    assert c["copies_left"] == [] and c["outputs"] is False
    if how == "cancel_graceful":
        assert c["worker_dirs_left"] == []  # the worker cleaned up; a forced cancel kills it before it can
