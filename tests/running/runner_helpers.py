"""Helpers for the runner tests: real child processes, inspected through /proc (no mocks)."""

from __future__ import annotations

import os
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"


def is_alive(pid: int) -> bool:
    """True while ``pid`` is a running (non-zombie) process. A zombie is dead: it only waits to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    state = stat[stat.rfind(b")") + 2:].split()[0]
    return state not in (b"Z", b"X")


def wait_for_pids(pidfile: Path, count: int, timeout_s: float = 10.0) -> list[int]:
    """The pids a child wrote to ``pidfile`` (one per line), once there are ``count`` of them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pidfile.exists():
            pids = [int(x) for x in pidfile.read_text().split()]
            if len(pids) >= count:
                return pids
        time.sleep(0.02)
    raise AssertionError(f"child did not write {count} pids to {pidfile}")


def wait_dead(pids: list[int], timeout_s: float = 3.0) -> list[int]:
    """Pids still alive after ``timeout_s`` (orphans are reaped asynchronously by PID 1)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if is_alive(p)]
        if not alive:
            return []
        time.sleep(0.02)
    return [p for p in pids if is_alive(p)]


def kill_leftovers(pids: list[int]) -> None:
    """Test hygiene only: if an assertion failed, do not leave our own test processes behind."""
    for p in pids:
        try:
            os.kill(p, 9)
        except OSError:
            pass


def processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text`` (to find children that never reported)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline and is_alive(int(entry)):
                found.append(int(entry))
    return found
