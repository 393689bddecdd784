"""The code state of a workspace: every file a run of the test command can execute or read, byte for byte.

Why the whole tree and not only ``operator_files``: the test command runs a harness, imports local modules and reads
data files. A verdict bound to the operator files alone can be had by rewriting the harness (issue #10, attack 5a).
So a session records, at its start, every regular file under the workspace (except the folders below, which hold
what runs and tools *produce*, never what they execute, and the server's own reports, ``tools/report/names.py``),
keeps a copy of each in a content-addressed blob store, and from then on:

* drift = the tree on disk differs from the recorded one in any file, added or removed files included;
* every run executes on a fresh copy **materialised from the ledger's bytes** (operator sources from the ledger, the
  other files from the blob store, each verified against its SHA-256), never on the live workspace, so swapping a
  file in the workspace while a run executes changes nothing the run sees (attack 5b).

Pure functions over paths and bytes; the session layer decides what a difference means.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, Field

from pypto_tune.tools.errors import InputError, TreeError
from pypto_tune.tools.code.workspace import LEDGER_DIR
from pypto_tune.tools.patching.nofollow import LinkRefused, open_tree
from pypto_tune.tools.report.names import is_report_file

# Folders that hold what runs and tools produce (run output, caches, VCS metadata, virtual environments), never code
# a run executes from the workspace. Matched by name at any depth.
EXCLUDED_DIRS = frozenset({
    LEDGER_DIR, "output", "__pycache__", ".git", ".hg", ".svn", "node_modules", ".pytest_cache", ".mypy_cache",
    ".ruff_cache", ".hypothesis", ".tox", ".nox", ".ipynb_checkpoints", ".idea", ".vscode", ".cursor",
})
EXCLUDED_SUFFIXES = (".pyc", ".pyo")
# A workspace is an operator's folder, not a data lake: copying it for every run must stay cheap. Past these limits
# start_session refuses and says how to narrow the workspace.
MAX_TREE_BYTES = 256 * 1024 * 1024
MAX_TREE_FILES = 5000


class FileEntry(BaseModel):
    """One file of the recorded tree. ``link`` is set for a relative symlink that stays inside the tree."""

    path: str = Field(description="POSIX path relative to the workspace")
    sha256: str
    size: int
    executable: bool = False
    link: str | None = None


def _excluded_dir(entry: os.DirEntry[str]) -> bool:
    if entry.name in EXCLUDED_DIRS:
        return True
    # any virtual environment, whatever it is called
    return os.path.exists(os.path.join(entry.path, "pyvenv.cfg"))


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def scan_tree(workspace: Path, *, max_bytes: int = MAX_TREE_BYTES, max_files: int = MAX_TREE_FILES,
              strict: bool = True) -> dict[str, FileEntry]:
    """Every file under ``workspace`` a run could read, hashed (bytes as they are on disk).

    Symlinks: a relative link that resolves inside the workspace is recorded as a link (the copy gets the same link);
    any other link is refused (``strict``, at session start), because what it points at is outside what the ledger
    can account for; with ``strict=False`` (drift checks) it is listed with an "outside" hash, so it shows up as a
    difference instead of stopping the check.
    """
    root = Path(workspace)
    out: dict[str, FileEntry] = {}
    total = 0
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            raise TreeError(f"cannot read {folder}: {exc}", hint="check the workspace's permissions") from None
        for e in entries:
            rel = PurePosixPath(Path(e.path).relative_to(root).as_posix())
            if e.is_symlink():
                target = os.readlink(e.path)
                resolved = Path(e.path).resolve()
                if os.path.isabs(target) or not (resolved == root or root in resolved.parents):
                    if not strict:
                        out[str(rel)] = FileEntry(path=str(rel), sha256="outside:" + sha256_bytes(target.encode()),
                                                  size=0, link=target)
                        continue
                    raise TreeError(
                        f"{rel} is a symlink to {target}, outside the workspace: a run could read bytes the ledger "
                        "cannot account for", hint="copy the target into the workspace (or make the link relative "
                        "and inside it), then start the session again")
                data = target.encode()
                out[str(rel)] = FileEntry(path=str(rel), sha256=sha256_bytes(b"link:" + data), size=len(data),
                                          link=target)
                continue
            if e.is_dir(follow_symlinks=False):
                if not _excluded_dir(e):
                    stack.append(Path(e.path))
                continue
            if not e.is_file(follow_symlinks=False) or e.name.endswith(EXCLUDED_SUFFIXES):
                continue
            if is_report_file(str(rel)):
                continue  # the server's own report (render_report writes it here): output, never recorded state
            try:
                data = Path(e.path).read_bytes()
                mode = e.stat(follow_symlinks=False).st_mode
            except OSError as exc:
                raise TreeError(f"cannot read {rel}: {exc}", hint="check the file's permissions") from None
            total += len(data)
            if len(out) + 1 > max_files or total > max_bytes:
                raise TreeError(
                    f"the workspace {root} holds more than {max_files} files or {max_bytes // (1024 * 1024)} MiB "
                    "(outside output/, .git/, virtual environments and caches); every run executes on a copy of it",
                    hint="point the session at the operator's own folder (its sources, harness and small data files)")
            out[str(rel)] = FileEntry(path=str(rel), sha256=sha256_bytes(data), size=len(data),
                                      executable=bool(mode & stat.S_IXUSR))
    return out


def tree_hash(entries: dict[str, FileEntry]) -> str:
    """One hash of a tree: paths, contents, the executable bit and link targets all count."""
    h = hashlib.sha256()
    for path in sorted(entries):
        e = entries[path]
        h.update(f"{len(path.encode())}:{path}\0{e.sha256}\0{int(e.executable)}\0{e.link or ''}\0".encode())
    return h.hexdigest()


def entries_for_sources(sources: dict[str, str], base: dict[str, FileEntry]) -> dict[str, FileEntry]:
    """The tree with the operator files replaced by ``sources`` (their bytes as the server writes them)."""
    from pypto_tune.tools.patching.files import to_bytes

    out = dict(base)
    for path, text in sources.items():
        data = to_bytes(text)
        old = base.get(path)
        out[path] = FileEntry(path=path, sha256=sha256_bytes(data), size=len(data),
                              executable=bool(old.executable) if old else False)
    return out


@dataclass
class TreeDiff:
    changed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.changed or self.added or self.removed)

    def describe(self, limit: int = 8) -> str:
        parts = []
        for label, items in (("changed", self.changed), ("added", self.added), ("removed", self.removed)):
            if items:
                more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
                parts.append(f"{label}: {', '.join(items[:limit])}{more}")
        return "; ".join(parts) or "no difference"


def diff_trees(expected: dict[str, FileEntry], actual: dict[str, FileEntry]) -> TreeDiff:
    d = TreeDiff()
    for path in sorted(set(expected) | set(actual)):
        if is_report_file(path):
            continue  # a tree recorded before reports were left out may still list one: rewriting it is no drift
        a, b = expected.get(path), actual.get(path)
        if a is None:
            d.added.append(path)
        elif b is None:
            d.removed.append(path)
        elif (a.sha256, a.executable, a.link) != (b.sha256, b.executable, b.link):
            d.changed.append(path)
    return d


class BlobStore:
    """Content-addressed copies of the recorded files: ``.pypto-tune/blobs/<sha256>``.

    A blob's name is its hash, and every read checks it, so a blob altered on disk is detected instead of executed.
    Reads and writes never follow a symbolic link (``tools/patching/nofollow.py``): a ``blobs/`` folder swapped for
    a link can neither redirect a write nor feed a read.
    """

    def __init__(self, workspace: Path) -> None:
        self.workspace = Path(workspace)
        self.root = self.workspace / LEDGER_DIR / "blobs"

    def _rel(self, digest: str) -> str:
        return f"{LEDGER_DIR}/blobs/{digest}"

    def put(self, data: bytes) -> str:
        digest = sha256_bytes(data)
        with open_tree(self.workspace, allow_server_dir=True) as tree:
            if tree.lstat(self._rel(digest)) is None:
                tree.write(self._rel(digest), data, mode=0o644)
        return digest

    def get(self, digest: str) -> bytes:
        try:
            with open_tree(self.workspace, allow_server_dir=True) as tree:
                data = tree.read(self._rel(digest))
        except LinkRefused as exc:
            raise TreeError(f"the recorded copy {digest[:12]} cannot be read: {exc.message}",
                            hint="blobs are the bytes runs execute; restore .pypto-tune/blobs or start a new "
                            "session") from None
        except OSError:
            raise TreeError(f"the recorded copy of a workspace file ({digest[:12]}) is missing from {self.root}",
                            hint="the session's recorded files were deleted; restore .pypto-tune/blobs or start a "
                            "new session") from None
        if sha256_bytes(data) != digest:
            raise TreeError(f"the recorded copy {digest[:12]} in {self.root} was altered",
                            hint="blobs are the bytes runs execute; restore them or start a new session")
        return data


def record_tree(workspace: Path, entries: dict[str, FileEntry]) -> None:
    """Copy every recorded file into the blob store (links need no blob: the target string is the content)."""
    store = BlobStore(workspace)
    with open_tree(workspace) as tree:
        for e in entries.values():
            if e.link is None:
                try:
                    data = tree.read(e.path)
                except (OSError, LinkRefused):
                    data = b""
                if sha256_bytes(data) != e.sha256:
                    raise TreeError(f"{e.path} changed while the session was being recorded",
                                    hint="leave the workspace alone for a moment and start the session again")
                store.put(data)


@dataclass(frozen=True)
class ExecFile:
    """One file to materialise for a run: bytes (or a link target) and the executable bit."""

    data: bytes
    executable: bool = False
    link: str | None = None


def exec_files(workspace: Path, tree: dict[str, FileEntry], sources: dict[str, str]) -> dict[str, ExecFile]:
    """The exact bytes a run executes: operator ``sources`` from the ledger, every other file from the blob store."""
    from pypto_tune.tools.patching.files import to_bytes

    store = BlobStore(workspace)
    out: dict[str, ExecFile] = {}
    for path, e in tree.items():
        if path in sources:
            continue
        out[path] = ExecFile(data=e.link.encode() if e.link else store.get(e.sha256), executable=e.executable,
                             link=e.link)
    for path, text in sources.items():
        old = tree.get(path)
        out[path] = ExecFile(data=to_bytes(text), executable=bool(old.executable) if old else False)
    return out


def files_hash(files: dict[str, ExecFile]) -> str:
    """The tree hash of a set of files to materialise (same number ``tree_hash`` gives for their entries)."""
    return tree_hash(_entries_of(files))


def _entries_of(files: dict[str, ExecFile]) -> dict[str, FileEntry]:
    out = {}
    for path, f in files.items():
        digest = sha256_bytes(b"link:" + f.data) if f.link else sha256_bytes(f.data)
        out[path] = FileEntry(path=path, sha256=digest, size=len(f.data), executable=f.executable, link=f.link)
    return out


def _safe_target(dest: Path, rel: str) -> Path:
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise InputError(f"refusing to materialise {rel!r}: not a relative path inside the tree",
                         hint="this is a bug in the recorded tree; start a new session")
    return dest.joinpath(*pure.parts)


def materialize(dest: Path, files: dict[str, ExecFile]) -> None:
    """Write ``files`` under ``dest`` (which must not exist yet): the run's private copy of the recorded state.

    Every file is written through directory descriptors opened without following links, so a folder of the copy
    swapped for a link while it is being written cannot send recorded bytes anywhere else."""
    dest.mkdir(parents=True, exist_ok=False)
    with open_tree(dest) as tree:
        for rel, f in sorted(files.items()):
            _safe_target(dest, rel)
            if f.link is not None:
                tree.symlink(rel, f.link)
                continue
            tree.write(rel, f.data, executable=True if f.executable else None, durable=False)


def changed_in_copy(dest: Path, files: dict[str, ExecFile]) -> list[str]:
    """Files of the copy whose bytes no longer match what was materialised (the run, or someone, changed them).

    New files (caches, whatever the run writes) do not count: only the recorded bytes must be what executed.
    """
    expected = _entries_of(files)
    bad = []
    for rel, e in sorted(expected.items()):
        target = _safe_target(dest, rel)
        try:
            if e.link is not None:
                ok = target.is_symlink() and os.readlink(target) == e.link
            else:
                ok = not target.is_symlink() and sha256_bytes(target.read_bytes()) == e.sha256
        except OSError:
            ok = False
        if not ok:
            bad.append(rel)
    return bad
