"""tools/operations/result_views.py: the published analysis is small, keeps the top items in order, counts what it left out,
and its text is a reading of the numbers, not the structured content again."""

from __future__ import annotations

import json
import shutil

import pytest
from pypto_tune.tools.operations.result_views import (
    SUMMARY_BUDGET,
    TEXT_BUDGET,
    analysis_text,
    result_text,
    summarize_analysis,
)
from pypto_tune.tools.operations.results import (
    AnalyzeResult,
    JobHandle,
    StatusResult,
    SuggestionOut,
)
from pypto_tune.tools.service import TuningService
from pypto_tune.tools.snapshot import CoreStat

from tests.conftest import RUNS

SCENARIOS = sorted(p.name for p in RUNS.iterdir() if (p / "output").is_dir())


@pytest.fixture(scope="module")
def analyses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, AnalyzeResult]:
    """The whole analysis of every recorded run, as the operations build it (copies: the report is written there)."""
    ws = tmp_path_factory.mktemp("runs")
    svc = TuningService(default_workspace=ws)
    out = {}
    for name in SCENARIOS:
        shutil.copytree(RUNS / name, ws / name)
        out[name] = svc.analyze_bubbles(None, output_dir=str(ws / name), lang="en")
    return out


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_recorded_run_summarises_under_the_budget_with_the_top_items_in_order(analyses, name) -> None:
    full = analyses[name]
    s = summarize_analysis(full, lang="en", detail_uri="pypto-tune://sessions/s-1/analyses/3")
    assert len(s.model_dump_json()) <= SUMMARY_BUDGET
    assert len(full.model_dump_json()) > 3 * SUMMARY_BUDGET  # the reason the summary exists
    # headline figures are the analysis' own (rounded to 3 decimals)
    assert s.operator_time_us == pytest.approx(full.operator_time_us, abs=1e-3)
    assert s.active_core_utilization == pytest.approx(full.active_core_utilization, abs=1e-3)
    # worst cores: active ones only, lowest utilisation first, and the count of the rest
    active = sorted(c.utilization_pct for c in full.cores if c.active)
    assert [c.utilization_pct for c in s.worst_cores] == [pytest.approx(u, abs=1e-3) for u in
                                                          active[:len(s.worst_cores)]]
    assert s.cores_total == len(full.cores) and s.cores_active == len(active)
    assert len(s.worst_cores) + s.omitted.cores == len(full.cores)
    # suggestions keep the analysis' rank order; everything shown + omitted = everything
    assert [x.catalog_id for x in s.suggestions] == [x.catalog_id for x in full.suggestions[:len(s.suggestions)]]
    assert len(s.suggestions) + s.omitted.suggestions == len(full.suggestions)
    assert len(s.bottlenecks) + s.omitted.bottlenecks == len(full.bottlenecks)
    assert len(s.kernels) + s.omitted.kernels == len(full.details["per_dir"])
    assert len(s.top_leaves) + s.omitted.leaves == len(full.details["leaves"])
    assert s.detail_uri == "pypto-tune://sessions/s-1/analyses/3" and s.full is None


def test_bottlenecks_come_most_severe_first_with_false_alarms_last() -> None:
    full = _synthetic(bottlenecks=[
        {"kind": "bubble", "severity": "low", "message": "low one", "false_alarm": False},
        {"kind": "utilization", "severity": "high", "message": "false alarm", "false_alarm": True},
        {"kind": "load_balance", "severity": "high", "message": "real high", "false_alarm": False},
        {"kind": "dependency", "severity": "medium", "message": "medium", "false_alarm": False},
    ])
    s = summarize_analysis(full, lang="en", limits=_limits(bottlenecks=3))
    assert [b.message for b in s.bottlenecks] == ["real high", "medium", "low one"]
    assert s.omitted.bottlenecks == 1


def test_lang_picks_the_bottleneck_message_language_and_falls_back_to_english() -> None:
    full = _synthetic(bottlenecks=[{"kind": "bubble", "severity": "high", "message": "bubble high",
                                    "message_zh": "气泡率高"},
                                   {"kind": "utilization", "severity": "high", "message": "only english"}])
    assert [b.message for b in summarize_analysis(full, lang="zh").bottlenecks] == ["气泡率高", "only english"]
    assert [b.message for b in summarize_analysis(full, lang="en").bottlenecks] == ["bubble high", "only english"]


def test_a_pathological_analysis_still_fits_the_budget() -> None:
    """300 cores, 200 suggestions with long evidence, 50 long warnings: the limits shrink until it fits."""
    full = _synthetic(n_cores=300, n_suggestions=200, warnings=["w" * 2000] * 50,
                      evidence={f"k{i}": [1.123456789] * 50 for i in range(30)})
    s = summarize_analysis(full, lang="en")
    assert len(s.model_dump_json()) <= SUMMARY_BUDGET
    assert s.suggestions and s.worst_cores and s.warnings  # never shrunk to nothing
    assert s.omitted.suggestions == 200 - len(s.suggestions) and s.omitted.warnings == 50 - len(s.warnings)


