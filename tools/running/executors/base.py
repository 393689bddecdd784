"""The executor interface: where one isolated run of the test command happens.

The session layer orchestrates candidate trials (each a gated round: a precision run, then measurement runs) and
records everything; the unit it hands an executor is **one isolated run** (:class:`RunSpec`): the exact files to
materialise, the argv, the environment, the time budget, the run mode and (NPU) the chips it may use. The executor
answers with what :func:`pypto_tune.tools.running.execution.run_isolated` answers (an :class:`ExecutorRun`, which *is* an
``IsolatedRun``), with the run's output folders already inside the session's ``WORKSPACE/output/`` — wherever the
run executed — because that is where the ledger and the analysis look for them.

Two backends: :class:`~pypto_tune.tools.running.executors.local.LocalExecutor` (this machine, the default) and
:class:`~pypto_tune.tools.running.executors.ray_backend.RayExecutor` (a Ray cluster, optional extra ``.[ray]``).

What every backend promises:

* **Capacity is enforced, not only reported.** ``capacity()`` tells the caller how many runs may go at once; a
  caller that starts more simply queues (a queued run counts its wait in ``queued_s``, not in the run's duration).
* **NPU runs are exclusive per chip.** A run claims one chip for its whole duration and the child's
  ``TILE_FWK_DEVICE_ID`` names that chip; the chip the run actually used comes back in ``device_id``.
* **Cancelling the calling task kills the run's whole process group**, wherever it runs, before ``run`` returns
  control (the cancellation is then re-raised). No half result is returned.
* **A run that cannot start** raises ``RunError`` (as ``run_isolated`` does); a failure of the executor itself (the
  cluster is unreachable, its worker died) raises :class:`ExecutorError`. A failing or timed-out test command is a
  normal result.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from pypto_tune.tools.code.codestate import ExecFile, files_hash
from pypto_tune.tools.errors import InputError, PyptoTuneError
from pypto_tune.tools.running.execution import IsolatedRun
from pypto_tune.tools.running.sandbox import Closure

ProgressCallback = Callable[[float, str], Awaitable[None]]
RunMode = Literal["sim", "npu"]


class ExecutorError(PyptoTuneError):
    """The executor could not carry out a run (cluster unreachable, worker lost, results not returned)."""

    code = "executor"


@dataclass(frozen=True)
class RunSpec:
    """One isolated run, complete in itself so that it can be shipped to another machine (plain picklable data).

    ``workspace`` is the session's workspace *on the machine that records the run*: inside the run's sandbox the
    private copy is mounted at that path (wherever the copy lives on the machine that runs it), and the output
    folders end up in ``workspace/output/``.

    The sandbox (``tools/running/sandbox.py``): ``sandboxed`` (False only where the person starting the server
    allowed ``--unsandboxed``), ``closure`` (what the run may read besides the system; None: found for the command's
    interpreter). For other modules that need something of the run (the run-time probe):

    * ``ro_binds`` — absolute host paths bound read-only at the same path inside the run;
    * ``pythonpath_first`` — folders put first on the run's PYTHONPATH, in order (bound read-only too);
    * ``capture_env`` — an environment variable the run gets set to a fresh, empty, writable folder; every regular
      file left directly in it comes back in ``ExecutorRun.captured`` (name → bytes, ≤ 16 MiB in all).
    """

    files: dict[str, ExecFile]
    argv: list[str]
    env: dict[str, str]
    workspace: str
    timeout_s: float
    run_mode: RunMode = "sim"
    # NPU only. ``device_id`` pins the run to one chip; otherwise the executor picks a free chip of ``device_pool``
    # (the session's pool). The Ray backend cannot honour a pin: Ray assigns chips (see ray_backend.py); the chip
    # used is always the one in ``ExecutorRun.device_id``.
    # Ignored (set to None) for SIM runs.
    device_id: str | None = None
    device_pool: tuple[str, ...] = ()
    tag: str = ""
    sandboxed: bool = True
    closure: Closure | None = None
    ro_binds: tuple[str, ...] = ()
    pythonpath_first: tuple[str, ...] = ()
    capture_env: str | None = None

    def __post_init__(self) -> None:
        if self.run_mode not in ("sim", "npu"):
            raise InputError(f"run_mode must be 'sim' or 'npu', got {self.run_mode!r}")
        if not self.argv or not all(isinstance(a, str) for a in self.argv):
            raise InputError("a run needs a non-empty argv of strings")
        if not os.path.isabs(self.workspace):
            raise InputError(f"RunSpec.workspace must be absolute, got {self.workspace!r}")
        # frozen: normalise through object.__setattr__ so a list passed by the caller cannot be mutated later
        object.__setattr__(self, "device_pool", tuple(str(d) for d in self.device_pool))
        for name in ("ro_binds", "pythonpath_first"):
            paths = tuple(str(p) for p in getattr(self, name))
            if not all(os.path.isabs(p) for p in paths):
                raise InputError(f"RunSpec.{name} must hold absolute paths, got {list(paths)}")
            object.__setattr__(self, name, paths)
        if self.capture_env is not None and (not self.capture_env or "=" in self.capture_env):
            raise InputError(f"RunSpec.capture_env must be an environment variable name, got {self.capture_env!r}")
        if self.device_id is not None:
            object.__setattr__(self, "device_id", str(self.device_id))
        if self.run_mode == "npu":
            if self.device_id is None and not self.device_pool:
                raise InputError("an NPU run needs device_id or a non-empty device_pool",
                                 hint="pass the session's device_ids as device_pool")
            if self.device_id is not None and self.device_pool and self.device_id not in self.device_pool:
                raise InputError(f"device_id {self.device_id} is not in the run's device_pool {list(self.device_pool)}")
        else:
            # like build_child_env: a SIM run has no chip, whatever the session's current device is
            object.__setattr__(self, "device_id", None)

    def isolation(self) -> dict[str, object]:
        """The keyword arguments ``run_isolated`` takes for the sandbox and the run's extra folders."""
        return {"sandboxed": self.sandboxed, "closure": self.closure, "ro_binds": self.ro_binds,
                "pythonpath_first": self.pythonpath_first, "capture_env": self.capture_env}

    @property
    def exec_hash(self) -> str:
        """The tree hash of the files this run executes (what ``IsolatedRun.exec_hash`` will say)."""
        return files_hash(self.files)

    def chips(self) -> tuple[str, ...]:
        """The chips this NPU run may use: the pinned one, or the pool."""
        return (self.device_id,) if self.device_id is not None else self.device_pool


