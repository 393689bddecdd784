"""scripts/setup.sh: its help and its one option. Run again beside a running session (the demo's), it changes no file
of .venv and the session keeps every run: that is checked in tests/server/test_demo.py, beside the demo that test runs
anyway (a session of its own here would cost a baseline and a campaign of SIM runs)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv"


def venv_state() -> dict[str, tuple[int, int, int, int]]:
    """Every entry of .venv with what a rewrite changes: size, inode, mtime and ctime (the session's scan reads
    size, inode and ctime)."""
    out = {}
    for folder, dirs, files in os.walk(VENV):
        for name in dirs + files:
            st = os.lstat(os.path.join(folder, name))
            out[os.path.join(folder, name)] = (st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    return out


def run_script(script: str, *args: str, extra: str = "") -> subprocess.CompletedProcess[str]:
    """``bash scripts/SCRIPT ARGS`` from the checkout, with ``EXTRA`` set to ``extra`` (or unset)."""
    env = {k: v for k, v in os.environ.items() if k != "EXTRA"}
    if extra:
        env["EXTRA"] = extra
    return subprocess.run(["bash", str(ROOT / "scripts" / script), *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=ROOT)


def stamped_extras() -> set[str]:
    """The extras the last scripts/setup.sh recorded in .venv's stamp (none without a stamp)."""
    try:
        lines = (VENV / ".pypto-tune-setup").read_text().splitlines()
    except OSError:
        return set()
    return {e for line in lines if line.startswith("extras ") for e in line.split(" ", 1)[1].split(",")}


def test_setup_help_and_an_unknown_option() -> None:
    shown = run_script("setup.sh", "--help")
    assert shown.returncode == 0 and "--force" in shown.stdout and "EXTRA=" in shown.stdout
    wrong = run_script("setup.sh", "--froce")
    assert wrong.returncode == 2 and "--force" in wrong.stderr
