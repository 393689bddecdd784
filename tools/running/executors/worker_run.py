"""One isolated run in a process of its own, for the Ray worker (``python -m pypto_tune.tools.running.executors.worker_run``).

Why a process between the Ray worker and the command's supervisor: a forced ``ray.cancel`` makes the worker SIGKILL
its *direct* children before it exits. Were the command's supervisor (``runner._PDEATHSIG_LAUNCHER``) a direct
child, that SIGKILL would take it out before it could kill its group, and a group member that ignores SIGTERM
would outlive the run (measured). With this process in between, the worker's SIGKILL lands here; the supervisor,
whose parent-death signal is armed on this process, then kills the whole group.

Protocol (parent = the Ray task, on the same machine): stdin carries one pickled :class:`WorkerJob`; stdout carries
length-prefixed pickled messages ``("progress", elapsed_s, line)``, then ``("result", IsolatedRun)`` or
``("error", class name, message, hint)``. SIGTERM (or the parent's death: the parent-death signal is SIGTERM)
cancels the run (repeats are one request): ``run_command`` kills the group with its usual grace and ``run_isolated``
removes the copy, then this process exits 1 without a result. Logs go to stderr.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import anyio
from pypto_tune.tools.code.codestate import ExecFile
from pypto_tune.tools.errors import PyptoTuneError
from pypto_tune.tools.running.execution import run_isolated
from pypto_tune.tools.running.sandbox import Closure

_HEADER = struct.Struct(">Q")


@dataclass
class WorkerJob:
    files: dict[str, ExecFile]
    argv: list[str]
    env: dict[str, str]
    workspace: str  # the worker-local workspace: the copy goes under it, outputs end in its output/
    timeout_s: float
    tag: str
    parent_pid: int
    mount_at: str = ""  # the session's workspace path: where the copy appears inside the sandbox
    sandboxed: bool = True
    closure: Closure | None = None
    ro_binds: tuple[str, ...] = ()
    pythonpath_first: tuple[str, ...] = ()
    capture_env: str | None = None


def write_message(stream: BinaryIO, message: tuple[Any, ...], lock: threading.Lock | None = None) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    if lock is None:
        stream.write(_HEADER.pack(len(data)) + data)
        stream.flush()
        return
    with lock:
        stream.write(_HEADER.pack(len(data)) + data)
        stream.flush()


def read_message(stream: BinaryIO) -> tuple[Any, ...] | None:
    """The next message, or None at the end of the stream (a truncated message counts as the end)."""
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


def _arm_parent_death_signal(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        sys.exit(1)


async def _main(job: WorkerJob, out: BinaryIO) -> int:
    async def progress(elapsed: float, line: str) -> None:
        write_message(out, ("progress", elapsed, line))

    status = 1
    # The receiver stays open until the run is over: while it is open every SIGTERM is just a message (asyncio
    # puts SIG_DFL back when a receiver closes, so one opened and closed inside the run would let a repeated
    # SIGTERM kill this process halfway through killing the group).
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with anyio.create_task_group() as tg:
            run_scope = anyio.CancelScope()

            async def watch() -> None:
                async for _ in signals:
                    run_scope.cancel()

            tg.start_soon(watch)
            with run_scope:
                try:
                    iso = await run_isolated(job.files, job.argv, workspace=Path(job.workspace), env=job.env,
                                             timeout_s=job.timeout_s, on_progress=progress, tag=job.tag,
                                             mount_at=job.mount_at or None, sandboxed=job.sandboxed,
                                             closure=job.closure, ro_binds=job.ro_binds,
                                             pythonpath_first=job.pythonpath_first, capture_env=job.capture_env)
                except PyptoTuneError as exc:
                    write_message(out, ("error", type(exc).__name__, exc.message, exc.hint))
                else:
                    write_message(out, ("result", iso))
                    status = 0
            tg.cancel_scope.cancel()
    return status


def main() -> int:
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but protocol messages may reach the parent's pipe
    # Until the run's signal receiver is up a SIGTERM is dropped rather than fatal: the parent repeats it every
    # second until this process is gone. A no-op handler, not SIG_IGN: ignored signals would be inherited by the
    # command through exec, caught ones are reset.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    try:
        job: WorkerJob = pickle.load(sys.stdin.buffer)
    except EOFError:  # a spare whose Ray worker ended before giving it a job: nothing ran, nothing to say
        return 0
    _arm_parent_death_signal(job.parent_pid)
    return anyio.run(_main, job, out)


if __name__ == "__main__":
    sys.exit(main())
