"""The zh report speaks Chinese in its bottleneck and suggestion sections; the en report is left as it was.

Suggestion reasons and bottleneck messages carry an English text (scripts read it) and a zh text (the zh report
shows it). Catalogue SIM notes quoted in reasons are translated in catalog.json, and a translation keeps every
figure of its English original.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from .analysis_helpers import run_dirs
from pypto_tune.tools.analysis import analyze_runs, load_catalog
from pypto_tune.tools.analysis import suggest as suggest_mod
from pypto_tune.tools.analysis.metrics import CoreFigures, bottlenecks
from pypto_tune.tools.analysis.models import RunAnalysis
from pypto_tune.tools.analysis.report import render_report

CJK = re.compile(r"[\u4e00-\u9fff]")
# Three ASCII words in a row is an English phrase; ids and knobs (S-3, NOT FULL, unroll_list) are at most two.
ENGLISH_PHRASE = re.compile(r"[A-Za-z][\w.\-]*(?: [A-Za-z][\w.\-]*){2,}")
NUMBER = re.compile(r"\d+(?:\.\d+)?")

# recorded runs that between them raise every kind of flag the recorded data can raise
SCENARIOS = ["sim_softmax", "sim_matmul", "npu_handmade"]


def analysis(scenario: str) -> RunAnalysis:
    return analyze_runs(run_dirs(scenario)[-1:])  # sim_matmul's first run is an empty failed one


def bottleneck_lines(report: str, heading: str, next_heading: str) -> list[str]:
    """The message part of each ``- **sev** [source] message`` line of the bottleneck section."""
    section = report[report.index(heading):report.index(next_heading)]
    return [line.split("] ", 1)[1] for line in section.splitlines() if line.startswith("- **")]


def reason_cells(report: str, heading: str, next_heading: str) -> list[str]:
    """The last cell (the reason) of each data row of the suggestion table."""
    section = report[report.index(heading):report.index(next_heading)]
    rows = [line for line in section.splitlines() if re.match(r"\| \d+ \|", line)]
    return [row.rstrip(" |").rsplit(" | ", 1)[1] for row in rows]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_zh_report_shows_zh_bottleneck_messages_and_suggestion_reasons(scenario):
    a = analysis(scenario)
    assert a.bottlenecks and a.suggestions
    zh = render_report(a, "zh")
    messages = bottleneck_lines(zh, "## 瓶颈", "## 优化建议")
    reasons = reason_cells(zh, "## 优化建议", "## 各核详情")
    assert len(messages) == len(a.bottlenecks) and len(reasons) == len(a.suggestions)
    for b, line in zip(a.bottlenecks, messages):
        assert b.message_zh and line.startswith(b.message_zh) and b.message not in zh
    for s, cell in zip(a.suggestions, reasons):
        assert s.reason_zh and cell == s.reason_zh.replace("|", "/") and s.reason not in zh
    for text in messages + reasons:
        assert CJK.search(text), text
        assert not ENGLISH_PHRASE.search(text), text


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_en_report_keeps_the_english_texts(scenario):
    a = analysis(scenario)
    en = render_report(a, "en")
    messages = bottleneck_lines(en, "## Bottlenecks", "## Suggestions (ranked)")
    reasons = reason_cells(en, "## Suggestions (ranked)", "## Per-core detail")
    assert [m.removesuffix(" (false alarm of the reference formula)") for m in messages] == \
        [b.message for b in a.bottlenecks]
    assert reasons == [s.reason.replace("|", "/") for s in a.suggestions]
    assert not any(CJK.search(text) for text in messages + reasons)


def test_zh_report_falls_back_to_english_when_an_analysis_has_no_zh_text():
    # an analysis serialised before the zh fields existed
    a = analysis("npu_handmade")
    old = RunAnalysis.model_validate(a.model_dump(exclude={"bottlenecks": {"__all__": {"message_zh"}},
                                                           "suggestions": {"__all__": {"reason_zh"}}}))
    zh = render_report(old, "zh")
    assert bottleneck_lines(zh, "## 瓶颈", "## 优化建议")[0].startswith(a.bottlenecks[0].message)
    assert reason_cells(zh, "## 优化建议", "## 各核详情")[0] == a.suggestions[0].reason.replace("|", "/")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_translation_keeps_every_figure_of_the_english_text(scenario):
    a = analysis(scenario)
    for en, zh in [(b.message, b.message_zh) for b in a.bottlenecks] + [(s.reason, s.reason_zh) for s in a.suggestions]:
        assert Counter(NUMBER.findall(zh)) == Counter(NUMBER.findall(en)), (en, zh)


def test_every_reference_flag_has_a_zh_message():
    # figures bad enough to raise all four reference flags; the dependency flag never fires in the recorded runs
    fig = CoreFigures(avg_util=12.5, avg_bubble=30.25, avg_aic_util=12.5, avg_aiv_util=12.5, avg_aic_bubble=30.25,
                      avg_aiv_bubble=30.25, load_balance=40.0, active_util=88.0, active_bubble=5.0, active_balance=45.5,
                      max_work_us=100.0, max_aic_wait_pred_us=612.5)
    flags = bottlenecks(fig)
    assert {b.kind for b in flags} == {"utilization", "bubble", "load_balance", "dependency"}
    for b in flags:
        assert CJK.search(b.message_zh) and not ENGLISH_PHRASE.search(b.message_zh), b.message_zh
        assert Counter(NUMBER.findall(b.message_zh)) == Counter(NUMBER.findall(b.message)), (b.message, b.message_zh)
    by_kind = {b.kind: b for b in flags}
    assert "不构成问题" in by_kind["utilization"].message_zh  # 88 % on the active cores: a false alarm
    assert "不构成问题" not in by_kind["load_balance"].message_zh  # 45.5 % on the active cores: a real problem


def test_every_symptom_has_a_zh_reason():
    assert set(suggest_mod._REASONS_ZH) == set(suggest_mod._REASONS)
    for key, text in suggest_mod._REASONS_ZH.items():
        assert CJK.search(text), key
        assert Counter(NUMBER.findall(text)) == Counter(NUMBER.findall(suggest_mod._REASONS[key])), key


def test_every_catalog_sim_check_has_a_zh_translation():
    items = load_catalog().items
    checked = [i for i in items if i.sim_check]
    assert checked
    for item in checked:
        assert item.sim_check_zh and item.sim_check_zh != item.sim_check, item.id
        assert Counter(NUMBER.findall(item.sim_check_zh)) == Counter(NUMBER.findall(item.sim_check)), item.id
    # a zh note without an English one would never be shown: suggestions quote a note only when sim_check is set
    assert not [i.id for i in items if i.sim_check_zh and not i.sim_check]
