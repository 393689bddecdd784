"""Progress a client can draw: where the call is (a phase in words, a step of a total), what it just printed, and a
first notification at once.

Why: the operations report every 2 s while a run executes, but a call spends its first seconds elsewhere (building
the service, the environment checklist, recording the interpreter's files), and a bare elapsed-seconds counter with
"running" tells a person nothing. So the reporter sends one notification when the call starts, one whenever the
operation says where it is, and a heartbeat if nothing was sent for ``HEARTBEAT_S``.

The numbers follow the protocol: ``progress`` increases with every notification; ``total`` is the number of steps
once known (repeats of a measurement, trials of a batch, the one run of a precision check). Inside a step the value
moves towards the next whole number by the share of the step's expected time already spent (the previous step's
duration when there was one, else ``STEP_SCALE_S``), never reaching it until the step ends: an estimate between
exact values at every step boundary. When an operation starts a second series (a kept-state reference after the
repeats), the steps already done stay counted and the total grows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
from pypto_tune.tools.running.verdict import is_noise_line

log = logging.getLogger("pypto_tune.server")

HEARTBEAT_S = 2.0  # no call goes longer than this without a notification while it runs
STEP_SCALE_S = 10.0  # expected length of a step before one has been timed
MESSAGE_CHARS = 240

Send = Callable[[float, float | None, str], Awaitable[None]]


@dataclass
class ProgressState:
    """What the reporter knows; pure arithmetic, tested without a client."""

    tool: str
    started: float = field(default_factory=time.monotonic)
    phase: str = "starting"
    line: str = ""
    base: int = 0  # steps of earlier series, already done
    step: int = 0
    steps: int | None = None
    step_started: float = field(default_factory=time.monotonic)
    step_seconds: float | None = None  # how long the last finished step took
    sent: float = -1.0  # the last progress value sent

    def update(self, *, line: str | None = None, phase: str | None = None, step: int | None = None,
               steps: int | None = None, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        last = line.strip().splitlines()[-1] if line and line.strip() else ""
        if last and not is_noise_line(last):  # pypto's helpers without matplotlib: expected, and not news (A.2b)
            self.line = last
        if phase:
            self.phase = phase
        if step is None:
            return
        if self.steps is not None and steps is not None and (step < self.step or steps != self.steps):
            # a new series (a reference measurement after the repeats): what was done stays done
            self.base += self.steps
            self.step_seconds = None
        elif step > self.step:
            self.step_seconds = (now - self.step_started) / (step - self.step)
        if step != self.step or steps != self.steps:
            self.step_started = now
        self.step, self.steps = step, steps if steps is not None else self.steps

    def value(self, now: float | None = None) -> tuple[float, float | None]:
        """(progress, total) for a notification sent now; progress is strictly above the last one sent."""
        now = time.monotonic() if now is None else now
        spent = max(0.0, now - self.step_started)
        scale = self.step_seconds or STEP_SCALE_S
        within = spent / (spent + scale)  # 0 at the step's start, towards 1 (never 1) as its expected time passes
        progress = round(self.base + self.step + 0.99 * within, 3)
        if progress <= self.sent:
            progress = round(self.sent + 0.001, 3)
        total = float(self.base + self.steps) if self.steps is not None else None
        if total is not None and progress >= total:
            total = None  # ran past the count (a repeat retried on another chip): no bar rather than a wrong one
        self.sent = progress
        return progress, total

    def message(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        text = f"{self.tool}: {self.phase} · {now - self.started:.0f} s"
        if self.line:
            text += f" · {self.line}"
        return text[:MESSAGE_CHARS]


class ProgressReporter:
    """The ``progress`` a long tool's body receives: the operations call it; it forwards to the client."""

    def __init__(self, tool: str, send: Send | None) -> None:
        self.state = ProgressState(tool)
        self._send = send
        self._last_sent = 0.0
        self._lock = anyio.Lock()

    async def __call__(self, elapsed: float, line: str, *, phase: str | None = None, step: int | None = None,
                       steps: int | None = None) -> None:
        self.state.update(line=line, phase=phase, step=step, steps=steps)
        await self.notify()

    async def notify(self) -> None:
        if self._send is None:
            return
        async with self._lock:
            progress, total = self.state.value()
            self._last_sent = time.monotonic()
            try:
                await self._send(progress, total, self.state.message())
            except Exception:  # noqa: BLE001 - a client that went away: progress is best-effort, the call goes on
                log.debug("progress notification not delivered", exc_info=True)

    async def heartbeat(self) -> None:
        """Run beside the call: the first notification at once, then one whenever ``HEARTBEAT_S`` passed quietly."""
        await self.notify()
        while True:
            await anyio.sleep(HEARTBEAT_S / 4)
            if time.monotonic() - self._last_sent >= HEARTBEAT_S:
                await self.notify()
