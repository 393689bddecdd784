"""The embedded executor: runs on this machine through ``run_isolated``, as many at once as there are slots.

Slots: a SIM run takes one CPU slot (the simulator keeps one core busy; ``os.sched_getaffinity`` counts the cores
this process may use, which is what a container or ``taskset`` grants, unlike ``os.cpu_count``). An NPU run takes
one chip of its pool for its whole duration and gets ``TILE_FWK_DEVICE_ID`` = that chip, so two runs never share a
chip (a shared chip would make both measurements worthless). Chips are keyed by id across sessions: two sessions
whose pools overlap take turns on the common chips.

Cancellation: ``run_command`` (under ``run_isolated``) kills the run's whole process group when its task is
cancelled, shielded from a second cancellation; a run still waiting for a slot simply leaves the queue.
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from dataclasses import dataclass, fields
from pathlib import Path

import anyio
from pypto_tune.tools.running.execution import IsolatedRun, run_isolated
from pypto_tune.tools.running.executors.base import (
    Executor,
    ExecutorRun,
    ProgressCallback,
    RunMode,
    RunSpec,
)


def usable_cores() -> int:
    """Cores this process may run on (affinity mask), at least 1."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):  # not Linux
        return max(os.cpu_count() or 1, 1)


@dataclass
class _Waiter:
    candidates: frozenset[str]
    event: anyio.Event
    key: str | None = None


class SlotPool:
    """Named slots handed out first come, first served; a waiter names the slots it can use.

    A released slot goes straight to the oldest waiter that can use it (no thundering herd, no overtaking). The
    pool keeps no event loop state while idle, so one pool can serve successive event loops (tests do that).
    """

    def __init__(self) -> None:
        self._busy: set[str] = set()
        self._waiters: deque[_Waiter] = deque()

    @property
    def busy(self) -> frozenset[str]:
        return frozenset(self._busy)

    async def acquire(self, candidates: list[str] | tuple[str, ...]) -> str:
        if not candidates:
            raise ValueError("no slot to wait for")
        # A free slot can be taken at once: no waiter can use it, since a released slot goes to a waiter that
        # can use it before it is ever marked free.
        for c in candidates:
            if c not in self._busy:
                self._busy.add(c)
                return c
        w = _Waiter(frozenset(candidates), anyio.Event())
        self._waiters.append(w)
        try:
            await w.event.wait()
        except BaseException:
            if w.key is not None:  # handed a slot in the same instant we were cancelled: pass it on
                self.release(w.key)
            else:
                self._waiters.remove(w)
            raise
        assert w.key is not None
        return w.key

    def release(self, key: str) -> None:
        for w in self._waiters:
            if key in w.candidates:
                self._waiters.remove(w)
                w.key = key  # stays busy: ownership moves to the waiter
                w.event.set()
                return
        self._busy.discard(key)


def _as_executor_run(iso: IsolatedRun, **extra: object) -> ExecutorRun:
    return ExecutorRun(**{f.name: getattr(iso, f.name) for f in fields(IsolatedRun)}, **extra)  # type: ignore[arg-type]


class LocalExecutor(Executor):
    """Runs on this machine. ``sim_slots`` defaults to the usable cores."""

    name = "local"

    def __init__(self, *, sim_slots: int | None = None) -> None:
        if sim_slots is not None and sim_slots < 1:
            raise ValueError("sim_slots must be ≥ 1")
        self.sim_slots = sim_slots or usable_cores()
        self.pool = SlotPool()
        self._host = socket.gethostname()

    def capacity(self, run_mode: RunMode, device_ids: list[str] | tuple[str, ...] = ()) -> int:
        if run_mode == "npu":
            return max(len(set(map(str, device_ids))), 1)
        return self.sim_slots

    async def run(self, spec: RunSpec, *, on_progress: ProgressCallback | None = None) -> ExecutorRun:
        t0 = time.monotonic()
        if spec.run_mode == "npu":
            candidates = [f"npu:{d}" for d in spec.chips()]
        else:
            candidates = [f"sim:{i}" for i in range(self.sim_slots)]
        key = await self.pool.acquire(candidates)
        try:
            queued_s = round(time.monotonic() - t0, 3)
            env = dict(spec.env)
            device = None
            if spec.run_mode == "npu":
                device = key.split(":", 1)[1]
                env["TILE_FWK_DEVICE_ID"] = device
            iso = await run_isolated(spec.files, list(spec.argv), workspace=Path(spec.workspace), env=env,
                                     timeout_s=spec.timeout_s, on_progress=on_progress, tag=spec.tag,
                                     **spec.isolation())
        finally:
            self.pool.release(key)
        return _as_executor_run(iso, device_id=device, executor=self.name, node=self._host, queued_s=queued_s)
