"""Shared helpers for the reliability suite: free ports, server subprocesses, process-group kills."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.warm_interpreter import server_command


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_cmd(workspace: Path, *extra: str, env: dict[str, str] | None = None, fresh: bool = False) -> list[str]:
    """``pypto-tune serve`` on ``workspace``, run in ``env`` (None: this process's environment). The process started
    is a launcher of a child of the warm interpreter, where that behaves as a fresh interpreter
    (``tests/warm_interpreter.py``): a server's imports are most of its start's CPU. ``fresh``: the interpreter
    itself, for a test that needs the process it started to be the server (its pid)."""
    args = ["serve", "--workspace", str(workspace), "--log-level", "WARNING", *extra]
    if fresh:
        return [sys.executable, "-m", "pypto_tune.server.cli", *args]
    command, argv = server_command(args, dict(os.environ) if env is None else env)
    return [command, *argv]


def start_http(workspace: Path, port: int, *extra: str, fresh: bool = False) -> subprocess.Popen[bytes]:
    """The server on HTTP, up; ``fresh`` as in :func:`serve_cmd`."""
    proc = subprocess.Popen(serve_cmd(workspace, "--transport", "http", "--port", str(port), *extra, fresh=fresh),
                            cwd=workspace, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode}: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=0.5)
            return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    kill_group(proc.pid)
    raise RuntimeError("http server did not come up in 20 s")


@contextmanager
def running_http(workspace: Path, *extra: str) -> Iterator[int]:
    """``pypto-tune serve --transport http`` on a free loopback port for the block; yields the port."""
    port = free_port()
    proc = start_http(workspace, port, *extra)
    try:
        yield port
    finally:
        kill_group(proc.pid)
        proc.wait()


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def pids_in_group(pgid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(d.name))
    return out
