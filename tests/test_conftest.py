"""The CI guard in tests/conftest.py: a missing real part skips locally and fails in CI, where a skip would let the
run pass without the test."""

from __future__ import annotations

import pytest

from tests.conftest import require_real


def test_a_present_part_neither_skips_nor_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    require_real(True, "chromium")


def test_a_missing_part_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="chromium is not installed"):
        require_real(False, "chromium is not installed")


@pytest.mark.parametrize("value", ["true", "TRUE", "1"])
def test_a_missing_part_fails_in_ci(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match="CI is missing a real part this test needs: a tmpfs mount"):
        require_real(False, "a tmpfs mount")


def test_the_unit_tier_guard_refuses_every_way_to_start_a_process_and_restores_them() -> None:
    import asyncio
    import multiprocessing
    import os
    import subprocess

    from tests.tiers import ProcessInUnitTier, no_processes

    before = (subprocess._fork_exec, os.fork, os.posix_spawn)  # type: ignore[attr-defined]
    started: list[str] = []
    with no_processes(started):
        with pytest.raises(ProcessInUnitTier, match="Mark its module"):
            subprocess.run(["true"])
        with pytest.raises(ProcessInUnitTier):
            os.fork()
        with pytest.raises(ProcessInUnitTier):
            asyncio.run(asyncio.create_subprocess_exec("true"))
        with pytest.raises(ProcessInUnitTier):
            multiprocessing.get_context("fork").Process(target=print).start()
        try:  # code that catches it cannot hide it: every attempt is noted (the test's report is failed on it)
            subprocess.run(["true"])
        except Exception:
            pass
    assert len(started) == 5 and started[0].startswith("subprocess(['true']")
    assert (subprocess._fork_exec, os.fork, os.posix_spawn) == before  # type: ignore[attr-defined]
