"""Shared helpers for the patching tests: sources on disk, small builders."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures" / "operators"


def data_source(name: str) -> dict[str, str]:
    return {name: (DATA / name).read_bytes().decode("utf-8")}


def fixture_sources() -> dict[str, dict[str, str]]:
    """Every fixture operator present: {operator: {relative path: text}}."""
    out = {}
    if FIXTURES.is_dir():
        for d in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
            main = d / f"{d.name}.py"
            if main.is_file():
                out[d.name] = {main.name: main.read_bytes().decode("utf-8")}
    return out


def by_id(knobs) -> dict:
    return {k.id: k for k in knobs}


def crlf(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\n", "\r\n")
