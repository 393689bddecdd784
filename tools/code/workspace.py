"""Workspace safety: every path the server touches resolves inside the workspace, and one server process at a time
may change a workspace's session (an OS file lock, so a SIGKILLed holder releases it automatically)."""

from __future__ import annotations

import fcntl
import os
from datetime import datetime
from pathlib import Path

from pypto_tune.tools.errors import InputError
from pypto_tune.tools.rules import setup as setup_rules

#: The server's own folder inside a workspace: ledger, blobs, artifacts, run copies. Defined here, in the code layer,
#: because the code state and the run copies need it below the session's ledger.
LEDGER_DIR = ".pypto-tune"


def resolve_workspace(path: str | os.PathLike[str]) -> Path:
    raw = str(path)
    if not raw or "\x00" in raw:
        raise InputError("workspace path is empty or contains NUL", hint="pass the absolute path of the operator's folder")
    ws = Path(raw).expanduser()
    if not ws.is_absolute():
        raise InputError(f"workspace must be an absolute path, got {raw!r}",
                         hint="pass the absolute path of the folder the test command runs in")
    ws = ws.resolve()
    if not ws.is_dir():
        raise InputError(f"workspace {ws} does not exist or is not a folder",
                         hint="create it or pass the folder that holds the operator files")
    return ws


def inside(workspace: Path, candidate: str | os.PathLike[str], *, what: str = "path") -> Path:
    """Resolve ``candidate`` (relative to the workspace, or absolute) and refuse anything that escapes it.

    Symlinks are resolved before the check, so a link inside the workspace pointing outside is refused too.
    """
    raw = str(candidate)
    if not raw or "\x00" in raw:
        raise InputError(f"{what} is empty or contains NUL", hint="pass a path inside the workspace")
    p = Path(raw)
    full = (p if p.is_absolute() else workspace / p).resolve()
    try:
        full.relative_to(workspace)
    except ValueError:
        raise InputError(
            f"{what} {raw!r} resolves to {full}, outside the workspace {workspace}",
            hint="only files inside the workspace can be used; symlinks and '..' are resolved first",
        ) from None
    if LEDGER_DIR in full.relative_to(workspace).parts:
        raise InputError(f"{what} {raw!r} points into the server's own {LEDGER_DIR}/ folder",
                         hint="operator files and outputs must live outside .pypto-tune/")
    return full


def relative_operator_files(workspace: Path, files: list[str]) -> list[str]:
    if not files:
        raise InputError("operator_files is empty", hint="list the operator's .py files, relative to the workspace")
    out: list[str] = []
    for f in files:
        full = inside(workspace, f, what="operator file")
        if not full.is_file():
            raise InputError(f"operator file {f!r} does not exist ({full})",
                             hint="pass existing .py files relative to the workspace")
        if full.suffix != ".py":
            raise InputError(f"operator file {f!r} is not a .py file", hint="the tuner edits Python operator sources")
        rel = full.relative_to(workspace).as_posix()
        if rel not in out:
            out.append(rel)
    return out


class WorkspaceLock:
    """Exclusive lock on ``WORKSPACE/.pypto-tune/server.lock``.

    Taken on the first call that changes anything and held until the session's report is rendered (DONE) or the
    process exits; flock is released by the kernel when the holder dies, so a killed server never blocks its
    successor.
    """

    def __init__(self, workspace: Path) -> None:
        self.path = workspace / LEDGER_DIR / "server.lock"
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            try:
                holder = os.pread(fd, 128, 0).decode(errors="replace").strip()
            finally:
                os.close(fd)
            pid, _, since = holder.partition(" ")
            raise setup_rules.session_locked(pid, since) from None
        os.ftruncate(fd, 0)
        # "<pid> <since>": a refused second server names the holder and how long it has held the workspace
        since = datetime.now().astimezone().isoformat(timespec="seconds")
        os.pwrite(fd, f"{os.getpid()} {since}".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
