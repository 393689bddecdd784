"""Run the test command on a private, freshly materialised copy of the recorded code state.

Every run the server measures or verifies goes through :func:`run_isolated`:

1. the exact files the ledger records (``codestate.exec_files``) are written into a new folder;
2. the command runs there (``cwd`` = the copy). Arguments and environment values that name the workspace are
   rewritten to the copy, so ``python /ws/op.py`` or ``PYTHONPATH=/ws`` cannot reach the live files;
3. afterwards the copy's recorded files are hashed again: if any changed (the run rewrote its own code, or something
   swapped a file in), the run is marked tampered and the caller discards it;
4. the run's output folders (``copy/output/output_*``) are moved into ``WORKSPACE/output/``, where users and the
   skill's workflow look for them; the copy is removed.

So the bytes a run executes are the bytes the ledger names, whatever happens in the workspace meanwhile (issue #10,
attack 5b). The same primitive runs candidate trials in parallel (each in its own copy), locally or on a Ray worker.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pypto_tune.tools.codestate import ExecFile, changed_in_copy, files_hash, materialize
from pypto_tune.tools.ledger import LEDGER_DIR
from pypto_tune.tools.runner import ProgressCallback, RunResult, run_command

EXEC_DIR = "exec"


@dataclass
class IsolatedRun:
    """What one isolated run did. ``output_dirs`` are already in ``WORKSPACE/output/`` (empty when none)."""

    result: RunResult
    exec_hash: str  # tree hash of the materialised files = what executed
    exec_dir: str  # where the copy lived (program.json names source files under it)
    tampered: list[str] = field(default_factory=list)
    output_dirs: list[Path] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)  # as executed (after rewriting)


def exec_parent(workspace: Path) -> Path:
    return Path(workspace) / LEDGER_DIR / EXEC_DIR


def rewrite_arg(value: str, old: str, new: str) -> str:
    """Replace the workspace prefix where it names a path: the whole value, after ``=``, or in a path list."""
    if old not in value:
        return value
    parts = []
    for piece in value.split(os.pathsep):
        head, eq, tail = piece.rpartition("=") if "=" in piece else ("", "", piece)
        if tail == old or tail.startswith(old + "/"):
            tail = new + tail[len(old):]
        parts.append(f"{head}{eq}{tail}")
    return os.pathsep.join(parts)


def rewrite_command(argv: list[str], env: Mapping[str, str], workspace: Path, copy: Path,
                    ) -> tuple[list[str], dict[str, str]]:
    old, new = str(Path(workspace)), str(copy)
    return ([rewrite_arg(a, old, new) for a in argv],
            {k: rewrite_arg(v, old, new) for k, v in env.items()})


def adopt_outputs(copy: Path, workspace: Path) -> list[Path]:
    """Move the run folders the run wrote under ``copy/output/`` into ``WORKSPACE/output/`` (sorted by name)."""
    src = copy / "output"
    if not src.is_dir():
        return []
    dest_root = Path(workspace) / "output"
    dest_root.mkdir(parents=True, exist_ok=True)
    moved = []
    for d in sorted(src.iterdir()):
        if not d.is_dir() or not d.name.startswith("output_"):
            continue
        target = dest_root / d.name
        n = 1
        while target.exists():  # two parallel trials in the same microsecond and pid: keep both
            target = dest_root / f"{d.name}_{n}"
            n += 1
        shutil.move(str(d), str(target))
        moved.append(target)
    return moved


async def run_isolated(files: dict[str, ExecFile], argv: list[str], *, workspace: Path, env: dict[str, str],
                       timeout_s: float, on_progress: ProgressCallback | None = None, tag: str = "",
                       keep_copy: bool = False) -> IsolatedRun:
    """Materialise ``files`` into a private copy, run ``argv`` there, verify, move outputs to the workspace.

    Raises what :func:`run_command` raises (RunError when the program cannot start, cancellation); the copy is
    removed on every path.
    """
    parent = exec_parent(workspace)
    copy = parent / f"{tag or 'run'}-{uuid.uuid4().hex[:10]}"
    materialize(copy, files)
    try:
        run_argv, run_env = rewrite_command(argv, env, workspace, copy)
        result = await run_command(run_argv, cwd=copy, env=run_env, timeout_s=timeout_s, on_progress=on_progress)
        tampered = changed_in_copy(copy, files)
        outputs = adopt_outputs(copy, workspace)
        return IsolatedRun(result=result, exec_hash=files_hash(files), exec_dir=str(copy), tampered=tampered,
                           output_dirs=outputs, argv=run_argv)
    finally:
        if not keep_copy:
            shutil.rmtree(copy, ignore_errors=True)