def test_full_detail_carries_the_whole_analysis() -> None:
    full = _synthetic(n_cores=72)
    s = summarize_analysis(full, lang="en", include_full=True)
    assert s.full is not None and len(s.full["cores"]) == 72 and s.full == full.model_dump(mode="json")


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_text_is_a_short_reading_not_the_structured_content_again(analyses, name) -> None:
    s = summarize_analysis(analyses[name], lang="en", detail_uri="pypto-tune://sessions/s-1/analyses/3")
    text = analysis_text(s)
    assert len(text) <= TEXT_BUDGET
    assert f"{s.operator_time_us:.3f} µs" in text
    assert "pypto-tune://sessions/s-1/analyses/3" in text  # where the rest is
    assert s.model_dump_json() not in text and '"worst_cores"' not in text
    if s.suggestions:
        assert f"suggest {s.suggestions[0].catalog_id}:" in text


def test_generic_text_shows_each_field_once_and_long_text_as_a_block() -> None:
    st = StatusResult(session_id="s-1", state="S4_TUNE", stage="FRONTEND", message="S4_TUNE / FRONTEND",
                      next_actions=["apply_tuning_patch", "get_status"], board="| a | b |\n| 1 | 2 |",
                      baseline_us=36.405, target_us=12.135, best_us=None, rounds=3, kept=2, success_rate_pct=66.7,
                      finished=False, running_job=None, drift=False)
    text = result_text(st)
    assert text.splitlines()[0] == "S4_TUNE / FRONTEND"
    assert "baseline_us: 36.405" in text and "board:\n| a | b |\n| 1 | 2 |" in text
    assert text.splitlines()[-1] == "next: apply_tuning_patch, get_status"
    assert "best_us" not in text  # nothing to say about a null


def test_job_text_says_how_to_poll() -> None:
    job = JobHandle(job_id="job-1", tool="collect_swimlane", status="running", elapsed_s=4.2,
                    message="collect_swimlane is running as job-1; call wait_job(job_id='job-1')",
                    next_actions=["wait_job", "cancel_job"], last_output="compiling\nrepeat 1/1: simulating")
    text = result_text(job)
    assert "wait_job(job_id='job-1')" in text and "last output: repeat 1/1: simulating" in text


# ---------------------------------------------------------------------------------------------- helpers
def _limits(**kw):
    from pypto_tune.tools.operations.result_views import Limits

    return Limits(**kw)


def _synthetic(*, n_cores: int = 8, n_suggestions: int = 3, bottlenecks: list[dict] | None = None,
               warnings: list[str] | None = None, evidence: dict | None = None) -> AnalyzeResult:
    cores = [CoreStat(name=f"AIV_{i}", core_type="AIV", work_us=10.0 + i, busy_us=5.0, wait_schedule_us=1.0,
                      utilization_pct=100.0 * ((i * 37) % n_cores) / n_cores, bubble_rate_pct=10.0,
                      active=i % 3 != 0) for i in range(n_cores)]
    return AnalyzeResult(
        session_id=None, message="synthetic", next_actions=[], output_dirs=["/x/output_1"], operator_time_us=10.0,
        e2e_us=9.0, avg_core_utilization=20.0, avg_bubble_rate=40.0, load_balance=0.0, active_core_utilization=30.0,
        active_bubble_rate=60.0, active_load_balance=90.0, cores=cores, ratings={"overall": 2},
        bottlenecks=[{"source": "reference", "value": 1.0, "threshold": 2.0, **b} for b in (bottlenecks or [])],
        suggestions=[SuggestionOut(catalog_id=f"F-{i + 1}", stage="frontend", priority=str(i + 1),
                                   reason="because " * 40, evidence=dict(evidence or {"x": 1.23456}))
                     for i in range(n_suggestions)],
        warnings=list(warnings or []), report_path="/x/report.md",
        details={"per_dir": [{"run_dir": "/x/output_1", "operator_time_us": 10.0, "e2e_us": 9.0, "task_count": 5,
                              "active_core_utilization_pct": 30.0, "active_bubble_rate_pct": 60.0}],
                 "leaves": [{"leaf_hash": str(i), "core_type": "AIV", "count": 1, "avg_us": 1.0, "total_us": float(i),
                             "source": "op.py:1", "short_task": True} for i in range(12)]},
    )


def test_synthetic_helper_round_trips_as_json() -> None:
    # guards the helper itself: what the tests above feed in is a valid whole analysis
    assert json.loads(_synthetic().model_dump_json())["cores"][0]["name"] == "AIV_0"
