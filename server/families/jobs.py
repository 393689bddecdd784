"""Jobs family: a long tool called with wait=false runs as a job; these wait for it or cancel it."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from pypto_tune.server.wiring import EDITS_IDEMPOTENT, RO, Wiring
from pypto_tune.tools.operations.results import JobHandle

JobId = Annotated[str, Field(description="job_id from a wait=false call")]


def register(w: Wiring) -> None:
    @w.reg.tool(title="Wait for a background job", annotations=RO, result=JobHandle)
    async def wait_job(job_id: JobId,
                       timeout_s: Annotated[float, Field(description="how long to wait now (≤ 50 s keeps within "
                                                         "client timeouts)")] = 30.0) -> JobHandle:
        """Wait for a background job; returns its result when done, else its status."""
        return await w.jobs.wait(job_id, min(float(timeout_s), 50.0))

    @w.reg.tool(title="Cancel a background job", annotations=EDITS_IDEMPOTENT, result=JobHandle)
    async def cancel_job(job_id: JobId) -> JobHandle:
        """Cancel a background job; its whole process group is killed and nothing half is recorded."""
        w.jobs.cancel(job_id)
        return await w.jobs.wait(job_id, 10.0)
