"""The main job, as `scripts/demo.sh` runs it: `pypto-tune demo` performs a whole SIM session over stdio, uses the
server's search (at least one batch of `run_candidates`), reaches its goal, and writes a report that shows each batch's
candidates and which one won (issue #12), in Markdown and HTML, en and zh (issue #18)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.sim


def test_the_demo_session_searches_reaches_its_goal_and_reports_the_batches(tmp_path: Path) -> None:
    ws = tmp_path / "demo-run"
    cli = Path(sys.executable).with_name("pypto-tune")
    proc = subprocess.run([str(cli), "demo", "--workspace", str(ws)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # a passing first run prints nothing that looks like a failure: pypto's helpers fail to import matplotlib on
    # every SIM run (kept out on purpose, A.2b), and that traceback is not progress
    progress = [line for line in proc.stdout.splitlines() if "    … " in line]
    assert progress and all(line.split("… ", 1)[1].split(":", 1)[0] for line in progress)
    for noise in ("ModuleNotFoundError", "Traceback", "matplotlib"):
        assert noise not in proc.stdout + proc.stderr, [ln for ln in proc.stdout.splitlines() if noise in ln][:3]

    con = sqlite3.connect(ws / ".pypto-tune" / "ledger.sqlite3")
    trials = con.execute("SELECT batch, round, outcome FROM trials").fetchall()
    decisions = dict(con.execute("SELECT number, decision FROM round_decisions").fetchall())
    (sid,) = con.execute("SELECT id FROM sessions").fetchone()
    con.close()
    assert len({b for b, _, _ in trials}) >= 1 and len(trials) >= 2, trials
    # every trial is its own gated round with its own decision, and at least one batch had a winner it kept
    assert all(r in decisions for _, r, _ in trials if r is not None), (trials, decisions)
    assert any(o == "kept" and decisions.get(r) == "kept" for _, r, o in trials), (trials, decisions)

    reports = sorted((ws / ".pypto-tune").rglob("*.en.md")) + sorted(ws.rglob("*report*.md"))
    text = "\n".join(p.read_text() for p in reports if p.is_file())
    assert "★" in text, [str(p) for p in reports]  # the winning candidate of a batch is starred
    assert "numerics not checked" in text.lower()  # a SIM verdict says what it means
    # the promised set: Markdown and HTML in en and zh, the session's own files and the latest under the stable name
    for stem in (f"softmax_tuning_report_{sid}", "softmax_tuning_report"):
        for suffix in ("", "_en"):
            for fmt in ("md", "html"):
                path = ws / f"{stem}{suffix}.{fmt}"
                assert path.is_file() and f"report: {path}" in proc.stdout, path
    assert "性能调优报告" in (ws / "softmax_tuning_report.html").read_text()
