"""Fixtures for the runner tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    # The MCP SDK runs on asyncio; trio is not installed.
    return "asyncio"
