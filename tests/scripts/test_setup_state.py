"""What makes set-up install again: the tables of pyproject.toml that the install reads, not those that configure
the checks (editing pytest's options or the import contract must not rewrite .venv under running sessions)."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("setup_state", ROOT / "scripts" / "setup_state.py")
assert _spec is not None and _spec.loader is not None
setup_state = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(setup_state)

PYPROJECT = (ROOT / "pyproject.toml").read_text()


def _part(text: str) -> bytes:
    return setup_state.install_part(text.encode())


def test_editing_the_check_tables_does_not_ask_for_an_install() -> None:
    assert "[tool.pytest.ini_options]" in PYPROJECT and "[tool.importlinter]" in PYPROJECT
    edited = PYPROJECT.replace("[tool.pytest.ini_options]", "[tool.pytest.ini_options]\nxfail_strict = true", 1)
    edited = edited.replace("[tool.importlinter]", "[tool.importlinter]\ninclude_external_packages = false", 1)
    assert edited != PYPROJECT
    tomllib.loads(edited)
    assert _part(edited) == _part(PYPROJECT)


def test_editing_a_dependency_an_extra_a_script_or_the_package_list_asks_for_one() -> None:
    for table, line in (("[project]", 'keywords = ["changed"]'),
                        ("[project.optional-dependencies]", 'extra-one = ["six"]'),
                        ("[project.scripts]", 'another = "pypto_tune.server.cli:main"'),
                        ("[tool.setuptools.package-data]", '"pypto_tune.extra" = ["*.txt"]')):
        assert table in PYPROJECT, table
        edited = PYPROJECT.replace(table, f"{table}\n{line}", 1)
        tomllib.loads(edited)  # a real edit, not a file that fails to parse (which is hashed whole)
        assert _part(edited) != _part(PYPROJECT), table


def test_a_file_that_does_not_parse_is_hashed_whole() -> None:
    broken = PYPROJECT + "\n[project\n"
    assert _part(broken) == broken.encode()
