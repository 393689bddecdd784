"""Run folders: found from a workspace, an output/ folder or a run; sorted by the name's timestamp; SIM and NPU
layouts resolved."""

from __future__ import annotations

import os
import time

import pytest

from pypto_tune.tools.analysis.layout import find_run_dirs, locate, run_timestamp
from pypto_tune.tools.errors import InputError


def _mk(base, name):
    d = base / "output" / name
    d.mkdir(parents=True)
    return d


def test_sorted_by_name_timestamp_not_mtime(tmp_path):
    b = _mk(tmp_path, "output_20261202_105835_999999_7014_C0000202")
    a = _mk(tmp_path, "output_20261202_105835_000001_7999_C0000202")
    c = _mk(tmp_path, "output_20261203_000000_000000_1_C")
    os.utime(a, (time.time() + 100, time.time() + 100))  # a newer mtime must not reorder
    (tmp_path / "output" / "notes").mkdir()
    for root in (tmp_path, tmp_path / "output"):
        assert find_run_dirs(root) == [a, b, c]
    assert find_run_dirs(b) == [b]
    assert find_run_dirs(b / "CostModelSimulationOutput" if (b / "CostModelSimulationOutput").mkdir() is None
                         else b) == [b]


def test_created_after_uses_the_name(tmp_path):
    old = _mk(tmp_path, "output_20200101_000000_000000_1_C")
    new = _mk(tmp_path, time.strftime("output_%Y%m%d_%H%M%S_000000_1_C", time.localtime(time.time() + 5)))
    assert find_run_dirs(tmp_path, created_after=time.time()) == [new]
    assert run_timestamp(old) == time.mktime((2020, 1, 1, 0, 0, 0, 0, 0, -1))


def test_bad_roots(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        find_run_dirs(tmp_path / "nope")
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="not a folder"):
        find_run_dirs(tmp_path / "f")
    assert find_run_dirs(tmp_path) == []


def test_sim_and_npu_layouts(tmp_path):
    sim = _mk(tmp_path, "output_20261202_105835_1_1_C")
    (sim / "CostModelSimulationOutput").mkdir()
    for n in ("bubble_analysis.log", "merged_swimlane.json", "_simulate.stat.report.txt"):
        (sim / "CostModelSimulationOutput" / n).write_text("x")
    (sim / "program.json").write_text("{}")
    (sim / "dyn_topo.txt").write_text("x")
    f = locate(sim)
    assert f.layout == "sim" and f.swim_dir == sim / "CostModelSimulationOutput"
    assert f.program == sim / "program.json" and f.topo == sim / "dyn_topo.txt"
    assert f.report_path == sim / "CostModelSimulationOutput" / "performance_analysis_report.md"
    npu = _mk(tmp_path, "output_20261202_105836_1_1_C")
    for n in ("bubble_analysis.log", "merged_swimlane.json", "program.json", "dyn_topo.txt",
              "tilefwk_L1_prof_data.json"):
        (npu / n).write_text("x")
    g = locate(npu)
    assert g.layout == "npu" and g.swim_dir == npu and g.log == npu / "bubble_analysis.log" and g.sim_stat is None
    gz = _mk(tmp_path, "output_20261202_105837_1_1_C")
    (gz / "merged_swimlane.json.gz").write_bytes(b"")
    assert locate(gz).trace == gz / "merged_swimlane.json.gz" and locate(gz).log is None


def test_a_folder_written_just_before_a_run_started_is_not_that_runs(tmp_path):
    # the demo's failed round 4 left a folder 0.8 s before round 5's collection began; it must not be summed in
    start = time.time()
    stamp = lambda t: time.strftime("output_%Y%m%d_%H%M%S_", time.localtime(t)) + f"{int(t % 1 * 1e6):06d}_1_C"
    before = _mk(tmp_path, stamp(start - 0.8))
    after = _mk(tmp_path, stamp(start + 0.3))
    assert run_timestamp(before) < start
    assert find_run_dirs(tmp_path, created_after=start) == [after]
