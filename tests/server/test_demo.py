"""The main job, as `scripts/demo.sh` runs it: `pypto-tune demo` performs a whole SIM session over stdio, uses the
server's search (at least one batch of `run_candidates`), reaches its goal, and writes a report that shows each batch's
candidates and which one won (issue #12), in Markdown and HTML, en and zh (issue #18).

Ctrl-C in a real terminal (tmux): `pypto-tune demo` prints one line that says what state the session is in, what the
operator file holds and how to go on; a second demo on the folder is refused while the first runs, naming its pid and
start; `pypto-tune demo --resume` then reaches the same result as a demo nobody interrupted (the same kept operator
source, the same best time).

`scripts/setup.sh` and `scripts/demo.sh` run again while the demo's session measures from the same checkout: they
change no file of .venv (a session fingerprints the interpreter's files and would discard its next run), say so in one
line, and the session goes on measuring with every run kept and every trial judged on its measurement; a set-up that
must change .venv names the running session and stops.

One uninterrupted demo serves all three: it is the main job whose output and ledger are checked, the session the
set-up runs beside, and the run the interrupted one is compared with (it runs alongside the interrupted one)."""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pypto_tune.tools.campaign.facts import latest_session, ledger_tables
from pypto_tune.tools.session.discarded import discarded_run_ids
from tests.conftest import require_real
from tests.scripts.test_setup_over_stdio import VENV, run_script, stamped_extras, venv_state
from tests.terminal import Tmux

pytestmark = pytest.mark.sim

CLI = Path(sys.executable).with_name("pypto-tune")


