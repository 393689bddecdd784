"""Shared fixtures: real workspaces holding our fixture operators, and a real stdio MCP client."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OPERATORS = ROOT / "fixtures" / "operators"
RUNS = ROOT / "fixtures" / "runs"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def require_real(available: bool, what: str) -> None:
    """Skip a test whose real part (Chromium, a tmpfs mount, an interpreter without pypto, Node...) is missing here —
    but in CI (``CI=true``) fail instead: scripts/test.sh installs every real part, so a missing one there is a broken
    setup, and a skip would let the run pass without the test."""
    if available:
        return
    if in_ci():
        pytest.fail(f"CI is missing a real part this test needs: {what}", pytrace=False)
    pytest.skip(what)


def make_workspace(tmp_path: Path, operator: str = "softmax") -> Path:
    ws = tmp_path / f"ws-{operator}"
    ws.mkdir()
    shutil.copy2(OPERATORS / operator / f"{operator}.py", ws / f"{operator}.py")
    return ws


def sim_command(operator: str = "softmax") -> list[str]:
    return [sys.executable, f"{operator}.py", "--run-mode", "sim"]


@pytest.fixture
def softmax_ws(tmp_path: Path) -> Path:
    return make_workspace(tmp_path, "softmax")
