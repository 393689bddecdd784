"""Paths of the recorded runs used by the analysis tests (data/<scenario>/runs/output_<ts>/)."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).parent / "data"


def run_dirs(scenario: str) -> list[Path]:
    base = DATA / scenario / "runs"
    return sorted(p for p in base.iterdir() if p.name.startswith("output_"))
