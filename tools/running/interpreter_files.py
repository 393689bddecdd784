"""The interpreter's own files are part of what a run executes.

The recorded tree covers the workspace; a run also imports from the interpreter's ``sys.path`` (the standard
library, site-packages, ``.pth`` files, ``sitecustomize``), runs programs from the recorded ``PATH`` and PyPTO reads
its tile library from ``PTO_TILE_LIB_CODE_PATH``. The sandbox (``sandbox.py``) mounts these roots read-only, so a
run cannot change them — but the agent's user can, between runs: a ``.pth`` file dropped into site-packages
mid-session runs in every later run and can rewrite that run's artifacts (red team: kept at -99 %). So when the
baseline is about to be set the server scans every root the closure marks as fingerprinted (``closure.py``: every
root on the run's ``sys.path``, the interpreter, the PATH folders, declared roots — found, not a fixed list) once and
keeps a fingerprint; every run is judged only if the roots are still as scanned. The package folders a sandboxed
run cannot see (``Closure.hidden``: the base installation's own site-packages under a virtual environment) are left
out of the scan — for an unsandboxed session they are scanned like the rest.

The fingerprint is ``(size, inode, ctime)`` per entry. ``ctime`` is set by the kernel on every write, rename,
chmod or link change and cannot be set back by an unprivileged process, so a file changed and put back between two
scans still differs — one scan after a run therefore covers every change since the session started, and scans of
parallel runs can share one result (``EnvironmentWatch``).

Not covered (README, residuals): a ``.pyc`` planted in a ``__pycache__`` for a module that had none — Python itself
adds such files as modules are first imported, so additions of ``__pycache__/*.pyc`` are not counted; the system
folders and toolchain roots the sandbox mounts read-only without fingerprinting (``/usr``, CANN).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import anyio
import orjson

from pypto_tune.tools.running.sandbox import outermost


#: (size, inode, ctime_ns); folders have size -1 so a file replaced by a folder differs
Entry = tuple[int, int, int]


def scan(roots: Iterable[str], skip: Iterable[str] = ()) -> dict[str, Entry]:
    """Every entry under ``roots`` (links not followed) with its ``(size, inode, ctime_ns)``; the folders in
    ``skip`` are left out with everything under them: the workspace, when a root contains it (the recorded tree
    covers it), and the package folders a sandboxed run cannot see (``Closure.hidden``).

    A root inside another is walked once, as part of the outer one (a closure names the base installation and its
    standard library, the virtual environment and its site-packages: walking each would scan most entries twice).
    """
    skipped = frozenset(os.path.normpath(p) for p in skip)
    out: dict[str, Entry] = {}

    def walk(folder: str) -> None:
        if folder in skipped:
            return
        try:
            it = os.scandir(folder)
        except OSError:
            return
        with it:
            for e in it:
                if e.path in skipped:
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                is_dir = e.is_dir(follow_symlinks=False)
                out[e.path] = (-1 if is_dir else st.st_size, st.st_ino, st.st_ctime_ns)
                if is_dir:
                    walk(e.path)

    for r in outermost(roots):
        if r in skipped:
            continue
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
            # a __pycache__ folder changes when Python adds a cache file to it; its files are judged one by one.
            # Any other folder whose ctime moved had an entry added, removed or renamed — also one that was put back
            # before this scan (a .pth present during a run and gone after it): that counts.
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
    #: left out of the roots: the workspace, and for a sandboxed session the folders its runs cannot see
    skip: list[str] = field(default_factory=list)

    @cached_property
    def digest(self) -> str:
        # computed once: sorting and hashing ~50 000 entries costs ~0.1 s, and every run's check asks for it
        return digest(self.entries)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(gzip.compress(orjson.dumps({"roots": self.roots, "entries": self.entries,
                                                    "skip": self.skip}), 1))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> "Fingerprint":
        data = orjson.loads(gzip.decompress(path.read_bytes()))
        skip = data.get("skip") or []
        return cls(roots=list(data["roots"]), entries={k: tuple(v) for k, v in data["entries"].items()},
                   skip=[skip] if isinstance(skip, str) else list(skip))  # one folder (the workspace) before hidden


def take_sync(roots: Iterable[str], *, workspace: Path, hidden: Iterable[str] = ()) -> Fingerprint:
    """Scan ``roots`` (a closure's fingerprinted roots, ``closure.py``), leaving out the workspace and ``hidden``
    (pass a closure's hidden folders only when its runs are sandboxed: unsandboxed, a run can read them)."""
    skip = [os.path.normpath(str(workspace)), *(os.path.normpath(p) for p in hidden)]
    return Fingerprint(roots=list(roots), entries=scan(roots, skip), skip=skip)


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
            now = await anyio.to_thread.run_sync(lambda: scan(fp.roots, fp.skip))
            found = changes(fp.entries, now)
            self._last = (started, fp.digest, found)
            return found


def python_of(argv: list[str], fallback: str = sys.executable) -> str:
    """The interpreter a test command runs: its first word when that is a Python, else the server's."""
    if argv and Path(argv[0]).name.startswith("python"):
        return argv[0]
    return fallback
