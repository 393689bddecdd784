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
