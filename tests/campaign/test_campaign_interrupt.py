"""Ctrl-C in a real terminal (tmux) on `pypto-tune campaign`: it says at once that the running steps finish first,
then prints one line — what state the operators are in and the command that resumes — and leaves each session
resumable with its operator file at the kept state (no round open); a second campaign on the folder is refused,
naming the driver's pid and start; the resumed campaign ends as one nobody interrupted (the same best time, the same
kept source, the same number of trials)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pypto_tune.tools.campaign.facts import latest_session
from pypto_tune.tools.session.ledger import Ledger
from pypto_tune.tools.session.state import derive_state, load_rows
from tests.conftest import OPERATORS, require_real
from tests.terminal import Tmux

pytestmark = [pytest.mark.sim, pytest.mark.slow]

CLI = Path(sys.executable).with_name("pypto-tune")
MANIFEST = """
name = "{name}"
batch = 2
[[operator]]
name = "softmax"
workspace = "ws"
source = "{source}"
operator_files = ["softmax.py"]
test_command = ["python", "softmax.py", "--run-mode", "sim"]
goal_speedup = 20
trials = 2
"""


def _manifest(folder: Path, name: str) -> Path:
    folder.mkdir()
    m = folder / "c.toml"
    m.write_text(MANIFEST.format(name=name, source=OPERATORS / "softmax"))
    return m


def _events(out: Path) -> list[dict]:
    f = out / "journal.jsonl"
    return [json.loads(x) for x in f.read_text().splitlines()] if f.is_file() else []


def _end(ws: Path) -> tuple[str, float | None, int, str]:
    f = latest_session(ws)
    assert f is not None
    return f.level1, f.best_us, f.trials, (ws / "softmax.py").read_text()


def test_ctrl_c_pauses_the_campaign_with_one_line_and_resume_ends_as_an_uninterrupted_one(tmp_path: Path) -> None:
    require_real(shutil.which("tmux") is not None, "tmux is not installed (apt-get install -y tmux)")
    plain_m, m = _manifest(tmp_path / "plain", "plain"), _manifest(tmp_path / "cut", "cut")
    plain = subprocess.Popen([str(CLI), "campaign", str(plain_m), "--out", str(tmp_path / "plain" / "out"),
                              "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, ws = tmp_path / "cut" / "out", tmp_path / "cut" / "ws"
    term = Tmux("campaign", f"{CLI} campaign {m} --out {out} --quiet", tmp_path)
    try:
        deadline = time.monotonic() + 600
        while not any(e["event"] == "session" for e in _events(out)) and time.monotonic() < deadline:
            time.sleep(0.5)
        second = subprocess.run([str(CLI), "campaign", str(m), "--out", str(out), "--resume"], capture_output=True,
                                text=True, timeout=120)
        assert second.returncode != 0 and re.search(r"being driven by pid \d+ \(since 20\d\d-", second.stderr), \
            second.stdout + second.stderr
        term.keys("C-c")
        term.wait_for(r"SIGINT received — finishing the running steps, then pausing", timeout=60)
        line = term.wait_for(r"pypto-tune campaign: interrupted \(SIGINT received\): 0 done, 1 paused with their "
                             r"sessions resumable \(each operator file holds its kept state\), 0 not started; resume "
                             r"with: (.+ --resume)\n", timeout=600).group(1)
        term.wait_for(r"EXIT=130", timeout=60)
    finally:
        term.close()
    f = latest_session(ws)
    assert f is not None and f.level1 != "DONE"  # paused, not ended: the session resumes
    ledger = Ledger.for_workspace(ws)
    try:
        st = derive_state(load_rows(ledger, f.session_id))
    finally:
        ledger.close()
    assert st.open_round is None and (ws / "softmax.py").read_text() == st.kept_sources["softmax.py"]
    argv = shlex.split(line)
    assert argv[:2] == ["pypto-tune", "campaign"] and argv[-3:] == ["--out", str(out), "--resume"]
    resumed = subprocess.run([str(CLI), *argv[1:]], capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    text, _ = plain.communicate(timeout=900)
    assert plain.returncode == 0, text[-3000:]
    assert _end(ws) == _end(tmp_path / "plain" / "ws")
    assert _end(ws)[0] == "DONE"
    assert latest_session(ws).session_id == f.session_id  # the same session, resumed
