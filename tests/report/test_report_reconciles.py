"""Every number of the report reconciles with the ledger, on a real SIM session driven over MCP stdio (issue #18).

The session: a baseline, a kept round (vector tile), a second round (TILE_B), stop, the reports in Markdown and HTML in
en and zh. The expected numbers are read from the SQLite ledger with ``sqlite3`` and from the archived traces with
``json`` — never through the report or snapshot code — and compared with the numbers read back from the rendered
files: the headline, the before/after table, the swim-lane panels (their time and task count), the round log, the
measurements table and the best configuration.

Then a second session on the same workspace, over a new server: it does not record the first session's report files
as workspace files, so its own reports render in both languages and formats without a drift refusal (they used to
be refused: the first session's reports, rewritten under the stable name, counted as drift). A file whose name only
resembles a report is still drift.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
import statistics
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import OPERATORS, sim_command
from tests.server.mcp_client import connect

pytestmark = pytest.mark.sim

VEC = "softmax.py:softmax_kernel.set_vec_tile_shapes#1"


class Tables(HTMLParser):
    """Text of every table cell, by the table's class; the SVG panel titles; all visible text."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.panels: list[str] = []
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._panel = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self._table = a.get("class") or ""
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "text" and "panel-title" in (a.get("class") or ""):
            self._panel = True
            self.panels.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None
        elif tag == "text":
            self._panel = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._panel:
            self.panels[-1] += data


def html_tables(path: Path) -> Tables:
    p = Tables()
    p.feed(path.read_text())
    return p


def md_table(text: str, heading: str) -> list[list[str]]:
    """Rows (cells stripped, header and rule dropped) of the first Markdown table after ``heading``."""
    section = text.split(heading, 1)[1]
    rows = []
    for line in section.splitlines():
        if line.startswith("|"):
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
        elif rows:
            break
    return rows[2:]


# ---------------------------------------------------------------------------------------------- the session
@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    ws = tmp_path_factory.mktemp("reconcile") / "ws"
    ws.mkdir()
    shutil.copy2(OPERATORS / "softmax" / "softmax.py", ws / "softmax.py")
    out: dict[str, Any] = {"ws": ws}

    async def first() -> None:
        async with connect(ws) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"],
                              test_command=sim_command(), run_mode="sim", goal_speedup=100.0))["session_id"]
            await s.ok("run_precision_check", session_id=sid)
            await s.ok("enable_runtime_debug", session_id=sid)
            await s.ok("collect_swimlane", session_id=sid)
            await s.ok("analyze_bubbles", session_id=sid, lang="en")
            for knob, value, cid in ((VEC, [1, 8, 256], "F-10"), ("softmax.py:TILE_B", 2, "F-3")):
                await s.ok("apply_tuning_patch", session_id=sid, knob=knob, value=value, catalog_id=cid,
                           rationale="reconciliation test")
                await s.ok("run_precision_check", session_id=sid)
                await s.ok("collect_swimlane", session_id=sid)
                await s.ok("record_round", session_id=sid, notes="reconciliation test")
            await s.ok("stop_session", session_id=sid, reason="numbers checked")
            out["paths"] = (await s.ok("render_report", session_id=sid, format="both", lang="en"))["paths"]
            out["paths"] += (await s.ok("render_report", session_id=sid, format="both", lang="zh"))["paths"]
            out["sid"] = sid

    async def second() -> None:
        async with connect(ws) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"],
                              test_command=sim_command(), run_mode="sim", goal_speedup=2.0))["session_id"]
            assert sid != out["sid"]
            out["status2"] = await s.ok("get_status", session_id=sid, lang="en")
            # a name that only resembles a report is a workspace file like any other: drift
            near_miss = ws / "softmax_tuning_report_v2.md"
            near_miss.write_text("not the server's\n")
            out["near_miss_status"] = await s.ok("get_status", session_id=sid, lang="en")
            out["near_miss_refusal"] = await s.refused("run_precision_check", session_id=sid)
            await s.ok("revert_patch", session_id=sid)  # moves the added file to .pypto-tune/quarantine/
            out["near_miss_gone"] = not near_miss.exists()
            await s.ok("stop_session", session_id=sid, reason="second session, nothing tried")
            out["paths2"] = []
            for lang in ("en", "zh"):
                out["paths2"] += (await s.ok("render_report", session_id=sid, format="both", lang=lang))["paths"]
            out["sid2"] = sid

    anyio.run(first)
    out["first_bytes"] = {p: Path(p).read_bytes() for p in out["paths"] if out["sid"] in Path(p).name}
    anyio.run(second)
    return out


