"""Shared helpers: recorded SIM runs under data/<scenario>/runs/ (copied to tmp so reports never touch them)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .analysis_helpers import DATA


@pytest.fixture
def scenario(tmp_path: Path):
    """Copy a recorded scenario into tmp_path/<name>/output/ (a workspace layout) and return that workspace."""

    def make(name: str) -> Path:
        ws = tmp_path / name
        shutil.copytree(DATA / name / "runs", ws / "output")
        for extra in (DATA / name).glob("*.py"):
            shutil.copy(extra, ws / extra.name)
        return ws

    return make
