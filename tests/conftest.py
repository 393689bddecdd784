"""Shared fixtures: real workspaces holding our fixture operators, and a real stdio MCP client."""

from __future__ import annotations

import os
import shutil
import subprocess
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


#: an interpreter of this machine without pypto: the system's own
NO_PYPTO_PYTHON = "/usr/bin/python3"


def python_without_pypto() -> str:
    """``NO_PYPTO_PYTHON``, once it is known to start and to lack pypto (else a skip; in CI a failure)."""
    require_real(Path(NO_PYPTO_PYTHON).exists() and subprocess.run(
        [NO_PYPTO_PYTHON, "-c", "import pypto"], capture_output=True).returncode != 0,
        f"{NO_PYPTO_PYTHON} is missing or has pypto: no interpreter without it")
    return NO_PYPTO_PYTHON


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


# ------------------------------------------------------------------------------------------------- test tiers


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--tier", choices=("all", "unit"), default="all",
                     help="unit: only tests that start no process (scripts/test.sh --fast); all: every test")


def pytest_configure(config: pytest.Config) -> None:
    from tests.tiers import MARKERS

    for line in MARKERS:
        config.addinivalue_line("markers", line)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tests.schedule import longest_first

    longest_first(items)
    if config.getoption("--tier") != "unit":
        return
    from tests.tiers import in_unit_tier

    kept = [i for i in items if in_unit_tier(i)]
    config.hook.pytest_deselected(items=[i for i in items if not in_unit_tier(i)])
    items[:] = kept


def _unit(item: pytest.Item) -> bool:
    return item.config.getoption("--tier") == "unit"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    yield from _guarded(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    yield from _guarded(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item):
    yield from _guarded(item)


def _guarded(item: pytest.Item):
    """Each phase of a unit-tier test (its fixtures' set-up included) runs where no process can be started."""
    if not _unit(item):
        yield
        return
    from tests.tiers import no_processes

    with no_processes(item.stash.setdefault(_STARTED, [])):
        yield


_STARTED = pytest.StashKey[list]()
_FLAGGED = pytest.StashKey[bool]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    started = item.stash.get(_STARTED, [])
    if not (_unit(item) and started) or item.stash.get(_FLAGGED, False):
        return
    item.stash[_FLAGGED] = True  # one report per test names it (a phase that failed on the refusal already did)
    if report.passed:
        # the test's own code caught the refusal: still a test of the wrong tier
        report.outcome = "failed"
        report.longrepr = (f"a unit-tier test started a process ({started[0]}): mark its module "
                           "`pytestmark = pytest.mark.process` or keep it in-process")
