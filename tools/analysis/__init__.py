"""Trace analysis engine: readers for a run's output folders (NPU and SIM layouts), the reference metrics of the
tuning skill's scripts and corrected ones, a trace-only cross-check, catalogue suggestions and the report writer.

Pure library (no MCP imports). Every malformed or missing input raises ``ArtifactError`` naming file and place.
"""

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

__all__ = [
    "AivChains", "Bottleneck", "Catalog", "CatalogItem", "CoreUsage", "CoreUsageRow", "CrossCheck", "DirAnalysis",
    "LeafStat", "LoadGap", "RunAnalysis", "Suggestion", "analyze_runs", "find_run_dirs", "load_catalog", "locate",
    "render_report", "validate_run", "write_report",
]
