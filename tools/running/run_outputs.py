"""Outputs are born in the run (issue #16, item 3): which output folders of a run count.

A run gets a fresh, empty ``WORKSPACE/output/`` inside its sandbox, so only folders created during the run can be
there at its end. That alone does not make a folder *this run's*: the test's own code (a recorded hook) could move a
genuine folder produced elsewhere into place — a real, well-formed trace of other code, analysed as this round's.
So each folder is checked against what the run compiled before it leaves the sandbox:

1. **its name's time** — PyPTO names a run folder ``output_<YYYYMMDD_HHMMSS>_<usec>_<pid>_…`` in local time when
   it compiles (domain A.1); the time must lie inside the run's own window (± :data:`SLACK_S`);
2. **its own name inside it** — in SIM, ``CostModelSimulationOutput/_simulate.config.ini`` records
   ``submitTopoPath = output/<folder>/tmp_topo_json.json``: a folder renamed into place names another folder;
3. **its sources** — every source file ``program.json`` names (``functions[].operations[].file``, domain A.7) must
   be a file of the recorded copy, under the path the run saw it at (the workspace's own path in the sandbox), or a
   file of the run's closure (PyPTO's own frontend names some of its operations after its parser's source); and at
   least one must be the copy's.

The measuring side adds one check that needs the session's memory (``operations/runs.py``): a measured folder's
sources must be among those of the session's baseline measurement, so a kernel of another recorded file (compiled in
the same run and swapped in) is not analysed as the operator's.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

import orjson

#: Seconds of tolerance around the run's window (folder names carry whole seconds plus microseconds; clocks agree).
SLACK_S = 2.0
#: program.json files larger than this are not parsed for their sources (the analysis reads them anyway).
PROGRAM_MAX_BYTES = 512 * 1024 * 1024

_TOPO = re.compile(r"^\s*submitTopoPath\s*=\s*output/([^/\s]+)/", re.M)


@dataclass
class OutputCheck:
    """One output folder of a run: the recorded files its program names, and why it does not count (if it does
    not)."""

    name: str
    sources: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def program_sources(program: Path) -> list[str]:
    """Every distinct ``file`` program.json's functions and their operations name, in first-seen order. A kernel that
    only moves data (PyPTO's concat, view and assemble examples) compiles to copies that name no file: only its
    function names the file that defined it."""
    data = orjson.loads(program.read_bytes())
    seen: dict[str, None] = {}
    for fn in data.get("functions", []) if isinstance(data, dict) else []:
        if not isinstance(fn, dict):
            continue
        for f in [fn.get("file"), *(op.get("file") for op in fn.get("operations", []) if isinstance(op, dict))]:
            if isinstance(f, str) and f:
                seen.setdefault(f, None)
    return list(seen)


def _relative(path: str, run_root: str) -> str | None:
    """``path`` relative to ``run_root`` (both normalised; ``/proc/self/cwd`` is the root: the run's cwd), or None."""
    p = os.path.normpath(path)
    for cwd in ("/proc/self/cwd", "/proc/thread-self/cwd"):
        if p == cwd or p.startswith(cwd + "/"):
            p = os.path.normpath(run_root + p[len(cwd):])
    root = os.path.normpath(run_root)
    if p.startswith(root.rstrip("/") + "/"):
        return p[len(root.rstrip("/")) + 1:]
    return None


def check_folder(folder: Path, *, run_root: str, files: Collection[str], started_at: float, ended_at: float,
                 closure_file: Callable[[str], bool] = lambda path: False) -> OutputCheck:
    """The three checks of the module docstring for one folder the run left in its output folder;
    ``closure_file(path)`` says whether a path outside ``run_root`` is one the run could read (its closure)."""
    out = OutputCheck(name=folder.name)
    if folder.is_symlink() or not folder.is_dir():
        out.problems.append("not a folder the run created (a link or a file)")
        return out
    from pypto_tune.tools.analysis.layout import run_timestamp  # here: the analysis package loads ~0.2 s

    t = run_timestamp(folder)
    if t is None:
        out.problems.append("its name carries no PyPTO time stamp (output_<YYYYMMDD_HHMMSS>_<usec>_…)")
    elif not started_at - SLACK_S <= t <= ended_at + SLACK_S:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
        span = (f"{time.strftime('%H:%M:%S', time.localtime(started_at))}–"
                f"{time.strftime('%H:%M:%S', time.localtime(ended_at))}")
        out.problems.append(f"its name says it was compiled at {when}, outside this run ({span})")
    ini = folder / "CostModelSimulationOutput" / "_simulate.config.ini"
    if ini.is_file() and not ini.is_symlink():
        m = _TOPO.search(ini.read_text(errors="replace"))
        if m and m.group(1) != folder.name:
            out.problems.append(f"its simulator configuration names the run folder {m.group(1)}: it was renamed "
                                "into place")
    program = folder / "program.json"
    if program.is_symlink() or not program.is_file():
        out.problems.append("it holds no program.json: nothing says what it compiled")
        return out
    if program.stat().st_size > PROGRAM_MAX_BYTES:
        out.problems.append(f"program.json is larger than {PROGRAM_MAX_BYTES >> 20} MiB")
        return out
    try:
        named = program_sources(program)
    except (orjson.JSONDecodeError, OSError) as exc:
        out.problems.append(f"program.json is unreadable: {exc}")
        return out
    recorded = set(files)
    for src in named:
        rel = _relative(src, run_root)
        if rel is None and closure_file(os.path.normpath(src)):
            continue  # PyPTO's own source, or another file of the closure
        if rel is None or rel not in recorded:
            out.problems.append(f"program.json names {src}, which is not a file of this run's recorded copy")
        elif rel not in out.sources:
            out.sources.append(rel)
    if not out.sources and not out.problems:
        out.problems.append("program.json names no source file of this run's recorded copy")
    return out


def run_folders(output: Path) -> list[Path]:
    """The candidate run folders a run left directly in its output folder (``output_*``), sorted by name."""
    if not output.is_dir():
        return []
    return sorted(d for d in output.iterdir() if d.name.startswith("output_"))


def foreign_sources(baseline_folders: list[dict], sources: dict[str, list[str]]) -> str:
    """'' when every measured folder (``sources``: folder → recorded files its program names) was compiled from files
    the session's baseline folders were (``baseline_folders``: the baseline measurement's ``per_dir`` entries, each
    with the ``sources`` recorded for it), else why not. A kernel of another recorded file, compiled in the same run
    and put in the operator's place by a test-side hook, is not the operator's kernel, whatever its trace says.
    Baselines recorded before sources were are not checked."""
    recorded = [entry["sources"] for entry in baseline_folders if "sources" in entry]
    if not recorded:
        return ""
    known = {f for files in recorded for f in files}
    for folder, files in sorted(sources.items()):
        other = sorted(set(files) - known)
        if other:
            return (f"output folder {Path(folder).name} was compiled from {', '.join(other)}, which no kernel of the "
                    f"baseline measurement was (it compiled {', '.join(sorted(known)) or 'nothing'}): it is not the "
                    "operator's kernel, and its figures are not this round's")
    return ""
