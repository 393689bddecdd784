"""Fixture operators as (kept sources, context files), a shared admission cache, a real recorded analysis, and the
calls of a hand-made probe record (in the form tests/patching/data/probes/README.md describes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pypto_tune.tools.search import AdmissionCache

from tests.knob_operators import line_of

ROOT = Path(__file__).resolve().parents[2]
OPS = ROOT / "fixtures" / "operators"
RUNS = ROOT / "fixtures" / "runs"

# operator folder -> the files the session tunes (the rest of the folder is context)
OPERATOR_FILES = {
    "softmax": ["softmax.py"], "rmsnorm": ["rmsnorm.py"], "matmul": ["matmul.py"],
    "rmsnorm_grid": ["rmsnorm_grid.py"], "matmul_act": ["matmul_act.py"], "multi_stage": ["multi_stage.py"],
    "split_harness": ["kernels.py"], "upstream_softmax": ["softmax_op.py"], "layer_norm_multi": ["layer_norm_ops.py"],
}


def load_operator(name: str) -> tuple[dict[str, str], dict[str, str]]:
    files = OPERATOR_FILES[name]
    d = OPS / name
    sources = {f: (d / f).read_text() for f in files}
    context = {p.name: p.read_text() for p in sorted(d.glob("*.py")) if p.name not in files}
    return sources, context


@pytest.fixture(scope="session")
def admission_cache() -> AdmissionCache:
    """Shared within the test session: the admission answers depend only on the texts (see tools/search/cache.py)."""
    return AdmissionCache()


@pytest.fixture(scope="session")
def softmax_analysis() -> dict:
    """The real analysis of the recorded softmax baseline run (fixtures/runs/softmax_base)."""
    from pypto_tune.tools.analysis import analyze_runs

    dirs = sorted((RUNS / "softmax_base" / "output").glob("output_*"))
    return analyze_runs(dirs, run_mode="sim").model_dump(mode="json")


def probed_call(text: str, file: str, kernel: str, api: str, marker: str, args: list[Any],
                **extra: Any) -> dict[str, Any]:
    """One call of a hand-made probe record: ``api`` ran once with ``args`` at the line of ``text`` that holds
    ``marker``, directly in the jit body of ``kernel``."""
    return {"api": api, "file": file, "line": line_of(text, marker), "function": "<jit>", "jit_body": True, "in_workspace": True,
            "kernel": kernel, "origin": "direct", "args": args, "kwargs": {}, "count": 1, "stack": [], **extra}
