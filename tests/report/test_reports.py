"""Reports rendered from a recorded real ledger (the demo session) match the ledger, in both languages, and the HTML
draws its charts in real headless Chromium without touching the network."""

from __future__ import annotations

import shutil
import struct
import zlib
from pathlib import Path

import pytest

from pypto_tune.tools.session.ledger import Ledger
from pypto_tune.tools.report import achievement_rate, render_report, render_status_board
from pypto_tune.tools.snapshot import SessionSnapshot
from pypto_tune.tools.operations.snapshot_builder import build_snapshot
from pypto_tune.tools.session.state import derive_state, load_rows
from tests.conftest import RUNS, require_real

DATA = Path(__file__).parent / "demo_ledger.sqlite3"


def _trace(scenario: str) -> str:
    return str(next((RUNS / scenario).rglob("merged_swimlane.json")))


@pytest.fixture
def snap(tmp_path: Path) -> SessionSnapshot:
    db = tmp_path / "ws" / ".pypto-tune" / "ledger.sqlite3"
    db.parent.mkdir(parents=True)
    shutil.copy2(DATA, db)
    ledger = Ledger(db)
    sid = ledger.rows("sessions")[0]["id"]
    s = build_snapshot(derive_state(load_rows(ledger, sid)))
    ledger.close()
    # The recorded archives lived in the demo's tmp workspace; point the lanes at recorded runs of the same kernel.
    for m in s.measurements:
        m.trace_paths = [_trace("softmax_base" if m.round == 0 else "softmax_tuned")]
    return s


def test_the_snapshot_of_the_recorded_demo_holds_kept_reverted_and_failed_rounds(snap: SessionSnapshot) -> None:
    assert [r.decision for r in snap.rounds] == ["kept", "kept", "reverted", "failed", "kept"]
    assert snap.baseline_us == pytest.approx(36.405, abs=1e-3) and snap.best_us == pytest.approx(2.726, abs=1e-3)
    assert snap.rounds[3].result_type == "compile-failure" and "Run pass failed" in snap.rounds[3].error_output
    assert snap.debug_restored and snap.finish_reason.startswith("target reached")


def test_achievement_rate_is_the_share_of_the_required_reduction(snap: SessionSnapshot) -> None:
    assert achievement_rate(snap) == 100.0
    half = snap.model_copy(update={"best_us": (snap.baseline_us + snap.target_us) / 2})
    assert achievement_rate(half) == pytest.approx(50.0)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_markdown_report_numbers_come_from_the_ledger(snap: SessionSnapshot, tmp_path: Path, lang: str) -> None:
    text = render_report(snap, "md", lang, tmp_path).read_text()
    assert "36.405" in text and "2.726" in text and "13.36×" in text
    for r in snap.rounds:
        assert f"| {r.number} | {r.stage} | {r.catalog_id} |" in text  # one outer round: no Outer column
        if r.after_us is not None:
            assert f"{r.after_us:.3f}" in text
    assert "Run pass failed" in text  # the failed round's key error output
    assert "set_vec_tile_shapes(1, 32, 256)" in text and "TILE_B = 1" in text  # best-config diff
    if lang == "zh":
        assert "性能调优报告" in text and "未校验输出数值" in text
        assert "Before / after" not in text and "Kept changes" not in text
    else:
        assert "output values were NOT checked" in text and "保留的优化" not in text


def test_status_board_shows_progress_and_the_fuller_board_every_five_rounds(snap: SessionSnapshot) -> None:
    board = render_status_board(snap, "en")
    assert "5 rounds" not in board  # sanity: the table is a table, not prose
    assert "### Stages" in board  # 5 decided rounds → the fuller board
    # 3 of 5 decided rounds measured a gain (a regression and a compile failure are the others)
    assert "Success rate (rounds that measured a gain, kept or not chosen): 3/5 (60%)" in board
    assert "████████████████████ 100%" in board
    assert "[^" not in board  # no footnote reference without the report's Definitions section to land on
    four = snap.model_copy(update={"rounds": snap.rounds[:4]})
    assert "### Stages" not in render_status_board(four, "en")


def test_stall_warning_after_three_rounds_without_gain(snap: SessionSnapshot) -> None:
    rounds = [r.model_copy(update={"result_type": "regression", "decision": "reverted"}) for r in snap.rounds[:3]]
    board = render_status_board(snap.model_copy(update={"rounds": rounds}), "zh")
    assert "调优停滞" in board