@dataclass
class ExecutorRun(IsolatedRun):
    """``IsolatedRun`` plus where the run happened. ``device_id`` is the chip actually used (NPU), which the ledger
    must record instead of the one asked for; ``queued_s`` is the wait for a slot before the run started."""

    device_id: str | None = None
    executor: str = ""
    node: str = ""
    queued_s: float = 0.0


class Executor(abc.ABC):
    """Where isolated runs execute. One instance serves every session of a server process."""

    name: str = ""

    @abc.abstractmethod
    async def run(self, spec: RunSpec, *, on_progress: ProgressCallback | None = None) -> ExecutorRun:
        """Run ``spec`` once: materialise, execute, verify, bring the output folders to ``spec.workspace/output/``.

        Waits for a free slot first (see ``capacity``). ``on_progress(elapsed_s, last_output_line)`` is awaited
        while the command runs (about every 2 s). Cancelling the calling task kills the run's process group and
        re-raises the cancellation.
        """

    @abc.abstractmethod
    def capacity(self, run_mode: RunMode, device_ids: list[str] | tuple[str, ...] = ()) -> int:
        """How many runs of ``run_mode`` may execute at once (NPU: over the chips ``device_ids``). Always ≥ 1.
        May block on first use (Ray connects): in async code ``await prepare()`` first."""

    async def prepare(self) -> None:
        """Get ready to run (connect to a cluster); idempotent. Nothing to do for the local pool."""

    def close(self) -> None:
        """Release what the executor holds (idempotent). Runs still going are not this call's business: cancel
        their tasks first."""
