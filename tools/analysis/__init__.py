"""Trace analysis engine: readers for a run's output folders (NPU and SIM layouts), the reference metrics of the
tuning skill's scripts and corrected ones, a trace-only cross-check, catalogue suggestions and the report writer.

Pure library (no MCP imports). Every malformed or missing input raises ``ArtifactError`` naming file and place.

The names below are imported on first use (PEP 562): importing one submodule — the ``dyn_topo.txt`` worker process
imports only ``topo_worker`` — then no longer loads the engine, the report writer and the catalogue with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pypto_tune.tools.lazy_exports import module_getattr

_HOME = {
    "load_catalog": "catalog",
    "analyze_runs": "engine", "validate_run": "engine",
    "find_run_dirs": "layout", "locate": "layout",
    "render_report": "report", "write_report": "report",
    **{name: "models" for name in ("AivChains", "Bottleneck", "Catalog", "CatalogItem", "CoreUsage", "CoreUsageRow",
                                   "CrossCheck", "DirAnalysis", "LeafStat", "LoadGap", "RunAnalysis", "Suggestion")},
}

__all__ = [
    "AivChains", "Bottleneck", "Catalog", "CatalogItem", "CoreUsage", "CoreUsageRow", "CrossCheck", "DirAnalysis",
    "LeafStat", "LoadGap", "RunAnalysis", "Suggestion", "analyze_runs", "find_run_dirs", "load_catalog", "locate",
    "render_report", "validate_run", "write_report",
]


__getattr__ = module_getattr(__name__, _HOME, keep=True)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # static tools see the same names as before
    from pypto_tune.tools.analysis.catalog import load_catalog
    from pypto_tune.tools.analysis.engine import analyze_runs, validate_run
    from pypto_tune.tools.analysis.layout import find_run_dirs, locate
    from pypto_tune.tools.analysis.models import (
        AivChains,
        Bottleneck,
        Catalog,
        CatalogItem,
        CoreUsage,
        CoreUsageRow,
        CrossCheck,
        DirAnalysis,
        LeafStat,
        LoadGap,
        RunAnalysis,
        Suggestion,
    )
    from pypto_tune.tools.analysis.report import render_report, write_report
