"""Reports rendered from recorded snapshots (tests/report/data/*.json) carry the snapshot's numbers, in zh and en,
and never leak a string of the other language.

Fixtures: ``softmax_sim_kept_reverted_failed.json`` is the demo ledger's snapshot (SIM; kept, reverted and
compile-failed rounds). ``softmax_npu_precision_failed.json`` is the same session as an NPU run whose round 3 failed
the numeric check. Their ``trace_paths`` are relative to the repository root and point at recorded SIM runs.
"""

from __future__ import annotations

import re
import string
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pypto_tune.tools.report import achievement_rate, render_report, render_status_board
from pypto_tune.tools.report.i18n import _table, strings
from pypto_tune.tools.report.values import round_change
from pypto_tune.tools.snapshot import SessionSnapshot

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
FIXTURES = sorted(p.stem for p in DATA.glob("*.json"))
CJK = re.compile(r"[\u4e00-\u9fff]")
# Keys whose en and zh text are legitimately equal or too generic to search for in free text.
SHARED = {"ok"}


class _Text(HTMLParser):
    """What a reader sees: text nodes outside <style>, plus SVG <title>/<desc> (read aloud by screen readers)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.skip = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.skip = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self.skip = False

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.parts.append(data)


def visible_text(page: str) -> str:
    parser = _Text()
    parser.feed(page)
    return "\n".join(parser.parts)


def load(name: str) -> SessionSnapshot:
    snap = SessionSnapshot.model_validate_json((DATA / f"{name}.json").read_text())
    for m in snap.measurements:
        m.trace_paths = [str(ROOT / p) for p in m.trace_paths]
    return snap


def test_the_fixtures_cover_kept_reverted_failed_precision_failed_sim_and_npu() -> None:
    snaps = [load(n) for n in FIXTURES]
    assert {s.run_mode for s in snaps} == {"sim", "npu"}
    results = {r.result_type for s in snaps for r in s.rounds}
    assert {"gain", "regression", "compile-failure", "precision-failure"} <= results
    assert {r.decision for s in snaps for r in s.rounds} == {"kept", "reverted", "failed"}
    for s in snaps:  # the swim lanes are drawn from real recorded traces
        assert all(Path(p).is_file() for m in s.measurements for p in m.trace_paths)


def test_both_languages_define_the_same_keys_and_placeholders() -> None:
    en, zh = _table()["en"], _table()["zh"]
    assert set(en) == set(zh)
    fields = lambda t: {f for _, f, _, _ in string.Formatter().parse(t) if f}  # noqa: E731
    for key in en:
        assert en[key].strip() and zh[key].strip(), key
        assert fields(en[key]) == fields(zh[key]), key
        assert not CJK.search(en[key]), key
    with pytest.raises(ValueError, match="lang must be one of"):
        strings("fr")


@pytest.mark.parametrize("lang", ["zh", "en"])
@pytest.mark.parametrize("name", FIXTURES)
def test_markdown_report_carries_every_number_of_the_snapshot(name: str, lang: str, tmp_path: Path) -> None:
    snap, s = load(name), strings(lang)
    path = render_report(snap, "md", lang, tmp_path)
    assert path.name == f"{snap.operator}_tuning_report{'' if lang == 'zh' else '_en'}.md"
    text = path.read_text()
    gain = (snap.baseline_us - snap.best_us) / snap.baseline_us * 100
    assert f"{snap.best_us:.3f}" in text and f"{gain:.1f}%" in text
    assert f"{snap.baseline_us / snap.best_us:.2f}×" in text
    assert f"{achievement_rate(snap):.1f}%" in text and s["achievement_def"] in text
    rounds = text.split(f"## {s['rounds']}\n")[1].split("\n## ")[0]
    for r in snap.rounds:  # one outer round: no Outer column; status and result type share the Result cell
        time = f"{r.after_us:.3f}" if r.after_us is not None else "—"
        delta = f"{r.delta_pct:+.1f}%" if r.delta_pct is not None else "—"
        row = next(line for line in rounds.splitlines() if line.startswith(f"| {r.number} | {r.stage} |"))
        assert f"| {r.catalog_id} |" in row and f"| {time} | {delta} |" in row, row
        assert f"{s[r.decision]} · {s['rt_' + r.result_type]} |" in row, row
        if r.error_output:
            assert r.error_output.splitlines()[0] in text
    for p in snap.precision_records:
        assert " ".join(p.command) in text
    assert (s["sim_note"] in text) == (snap.run_mode == "sim")


def test_a_precision_failure_on_npu_is_reported_with_its_mismatch(tmp_path: Path) -> None:
    snap = load("softmax_npu_precision_failed")
    text = render_report(snap, "md", "en", tmp_path).read_text()
    assert "| 3 | FRONTEND | F-10 |" in text and "precision failure" in text
    assert "Mismatched elements: 412 / 8192" in text
    section = text.split("## Precision records")[1].split("\n## ")[0]
    records = [line for line in section.splitlines() if line.startswith("| ")][1:]  # minus the header row
    assert len(records) == len(snap.precision_records)
    assert all("| yes |" in line for line in records)  # NPU: every check compared output values
    assert sum("| failed |" in line for line in records) == 1


@pytest.mark.parametrize("fmt", ["md", "html"])
@pytest.mark.parametrize("name", FIXTURES)
def test_no_string_of_the_other_language_leaks(name: str, fmt: str, tmp_path: Path) -> None:
    snap = load(name)
    en, zh = _table()["en"], _table()["zh"]
    zh_text = render_report(snap, fmt, "zh", tmp_path).read_text()
    en_text = render_report(snap, fmt, "en", tmp_path).read_text()
    # The snapshot's own text (changes, tool output, finish reason) is recorded in English; remove it so that only
    # the template's words are checked.
    data = [snap.finish_reason or "", *(r.change for r in snap.rounds), *(r.error_output for r in snap.rounds),
            *(round_change(r, strings("zh")) for r in snap.rounds),
            *(p.key_output for p in snap.precision_records), *(c.detail for c in snap.env_checks),
            *(r.message for r in snap.refusals)]
    assert not CJK.search(en_text)
    if fmt == "html":
        zh_text, en_text = visible_text(zh_text), visible_text(en_text)
    for d in sorted(filter(None, data), key=len, reverse=True):  # a quote may contain a shorter one
        for piece in (d, d.replace("\n", " "), *d.splitlines()):
            if len(piece.strip()) > 10:  # a truncated quote starts like its source: drop it to the end of the line
                zh_text = re.sub(re.escape(piece.strip()[:40]) + ".*", "", zh_text)
    # Identifiers, not words: Markdown footnote labels, and the log's own field names the definitions quote (A.3).
    zh_text = re.sub(r"\[\^[\w-]+\]", "", zh_text)
    for field in ("Core Total Work Time", "Wait Schedule Time"):
        zh_text = zh_text.replace(field, "")
    leaks = [key for key, word in en.items()
             if key not in SHARED and word != zh[key] and "{" not in word
             and re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", zh_text)]
    assert leaks == []


def test_npu_html_has_no_sim_line_and_one_marker_per_round(tmp_path: Path) -> None:
    snap = load("softmax_npu_precision_failed")
    html = render_report(snap, "html", "zh", tmp_path).read_text()
    assert strings("zh")["sim_note"] not in html
    assert html.count('class="marker ') == len(snap.rounds) + 1
    assert html.count('class="marker failed"') == 2  # the precision failure and the compile failure
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html


@pytest.mark.parametrize("name", FIXTURES)
def test_the_status_board_lists_every_round_in_both_languages(name: str) -> None:
    snap = load(name)
    for lang in ("zh", "en"):
        s = strings(lang)
        board = render_status_board(snap, lang, full=False)
        rows = [line for line in board.splitlines() if re.match(r"\| \d+ \|", line)]
        assert len(rows) == len(snap.rounds)
        assert f"{snap.best_us:.3f}" in board and f"{snap.baseline_us:.3f}" in board
        assert f"{s['failures']}: {sum(r.decision == 'failed' for r in snap.rounds)}" in board
        assert f"### {s['stages']}" not in board


@pytest.mark.parametrize("lang", ["zh", "en"])
@pytest.mark.parametrize("name", FIXTURES)
def test_every_footnote_of_the_markdown_report_lands_on_its_definition(name: str, lang: str, tmp_path: Path) -> None:
    """Metric names carry footnotes to the Definitions section; each one resolves, and the terms the tables use
    (operator time, E2E, CV, load balance, SIM) are defined."""
    text = render_report(load(name), "md", lang, tmp_path).read_text()
    body, defs = text.split(f"\n## {strings(lang)['glossary']}\n")
    refs = set(re.findall(r"\[\^([\w-]+)\](?!:)", body))
    defined = set(re.findall(r"^\[\^([\w-]+)\]: \*\*", defs, flags=re.MULTILINE))
    assert refs and refs <= defined, refs - defined
    assert {"op-time", "e2e", "cv", "lb", "util", "bubble", "stars", "tasks", "delta"} <= refs
