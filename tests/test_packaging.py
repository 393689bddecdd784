"""The install names every folder it ships: setuptools warns ("Package ... is absent from the `packages`
configuration", ~30 lines each) for any folder of a mapped package it is not told about, and a first install that
prints pages of warnings looks broken. Also, every data file lands in the wheel (icons, templates, prompts)."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
SKIP = {"__pycache__"}


def _shipped() -> dict[str, Path]:
    """Every folder below a mapped package, as the package name it installs under."""
    found = {}
    for package, folder in CONFIG["package-dir"].items():
        base = ROOT / folder
        for d in [base, *(p for p in base.rglob("*") if p.is_dir())]:
            if SKIP & set(d.relative_to(ROOT).parts) or not any(f.is_file() for f in d.iterdir()):
                continue
            found[".".join([package, *d.relative_to(base).parts])] = d
    return found


def test_every_shipped_folder_is_a_listed_package() -> None:
    listed = set(CONFIG["packages"])
    missing = sorted(set(_shipped()) - listed)
    assert missing == [], f"add to [tool.setuptools] packages in pyproject.toml: {missing}"
    assert sorted(listed - set(_shipped())) == [], "packages listed that no folder holds"


def test_every_data_file_is_matched_by_package_data() -> None:
    data = CONFIG["package-data"]
    unmatched = []
    for package, folder in _shipped().items():
        for f in folder.iterdir():
            if not f.is_file() or f.suffix in (".py", ".pyc"):
                continue
            # a pattern of this package or of an enclosing one (prompts' "**/*.md" covers prompts/workflow/*.md)
            owners = [(p, pats) for p, pats in data.items() if package == p or package.startswith(p + ".")]
            rel = lambda p: "/".join(package.split(".")[len(p.split(".")):] + [f.name])  # noqa: E731
            if not any(fnmatch.fnmatch(rel(p), pat) or fnmatch.fnmatch(f.name, pat.removeprefix("**/"))
                       for p, pats in owners for pat in pats):
                unmatched.append(str(f.relative_to(ROOT)))
    assert unmatched == [], f"data files no package-data pattern ships: {unmatched}"