class Demo:
    """`pypto-tune demo --workspace ws` started at once; :meth:`result` waits for it (once)."""

    def __init__(self, ws: Path) -> None:
        self.ws = ws
        self.proc = subprocess.Popen([str(CLI), "demo", "--workspace", str(ws)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self._out: tuple[str, str] | None = None
        self.setups_done_at: float | None = None  # when the set-up scripts beside it had finished (epoch seconds)

    def result(self) -> subprocess.CompletedProcess[str]:
        if self._out is None:
            self._out = self.proc.communicate(timeout=900)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, *self._out)


@pytest.fixture(scope="module")
def plain_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    demo = Demo(tmp_path_factory.mktemp("plain") / "demo-run")
    try:
        yield demo
    finally:
        if demo.proc.poll() is None:
            demo.proc.kill()
            demo.proc.communicate()


def _runs_recorded(ws: Path) -> int:
    """How many runs the demo's ledger holds now (read-only, beside the server writing it)."""
    db = ws / ".pypto-tune" / "ledger.sqlite3"
    if not db.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
        try:
            return con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        finally:
            con.close()
    except sqlite3.OperationalError:  # the server has not created its tables yet
        return 0


# First in the file: the set-up scripts run while the plain demo measures.
def test_setup_and_demo_run_again_beside_the_demo_change_nothing_it_measures(plain_demo: Demo) -> None:
    require_real(Path(sys.executable).parent.parent == VENV, f"the tests run from {VENV}")
    require_real({"sim", "operator-tests"} <= stamped_extras(), "a .venv made by scripts/setup.sh (its stamp)")
    ws = plain_demo.ws
    # the baseline's precision run is recorded: the session has fingerprinted the interpreter's files, and from here
    # on a change of .venv voids its runs
    deadline = time.monotonic() + 600
    while _runs_recorded(ws) < 1:
        assert plain_demo.proc.poll() is None, plain_demo.result().stderr[-3000:]
        assert time.monotonic() < deadline, "the demo recorded no run in 600 s"
        time.sleep(0.5)
    before = venv_state()
    # the checkout's main command and its set-up, run twice while the session holds its workspace
    for _ in range(2):
        setup = run_script("setup.sh")
        assert setup.returncode == 0, setup.stderr
        assert setup.stdout.strip().splitlines()[-1].startswith("setup: .venv is up to date"), setup.stdout
        demo = run_script("demo.sh", "--help")
        assert demo.returncode == 0 and "usage: pypto-tune demo" in demo.stdout, demo.stderr
    assert venv_state() == before
    # a set-up that must change .venv (an extra not installed) names the session and stops
    refused = run_script("setup.sh", extra="mutation")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "processes run from it" in refused.stderr
    # each process is listed with every session it (or a child) holds: the test runner holds others too
    holders = [ln for ln in refused.stderr.splitlines() if "holds the session of" in ln]
    assert any(str(ws) in [w.strip() for w in ln.split("holds the session of", 1)[1].split(", ")]
               for ln in holders), holders
    assert "--force" in refused.stderr
    assert venv_state() == before
    # the set-ups ran beside a session still measuring (what it measured next is checked when the demo has ended)
    assert plain_demo.proc.poll() is None, "the demo ended before the set-ups did: nothing ran beside them"
    plain_demo.setups_done_at = time.time()


def _result(ws: Path) -> tuple[str, float | None, str]:
    facts = latest_session(ws)
    assert facts is not None
    return facts.level1, facts.best_us, (ws / "softmax.py").read_text()


# Next: the interrupted demo runs while the plain one does.
@pytest.mark.slow
def test_ctrl_c_prints_the_state_a_second_demo_is_refused_and_resume_reaches_the_same_result(
        tmp_path: Path, plain_demo: Demo) -> None:
    require_real(shutil.which("tmux") is not None, "tmux is not installed (apt-get install -y tmux)")
    ws = tmp_path / "demo-run"
    term = Tmux("demo", f"{CLI} demo --workspace {ws}", tmp_path)
    try:
        term.wait_for(r"round 1: \S+ → \[1, 8, 256\]", timeout=600)  # round 1 applied, its precision run going
        second = subprocess.run([str(CLI), "demo", "--workspace", str(ws)], capture_output=True, text=True,
                                timeout=120)
        assert second.returncode == 1 and re.search(r"another demo is running in .*\(pid \d+, started 20\d\d-",
                                                    second.stderr), second.stderr
        term.keys("C-c")
        line = term.wait_for(r"pypto-tune demo: stopped by SIGINT in session (\S+) at S4_TUNE / FRONTEND; "
                             r"round 1 is open \(step \w+\): the operator file holds its change; resuming rolls it "
                             r"back to the kept state and does it again — resume: pypto-tune demo --resume "
                             r"--workspace \S+ \(or start over: pypto-tune demo --workspace \S+\)", timeout=120)
        term.wait_for(r"EXIT=130", timeout=60)
        assert "set_vec_tile_shapes(1, 8, 256)" in (ws / "softmax.py").read_text()  # the open round's change
        sid = line.group(1)
    finally:
        term.close()
    resumed = subprocess.run([str(CLI), "demo", "--resume", "--workspace", str(ws)], capture_output=True, text=True,
                             timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"session {sid} resumed" in resumed.stdout
    assert "round 1 was open when the demo stopped: rolled back to the kept state" in resumed.stdout
    plain = plain_demo.result()
    assert plain.returncode == 0, plain.stdout[-3000:] + plain.stderr[-3000:]
    assert _result(ws) == _result(plain_demo.ws)  # DONE, the same best time, the same kept source
    assert _result(ws)[0] == "DONE"


def test_the_demo_session_searches_reaches_its_goal_and_reports_the_batches(plain_demo: Demo) -> None:
    ws = plain_demo.ws
    proc = plain_demo.result()
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

    # every run kept (none discarded for a changed interpreter), every trial judged on its measurement — also the
    # runs that started after the set-up scripts ran beside the session (the first test): it went on measuring
    rows = ledger_tables(ws, sid)
    assert rows["runs"] and not any(r.get("tampered") for r in rows["runs"]), [r["tampered"] for r in rows["runs"]]
    assert not discarded_run_ids(rows)
    if plain_demo.setups_done_at is not None:
        assert any(r["started_epoch"] > plain_demo.setups_done_at for r in rows["runs"]), \
            "no run started after the set-up scripts: the session did not measure beside them"
