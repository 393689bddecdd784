"""The NPU-only artifacts of a run folder, attached to its analysis: the AICPU-side AICore end-to-end time (A.5,
recorded beside ``max_work_time`` as domain B.10 recommends) and ``pipe_usage.csv`` (A.6).

Both files are optional: most NPU runs have neither (A.2 step 4, A.6). A file that is present but unreadable does
not sink the whole analysis — the swimlane figures stand on their own — but its ``ArtifactError`` text goes into
the analysis warnings, so nobody mistakes a broken file for an absent one.
"""

from __future__ import annotations

from pypto_tune.tools.analysis.aicpu_trace import read_aicpu_trace
from pypto_tune.tools.analysis.layout import RunFiles
from pypto_tune.tools.analysis.models import DirAnalysis
from pypto_tune.tools.analysis.pipe_usage import read_pipe_usage
from pypto_tune.tools.errors import ArtifactError


def attach(dir_analysis: DirAnalysis, files: RunFiles, warnings: list[str]) -> None:
    """Fill ``aicpu_e2e_us`` / ``aicpu_trace_paths`` / ``pipe_usage`` of one folder's analysis.

    Several trace files in one folder (one per round, ``_<round>``) are summed, as the rounds of one invocation.
    """
    total = 0.0
    read_any = False
    for path in files.aicpu_traces:
        try:
            trace = read_aicpu_trace(path)
        except ArtifactError as exc:
            warnings.append(f"{files.run_dir.name}: AICPU trace ignored: {exc.message}")
            continue
        total += trace.e2e_us
        read_any = True
        dir_analysis.aicpu_trace_paths.append(str(path))
    dir_analysis.aicpu_e2e_us = total if read_any else None
    if files.pipe_usage is not None:
        try:
            dir_analysis.pipe_usage = read_pipe_usage(files.pipe_usage)
        except ArtifactError as exc:
            warnings.append(f"{files.run_dir.name}: pipe_usage.csv ignored: {exc.message}")


def total_aicpu_e2e(per_dir: list[DirAnalysis]) -> float | None:
    """Σ over the folders of one invocation, like ``operator_time_us``; None unless every folder has one."""
    values = [d.aicpu_e2e_us for d in per_dir]
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)
