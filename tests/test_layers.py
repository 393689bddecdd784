"""The floors of the code base hold: ``lint-imports`` checks the contract in pyproject.toml (``[tool.importlinter]``).

The installed package maps ``server/`` and ``tools/`` into ``pypto_tune`` (``package-dir``), which the import graph
builder cannot follow from the source tree; each test therefore lays out ``pypto_tune/`` in a temporary folder
(links to the real folders, or a copy to edit) and runs the linter there. Function-level imports count.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports() -> list[str]:
    beside = Path(sys.executable).with_name("lint-imports")
    if beside.exists():
        return [str(beside)]
    return [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"]


def lay_out(where: Path, *, copy: bool = False) -> Path:
    """``where/pypto_tune`` as the installed package sees it; ``copy``: real files, safe to edit."""
    pkg = where / "pypto_tune"
    pkg.mkdir()
    shutil.copy(ROOT / "pypto_tune" / "__init__.py", pkg / "__init__.py")
    for name in ("server", "tools", "prompts"):
        if copy and name != "prompts":
            shutil.copytree(ROOT / name, pkg / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (pkg / name).symlink_to(ROOT / name, target_is_directory=True)
    return where


def lint(where: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(where)}
    return subprocess.run([*_lint_imports(), str(ROOT / "pyproject.toml"), "--no-cache"], cwd=where, env=env,
                          capture_output=True, text=True, timeout=120)


def test_every_import_keeps_to_its_floor(tmp_path: Path) -> None:
    done = lint(lay_out(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "floors KEPT" in done.stdout
    analysed = re.search(r"Analyzed (\d+) files", done.stdout)
    assert analysed and int(analysed.group(1)) > 100, done.stdout  # the whole package, not an empty tree


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    """A rule decision that reached up into the operations (even inside a function) is refused."""
    where = lay_out(tmp_path, copy=True)
    change = where / "pypto_tune" / "tools" / "rules" / "change.py"
    change.write_text(change.read_text(encoding="utf-8") + "\n\ndef _upward():\n"
                      "    from pypto_tune.tools.operations import base  # noqa: F401\n", encoding="utf-8")
    done = lint(where)
    assert done.returncode != 0
    assert "floors BROKEN" in done.stdout
    assert "pypto_tune.tools.rules.change -> pypto_tune.tools.operations.base" in done.stdout
