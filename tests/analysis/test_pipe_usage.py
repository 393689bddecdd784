"""``pipe_usage.csv`` reader (A.6 layout) and how a broken NPU-only file shows up in the analysis."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pypto_tune.tools.analysis import analyze_runs
from pypto_tune.tools.analysis.pipe_usage import parse_pipe_usage_text, read_pipe_usage
from pypto_tune.tools.errors import ArtifactError

from .analysis_helpers import run_dirs

HEADER = ("Core, TotalTime, MTE_IN_Time, MTE_IN_Usage, MTE1_Time, MTE1_Usage, MTE_OUT_Time, MTE_OUT_Usage, "
          "CUBE_Time, CUBE_Usage, VECTOR_ALU_Time, VECTOR_ALU_Usage")
GOOD = f"""Total Core Num:3
AIC: 1
AIV: 2
Total Pipe Usage
Pipe, AverageTime, TotalExecuteTime, AverageUsage
CUBE, 4.5, 20.0, 22.5%
VECTOR_ALU, 1.25, 20.0, 6.25%
MTE_IN, 3.0, 20.0, 15.0%
MTE1, 0.5, 20.0, 2.5%
MTE_OUT, 1.0, 20.0, 5.0%


AICore Pipe Usage
{HEADER}
AIC_1, 20.0, 5.0, 27.78%, 0.5, 2.778%, 1.0, 5.556%, 4.5, 25.0%, 0.0, 0.0%
AIV_25, 20.0, 2.0, 20.0%, 0.0, 0.0%, 1.0, 10.0%, 0.0, 0.0%, 1.5, 15.0%
AIV_26, 20.0, 2.0, 1.235e+02%, 0.0, 0.0%, 1.0, 10.0%, 0.0, 0.0%, 1.0, 10.0%
"""


def test_the_a6_layout_is_read_by_its_headers() -> None:
    p = parse_pipe_usage_text(GOOD, "pipe_usage.csv")
    assert (p.total_cores, p.aic_cores, p.aiv_cores) == (3, 1, 2)
    assert p.pipes == ["MTE_IN", "MTE1", "MTE_OUT", "CUBE", "VECTOR_ALU"]
    cube = p.total("CUBE")
    assert cube is not None and (cube.avg_time_us, cube.total_execute_time_us, cube.avg_usage_pct) == (4.5, 20.0, 22.5)
    assert [c.core for c in p.cores] == ["AIC_1", "AIV_25", "AIV_26"]
    assert [c.core_type for c in p.cores] == ["AIC", "AIV", "AIV"]
    assert p.cores[0].time_us["CUBE"] == 4.5 and p.cores[0].usage_pct["MTE1"] == 2.778
    assert p.cores[2].usage_pct["MTE_IN"] == pytest.approx(123.5)  # the writer's 4-significant-digit form


def test_columns_follow_the_header_order() -> None:
    text = GOOD.replace("Core, TotalTime, MTE_IN_Time, MTE_IN_Usage, MTE1_Time",
                        "Core, TotalTime, MTE1_Time, MTE1_Usage, MTE_IN_Time")
    text = text.replace("MTE1_Usage, MTE_OUT_Time", "MTE_IN_Usage, MTE_OUT_Time", 1)
    p = parse_pipe_usage_text(text)
    assert p.pipes[:2] == ["MTE1", "MTE_IN"] and p.cores[0].time_us["MTE1"] == 5.0


@pytest.mark.parametrize(("mutate", "message", "line"), [
    (lambda t: "", "is empty", "byte 0"),
    (lambda t: t[:-1], "truncated", "line 17"),
    (lambda t: t.replace("Total Core Num:3", "Total Core Num:4"), r"Total Core Num 4 ≠ AIC 1 \+ AIV 2", "line 1"),
    (lambda t: t.replace("AIC: 1", "AIC one"), "expected 'AIC:' and a count", "line 2"),
    (lambda t: t.replace("Total Pipe Usage\n", "Pipe Usage\n"), "'Total Pipe Usage' title", "line 4"),
    (lambda t: t.replace("CUBE, 4.5, 20.0, 22.5%", "CUBE, 4.5, 20.0, 22.5"), "lacks its % sign", "line 6"),
    (lambda t: t.replace("MTE1, 0.5, 20.0", "MTE1, nan, 20.0"), "finite and not negative", "line 9"),
    (lambda t: t.replace("MTE_OUT, 1.0, 20.0, 5.0%", "MTE_OUT, 1.0, 20.0"), "needs 4 cells", "line 10"),
    (lambda t: t.replace("VECTOR_ALU_Time, VECTOR_ALU_Usage", "VECTOR_ALU_Usage, VECTOR_ALU_Time"),
     "unexpected per-core header", "line 14"),
    (lambda t: t.replace("AIV_25, 20.0, 2.0,", "AIV_25, 20.0, x,"), "not a number", "line 16"),
    (lambda t: t.replace(", 1.5, 15.0%\n", ", 1.5\n"), "needs 12 cells", "line 16"),
    (lambda t: t.replace("AIV_26,", "AIV_25,"), "appears twice", "line 17"),
    (lambda t: t.rsplit("AIV_26", 1)[0], "2 core rows but Total Core Num is 3", "AICore Pipe Usage"),
])
def test_a_broken_file_names_the_line(mutate, message, line) -> None:
    with pytest.raises(ArtifactError, match=message) as err:
        parse_pipe_usage_text(mutate(GOOD), "pipe_usage.csv")
    assert f"at: {line}" in str(err.value) and "draw_swim_lane.py -g" in str(err.value)


def test_unreadable_bytes_are_an_artifact_error(tmp_path) -> None:
    path = tmp_path / "pipe_usage.csv"
    path.write_bytes(b"Total Core Num:\xff\n")
    with pytest.raises(ArtifactError, match="not UTF-8"):
        read_pipe_usage(path)


def test_broken_npu_only_files_become_warnings_and_good_ones_are_attached(tmp_path) -> None:
    src = run_dirs("npu_handmade")[0]
    run = tmp_path / src.name
    shutil.copytree(src, run)
    (run / "pipe_usage.csv").write_text(GOOD.replace("AIC: 1", "AIC: x"))
    (run / "machine_runtime_operator_trace_0.json").write_text('{"traceEvents": [')
    a = analyze_runs([run])
    assert a.aicpu_e2e_us is None and a.pipe_usage == [] and a.per_dir[0].pipe_usage is None
    warned = [w for w in a.warnings if "ignored" in w]
    assert len(warned) == 2 and "AICPU trace ignored" in warned[0] and "not valid JSON" in warned[0]
    assert "pipe_usage.csv ignored" in warned[1] and "line 2" in warned[1]
    assert a.operator_time_us == 24.5  # the swimlane figures stand on their own
    (run / "pipe_usage.csv").write_text(GOOD)
    Path(run / "machine_runtime_operator_trace_0.json").unlink()
    good = analyze_runs([run])
    assert good.pipe_usage[0].total_cores == 3 and good.per_dir[0].pipe_usage == good.pipe_usage[0]
    assert not [w for w in good.warnings if "ignored" in w]
