"""Resource faults: a full disk, a read-only workspace, a missing pypto, an operator that hangs silently —
each gives a clear error and records nothing half."""

from __future__ import annotations

import functools
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from pypto_tune.tools.errors import GateRefusal, LedgerError, PyptoTuneError
from pypto_tune.tools.service import TuningService
from tests.conftest import OPERATORS, make_workspace, python_without_pypto, require_real, sim_command
from tests.reliability.crash_harness import processes_in

pytestmark = pytest.mark.process

def _counts(ws: Path) -> dict[str, int]:
    con = sqlite3.connect(ws / ".pypto-tune" / "ledger.sqlite3")
    try:
        tables = [r[0] for r in con.execute("select name from sqlite_master where type='table'")]
        return {t: con.execute(f"select count(*) from {t}").fetchone()[0] for t in tables}
    finally:
        con.close()


@pytest.fixture
def tmpfs(tmp_path: Path):
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True)
    require_real(r.returncode == 0,
                 f"cannot mount a tmpfs here ({r.stderr.decode().strip()}): needs root / CAP_SYS_ADMIN")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _start(svc: TuningService, ws: Path, **kw):
    args = dict(workspace=str(ws), operator_files=["softmax.py"], test_command=sim_command(), run_mode="sim",
                goal_speedup=2.0)
    args.update(kw)
    return svc.start_session(**args)


def _fill(mnt: Path) -> Path:
    filler = mnt / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for chunk in (65536, 512):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def test_disk_full_gives_ledger_error_and_records_nothing_half(tmpfs: Path) -> None:
    ws = tmpfs / "ws"
    ws.mkdir()
    shutil.copy2(OPERATORS / "softmax" / "softmax.py", ws / "softmax.py")
    svc = TuningService(default_workspace=ws)
    sid = _start(svc, ws).session_id
    before = _counts(ws)
    filler = _fill(tmpfs)
    try:
        with pytest.raises(LedgerError) as exc:
            # a long reason makes the transaction need fresh pages
            svc.stop_session(sid, reason="disk full attack " + uuid.uuid4().hex * 2000)
        text = str(exc.value)
        assert "ledger" in text and ("full" in text or "disk" in text), text
        assert "Next:" in text
    finally:
        filler.unlink()
    assert _counts(ws) == before, "a failed write left part of its rows"
    assert sqlite3.connect(ws / ".pypto-tune" / "ledger.sqlite3").execute("pragma integrity_check").fetchone() == \
        ("ok",)
    # space is back: the same server continues
    assert svc.stop_session(sid, reason="space freed").state == "S5_REPORT"


def test_read_only_workspace_gives_a_clear_error_not_an_internal_one(tmpfs: Path) -> None:
    ws = tmpfs / "ws"
    ws.mkdir()
    shutil.copy2(OPERATORS / "softmax" / "softmax.py", ws / "softmax.py")
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    try:
        with pytest.raises(PyptoTuneError) as exc:
            _start(TuningService(default_workspace=ws), ws)
        text = str(exc.value)
        assert "read-only" in text.lower() or "writable" in text.lower(), text
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(tmpfs)], check=True)
    assert not (ws / ".pypto-tune" / "ledger.sqlite3").exists()


def test_python_without_pypto_fails_env_check_naming_import_pypto(tmp_path: Path) -> None:
    python = python_without_pypto()
    ws = make_workspace(tmp_path)
    svc = TuningService(default_workspace=ws, python=python)
    sid = _start(svc, ws, test_command=[python, "softmax.py", "--run-mode", "sim"]).session_id
    with pytest.raises(GateRefusal) as exc:
        anyio.run(functools.partial(svc.run_precision_check, sid))
    text = str(exc.value)
    assert text.startswith("GATE env-check:") and "import pypto" in text, text
    assert svc.get_status(sid).state == "S1_SETUP"


HANG = """\
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for _ in range(2):          # grandchildren that ignore SIGTERM too
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(600)
        os._exit(0)
time.sleep(600)             # never prints anything
"""


def test_operator_hanging_silently_times_out_and_leaves_no_process(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "hang.py").write_text(HANG)
    svc = TuningService(default_workspace=ws)
    sid = svc.start_session(workspace=str(ws), operator_files=["hang.py"], test_command=[sys.executable, "hang.py"],
                            run_mode="sim", goal_speedup=2.0, timeout_s=3).session_id
    res = anyio.run(functools.partial(svc.run_precision_check, sid))
    assert res.verdict == "timeout", res
    assert res.duration_s < 30
    left = [p for p in processes_in(ws) if p != os.getpid()]
    for pid in left:
        os.kill(pid, 9)
    assert not left, f"processes of the timed-out test survive: {left}"
    rows = _counts(ws)
    assert rows["precision_records"] == 1 and rows["runs"] >= 1
