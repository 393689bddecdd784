"""Every label of a report is true: a gain its batch did not choose is not a failure, the success rate counts gains,
a campaign's budget end is not a person's stop, rounds are listed by number, and no path of the machine is shown
where a path in the workspace says the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from pypto_tune.tools.operations.snapshot_builder import build_snapshot
from pypto_tune.tools.report import render_report, render_status_board
from pypto_tune.tools.report.i18n import finish_reason_text, strings
from pypto_tune.tools.session.state import derive_state, load_rows
from tests.report.test_report_npu_rows import build_npu_session


@pytest.fixture(scope="module")
def npu(tmp_path_factory: pytest.TempPathFactory):
    """The NPU session of test_report_npu_rows with round 2 turned into a gain its batch did not choose (round 3 won),
    and its rounds listed out of order, as a batch's trials can be recorded."""
    w = build_npu_session(tmp_path_factory.mktemp("labels") / "npu-ws")
    snap = build_snapshot(derive_state(load_rows(w.ledger, w.sid)))
    rounds = {r.number: r for r in snap.rounds}
    r2 = rounds[2].model_copy(update={"result_type": "not-chosen", "decision": "reverted", "after_us": 30.0,
                                      "delta_pct": -15.3})
    return snap.model_copy(update={"rounds": [rounds[3], r2, rounds[1]]})


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_gain_not_chosen_has_its_own_heading_and_is_not_a_failure(npu, tmp_path: Path, lang: str) -> None:
    s = strings(lang)
    for fmt in ("md", "html"):
        text = render_report(npu, fmt, lang, tmp_path).read_text()
        failed = text.split(s["failed_changes"])[1].split(s["not_chosen_changes"])[0]
        not_chosen = text.split(s["not_chosen_changes"])[1]
        assert "F-3" not in failed and s["none"] in failed, (fmt, failed[:300])
        assert "F-3" in not_chosen.split(s["batches"])[0] and "-15.3%" in not_chosen


def test_the_success_rate_counts_every_gain_kept_or_not_chosen(npu) -> None:
    board = render_status_board(npu, "en")
    assert "Success rate (rounds that measured a gain, kept or not chosen): 3/3 (100%)" in board


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_rounds_are_listed_by_number(npu, tmp_path: Path, lang: str) -> None:
    md = render_report(npu, "md", lang, tmp_path).read_text()
    log = md.split(f"## {strings(lang)['rounds']}\n")[1]
    numbers = [line.split("|")[1].strip() for line in log.splitlines() if line.startswith("| ") and "FRONTEND" in line]
    assert numbers == ["1", "2", "3"]
    details = md.split(f"### {strings(lang)['round_details']}")[1]
    assert details.index(f"{strings(lang)['round']} 1 ") < details.index(f"{strings(lang)['round']} 2 ") < \
        details.index(f"{strings(lang)['round']} 3 ")


def test_no_path_of_the_machine_is_shown_where_the_workspace_holds_it(npu, tmp_path: Path) -> None:
    ws = str(npu.workspace).rstrip("/")
    snap = npu.model_copy(update={"data_paths": [f"{ws}/.pypto-tune/ledger.sqlite3"]})
    for lang in ("en", "zh"):
        for fmt in ("md", "html"):
            text = render_report(snap, fmt, lang, tmp_path).read_text()
            assert ws not in text and ".pypto-tune/ledger.sqlite3" in text


@pytest.mark.parametrize("reason, en, zh", [
    ("user stop: campaign budget: 8 trial(s) of this operator used",
     "the trial budget was used (8 trial(s) of this operator)", "试验预算已用完（本算子 8 次试验）"),
    ("user stop: campaign budget: the campaign's overall trial budget is used",
     "the campaign's overall trial budget was used", "战役的总试验预算已用完"),
    ("user stop: campaign stopped: SIGINT", "the campaign was stopped (SIGINT)", "战役被停止（SIGINT）"),
    ("user stop: enough for today", "stopped by the user: “enough for today”", "用户停止：“enough for today”"),
])
def test_a_campaign_budget_end_is_not_called_a_user_stop(reason: str, en: str, zh: str) -> None:
    assert finish_reason_text(strings("en"), reason) == en
    assert finish_reason_text(strings("zh"), reason) == zh
