"""Shared fixtures: real workspaces holding our fixture operators, and a real stdio MCP client."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OPERATORS = ROOT / "fixtures" / "operators"
RUNS = ROOT / "fixtures" / "runs"


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