def _png_is_not_blank(png: bytes) -> bool:
    # Parse IHDR + IDAT enough to see more than one distinct pixel value.
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        if kind == b"IDAT":
            idat += png[pos + 8:pos + 8 + length]
        pos += 12 + length
    raw = zlib.decompress(idat)
    return len(set(raw[: 200_000])) > 8


@pytest.mark.browser
def test_html_report_draws_its_charts_offline_in_real_chromium(snap: SessionSnapshot, tmp_path: Path) -> None:
    from tests.report.cdp import CHROMIUM, Browser

    require_real(Path(CHROMIUM).exists(),
                 "chromium is not installed: scripts/install_chromium.sh installs Debian's package")
    html = render_report(snap, "html", "en", tmp_path)
    text = html.read_text()
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text
    b = Browser()
    try:
        b.open(html.as_uri())
        markers = b.eval("document.querySelectorAll('svg.chart-time .marker').length")
        assert markers == len(snap.rounds) + 1  # the baseline and one marker per round
        kinds = b.eval("[...document.querySelectorAll('svg.chart-time .marker')].map(m => m.classList[1]).join(',')")
        assert kinds == "baseline,kept,kept,reverted,failed,kept"
        sizes = b.eval("[...document.querySelectorAll('svg.chart-svg')].map(s => s.getBoundingClientRect().height)")
        assert len(sizes) >= 4 and all(h > 50 for h in sizes)  # time, cores, two swim-lane charts
        assert b.eval("document.querySelectorAll('svg.chart-lanes rect.task').length") > 30
        assert b.eval("document.querySelectorAll('svg title').length") >= 4  # accessible names
        png = b.screenshot(tmp_path / "report.png")
        assert _png_is_not_blank(png)
        # SIM: the banner on top and again above every table that shows a verdict (round log, precision records)
        assert b.eval("document.querySelectorAll('p.note.sim').length") == 3
        assert b.eval("document.querySelectorAll('p.note.npu').length") == 0
        assert b.eval("document.querySelectorAll('table.measurements tbody tr').length") == len(snap.measurements)
        # the demo ran no batch: no batch table and no Batch column in the round log
        assert b.eval("[...document.querySelectorAll('table.rounds thead th')].pop().textContent") == "Result"
        assert b.eval("document.querySelectorAll('table.batch').length") == 0

        # An NPU session with a batch, kept-state references, chips left behind and a regression flag
        from tests.report.test_report_npu_rows import build_npu_session

        w = build_npu_session(tmp_path / "npu-ws")
        npu = build_snapshot(derive_state(load_rows(w.ledger, w.sid)))
        b.open(render_report(npu, "html", "zh", tmp_path / "npu").as_uri())
        assert b.eval("document.querySelectorAll('p.note.sim').length") == 0
        assert b.eval("document.querySelectorAll('p.note.npu').length") == 1
        winner = b.eval("[...document.querySelectorAll('table.batch tbody tr.winner')].map(r => r.cells[0]"
                        ".textContent)")
        assert winner == ["3"] and b.eval("document.querySelectorAll('table.batch tbody tr').length") == 2
        assert b.eval("[...document.querySelectorAll('table.rounds tr.winner')].length") == 1
        refs = b.eval("[...document.querySelectorAll('table.measurements tr.reference')].map(r => r.cells[1]"
                      ".textContent)")
        assert refs == ["第 1 轮的保留状态参考"]
        assert b.eval("document.querySelectorAll('ul.rotations li').length") == 3
        flags = b.eval("[...document.querySelectorAll('table.rounds td.result[title]')].map(c => c.title)")
        assert len(flags) == 1 and flags[0].startswith("FLAG: kernel scale_kernel got slower")
        assert b.eval("document.querySelectorAll('table.kernels tr.sum').length") == 3  # baseline, rounds 1, 3
        assert b.eval("getComputedStyle(document.querySelector('table.batch tr.winner')).fontWeight") == "600"
        assert b.eval("document.querySelectorAll('svg.chart-time .marker').length") == len(npu.rounds) + 1
        assert [u for u in b.requests() if not u.startswith(("file:", "data:", "about:"))] == []
        assert b.console_errors() == []
    finally:
        b.close()
