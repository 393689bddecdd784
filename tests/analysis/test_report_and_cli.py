"""The report file (zh/en) and `pypto-tune analyze` (human text, --json, newest run, clean errors)."""

from __future__ import annotations

import json

from pypto_tune.tools.analysis import analyze_runs, find_run_dirs, write_report
from pypto_tune.tools.analysis.cli import analyze_command


def test_report_in_both_languages(scenario, tmp_path):
    ws = scenario("sim_softmax")
    a = analyze_runs(find_run_dirs(ws))
    zh = write_report(a, tmp_path / "zh.md", "zh").read_text()
    en = write_report(a, tmp_path / "en.md", "en").read_text()
    assert "# PyPTO 算子性能分析报告" in zh and "算子实际执行时间" in zh and "35.929" in zh
    assert "# PyPTO operator performance analysis report" in en
    for section in ("## Summary", "## Bottlenecks", "## Suggestions (ranked)", "## Per-core detail",
                    "## Per-leaf (leafHash) statistics", "## Core usage", "## AIV dependency chains",
                    "## Cross-check (recomputed from the trace alone)"):
        assert section in en
    assert "| 12.67 |" in en and "| 19.00 |" in en  # reference and corrected side by side
    assert "24 idle cores not listed" in en


def test_cli_picks_the_newest_run_and_says_so(scenario, capsys):
    ws = scenario("sim_matmul")  # an empty failed run first, then the good one
    assert analyze_command([str(ws), "--json", "--lang", "en"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["picked_run"].endswith("output_20261202_133539_512482_7926_C0000202") and data["runs_found"] == 2
    assert "newest of 2 runs" in err
    assert data["operator_time_us"] == 18.00888888888889
    assert data["report_path"].endswith("CostModelSimulationOutput/performance_analysis_report.md")
    assert analyze_command([str(ws / "output"), "--no-report"]) == 0
    out, _ = capsys.readouterr()
    assert out.startswith("analysed the newest of 2 runs"), out[:200]
    # a NOT FULL core-usage finding must come with its catalogue answer (S-2: shrink tiles for more tasks)
    assert "NOT FULL" not in out or "S-2" in out, out


def test_cli_errors_are_one_message_and_exit_2(scenario, tmp_path, capsys):
    assert analyze_command([str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert analyze_command([str(tmp_path)]) == 2
    assert "no PyPTO run folder" in capsys.readouterr().err
    assert analyze_command(["--lang", "fr", str(tmp_path)]) == 2
    assert "invalid choice" in capsys.readouterr().err
    ws = scenario("sim_matmul")
    empty = sorted((ws / "output").iterdir())[0]
    assert analyze_command([str(empty)]) == 2
    err = capsys.readouterr().err
    assert "merged_swimlane.json is missing" in err and "Traceback" not in err
