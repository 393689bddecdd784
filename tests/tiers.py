"""The test tiers: the unit tier starts no process, every other test may.

``scripts/test.sh --fast`` runs ``pytest --tier unit``: every test not marked ``process``, ``sim``, ``browser`` or
``slow``. What keeps the tier honest is not a list but a guard: while a unit-tier test runs, creating a process
(``subprocess``, ``asyncio`` subprocesses, ``multiprocessing``, ``os.fork``, ``os.posix_spawn``) raises
:class:`ProcessInUnitTier`, and a test whose code swallowed that is failed all the same. A test that needs a process
(a server over stdio, the simulator, a shell script, a browser) says so with ``pytest.mark.process`` on its module.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

#: markers that put a test outside the unit tier
NOT_UNIT = ("process", "sim", "browser", "slow")

MARKERS = [
    "process: starts a process (a server over stdio, a script, the simulator in a child): not in the unit tier",
]


class ProcessInUnitTier(RuntimeError):
    """Raised where a unit-tier test creates a process. Code that catches it does not hide it: the attempt is noted,
    and the test's report is failed (tests/conftest.py). Not a BaseException: async test runners treat those as
    cancellation and stop the whole session."""


def in_unit_tier(item: pytest.Item) -> bool:
    return not any(item.get_closest_marker(m) for m in NOT_UNIT)


def _blocked(what: str, started: list[str]) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        argv = args[0] if args else kwargs.get("args") or kwargs.get("path")
        started.append(f"{what}({argv!r})"[:300])
        raise ProcessInUnitTier(f"a unit-tier test started a process: {started[-1]}. Mark its module "
                                "`pytestmark = pytest.mark.process` (the full suite runs it) or keep the test "
                                "in-process.")
    return refuse


@contextmanager
def no_processes(started: list[str]) -> Iterator[None]:
    """While inside, every way the standard library creates a process raises ProcessInUnitTier (and is noted)."""
    import _posixsubprocess
    import multiprocessing.popen_fork
    import subprocess

    patched: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, what: str) -> None:
        if hasattr(owner, name):
            patched.append((owner, name, getattr(owner, name)))
            setattr(owner, name, _blocked(what, started))

    # subprocess.Popen (and asyncio's subprocesses, built on it) reaches fork_exec through its own module's name
    patch(subprocess, "_fork_exec", "subprocess")
    patch(_posixsubprocess, "fork_exec", "subprocess")
    patch(os, "fork", "os.fork")
    patch(os, "forkpty", "os.forkpty")
    patch(os, "posix_spawn", "os.posix_spawn")
    patch(os, "posix_spawnp", "os.posix_spawnp")
    patch(os, "system", "os.system")
    patch(multiprocessing.popen_fork.Popen, "_launch", "multiprocessing")
    try:
        yield
    finally:
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)
