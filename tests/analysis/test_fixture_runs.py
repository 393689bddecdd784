"""The recorded scenarios of fixtures/runs/ (real pypto 0.2.0 SIM runs, see its README): our figures against the
numbers the README and the writer's own stdout summary (stdout.txt) state."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pypto_tune.tools.analysis import analyze_runs, find_run_dirs, validate_run
from tests.conftest import require_real

RUNS = Path(__file__).parents[2] / "fixtures" / "runs"


@pytest.fixture(autouse=True)
def _recorded_runs_present() -> None:
    # the recorded runs are committed: without them every test here would skip, and CI would pass without them
    require_real(RUNS.is_dir(), "fixtures/runs not present")


def dirs(scenario: str) -> list[Path]:
    return find_run_dirs(RUNS / scenario)


def writer_summary(scenario: str) -> list[tuple[float, float, int]]:
    """(AICore End-to-End Time, AICore Utilization %, Total Task Count) per kernel call, from stdout.txt."""
    text = (RUNS / scenario / "stdout.txt").read_text()
    e2e = [float(x) for x in re.findall(r"AICore End-to-End Time: ([\d.]+)", text)]
    util = [float(x) for x in re.findall(r"AICore Utilization:\s+([\d.]+)%", text)]
    tasks = [int(x) for x in re.findall(r"Total Task Count:(\d+)", text)]
    return list(zip(e2e, util, tasks))


# max_work_time over the AIC/AIV blocks (B.2, B.10). fixtures/runs/README.md lists 38.7156 / 184.87 / 70.7367 for
# the first three: those are the HUB_80 block's work time, which analyze_perf does not select.
@pytest.mark.parametrize("scenario, max_work_us, hub_work_us", [
    ("softmax_base", 36.405, 38.715555555555554), ("softmax_tuned", 2.7255555555555553, 0.0),
    ("matmul_base", 182.81944444444446, 184.87), ("vector_base", 67.47111111111111, 70.73666666666666),
])
def test_operator_time_and_writer_summary(scenario, max_work_us, hub_work_us):
    a = analyze_runs(dirs(scenario), run_mode="sim")
    assert a.invalid_reasons == []
    assert a.operator_time_us == pytest.approx(max_work_us, rel=1e-12)
    log = (dirs(scenario)[0] / "CostModelSimulationOutput" / "bubble_analysis.log").read_text()
    hub = re.search(r"\[HUB_80\] Execute task num:\d+\n    Core Total Work Time: (\S+)", log)
    assert float(hub.group(1)) == pytest.approx(hub_work_us, rel=1e-12)
    ((e2e, util, tasks),) = writer_summary(scenario)
    # B.3: the writer's stdout summary is reproduced from the trace (it prints 2 decimals)
    assert round(a.e2e_us, 2) == e2e
    assert round(a.writer_utilization_pct, 2) == util
    assert a.task_count == tasks
    assert a.crosscheck.agrees  # B.9.2: the trace alone reproduces the log


def test_multi_device_task_run_is_invalid():
    (d,) = dirs("softmax_multi_device_task")
    reasons = validate_run(d, "sim")
    assert any("Fake Task: 48" in r for r in reasons)
    assert any("48 core(s) have a negative Wait Schedule Time (worst [AIV_" in r and "-75.534 µs" in r
               for r in reasons)
    a = analyze_runs([d], run_mode="sim")
    assert not a.crosscheck.agrees and a.fake_task_count == 48
    assert a.operator_time_us == pytest.approx(55.79333333333333, rel=1e-12)  # README's 58.3244 is HUB_80


def test_two_calls_are_summed_and_the_newest_is_last():
    ds = dirs("softmax_two_calls")
    assert [d.name for d in ds] == ["output_20261202_133920_488895_21027_C0000202",
                                    "output_20261202_133921_404029_21027_C0000202"]
    a = analyze_runs(ds, run_mode="sim")
    assert [round(p.operator_time_us, 4) for p in a.per_dir] == [2.7256, 2.7256]
    assert a.operator_time_us == pytest.approx(2 * a.per_dir[0].operator_time_us, rel=1e-12)
    assert [round(p.e2e_us, 2) for p in a.per_dir] == [e for e, _, _ in writer_summary("softmax_two_calls")]
    assert a.task_count == 64


def test_softmax_tuning_shows_in_the_figures():
    base = analyze_runs(dirs("softmax_base"))
    tuned = analyze_runs(dirs("softmax_tuned"))
    assert base.operator_time_us / tuned.operator_time_us == pytest.approx(13.357, abs=0.001)
    assert tuned.task_count == 32 and base.task_count == 272
