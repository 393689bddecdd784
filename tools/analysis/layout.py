"""Where a run's artifacts live (domain A.1) and which run folders a path holds.

SIM writes the swimlane files into ``<run>/CostModelSimulationOutput/`` with ``program.json`` and ``dyn_topo.txt``
one level up; NPU writes everything into the run folder. Reports go next to the chosen ``bubble_analysis.log``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pypto_tune.tools.analysis.aicpu_trace import find_aicpu_traces
from pypto_tune.tools.analysis.pipe_usage import PIPE_USAGE_NAME
from pypto_tune.tools.errors import InputError

SIM_SUBDIR = "CostModelSimulationOutput"
LOG_NAME = "bubble_analysis.log"
TRACE_NAME = "merged_swimlane.json"
TOPO_NAME = "dyn_topo.txt"
PROGRAM_NAME = "program.json"
SIM_STAT_NAME = "_simulate.stat.report.txt"
REPORT_NAME = "performance_analysis_report.md"

# output_<YYYYMMDD>_<HHMMSS>_<usec>_<pid>_...
_RUN_RE = re.compile(r"^output_(\d{8})_(\d{6})_(\d+)")


@dataclass(frozen=True)
class RunFiles:
    """Resolved artifact paths of one output folder; ``None`` = absent."""

    run_dir: Path
    layout: Literal["sim", "npu"]
    swim_dir: Path  # folder holding bubble_analysis.log / merged_swimlane.json
    log: Path | None
    trace: Path | None
    topo: Path | None
    program: Path | None
    sim_stat: Path | None
    # NPU only (A.5, A.6): AICPU traces in the run folder, pipe_usage.csv next to the swim record
    aicpu_traces: tuple[Path, ...] = ()
    pipe_usage: Path | None = None

    @property
    def report_path(self) -> Path:
        return self.swim_dir / REPORT_NAME


def run_timestamp(run_dir: Path) -> float | None:
    """Epoch seconds encoded in an ``output_<ts>`` name (local time, like the runtime writes it), else None."""
    m = _RUN_RE.match(run_dir.name)
    if not m:
        return None
    try:
        base = time.mktime(time.strptime(m.group(1) + m.group(2), "%Y%m%d%H%M%S"))
    except ValueError:
        return None
    return base + int(m.group(3)) / 10 ** len(m.group(3))


def _sort_key(d: Path) -> tuple[str, str, int, str]:
    m = _RUN_RE.match(d.name)
    if m:
        return (m.group(1), m.group(2), int(m.group(3)), d.name)
    return ("", "", 0, d.name)


def is_run_dir(path: Path) -> bool:
    """A folder named output_<ts>, or any folder that holds a swimlane log/trace in either layout."""
    if not path.is_dir():
        return False
    if _RUN_RE.match(path.name):
        return True
    for base in (path, path / SIM_SUBDIR):
        if (base / LOG_NAME).is_file() or (base / TRACE_NAME).is_file():
            return True
    return False


def find_run_dirs(root: Path, *, created_after: float | None = None) -> list[Path]:
    """Run folders under ``root``, oldest → newest by the timestamp in their name.

    ``root`` may be the workspace (looks in ``root/output``), an ``output/`` folder, one run folder, or a run's
    ``CostModelSimulationOutput``. ``created_after`` (epoch seconds) keeps runs whose name timestamp is ≥ it;
    for names without a timestamp the folder mtime is used (the name is preferred because writing a report into
    an NPU run folder bumps its mtime).
    """
    root = Path(root).expanduser()
    if not root.exists():
        raise InputError(f"path does not exist: {root}", hint="pass a run folder, its output/ parent or a workspace")
    if not root.is_dir():
        raise InputError(f"not a folder: {root}", hint="pass the run folder, not one of its files")
    if root.name == SIM_SUBDIR and is_run_dir(root.parent):
        root = root.parent
    if _RUN_RE.match(root.name) or (is_run_dir(root) and not (root / "output").is_dir()
                                    and not any(_RUN_RE.match(c.name) for c in root.iterdir() if c.is_dir())):
        found = [root]
    else:
        found = []
        for base in (root / "output", root):
            if base.is_dir():
                found.extend(c for c in base.iterdir() if c.is_dir() and _RUN_RE.match(c.name))
        found = list(dict.fromkeys(found))
    if created_after is not None:
        kept = []
        for d in found:
            ts = run_timestamp(d)
            if ts is None:
                ts = d.stat().st_mtime
            # The caller reads its clock before spawning, so a run of its own is never older. The slack only
            # covers float rounding of the µs in the name: a full second once let a failed run's folder, written
            # 0.8 s before the next collection started, be summed into that collection (demo, round 5).
            if ts >= created_after - 0.002:
                kept.append(d)
        found = kept
    return sorted(found, key=_sort_key)


def locate(run_dir: Path) -> RunFiles:
    """Resolve the artifacts of one run folder (SIM layout if CostModelSimulationOutput/ holds swimlane files)."""
    run_dir = Path(run_dir)
    if run_dir.name == SIM_SUBDIR:
        run_dir = run_dir.parent
    sim = run_dir / SIM_SUBDIR
    sim_has = sim.is_dir() and any((sim / n).is_file() for n in (LOG_NAME, TRACE_NAME, TRACE_NAME + ".gz",
                                                                  "_simulate.swim.json"))
    swim_dir = sim if sim_has else run_dir

    def pick(base: Path, name: str, gz: bool = False) -> Path | None:
        p = base / name
        if p.is_file():
            return p
        if gz and (base / (name + ".gz")).is_file():
            return base / (name + ".gz")
        return None

    def up(name: str) -> Path | None:
        # SIM: one level above the swimlane files; tolerate copies that put everything in one folder.
        return pick(run_dir, name) or (pick(swim_dir, name) if swim_dir != run_dir else None)

    return RunFiles(
        run_dir=run_dir, layout="sim" if sim_has else "npu", swim_dir=swim_dir,
        log=pick(swim_dir, LOG_NAME), trace=pick(swim_dir, TRACE_NAME, gz=True),
        topo=up(TOPO_NAME), program=up(PROGRAM_NAME), sim_stat=pick(swim_dir, SIM_STAT_NAME) if sim_has else None,
        aicpu_traces=tuple(find_aicpu_traces(run_dir)), pipe_usage=pick(swim_dir, PIPE_USAGE_NAME),
    )
