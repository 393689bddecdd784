"""Run the operator's test command as a child process, safely and with a bounded memory footprint.

What "safely" means here, and why each point exists:

* **argv only, never a shell.** The test command comes from the agent; a shell would turn quoting mistakes into
  command injection. A user string is split once with ``shlex`` (:func:`split_command`).
* **Own session / process group** (``start_new_session=True``). PyPTO's simulator starts helper scripts as
  grandchildren (domain A.2b) and test harnesses fork workers; signalling the group reaches all of them. A
  grandchild that calls ``setsid()`` itself escapes the group — that is the one case this module cannot clean up.
* **Every exit path kills the group**: normal exit (strays left behind), timeout (SIGTERM, grace, SIGKILL) and
  cancellation of the anyio task (the MCP client cancelled the call; mcp2.md says the server must then stop the
  subprocess). The cleanup runs shielded in ``finally`` so a second cancellation cannot interrupt it.
* **Bounded output.** A child may print gigabytes; we keep the first and the last ``output_cap_bytes / 2`` bytes
  and count the rest, so memory stays O(cap) whatever the child does.
* **Explicit environment** (:func:`build_child_env`): nothing is inherited implicitly, and the server records what
  it passed. PATH starts with the directory of the running interpreter so that the ``python3`` pypto's helper
  scripts pick up exists (A.2b).
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import signal as _signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import anyio
from pydantic import BaseModel, Field

from pypto_tune.tools.errors import InputError, RunError

ProgressCallback = Callable[[float, str], Awaitable[None]]

#: Seconds between SIGTERM and SIGKILL of the process group, and how long we then wait for the group to vanish.
KILL_GRACE_S = 2.0
#: Bytes read from the pipe per receive; also the most the ring buffer can exceed its cap by, transiently.
_READ_CHUNK = 256 * 1024
#: Bytes of recent output kept to answer "what was the last line" for progress messages.
_LAST_LINE_WINDOW = 4096

# Environment variables passed through when present: what CANN's set_env.sh exports — ASCEND_* (ASCEND_HOME_PATH,
# ASCEND_TOOLKIT_HOME, ASCEND_OPP_PATH, ASCEND_AICPU_PATH), TOOLCHAIN_HOME, LD_LIBRARY_PATH and PYTHONPATH (CANN's
# own Python packages and, on many boxes, torch_npu: without it `import torch_npu` fails in the R3 check) — plus
# PTO-ISA (PTO_TILE_LIB_CODE_PATH, R3) and pypto's runtime switches (TILE_FWK_*). TILE_FWK_DEVICE_ID is the
# exception: the server picks the chip (R3/R5), and a SIM run has none.
_PASSTHROUGH_PREFIXES = ("ASCEND", "PTO", "TILE_FWK_")
# TZ: the run names its output folders in local time, which the server checks against the run's window.
_PASSTHROUGH_NAMES = ("LD_LIBRARY_PATH", "PYTHONPATH", "TOOLCHAIN_HOME", "TZ")
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


class RunResult(BaseModel):
    """What one run of the test command did. Times are epoch seconds; ``duration_s`` is monotonic."""

    argv: list[str]
    cwd: str
    exit_code: int | None = Field(description="exit status; None when the child was killed by a signal")
    signal: int | None = Field(description="signal number that ended the child (ours on timeout/cancel, or a crash)")
    timed_out: bool
    cancelled: bool = Field(False, description="the call was cancelled; run_command re-raises, so normally False")
    duration_s: float
    started_at: float = Field(description="epoch seconds taken BEFORE spawning: run folders newer than this are ours")
    ended_at: float
    output_head: str = Field(description="first output bytes (stdout+stderr merged), decoded as UTF-8")
    output_tail: str = Field("", description="last output bytes when the output did not fit in the head")
    output_truncated: bool = Field(description="bytes between head and tail were dropped")
    output_bytes: int = Field(description="total bytes the child printed")
    env_keys: list[str] = Field(description="names of the environment variables the child got (values not stored)")

    @property
    def output(self) -> str:
        """Head + a marker naming the dropped byte count + tail (just head + tail when nothing was dropped)."""
        if not self.output_truncated:
            return self.output_head + self.output_tail
        kept = len(self.output_head.encode()) + len(self.output_tail.encode())
        dropped = max(self.output_bytes - kept, 0)
        return f"{self.output_head}\n[... {dropped} bytes of output omitted ...]\n{self.output_tail}"


# When the server dies (even by SIGKILL, which runs no cleanup) the whole test must die with it. The kernel's
# parent-death signal reaches only one process, so a tiny supervisor sits between the server and the command: it
# asks for SIGUSR1 on the server's death, runs the command as its child in the same process group, and on that
# signal kills the group — the command and every helper it started (the 100 crash trials found both: first the
# simulator itself left running, then, once only the direct child got the signal, three of its helpers). Otherwise
# it waits and leaves with the command's own exit status or signal. SIGTERM is caught (not ignored, which exec
# would pass on) so that the runner's group SIGTERM gives the command its grace period while the supervisor
# keeps reporting the command's real status.
_PDEATHSIG_LAUNCHER = (
    "import ctypes, os, signal, sys\n"
    "signal.signal(signal.SIGUSR1, lambda *_: os.killpg(0, signal.SIGKILL))\n"
    "term = []\n"
    "signal.signal(signal.SIGTERM, lambda *_: term.append(1))\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGUSR1), 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[1]): os.killpg(0, signal.SIGKILL)\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    try:\n"
    "        os.execvp(sys.argv[2], sys.argv[2:])\n"
    "    finally:\n"
    "        os._exit(127)\n"
    "status = os.waitpid(pid, 0)[1]\n"
    # told to stop (timeout, cancel) and the command is gone: whatever of the group ignored SIGTERM goes now, even
    # if the server dies before its own SIGKILL (found by the executor work: a grandchild survived that gap)
    "if term: os.killpg(0, signal.SIGKILL)\n"
    "if os.WIFSIGNALED(status):\n"
    "    sig = os.WTERMSIG(status)\n"
    "    signal.signal(sig, signal.SIG_DFL)\n"
    "    os.kill(os.getpid(), sig)\n"
    "os._exit(os.waitstatus_to_exitcode(status))\n"
)


def _check_startable(program: str, *, cwd: Path, env: Mapping[str, str]) -> None:
    """The launcher execs the program, so "cannot start" must be detected here to stay a RunError."""
    if os.sep in program:
        full = Path(program) if os.path.isabs(program) else Path(cwd) / program
        ok = full.is_file() and os.access(full, os.X_OK)
    else:
        ok = shutil.which(program, path=env.get("PATH", os.defpath)) is not None
    if not ok or not Path(cwd).is_dir():
        raise RunError(f"cannot start {program!r} in {cwd}: not an executable file (or the folder is missing)",
                       hint="check the test command's program and that the workspace directory exists")


def _with_parent_death_signal(argv: list[str]) -> list[str]:
    if not sys.platform.startswith("linux"):
        return list(argv)
    return [sys.executable, "-S", "-c", _PDEATHSIG_LAUNCHER, str(os.getpid()), *argv]


def split_command(cmd: str | list[str], *, path: str | None = None, cwd: Path | None = None) -> list[str]:
    """Turn a user's test command into an argv, refusing what cannot be run.

    A string is split with ``shlex`` (POSIX rules, no shell features: ``|``, ``>``, ``&&`` become plain words).
    Checks: non-empty, no NUL byte, every element a string, and the program resolvable — a bare name on ``path``
    (default: the PATH :func:`build_child_env` gives the child), a name with ``/`` as an existing file (relative
    names are checked against ``cwd`` when given, otherwise left to :func:`run_command`).
    """
    if isinstance(cmd, str):
        if "\x00" in cmd:
            raise InputError("test_command contains a NUL byte", hint="pass the command without control characters")
        try:
            argv = shlex.split(cmd)
        except ValueError as exc:  # unbalanced quotes
            raise InputError(f"test_command cannot be split into words: {exc}",
                             hint="balance the quotes, or pass test_command as a list of arguments") from exc
    elif isinstance(cmd, list):
        if not all(isinstance(a, str) for a in cmd):
            raise InputError("test_command list must contain only strings", hint='e.g. ["python3", "test_op.py"]')
        argv = list(cmd)
    else:
        raise InputError(f"test_command must be a string or a list of strings, got {type(cmd).__name__}")
    if not argv or not argv[0].strip():
        raise InputError("test_command is empty", hint='e.g. "python3 test_op.py"')
    if any("\x00" in a for a in argv):
        raise InputError("test_command contains a NUL byte", hint="pass the command without control characters")
    prog = argv[0]
    if "/" in prog:
        p = Path(prog)
        if not p.is_absolute():
            if cwd is None:
                return argv
            p = cwd / p
        if not p.is_file():
            raise InputError(f"test command program {prog!r} does not exist (looked at {p})",
                             hint="give a path relative to the workspace, or a program name on PATH")
        return argv
    search = path if path is not None else _child_path(os.environ)
    if shutil.which(prog, path=search) is None:
        raise InputError(f"test command program {prog!r} is not on the child's PATH ({search})",
                         hint="use python3 (the server's interpreter directory is first on PATH) or an absolute path")
    return argv


def _child_path(base: Mapping[str, str]) -> str:
    # The interpreter directory (the venv's bin) goes first: pypto runs its helper scripts with whatever `python3`
    # PATH finds (A.2b). Not resolved through symlinks: the venv's python3 is a symlink to the base interpreter,
    # and resolving it would lose the venv's site-packages.
    first = os.path.dirname(sys.executable) or "/usr/bin"
    rest = [p for p in base.get("PATH", _DEFAULT_PATH).split(os.pathsep) if p and p != first]
    return os.pathsep.join([first, *dict.fromkeys(rest)])


def build_child_env(*, run_mode: str, device_id: str | None = None, extra: dict[str, str] | None = None,
                    base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The complete environment of the test command; the caller records it with the run.

    Contains PATH (interpreter directory first, then ``base``'s PATH), HOME, LANG/LC_ALL=C.UTF-8 (stable decoding
    of the output we parse), PYTHONUNBUFFERED=1 (output arrives as it is printed, so progress and the tail after a
    timeout are meaningful), PYTHONDONTWRITEBYTECODE=1 (no ``__pycache__`` in the user's workspace), on NPU
    TILE_FWK_DEVICE_ID (the chip, R3/R5; ``device_id``, else ``base``'s), and what CANN's set_env.sh exports, copied
    from ``base`` when present: ASCEND*, TOOLCHAIN_HOME, LD_LIBRARY_PATH, PYTHONPATH, plus PTO* and TILE_FWK_*.
    ``extra`` is applied last and may override anything. ``base`` defaults to the server's ``os.environ``.
    """
    src = os.environ if base is None else base
    mode = run_mode.lower()
    if mode not in ("sim", "npu"):
        raise InputError(f"run_mode must be 'sim' or 'npu', got {run_mode!r}")
    home = src.get("HOME") or os.path.expanduser("~")
    env: dict[str, str] = {
        "PATH": _child_path(src),
        "HOME": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    for key, value in src.items():
        if (key.startswith(_PASSTHROUGH_PREFIXES) or key in _PASSTHROUGH_NAMES) and key != "TILE_FWK_DEVICE_ID":
            env[key] = value
    if mode == "npu":
        if device_id is not None:
            env["TILE_FWK_DEVICE_ID"] = str(device_id)
        elif "TILE_FWK_DEVICE_ID" in src:
            env["TILE_FWK_DEVICE_ID"] = src["TILE_FWK_DEVICE_ID"]
    for key, value in (extra or {}).items():
        if not key or "=" in key or "\x00" in key or "\x00" in str(value):
            raise InputError(f"invalid environment variable {key!r}", hint="names without '=' or NUL")
        env[key] = str(value)
    return env


class _Capture:
    """Head + ring-buffer tail of a byte stream. Memory is bounded by ``cap + one chunk`` whatever is fed."""

    def __init__(self, cap: int) -> None:
        self.half = max(cap // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.recent = bytearray()

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        self.recent += data[-_LAST_LINE_WINDOW:]
        if len(self.recent) > _LAST_LINE_WINDOW:
            del self.recent[: len(self.recent) - _LAST_LINE_WINDOW]
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.half:
                # CPython's bytearray deletes from the front in O(1) (it moves a start offset), so this is a ring.
                del self.tail[: len(self.tail) - self.half]

    def last_line(self) -> str:
        for line in reversed(bytes(self.recent).decode("utf-8", "replace").splitlines()):
            if line.strip():
                return line.strip()[-300:]
        return ""

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def texts(self) -> tuple[str, str]:
        head = bytes(self.head).decode("utf-8", "replace")
        tail = bytes(self.tail)
        if self.truncated:
            # The cut may fall inside a multi-byte character: drop its continuation bytes instead of printing U+FFFD.
            i = 0
            while i < min(len(tail), 4) and 0x80 <= tail[i] <= 0xBF:
                i += 1
            tail = tail[i:]
        return head, tail.decode("utf-8", "replace")


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``, read from /proc.

    ``killpg(pgid, 0)`` is not enough: it succeeds while a zombie is left in the group, and in a container the
    reaper of orphans (PID 1) may never collect them.
    """
    members: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:  # not Linux: fall back to the signal probe
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except (ProcessLookupError, PermissionError):
            return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()  # comm may contain spaces and ')': split after the last ')'
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(int(entry))
    return members


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


async def _wait_group_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if not _group_members(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        await anyio.sleep(0.05)


async def _terminate_group(proc: anyio.abc.Process, pgid: int, grace_s: float) -> int | None:
    """SIGTERM the group, wait ``grace_s``, SIGKILL what is left; reap the direct child. Returns the signal that
    ended the direct child if we sent it (None when it had already exited on its own)."""
    sent: int | None = None
    if proc.returncode is None:
        sent = _signal.SIGTERM
    _signal_group(pgid, _signal.SIGTERM)
    with anyio.move_on_after(grace_s):
        await proc.wait()
        await _wait_group_gone(pgid, grace_s)
    if proc.returncode is None or _group_members(pgid):
        if proc.returncode is None:
            sent = _signal.SIGKILL
        _signal_group(pgid, _signal.SIGKILL)
    with anyio.move_on_after(grace_s):
        await proc.wait()
    await _wait_group_gone(pgid, grace_s)
    return sent


async def run_command(argv: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float = 300,
                      output_cap_bytes: int = 4 * 1024 * 1024,
                      on_progress: ProgressCallback | None = None,
                      progress_interval_s: float = 2.0,
                      kill_grace_s: float = KILL_GRACE_S, pass_fds: tuple[int, ...] = (),
                      stdin: int | None = None) -> RunResult:
    """Run ``argv`` in ``cwd`` with exactly ``env``; return what happened.

    * stdin is /dev/null, stdout and stderr are merged into one capture (head + tail of ``output_cap_bytes``).
    * The child gets its own session; when it exits, any group member still running is killed (after the pipe
      closes or the time budget runs out), so nothing the test started outlives the call.
    * ``timeout_s`` bounds the whole call: on expiry the group gets SIGTERM, ``kill_grace_s`` later SIGKILL, and
      the result has ``timed_out=True`` (returned, not raised).
    * If the calling task is cancelled, the group is killed the same way (shielded) and the cancellation is
      re-raised.
    * ``on_progress(elapsed_s, last_output_line)`` is awaited every ``progress_interval_s`` while the child runs,
      also when it prints nothing. An exception from it aborts the run (group killed) and propagates.

    * ``pass_fds`` stay open in the child under their numbers (a sealed sandbox's copy descriptors); ``stdin`` is a
      descriptor for the child's stdin instead of /dev/null (a sealed sandbox's handback socket).

    Raises :class:`RunError` when the program cannot be started (not found, not executable, bad cwd).
    """
    if not argv:
        raise InputError("argv is empty")
    _check_startable(argv[0], cwd=cwd, env=env)
    cap = _Capture(max(int(output_cap_bytes), 2))
    started_at = time.time()  # before spawn: the caller finds run folders created after this instant
    t0 = time.monotonic()
    try:
        # Shielded: a cancellation landing inside the spawn could otherwise leave a started child we hold no
        # handle to. A pending cancellation is delivered at the first await inside the try/finally below.
        with anyio.CancelScope(shield=True):
            proc = await anyio.open_process(
                _with_parent_death_signal(argv), stdin=subprocess.DEVNULL if stdin is None else stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                cwd=str(cwd), env=env, start_new_session=True, pass_fds=tuple(pass_fds),
            )
    except (FileNotFoundError, PermissionError, NotADirectoryError, OSError) as exc:
        raise RunError(f"cannot start {argv[0]!r} in {cwd}: {exc}",
                       hint="check the test command's program and that the workspace directory exists") from exc
    pgid = proc.pid  # start_new_session: the child is session and group leader, pgid == pid
    timed_out = False
    sent_signal: int | None = None
    eof = anyio.Event()

    async def read_output() -> None:
        assert proc.stdout is not None
        try:
            while True:
                cap.feed(await proc.stdout.receive(_READ_CHUNK))
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            eof.set()

    progress_error: list[Exception] = []

    async def report_progress(scope: anyio.CancelScope) -> None:
        assert on_progress is not None
        while True:
            await anyio.sleep(progress_interval_s)
            try:
                await on_progress(round(time.monotonic() - t0, 3), cap.last_line())
            except Exception as exc:  # noqa: BLE001 - re-raised below as itself, not wrapped in an ExceptionGroup
                progress_error.append(exc)
                scope.cancel()
                return

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_output)
            if on_progress is not None:
                tg.start_soon(report_progress, tg.cancel_scope)
            budget = float(timeout_s) if timeout_s and timeout_s > 0 else math.inf
            with anyio.move_on_after(budget) as scope:
                await proc.wait()
                # Like subprocess.run: wait until everyone holding the pipe closed it (grandchildren still
                # printing), within the same budget.
                await eof.wait()
            timed_out = scope.cancelled_caught
            with anyio.CancelScope(shield=True):
                sent = await _terminate_group(proc, pgid, kill_grace_s)
                if timed_out:
                    sent_signal = sent
                # Killing the group closes the pipe's write ends; take what is still buffered, briefly.
                with anyio.move_on_after(1.0):
                    await eof.wait()
            tg.cancel_scope.cancel()
    finally:
        # Cancellation or an error (from on_progress, say) lands here with the child possibly still running.
        with anyio.CancelScope(shield=True):
            if proc.returncode is None or _group_members(pgid):
                await _terminate_group(proc, pgid, kill_grace_s)
            await proc.aclose()

    if progress_error:
        raise progress_error[0]
    if on_progress is not None and cap.last_line():
        # A run shorter than one interval still tells the client what it printed last (its verdict line, usually).
        await on_progress(round(time.monotonic() - t0, 3), cap.last_line())
    rc = proc.returncode
    exit_code: int | None = rc if rc is not None and rc >= 0 else None
    sig: int | None = -rc if rc is not None and rc < 0 else None
    if sig is None and sent_signal is not None and exit_code is None:
        sig = sent_signal
    head, tail = cap.texts()
    return RunResult(
        argv=list(argv), cwd=str(cwd), exit_code=exit_code, signal=sig, timed_out=timed_out, cancelled=False,
        duration_s=round(time.monotonic() - t0, 3), started_at=started_at, ended_at=time.time(),
        output_head=head, output_tail=tail, output_truncated=cap.truncated, output_bytes=cap.total,
        env_keys=sorted(env),
    )
