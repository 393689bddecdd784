"""Background jobs for long tools called with ``wait=false``.

Why: clients time tool calls out (Claude Code near 60 s, Codex 60–300 s); a precision run may take minutes. A job
runs inside the server's task group, so it outlives the call that started it but not the server; ``wait_job`` polls.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup
from pypto_tune.server.progress import ProgressState
from pypto_tune.tools.errors import InputError, PyptoTuneError, domain_error
from pypto_tune.tools.operations.results import JobHandle


@dataclass
class Job:
    id: str
    tool: str
    started: float
    done: anyio.Event = field(default_factory=anyio.Event)
    status: str = "running"
    last_output: str = ""
    progress: str = ""  # where the job is: phase, elapsed seconds, last output line (server/progress.py)
    result: dict[str, Any] | None = None
    error: str | None = None
    cancel_scope: anyio.CancelScope | None = None
    ended: float | None = None  # elapsed_s stops counting when the job ends

    def view(self) -> JobHandle:
        if self.status == "running":
            message = (f"{self.tool} is running as {self.id}; call wait_job(job_id='{self.id}') (≤ 50 s per call) "
                       "until its status is done")
            nxt = ["wait_job", "cancel_job", "get_status"]
        elif self.status == "done":
            message = f"{self.tool} done: " + str((self.result or {}).get("message", ""))
            nxt = list((self.result or {}).get("next_actions", []))
        else:
            message = f"{self.tool} {self.status}: {self.error}"
            nxt = ["get_status"]
        elapsed = (self.ended or time.monotonic()) - self.started
        return JobHandle(job_id=self.id, tool=self.tool, status=self.status,  # type: ignore[arg-type]
                         elapsed_s=round(elapsed, 3), message=message, next_actions=nxt,
                         last_output=self.last_output, progress=self.progress, result=self.result,
                         error=self.error)


class JobRegistry:
    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._tg: TaskGroup | None = None

    def attach(self, tg: TaskGroup | None) -> None:
        self._tg = tg

    def start(self, tool: str, run: Callable[[Callable[[float, str], Awaitable[None]]], Awaitable[Any]]) -> Job:
        if self._tg is None:
            raise InputError("background jobs are not available in this server instance",
                             hint="call the tool with wait=true")
        job = Job(id=f"job-{uuid.uuid4().hex[:10]}", tool=tool, started=time.monotonic())
        self._jobs[job.id] = job

        where = ProgressState(tool)

        async def progress(elapsed: float, line: str, *, phase: str | None = None, step: int | None = None,
                           steps: int | None = None) -> None:
            where.update(line=line, phase=phase, step=step, steps=steps)
            job.last_output = where.line[-300:]
            job.progress = where.message()

        async def body() -> None:
            with anyio.CancelScope() as scope:
                job.cancel_scope = scope
                try:
                    res = await run(progress)
                    job.result = res.model_dump(mode="json") if hasattr(res, "model_dump") else res
                    job.status = "done"
                except PyptoTuneError as exc:
                    job.status, job.error = "failed", str(exc)
                except Exception as exc:  # noqa: BLE001 - reported to the agent through wait_job
                    known = domain_error(exc)
                    job.status, job.error = "failed", (str(known) if known is not None
                                                       else f"internal error: {type(exc).__name__}: {exc}")
            if scope.cancelled_caught:
                job.status, job.error = "cancelled", "cancelled by cancel_job; the child process group was killed"
            job.ended = time.monotonic()
            job.done.set()

        self._tg.start_soon(body)
        return job

    def get(self, job_id: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise InputError(f"unknown job id {job_id!r}",
                             hint="jobs live as long as the server; after a restart re-run the tool (get_status "
                             "shows the session state)")
        return job

    async def wait(self, job_id: str, timeout_s: float) -> JobHandle:
        job = self.get(job_id)
        with anyio.move_on_after(max(0.0, timeout_s)):
            await job.done.wait()
        return job.view()

    def cancel(self, job_id: str) -> JobHandle:
        job = self.get(job_id)
        if job.cancel_scope is not None and job.status == "running":
            job.cancel_scope.cancel()
        return job.view()

    def running(self) -> list[Job]:
        return [j for j in self._jobs.values() if j.status == "running"]
