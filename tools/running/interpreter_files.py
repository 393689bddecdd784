"""The interpreter's own files are part of what a run executes.

The recorded tree covers the workspace; a run also imports from the interpreter's ``sys.path`` (the standard
library, site-packages, ``.pth`` files, ``sitecustomize``) and PyPTO reads its tile library from
``PTO_TILE_LIB_CODE_PATH``. A ``.pth`` file dropped into site-packages mid-session runs in every later run and can
rewrite that run's artifacts (red team: kept at -99 %). So when the baseline is about to be set the server scans
those roots once and keeps a fingerprint; every run is judged only if the roots are still as scanned.

The fingerprint is ``(size, inode, ctime)`` per entry. ``ctime`` is set by the kernel on every write, rename,
chmod or link change and cannot be set back by an unprivileged process, so a file changed and put back between two
scans still differs — one scan after a run therefore covers every change since the session started, and scans of
parallel runs can share one result (``EnvironmentWatch``).

Not covered (README, residuals): a ``.pyc`` planted in a ``__pycache__`` for a module that had none — Python itself
adds such files as modules are first imported, so additions of ``__pycache__/*.pyc`` are not counted; files
outside these roots (shared libraries of the CANN toolkit, the kernel's own compiler).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import orjson

from pypto_tune.tools.running.runner import run_command

#: (size, inode, ctime_ns); folders have size -1 so a file replaced by a folder differs
Entry = tuple[int, int, int]

_PROBE = "import json, sys; print(json.dumps([p for p in sys.path if p]))"


async def interpreter_roots(python: str, *, env: dict[str, str], cwd: Path, workspace: Path) -> list[str]:
    """The folders the test command's interpreter imports from, outside the workspace (which the tree covers).

    ``python`` is the interpreter of the test command; the probe runs with the run's environment so PYTHONPATH,
    PYTHONHOME and user site-packages count as they will in the run.
    """
    res = await run_command([python, "-c", _PROBE], cwd=cwd, env=env, timeout_s=60.0, output_cap_bytes=256 * 1024,
                            kill_grace_s=1.0)
    paths: list[str] = []
    try:
        last = [ln for ln in res.output.splitlines() if ln.startswith("[")][-1]
        paths = [str(p) for p in json.loads(last)]
    except (IndexError, ValueError):
        paths = []
    tile_lib = env.get("PTO_TILE_LIB_CODE_PATH")
    if tile_lib:
        paths.append(tile_lib)
    ws = Path(workspace).resolve()
    roots: list[str] = []
    for p in paths:
        rp = Path(p).resolve()
        if rp == ws or ws in rp.parents or rp in ws.parents:
            continue  # the workspace (or a folder holding it) is the recorded tree's business
        if (rp.is_dir() or rp.is_file()) and str(rp) not in roots:
            roots.append(str(rp))
    return roots


def scan(roots: list[str]) -> dict[str, Entry]:
    """Every entry under ``roots`` (links not followed) with its ``(size, inode, ctime_ns)``."""
    out: dict[str, Entry] = {}

    def walk(folder: str) -> None:
        try:
            it = os.scandir(folder)
        except OSError:
            return
        with it:
            for e in it:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                is_dir = e.is_dir(follow_symlinks=False)
                out[e.path] = (-1 if is_dir else st.st_size, st.st_ino, st.st_ctime_ns)
                if is_dir:
                    walk(e.path)

    for r in roots:
        try:
            st = os.stat(r, follow_symlinks=False)
        except OSError:
            continue
        out[r] = (-1 if os.path.isdir(r) else st.st_size, st.st_ino, st.st_ctime_ns)
        if os.path.isdir(r):
            walk(r)
    return out


def _benign_addition(path: str) -> bool:
    """Python writes bytecode caches as modules are first imported; a new one is not a change of the code."""
    p = Path(path)
    return p.parent.name == "__pycache__" and p.suffix == ".pyc"


def changes(before: dict[str, Entry], after: dict[str, Entry]) -> list[str]:
    """What differs, as ``"added|removed|changed: path"`` (sorted)."""
    out: list[str] = []
    for path, entry in after.items():
        old = before.get(path)
        if old is None:
            if not _benign_addition(path):
                out.append(f"added: {path}")
        elif old != entry:
            # a __pycache__ folder changes when Python adds a cache file to it; its files are judged one by one
            if not (entry[0] == -1 and Path(path).name == "__pycache__"):
                out.append(f"changed: {path}")
    out.extend(f"removed: {path}" for path in before if path not in after)
    return sorted(out)


def digest(entries: dict[str, Entry]) -> str:
    return hashlib.sha256(orjson.dumps(sorted(entries.items()))).hexdigest()


@dataclass
class Fingerprint:
    roots: list[str]
    entries: dict[str, Entry]

    @property
    def digest(self) -> str:
        return digest(self.entries)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(gzip.compress(orjson.dumps({"roots": self.roots, "entries": self.entries}), 1))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> "Fingerprint":
        data = orjson.loads(gzip.decompress(path.read_bytes()))
        return cls(roots=list(data["roots"]), entries={k: tuple(v) for k, v in data["entries"].items()})


async def take(python: str, *, env: dict[str, str], workspace: Path) -> Fingerprint:
    roots = await interpreter_roots(python, env=env, cwd=workspace, workspace=workspace)
    entries = await anyio.to_thread.run_sync(lambda: scan(roots))
    return Fingerprint(roots=roots, entries=entries)


class EnvironmentWatch:
    """One scan answers every run that ended before it started (ctime makes later scans cover earlier changes),
    so parallel trials share a scan instead of each paying ~0.5 s for a 90 000-file site-packages."""

    def __init__(self) -> None:
        self._lock = anyio.Lock()
        self._last: tuple[float, str, list[str]] | None = None  # (scan started, fingerprint digest, changes)

    async def changes_since(self, fp: Fingerprint, ended_at: float) -> list[str]:
        async with self._lock:
            if self._last is not None and self._last[0] >= ended_at and self._last[1] == fp.digest:
                return list(self._last[2])
            started = time.time()
            now = await anyio.to_thread.run_sync(lambda: scan(fp.roots))
            found = changes(fp.entries, now)
            self._last = (started, fp.digest, found)
            return found


def python_of(argv: list[str], fallback: str = sys.executable) -> str:
    """The interpreter a test command runs: its first word when that is a Python, else the server's."""
    if argv and Path(argv[0]).name.startswith("python"):
        return argv[0]
    return fallback
