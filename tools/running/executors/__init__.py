"""Executors: where one isolated run of the test command happens (``base.py`` says what every backend promises).

* :class:`LocalExecutor` (``local.py``) — this machine, the default;
* :class:`~pypto_tune.tools.running.executors.ray_backend.RayExecutor` (``ray_backend.py``) — a Ray cluster, optional extra
  ``.[ray]``, imported only when asked for.

``configure_default`` / ``default_executor``: the executor a ``TuningService`` gets when none is passed. The CLI
(``serve --executor ...``) configures it before the service is built; it is process-wide because Ray's driver
connection is (one ``ray.init`` per process).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pypto_tune.tools.errors import InputError
from pypto_tune.tools.running.executors.base import (
    Executor,
    ExecutorError,
    ExecutorRun,
    RunSpec,
)
from pypto_tune.tools.running.executors.local import LocalExecutor, SlotPool, usable_cores

EXECUTOR_KINDS = ("local", "ray")

_default_factory: Callable[[], Executor] | None = None
_default: Executor | None = None
_lock = threading.Lock()


def make_executor(kind: str = "local", *, ray_address: str | None = None) -> Executor:
    """Build an executor by name; ``ray`` raises InputError (with the install command) when Ray is missing."""
    if kind == "local":
        if ray_address:
            raise InputError("--ray-address only applies to --executor ray")
        return LocalExecutor()
    if kind == "ray":
        from pypto_tune.tools.running.executors.ray_backend import RayExecutor

        return RayExecutor(ray_address)
    raise InputError(f"unknown executor {kind!r}", hint=f"one of: {', '.join(EXECUTOR_KINDS)}")


def configure_default(kind: str = "local", *, ray_address: str | None = None) -> None:
    """Choose the process-wide default executor. Checks the choice now (a missing Ray fails at startup, not on the
    first run); the executor itself is built on first use."""
    global _default_factory, _default
    make_executor(kind, ray_address=ray_address).close()  # validate now; building either kind is cheap
    with _lock:
        _default_factory = lambda: make_executor(kind, ray_address=ray_address)
        _default = None


def default_executor() -> Executor:
    """The configured default executor (a LocalExecutor unless ``configure_default`` said otherwise), shared by the
    services of this process."""
    global _default
    with _lock:
        if _default is None:
            _default = _default_factory() if _default_factory is not None else LocalExecutor()
        return _default


__all__ = [
    "EXECUTOR_KINDS", "Executor", "ExecutorError", "ExecutorRun", "LocalExecutor", "RunSpec", "SlotPool",
    "configure_default", "default_executor", "make_executor", "usable_cores",
]
