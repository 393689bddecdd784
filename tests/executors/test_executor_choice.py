"""Choosing the executor: `serve --executor local|ray [--ray-address ADDR]` and what the service then gets."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from pypto_tune.server.cli import main
from pypto_tune.tools.running import executors
from pypto_tune.tools.errors import InputError
from pypto_tune.tools.running.executors import (
    LocalExecutor,
    configure_default,
    default_executor,
    make_executor,
)
from tests.conftest import require_real


@pytest.fixture(autouse=True)
def back_to_local():
    yield
    configure_default("local")


def test_without_ray_the_ray_executor_is_refused_with_the_install_command(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # ray not importable, as on an install without the extra
    with pytest.raises(InputError, match=r"pip install \.\[ray\]"):
        make_executor("ray")
    assert main(["serve", "--executor", "ray", "--ray-address", "10.0.0.1:6379"]) == 2
    err = capsys.readouterr().err
    assert "pip install .[ray]" in err and err.startswith("pypto-tune: ")
    assert isinstance(default_executor(), LocalExecutor)  # a refused choice changes nothing


def test_a_ray_address_without_the_ray_executor_is_refused(capsys) -> None:
    assert main(["serve", "--ray-address", "10.0.0.1:6379"]) == 2
    assert "--ray-address only applies to --executor ray" in capsys.readouterr().err


def test_an_unknown_executor_is_refused_by_the_parser(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--executor", "k8s"])
    assert "invalid choice: 'k8s'" in capsys.readouterr().err


def test_the_configured_ray_executor_reaches_the_service_without_connecting(tmp_path: Path) -> None:
    # scripts/test.sh installs the ray extra: in CI a missing ray fails instead of skipping
    require_real(importlib.util.find_spec("ray") is not None, "ray not installed (pip install .[ray])")
    from pypto_tune.tools.running.executors.ray_backend import RayExecutor
    from pypto_tune.tools.service import TuningService

    configure_default("ray", ray_address="127.0.0.1:1")
    ex = default_executor()
    assert isinstance(ex, RayExecutor) and ex.address == "127.0.0.1:1"
    assert TuningService(default_workspace=tmp_path).executor is ex
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()  # connecting waits for a run


def test_the_default_is_the_local_pool() -> None:
    assert executors.EXECUTOR_KINDS == ("local", "ray")
    assert isinstance(default_executor(), LocalExecutor)