# ---------------------------------------------------------------------------------------------- the ledger, read raw
@pytest.fixture(scope="module")
def ledger(run: dict[str, Any]) -> dict[str, Any]:
    con = sqlite3.connect(run["ws"] / ".pypto-tune" / "ledger.sqlite3")
    con.row_factory = sqlite3.Row
    sid = run["sid"]
    ms = [dict(r) for r in con.execute("SELECT * FROM measurements WHERE session_id = ? AND valid = 1 ORDER BY id",
                                       (sid,))]
    for m in ms:
        m["analysis"] = json.loads(m["analysis"])
        m["samples"] = json.loads(m["samples"])
    decisions = {r["number"]: dict(r) for r in con.execute(
        "SELECT * FROM round_decisions WHERE session_id = ?", (sid,))}
    rounds = [dict(r) for r in con.execute("SELECT * FROM rounds WHERE session_id = ? ORDER BY number", (sid,))]
    patches = [dict(r) for r in con.execute(
        "SELECT * FROM patches WHERE session_id = ? AND kind = 'tuning' ORDER BY id", (sid,))]
    tree2 = [r["path"] for r in con.execute("SELECT path FROM tree_files WHERE session_id = ?", (run["sid2"],))]
    con.close()
    base = next(m for m in ms if m["round"] == 0)
    kept = [n for n, d in sorted(decisions.items()) if d["decision"] == "kept"]
    best_m = [m for m in ms if m["round"] == kept[-1]][-1] if kept else base
    # the kept time: the median of every sample of the kept code (SIM: one sample per measurement)
    best_us = statistics.median(x for m in ms if m["code_hash"] == best_m["code_hash"] for x in m["samples"])
    return {"ms": ms, "base": base, "best_m": best_m, "best_us": best_us, "decisions": decisions, "rounds": rounds,
            "patches": patches, "kept": kept, "tree2": tree2}


def _report(run: dict[str, Any], fmt: str, lang: str) -> Path:
    suffix = "" if lang == "zh" else "_en"
    return run["ws"] / f"softmax_tuning_report_{run['sid']}{suffix}.{fmt}"


def _platform(a: dict[str, Any]) -> float:
    """Busy time over (every listed core of the used types × the operator time): SIM lists the whole platform."""
    used = {c["core_type"] for c in a["cores"] if c["active"]}
    n = sum(1 for c in a["cores"] if c["core_type"] in used)
    return 100 * sum(c["busy_us"] for c in a["cores"] if c["active"]) / (n * a["operator_time_us"])


def _trace_figures(a: dict[str, Any]) -> tuple[float, float, int]:
    """(T0 → last AIC/AIV end, first → last AIC/AIV task, real tasks) from the archived trace itself (B.1, B.10)."""
    (path,) = a["trace_copies"]
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"
             and e.get("pid") == 1}
    tasks = [e for e in events if e.get("ph") == "X" and e.get("pid") == 1 and "Fake" not in names[e["tid"]]]
    core = [e for e in tasks if names[e["tid"]].startswith(("AIC", "AIV"))]
    end = max(e["ts"] + e["dur"] for e in core)
    return end - min(e["ts"] for e in tasks), end - min(e["ts"] for e in core), len(tasks)


