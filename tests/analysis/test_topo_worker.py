"""dyn_topo.txt read in a second process while the trace is decoded: same answer, same errors, and a safe fallback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pypto_tune.tools.analysis import analyze_runs, engine, find_run_dirs, topo_worker
from pypto_tune.tools.analysis.chains import topo_summary
from pypto_tune.tools.analysis.topo_worker import TopoJob
from pypto_tune.tools.errors import ArtifactError

from .analysis_helpers import DATA

pytestmark = pytest.mark.process


def _topo(name: str) -> Path:
    return next((DATA / name / "runs").glob("*/dyn_topo.txt"))


@pytest.mark.parametrize("name", ["sim_softmax", "sim_matmul"])
def test_the_worker_process_gives_the_in_process_summary(name):
    path = _topo(name)
    job = TopoJob(path, min_offload_bytes=0)
    assert job.offloaded
    got = job.result()
    assert job.offloaded  # answered by the child, not by the fallback
    assert got == topo_summary(path)
    assert got["chains"].total_tasks > 0 and got["psg"]


def test_a_malformed_file_raises_the_same_artifact_error_from_the_worker(tmp_path):
    lines = _topo("sim_softmax").read_text().splitlines(keepends=True)
    lines[5] = lines[5].replace(",", ",x", 1)
    bad = tmp_path / "dyn_topo.txt"
    bad.write_text("".join(lines))
    with pytest.raises(ArtifactError) as inline:
        topo_summary(bad)
    job = TopoJob(bad, min_offload_bytes=0)
    with pytest.raises(ArtifactError) as offloaded:
        job.result()
    assert job.offloaded
    assert str(offloaded.value) == str(inline.value) and "line 6" in str(offloaded.value)


def test_a_worker_that_cannot_answer_falls_back_to_the_in_process_read(monkeypatch):
    path = _topo("sim_softmax")
    monkeypatch.setattr(sys, "executable", "/bin/false")  # starts, prints nothing, exits 1
    job = TopoJob(path, min_offload_bytes=0)
    assert job.result() == topo_summary(path)
    assert not job.offloaded


def test_small_files_and_the_inline_switch_stay_in_process(monkeypatch):
    path = _topo("sim_softmax")
    assert not TopoJob(path).offloaded  # a few KiB: an interpreter start would cost more than it saves
    monkeypatch.setenv(topo_worker.INLINE_ENV, "1")
    assert not TopoJob(path, min_offload_bytes=0).offloaded


def test_the_whole_analysis_is_identical_either_way(scenario, monkeypatch):
    runs = find_run_dirs(scenario("sim_softmax"))
    inline = analyze_runs(runs[-1:])
    jobs: list[TopoJob] = []

    class Spy(TopoJob):
        def result(self):
            out = super().result()
            jobs.append(self)
            return out

    monkeypatch.setattr(topo_worker, "MIN_OFFLOAD_BYTES", 0)
    monkeypatch.setattr(engine, "TopoJob", Spy)
    offloaded = analyze_runs(runs[-1:])
    assert [j.offloaded for j in jobs] == [True]
    assert offloaded.model_dump() == inline.model_dump()
