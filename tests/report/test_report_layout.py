"""The HTML report as a reader sees it, measured in real headless Chromium (issue #18), in en and zh, at a 1280 px
window and at the printable width of an A4 page (210 mm − 2 × 12 mm margins = 186 mm ≈ 703 CSS px, print media):

* no table, chart or legend is wider than the page, no cell's text is cut, none is squeezed to a character or two
  per line;
* every chart has titled x and y axes with tick labels and a legend; no two labels of a chart overlap, none leaves
  the chart, none is drawn smaller than 7 px;
* a swim-lane colour names the same kind of task in every panel;
* every definition link lands on its definition;
* the browser sees no CJK font of the system (a fontconfig file listing DejaVu only), as on a machine where none is
  installed: every character of the page is in the cmap of the report's embedded CJK subset or of a DejaVu font
  (no missing-glyph box), and zh text is drawn with the embedded font — checked twice: the fonts Chromium reports it
  drew with (DevTools' "Rendered fonts") and three different characters drawn on a canvas must differ (a missing
  font draws every character as the same empty box). The same report without its embedded font fails both checks;
* no text is hidden behind an edge or ends in an ellipsis without the whole text on the page (details or title), and
  no Markdown reached the HTML as characters (backticks, ``**``, footnote marks);

Screenshots of every section, per report, language and width, are written to ``test-artifacts/report-layout/``
(ignored by git). One browser pass per page feeds every check. Inputs are recorded ledgers: the demo session (SIM:
kept, reverted, failed rounds; swim lanes from recorded runs of the same kernel) and an NPU session written row by
row (a batch, chips left behind, two kernels, kept-state references, a flag, a command correction).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pypto_tune.tools.operations.snapshot_builder import build_snapshot
from pypto_tune.tools.report import render_report
from pypto_tune.tools.report.fonts import FAMILY
from pypto_tune.tools.session.ledger import Ledger
from pypto_tune.tools.session.state import derive_state, load_rows
from tests.conftest import ROOT, RUNS, require_real

pytestmark = pytest.mark.browser

ARTIFACTS = ROOT / "test-artifacts" / "report-layout"
LAYOUT_JS = (Path(__file__).parent / "layout.js").read_text()
WIDTHS = {"window-1280": (1280, "screen"), "a4-print": (703, "print")}
LANGS = ("en", "zh")
MIN_FONT_PX = 7.0
DEJAVU = "/usr/share/fonts/truetype/dejavu"  # Debian's fonts-dejavu-core, which chromium depends on


def _demo_snapshot(tmp: Path):
    db = tmp / "demo-ws" / ".pypto-tune" / "ledger.sqlite3"
    db.parent.mkdir(parents=True)
    shutil.copy2(Path(__file__).parent / "demo_ledger.sqlite3", db)
    ledger = Ledger(db)
    try:
        snap = build_snapshot(derive_state(load_rows(ledger, ledger.rows("sessions")[0]["id"])))
    finally:
        ledger.close()
    for m in snap.measurements:  # the recorded traces lived in the demo's tmp workspace: recorded runs, same kernel
        m.trace_paths = [str(next((RUNS / ("softmax_base" if m.round == 0 else "softmax_tuned"))
                                  .rglob("merged_swimlane.json")))]
        m.folders = []
    return snap


def _npu_snapshot(tmp: Path):
    from tests.report.test_report_npu_rows import build_npu_session

    w = build_npu_session(tmp / "npu-ws")
    return build_snapshot(derive_state(load_rows(w.ledger, w.sid)))


def no_cjk_fonts(folder: Path) -> dict[str, str]:
    """A fontconfig configuration that shows the browser DejaVu only: a machine with no CJK font installed."""
    conf = folder / "fonts.conf"
    conf.write_text('<?xml version="1.0"?><!DOCTYPE fontconfig SYSTEM "fonts.dtd"><fontconfig>'
                    f"<dir>{DEJAVU}</dir><cachedir>{folder / 'fc-cache'}</cachedir></fontconfig>")
    env = {"FONTCONFIG_FILE": str(conf)}
    assert _cjk_families(env) == set()  # nothing that covers Chinese is visible to this configuration
    return env


def page_fonts_cmap() -> set[int]:
    """Code points the page can draw without a system CJK font: the embedded subset and the DejaVu fonts."""
    ttlib = pytest.importorskip("fontTools.ttLib", reason="fontTools reads the fonts' cmaps (pip install -e .[test])")
    import io

    from pypto_tune.tools.report.fonts import font_bytes

    out: set[int] = set(ttlib.TTFont(io.BytesIO(font_bytes())).getBestCmap())
    for f in Path(DEJAVU).glob("*.ttf"):
        out |= set(ttlib.TTFont(f, lazy=True).getBestCmap())
    return out


def _browser(env: dict[str, str] | None = None):
    from tests.report.cdp import CHROMIUM, Browser

    require_real(Path(CHROMIUM).exists(),
                 "chromium is not installed: scripts/install_chromium.sh installs Debian's package")
    return Browser(env)


def _cjk_families(env: dict[str, str] | None = None) -> set[str]:
    """Font families fontconfig says cover Chinese (the same configuration the browser reads)."""
    out = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True,
                         env=None if env is None else {**__import__("os").environ, **env})
    return {f.strip() for line in out.stdout.splitlines() for f in line.split(",") if f.strip()}


CANVAS_JS = r"""(() => {
  const font = getComputedStyle(document.querySelector('h1')).fontFamily;
  const draw = (ch) => { const c = document.createElement('canvas'); c.width = 64; c.height = 64;
    const g = c.getContext('2d'); g.fillStyle = '#fff'; g.fillRect(0, 0, 64, 64); g.fillStyle = '#000';
    g.font = '48px ' + font; g.textBaseline = 'top'; g.fillText(ch, 4, 4);
    return Array.from(g.getImageData(0, 0, 64, 64).data).join(','); };
  return new Set(['调', '优', '报'].map(draw)).size;
})()"""
# zh text in every kind of place: headings, table headers, metric names, chart axis titles and legends, captions
CJK_SELECTORS = ("h1", "h2", "th", "td.metric", "text.axis-title", "ul.legend li span", "figcaption", "dl.glossary dt")


def cjk_problems(browser, families: set[str], selectors: tuple[str, ...] = CJK_SELECTORS) -> list[str]:
    """Elements whose CJK characters were not all drawn by a CJK font, and the canvas check's verdict."""
    problems = []
    for selector in selectors:
        for text, fonts in browser.platform_fonts(selector, limit=12):
            cjk = sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff")
            if not cjk:
                continue
            drawn = sum(f["glyphCount"] for f in fonts if f["familyName"] in families)
            if drawn < cjk:
                problems.append(f"{selector} {text.strip()[:30]!r}: {cjk} CJK characters, fonts used "
                                f"{[(f['familyName'], f['glyphCount']) for f in fonts]}")
    if browser.eval(CANVAS_JS) != 3:
        problems.append("three different CJK characters drawn on a canvas look the same (empty boxes)")
    return problems


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every report × language × width, measured once; screenshots of each section written as artifacts."""
    tmp = tmp_path_factory.mktemp("layout")
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    snaps = {"demo-sim": _demo_snapshot(tmp), "npu-rows": _npu_snapshot(tmp)}
    env = no_cjk_fonts(tmp)
    browser = _browser(env)
    out: dict[str, Any] = {"layouts": {}, "cjk": {}, "shots": {}, "snaps": snaps, "env": env}
    try:
        families = {FAMILY}
        for name, snap in snaps.items():
            for lang in LANGS:
                html = render_report(snap, "html", lang, tmp / f"{name}-{lang}")
                browser.open(html.as_uri())
                for width_name, (width, media) in WIDTHS.items():
                    browser.set_layout(width, media)
                    key = f"{name}-{lang}-{width_name}"
                    out["layouts"][key] = browser.eval(LAYOUT_JS)
                    out["shots"][key] = browser.screenshot_sections("main > section", ARTIFACTS / key)
                if lang == "zh":
                    browser.set_layout(1280, "screen")
                    out["cjk"][name] = cjk_problems(browser, families)
                out.setdefault("errors", []).extend(browser.console_errors())
                out.setdefault("requests", []).extend(
                    u for u in browser.requests() if not u.startswith(("file:", "data:", "about:")))
    finally:
        browser.close()
    return out


def _each(pages: dict[str, Any]):
    return sorted(pages["layouts"].items())


def test_no_table_chart_or_legend_is_wider_than_the_page(pages: dict[str, Any]) -> None:
    for key, lay in _each(pages):
        assert lay["overflow"] == [], key
        assert lay["scrollWidth"] <= lay["page"], (key, lay["scrollWidth"], lay["page"])
        assert lay["cut"] == [], key


def test_no_cell_is_squeezed_to_a_character_or_two_per_line(pages: dict[str, Any]) -> None:
    for key, lay in _each(pages):
        assert lay["squeezed"] == [], key


def test_every_chart_has_titled_axes_tick_labels_and_a_legend_and_no_label_collides(pages: dict[str, Any]) -> None:
    for key, lay in _each(pages):
        kinds = [c["kind"] for c in lay["charts"]]
        assert kinds.count("time") == 1 and kinds.count("cores") == (1 if key.startswith("demo") else 1), (key, kinds)
        if key.startswith("demo"):
            assert kinds.count("lanes") == 2, (key, kinds)  # baseline and best
        for c in lay["charts"]:
            where = f"{key} {c['kind']}"
            for axis in ("xTitle", "yTitle"):
                assert c[axis] and c[axis]["text"] and c[axis]["w"] > 0 and c[axis]["h"] > 0, (where, axis)
            assert c["xTicks"] >= 2 and c["yTicks"] >= 2, (where, c["xTicks"], c["yTicks"])
            assert c["legend"] and all(it["label"] and it["fill"] and it["visible"] for it in c["legend"]), where
            assert c["clash"] == [], where
            assert c["outside"] == [], where
            assert c["minFontPx"] >= MIN_FONT_PX, (where, c["minFontPx"])
            if c["kind"] == "lanes":  # every lane has its label, not every 8th
                assert c["lanes"] and len(c["lanes"]) == len(set(c["lanes"])), where
            if c["kind"] == "cores":  # every core has its label
                assert c["coreLabels"] and all(n.startswith(("AIC_", "AIV_")) for n in c["coreLabels"]), where


def test_a_swim_lane_colour_means_the_same_kind_of_task_in_every_panel(pages: dict[str, Any]) -> None:
    for key, lay in _each(pages):
        panels = [c for c in lay["charts"] if c["kind"] == "lanes"]
        by_label: dict[str, set[str]] = {}
        by_fill: dict[str, set[str]] = {}
        for c in panels:
            legend = {it["label"]: it["fill"] for it in c["legend"]}
            for fill in c["taskFills"]:  # every colour drawn is explained by the panel's own legend
                assert fill in legend.values(), (key, fill, legend)
            for label, fill in legend.items():
                by_label.setdefault(label, set()).add(fill)
                by_fill.setdefault(fill, set()).add(label)
        assert all(len(v) == 1 for v in by_label.values()), (key, by_label)
        assert all(len(v) == 1 for v in by_fill.values()), (key, by_fill)


def test_every_definition_link_lands_on_its_definition(pages: dict[str, Any]) -> None:
    for key, lay in _each(pages):
        assert lay["links"] >= 10 and lay["missingTargets"] == [], key
        assert {"def-op-time", "def-e2e", "def-bubble", "def-util", "def-lb", "def-cv", "def-sim"} <= set(
            lay["definitions"]), key


def test_zh_text_is_drawn_with_a_cjk_font(pages: dict[str, Any]) -> None:
    assert pages["cjk"] and all(problems == [] for problems in pages["cjk"].values()), pages["cjk"]


def test_every_character_has_a_glyph_without_a_system_cjk_font(pages: dict[str, Any]) -> None:
    cmap = page_fonts_cmap()
    for key, lay in _each(pages):
        missing = sorted({ch for ch in lay["text"] if ord(ch) not in cmap and not ch.isspace()})
        assert missing == [], (key, "".join(missing))


def test_no_text_is_hidden_cut_without_its_whole_or_left_as_markdown(pages: dict[str, Any]) -> None:
    for key, lay in _each(pages):
        assert lay["hidden"] == [], key
        assert lay["ellipsis"] == [], key
        assert lay["raw"] == [], key


def test_the_cjk_check_catches_a_report_without_its_embedded_font(pages: dict[str, Any], tmp_path: Path) -> None:
    """The same check on the zh report with its @font-face taken out, in the same font-less browser: it must find
    the empty boxes (so the passing check above is the embedded font's doing)."""
    html = render_report(pages["snaps"]["demo-sim"], "html", "zh", tmp_path)
    text = html.read_text(encoding="utf-8")
    stripped = re.sub(r"@font-face \{[^}]*\}", "", text)
    assert stripped != text and FAMILY in text
    html.write_text(stripped, encoding="utf-8")
    browser = _browser(pages["env"])
    try:
        browser.open(html.as_uri())
        problems = cjk_problems(browser, {FAMILY})
    finally:
        browser.close()
    assert any("canvas" in p for p in problems) and any(p.startswith("h1 ") for p in problems), problems


def test_screenshots_of_every_section_are_written_and_the_page_stays_offline(pages: dict[str, Any]) -> None:
    for key, shots in pages["shots"].items():
        sections = pages["layouts"][key]["sections"]
        assert len(shots) == len(sections) >= 10, key
        for shot in shots:
            data = shot.read_bytes()
            assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000, shot
    assert pages["requests"] == [] and pages["errors"] == []


# ---------------------------------------------------------------------------------------------- the campaign report
GATE_TEXT = ("GATE drift: the workspace differs from the state the server recorded (changed: softmax.py): an edit "
             "made behind its back, or an interrupted write; tuning is blocked\nNext: revert_patch restores every "
             "recorded file byte-for-byte (files added since are moved to .pypto-tune/quarantine/); during tuning, "
             "run_precision_check(adopt_drift=true) adopts an edit of the operator files that is exactly one legal "
             "knob change, as a manual round\nAllowed now: revert_patch, run_precision_check(adopt_drift=true), "
             "get_status, list_knobs")


def campaign_board(folder: Path):
    """A finished campaign of four operators as a person meets it: a goal reached, a budget end, a refusal that
    failed an operator, a pause; session reports with long file names."""
    from pypto_tune.tools.campaign.board import Board, OperatorRow
    from pypto_tune.tools.campaign.driver import PAUSED

    def row(name: str, status: str, reason: str, speedup: float | None, **kw: Any) -> OperatorRow:
        sid = f"20261206-0412{len(name):02d}-a1b2c3"
        reports = [str(folder / name / f"{name}_tuning_report_{sid}{sfx}.html") for sfx in ("", "_en")]
        return OperatorRow(name=name, status=status, session_id=sid, goal="12x", baseline_us=36.405,
                           best_us=36.405 / speedup if speedup else None, speedup=speedup, trials=8, trials_budget=8,
                           kept=3, failed=1, failures=["compile-failure ×1"], reason=reason, elapsed_s=412.5,
                           run_s=301.2, reports=reports, **kw)

    ops = [row("upstream_layernorm_with_a_long_name", "done", "target reached (2.726 µs ≤ 3.034 µs)", 13.36),
           row("softmax", "done", "user stop: campaign budget: 8 trial(s) of this operator used", 2.45),
           row("rmsnorm_grid", "failed", "campaign: " + GATE_TEXT, None),
           row("upstream_rope", "stopped", PAUSED, 1.11)]
    return Board(campaign_id="c-20261206-041200", name="fixtures", state="finished", executor="local",
                 nodes=["host (local pool)"], slots=2, started_at="2026-12-06T04:12:00+00:00",
                 updated_at="2026-12-06T04:40:00+00:00", elapsed_s=1680.0,
                 counts={"done": 2, "failed": 1, "stopped": 1, "not-started": 0, "queued": 0, "running": 0},
                 best_speedup=13.36, best_operator=ops[0].name, trials_used=32, trials_budget=40, operators=ops,
                 folder=str(folder))


@pytest.fixture(scope="module")
def campaign_pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from pypto_tune.tools.campaign.report import render_html

    tmp = tmp_path_factory.mktemp("campaign")
    board = campaign_board(tmp)
    browser = _browser(no_cjk_fonts(tmp))
    out: dict[str, Any] = {"layouts": {}, "cjk": {}, "html": {}}
    try:
        for lang in LANGS:
            html = tmp / f"campaign_report_{lang}.html"
            html.write_text(render_html(board, lang, tmp), encoding="utf-8")
            out["html"][lang] = html.read_text(encoding="utf-8")
            browser.open(html.as_uri())
            for width_name, (width, media) in WIDTHS.items():
                browser.set_layout(width, media)
                key = f"campaign-{lang}-{width_name}"
                out["layouts"][key] = browser.eval(LAYOUT_JS)
                browser.screenshot_sections("body", ARTIFACTS / key)
            if lang == "zh":
                browser.set_layout(1280, "screen")
                out["cjk"]["campaign"] = cjk_problems(browser, {FAMILY}, selectors=("h1", "h2", "th", "td"))
    finally:
        browser.close()
    return out


def test_the_campaign_report_fits_the_page_draws_every_glyph_and_says_why_in_a_sentence(
        campaign_pages: dict[str, Any]) -> None:
    cmap = page_fonts_cmap()
    for key, lay in sorted(campaign_pages["layouts"].items()):
        assert lay["overflow"] == [] and lay["scrollWidth"] <= lay["page"], (key, lay["overflow"], lay["scrollWidth"])
        assert lay["cut"] == [] and lay["hidden"] == [] and lay["ellipsis"] == [] and lay["raw"] == [], key
        missing = sorted({ch for ch in lay["text"] if ord(ch) not in cmap and not ch.isspace()})
        assert missing == [], (key, "".join(missing))
    assert campaign_pages["cjk"]["campaign"] == []
    en, zh = campaign_pages["html"]["en"], campaign_pages["html"]["zh"]
    assert "user stop" not in en and "the trial budget was used (8 trial(s) of this operator)" in en
    assert "试验预算已用完（本算子 8 次试验）" in zh and "用户停止" not in zh
    assert "a rule refused a step (drift): the workspace differs" in en
    summary = en.split("<summary>")[1].split("</summary>")[0]  # the visible sentence is not the agent's text
    assert "Next:" not in summary and "Allowed now:" not in summary
    assert "Allowed now:" in en  # the whole text stays one click away