def test_the_session_kept_a_round_and_its_reports_exist(run: dict[str, Any], ledger: dict[str, Any]) -> None:
    assert ledger["kept"] and len(ledger["decisions"]) == 2
    for fmt in ("md", "html"):
        for lang in ("en", "zh"):
            assert _report(run, fmt, lang).is_file()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_headline_is_the_ledgers_baseline_best_and_speed_up(run, ledger, lang: str) -> None:
    base, best = ledger["base"]["operator_time_us"], ledger["best_us"]
    md = _report(run, "md", lang).read_text()
    html = _report(run, "html", lang).read_text()
    line = f"{base:.3f} → {best:.3f} µs"
    assert line in md and f"{base / best:.2f}×" in md and f"{(best - base) / base * 100:+.1f}%" in md
    assert f'<span class="baseline-us">{base:.3f}</span> → <span class="best-us">{best:.3f}</span>' in html
    assert f'<strong class="speedup">{base / best:.2f}×</strong>' in html


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_before_after_table_is_the_analysis_of_the_baseline_and_the_best_measurement(run, ledger, lang) -> None:
    b, a = ledger["base"]["analysis"], ledger["best_m"]["analysis"]
    fields = [("operator_time_us", 3, ""), ("e2e_us", 3, ""), ("avg_core_utilization_pct", 1, "%"),
              ("active_core_utilization_pct", 1, "%"), (None, 1, "%"), ("avg_bubble_rate_pct", 1, "%"),
              ("active_bubble_rate_pct", 1, "%"), ("load_balance_pct", 1, "%"), ("active_load_balance_pct", 1, "%")]
    md_rows = md_table(_report(run, "md", lang).read_text(), "\n## ")  # the first table is before/after
    html_rows = html_tables(_report(run, "html", lang)).tables["compare"][1:]
    for rows in (md_rows, html_rows):
        for row, (key, digits, unit) in zip(rows, fields):
            want = [(_platform(x) if key is None else x[key]) for x in (b, a)]
            assert row[1:3] == [f"{v:.{digits}f}{unit}" for v in want], (row, key)
        tasks = rows[-1]
        assert tasks[1:3] == [str(b["task_count"]), str(a["task_count"])], tasks
        # the stars are analyze_perf's ratings of the same figures, reference and active cores
        assert rows[2][3].count("★") == b["ratings"]["utilization"] + a["ratings"]["utilization"]
        assert rows[3][3].count("★") == b["active_ratings"]["utilization"] + a["active_ratings"]["utilization"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_each_swim_lane_panel_spans_the_operator_time_and_counts_the_analysed_tasks(run, ledger, lang) -> None:
    panels = html_tables(_report(run, "html", lang)).panels
    html = _report(run, "html", lang).read_text()
    assert len(panels) == 2
    for panel, m in zip(panels, (ledger["base"], ledger["best_m"])):
        op, e2e, tasks = _trace_figures(m["analysis"])
        # one folder, one sample: the folder's max_work_time is the measurement's time and the headline's
        assert f"{m['operator_time_us']:.3f}" == f"{op:.3f}" == f"{m['analysis']['per_dir'][0]['operator_time_us']:.3f}"
        assert f"{m['operator_time_us']:.3f} µs" in panel and f"{m['analysis']['task_count']} " in panel, panel
        assert tasks == m["analysis"]["task_count"]
        assert f"{e2e:.3f}" == f"{m['e2e_us']:.3f}" and f"{m['e2e_us']:.3f} µs" in html  # named in the caption


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_round_log_and_the_measurements_table_carry_the_ledgers_rows(run, ledger, lang: str) -> None:
    md = _report(run, "md", lang).read_text()
    parsed = html_tables(_report(run, "html", lang))
    for rows in (md_table(md, "\n## " + ("Rounds" if lang == "en" else "轮次记录") + "\n"),
                 parsed.tables["rounds"][1:]):
        assert rows[0][5] == f"{ledger['base']['operator_time_us']:.3f}"  # the baseline row
        for row in rows[1:]:
            d = ledger["decisions"][int(row[0])]
            assert row[5] == (f"{d['after_us']:.3f}" if d["after_us"] is not None else "—"), row
            assert row[6] == f"{d['delta_pct']:+.1f}%", row
    for rows in (md_table(md, "\n## " + ("Measurements" if lang == "en" else "测量记录") + "\n"),
                 parsed.tables["measurements"][1:]):
        assert [int(r[0]) for r in rows] == [m["id"] for m in ledger["ms"]]
        for row, m in zip(rows, ledger["ms"]):
            a = m["analysis"]
            assert row[3] == f"{m['operator_time_us']:.3f}" and row[6] == f"{m['e2e_us']:.3f}", row
            assert row[7] == f"{a['active_core_utilization_pct']:.1f}%" and row[8] == f"{_platform(a):.1f}%", row
            assert row[9] == str(a["task_count"]), row


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_changes_and_the_best_configuration_are_source_text_with_the_changed_knobs_marked(run, ledger, lang) -> None:
    md = _report(run, "md", lang).read_text()
    html = _report(run, "html", lang).read_text()
    for text in (md, html):
        assert "$expr" not in text and "{'" not in text
    knobs = html_tables(_report(run, "html", lang)).tables["knobs"][1:]
    kept_changes = [c for p in ledger["patches"] if p["round"] in ledger["kept"]
                    for c in json.loads(p["knob_changes"])]
    changed = {row[0].removeprefix("✱ ") for row in knobs if row[0].startswith("✱ ")}
    assert changed == {c["knob_id"] for c in kept_changes}
    for c in kept_changes:
        row = next(r for r in knobs if r[0] == f"✱ {c['knob_id']}")
        assert row[2:] == [str(c["before"]), str(c["after"])]  # [1, 4, 256] → [1, 8, 256] reads as in the source
    assert all("None" not in cell for row in knobs for cell in row)  # knobs written in the source only
    assert not any(row[0].endswith((":B", ":N", ":D")) for row in knobs)  # no problem constants
    assert not any("run_mode" in row[0] for row in knobs)


def test_the_zh_report_says_why_the_session_ended_in_chinese(run) -> None:
    md = _report(run, "md", "zh").read_text()
    assert "user stop:" not in md and "用户停止：“numbers checked”" in md


def test_a_second_session_renders_both_languages_and_formats_without_drift(run, ledger) -> None:
    ws, sid, sid2 = run["ws"], run["sid"], run["sid2"]
    # the second session recorded the operator and none of the first session's reports
    assert "softmax.py" in ledger["tree2"] and not any("tuning_report" in p for p in ledger["tree2"])
    assert run["status2"]["drift"] is False
    assert sorted(Path(p).name for p in run["paths2"]) == sorted(
        [f"softmax_tuning_report_{sid2}{sfx}.{fmt}" for sfx in ("", "_en") for fmt in ("md", "html")]
        + [f"softmax_tuning_report{sfx}.{fmt}" for sfx in ("", "_en") for fmt in ("md", "html")])
    assert f"`{sid2}`" in (ws / "softmax_tuning_report.md").read_text()
    for path, data in run["first_bytes"].items():  # the first session's own reports are untouched
        assert Path(path).read_bytes() == data
    # the exclusion is narrow: a file that only looks like a report is drift, refused, and put aside on revert
    assert run["near_miss_status"]["drift"] is True
    assert "GATE drift" in run["near_miss_refusal"] and "softmax_tuning_report_v2.md" in run["near_miss_refusal"]
    assert run["near_miss_gone"]
    assert any(p.name == "softmax_tuning_report_v2.md" for p in (ws / ".pypto-tune" / "quarantine").rglob("*"))
