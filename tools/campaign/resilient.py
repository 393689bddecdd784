"""A run lost with its machine is run again elsewhere: an executor wrapper for campaigns on a cluster.

The Ray executor never retries a run by itself (``max_retries=0``): a retry there would execute the command a
second time behind the ledger's back. A campaign can afford it one floor up, for one kind of failure only: Ray
says the *node* (or the worker process) running the task died, so the run's result never reached the driver and
nothing of it was recorded (the ledger writes a run only when ``Executor.run`` returns). The same ``RunSpec`` — the
same bytes, argv and environment — is then handed to the executor again and lands on a node that is alive; the
session's ledger records that run alone, and the campaign's journal records the loss (which run, which error,
which attempt). A failure of the run itself (the command failed, timed out, could not start) or any other executor
error is never retried here: it is the session's to judge.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pypto_tune.tools.running.executors.base import (
    Executor,
    ExecutorError,
    ExecutorRun,
    ProgressCallback,
    RunMode,
    RunSpec,
)

log = logging.getLogger("pypto_tune.campaign")

#: Ray's exception classes that mean "the machine or process running the task is gone", by name (the wrapper does
#: not import Ray: it also wraps the local pool, where none of these can occur).
NODE_LOSS = frozenset({"NodeDiedError", "WorkerCrashedError", "LocalRayletDiedError", "OwnerDiedError",
                       "ObjectLostError", "ObjectFetchTimedOutError", "RaySystemError", "ActorDiedError",
                       "ActorUnavailableError", "OutOfMemoryError"})
DEFAULT_ATTEMPTS = 3


def lost_with_its_node(exc: BaseException) -> bool:
    """True when the executor failed because the machine or worker running the run died (see the module docstring)."""
    if not isinstance(exc, ExecutorError):
        return False
    cause: BaseException | None = exc.__cause__
    while cause is not None:
        if type(cause).__name__ in NODE_LOSS or any(c.__name__ in NODE_LOSS for c in type(cause).__mro__):
            return True
        cause = cause.__cause__
    return False


class ResilientExecutor(Executor):
    """Delegates to ``inner``; a run lost with its node is run again, up to ``attempts`` times in all."""

    def __init__(self, inner: Executor, *, attempts: int = DEFAULT_ATTEMPTS,
                 on_loss: Callable[[RunSpec, int, ExecutorError], Any] | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.attempts = max(1, int(attempts))
        self.on_loss = on_loss
        self.losses = 0

    async def run(self, spec: RunSpec, *, on_progress: ProgressCallback | None = None) -> ExecutorRun:
        attempt = 1
        while True:
            try:
                return await self.inner.run(spec, on_progress=on_progress)
            except ExecutorError as exc:
                if not lost_with_its_node(exc) or attempt >= self.attempts:
                    raise
                self.losses += 1
                log.warning("run %s lost with its node (attempt %d of %d): %s; running it again", spec.tag, attempt,
                            self.attempts, exc.message.splitlines()[0][:200])
                if self.on_loss is not None:
                    self.on_loss(spec, attempt, exc)
                attempt += 1

    def capacity(self, run_mode: RunMode, device_ids: list[str] | tuple[str, ...] = ()) -> int:
        return self.inner.capacity(run_mode, device_ids)

    async def prepare(self) -> None:
        await self.inner.prepare()

    def close(self) -> None:
        self.inner.close()
