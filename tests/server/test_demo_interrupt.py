"""Ctrl-C in a real terminal (tmux): `pypto-tune demo` prints one line that says what state the session is in,
what the operator file holds and how to go on; a second demo on the folder is refused while the first runs, naming
its pid and start; `pypto-tune demo --resume` then reaches the same result as a demo nobody interrupted (the same
kept operator source, the same best time)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pypto_tune.tools.campaign.facts import latest_session
from tests.conftest import require_real

pytestmark = [pytest.mark.sim, pytest.mark.slow]

CLI = Path(sys.executable).with_name("pypto-tune")


class Tmux:
    """A private tmux server (its own socket) with one window running ``command``."""

    def __init__(self, name: str, command: str, cwd: Path) -> None:
        self.base = ["tmux", "-L", f"pypto-tune-test-{os.getpid()}-{name}"]
        subprocess.run(self.base + ["new-session", "-d", "-s", name, "-x", "220", "-y", "50", "-c", str(cwd),
                                    f"{command}; echo EXIT=$?; sleep 600"], check=True)
        self.name = name

    def screen(self) -> str:
        out = subprocess.run(self.base + ["capture-pane", "-p", "-J", "-t", self.name, "-S", "-5000"],
                             capture_output=True, text=True)
        return out.stdout

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.screen())
            if m:
                return m
            time.sleep(0.5)
        raise AssertionError(f"{pattern!r} not shown within {timeout} s:\n{self.screen()[-3000:]}")

    def keys(self, *keys: str) -> None:
        subprocess.run(self.base + ["send-keys", "-t", self.name, *keys], check=True)

    def close(self) -> None:
        subprocess.run(self.base + ["kill-server"], capture_output=True)


def _result(ws: Path) -> tuple[str, float | None, str]:
    facts = latest_session(ws)
    assert facts is not None
    return facts.level1, facts.best_us, (ws / "softmax.py").read_text()


def test_ctrl_c_prints_the_state_a_second_demo_is_refused_and_resume_reaches_the_same_result(tmp_path: Path) -> None:
    require_real(shutil.which("tmux") is not None, "tmux is not installed (apt-get install -y tmux)")
    plain_ws, ws = tmp_path / "plain", tmp_path / "demo-run"
    plain = subprocess.Popen([str(CLI), "demo", "--workspace", str(plain_ws)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
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
    out, _ = plain.communicate(timeout=900)
    assert plain.returncode == 0, out[-3000:]
    assert _result(ws) == _result(plain_ws)  # DONE, the same best time, the same kept source
    assert _result(ws)[0] == "DONE"
