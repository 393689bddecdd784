"""The server's own folder ``WORKSPACE/.pypto-tune/`` belongs to the server: any file there it did not write is drift.

Why: run copies live under ``.pypto-tune/exec/``, so a tool that looks for configuration by walking upward from the
run's folder (a test runner's ``conftest.py``, ``pytest.ini``, ``setup.cfg``, ``pyproject.toml``…) finds whatever an
agent dropped in ``.pypto-tune/`` — and the status board showed no drift (issue #16). The sandbox makes the folder
invisible to runs; this module makes a foreign file in it *visible*, so the board names it and the drift rule refuses
to run, change or judge anything until ``revert_patch`` moves it into ``quarantine/``.

How a file is known to be the server's — the sealed ledger is the manifest, no second list to forge:

* fixed names the server keeps open (the ledger with its WAL/SHM/journal, the session lock file);
* ``blobs/<sha256>``: a name recorded in a sealed ``tree_files`` row, with the recorded size (the bytes are verified
  against the name on every read);
* ``artifacts/<session>/…``: archives and trace copies of a known session, by the server's naming (``*.tar.gz``,
  ``*.json.gz``; written before their measurement row, so a crash may leave one unrecorded);
* ``reports/<session>/analysis-m<id>.<lang>.md``: analysis reports, by the server's naming (a second, read-only
  window writes them without recording them; nothing reads them back); ``reports/adhoc/`` holds analyses of
  folders without a session;
* ``interpreter/<session>.json.gz``: a known session's fingerprint (its digest is checked against the ledger);
* ``exec/<run>/``: run copies (folders only, named by the server; their contents are the run's);
* ``quarantine/``: what the server moved out of the workspace.

Anything else — another top-level file, a file directly in ``exec/``, a blob the ledger does not name, a symbolic
link anywhere outside a run copy or the quarantine — is foreign. Pure function over the folder and a ``Known``
index; the session layer builds the index from sealed rows and decides what a finding means.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from pypto_tune.tools.code.workspace import LEDGER_DIR

#: files the server keeps at the top of its folder (contents change all the time; names are what is checked)
FIXED_FILES = frozenset({"ledger.sqlite3", "ledger.sqlite3-wal", "ledger.sqlite3-shm", "ledger.sqlite3-journal",
                         "server.lock"})
#: top-level folders and who fills them; another part of the server that writes here registers its folder
FOLDERS = {"blobs", "exec", "artifacts", "reports", "interpreter", "quarantine"}
_RUN_COPY = re.compile(r"^[A-Za-z0-9_.-]+-[0-9a-f]{10}$")  # tools/running/execution.py: <tag>-<uuid hex[:10]>
_SHA = re.compile(r"^[0-9a-f]{64}$")
_TEMP = re.compile(r"^\..+\.[0-9]+\.[0-9a-f]{8}\.pypto-tune\.tmp$")  # nofollow.Tree.write, mid-write
_WRITING = re.compile(r"^\.(.+\.tmp|report-\w+)$")  # archives and analysis reports mid-write (mkstemp names)
_ANALYSIS = re.compile(r"^analysis-m[0-9]+\.(zh|en)\.md$")  # tools/operations/runs.py: reports/<session>/
# tools/operations/runs.py: artifacts/<session>/<label>-<stamp>.tar.gz and traces/<label>-<stamp>/NN-<run>-….json.gz
_ARTIFACT = re.compile(r"^[\w.-]+\.(tar\.gz|json\.gz)$")


@dataclass
class Known:
    """What the sealed ledger says the server wrote (paths relative to the workspace, POSIX)."""

    sessions: set[str] = field(default_factory=set)
    blobs: dict[str, int] = field(default_factory=dict)  # sha256 -> size


def foreign(workspace: Path, known: Known, limit: int = 50) -> list[tuple[str, str]]:
    """(path relative to the workspace, why) of every entry under ``.pypto-tune/`` the server did not write; at most
    ``limit``. ``why`` is '' for a plain unknown file."""
    root = Path(workspace) / LEDGER_DIR
    out: list[tuple[str, str]] = []
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        return out
    if stat.S_ISLNK(st.st_mode):
        return [(LEDGER_DIR, "the server's folder itself is a symbolic link")]

    def add(rel: str, why: str = "") -> bool:
        out.append((f"{LEDGER_DIR}/{rel.rstrip('/')}", why))
        return len(out) >= limit

    for e in _entries(root):
        name = e.name
        if e.is_symlink():
            if add(name, "a symbolic link"):
                break
            continue
        if e.is_dir(follow_symlinks=False):
            if name not in FOLDERS:
                if add(name + "/"):
                    break
                continue
            if _folder(root, name, known, add):
                break
        elif name not in FIXED_FILES:
            if add(name):
                break
    return out


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    try:
        return sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return []


def _folder(root: Path, top: str, known: Known, add) -> bool:  # noqa: ANN001 - add(rel, why) -> stop
    if top == "quarantine":
        return False  # the server moved these here; nothing reads them
    if top == "exec":
        for e in _entries(root / top):
            if not (e.is_dir(follow_symlinks=False) and _RUN_COPY.match(e.name)):
                if add(f"exec/{e.name}", "a symbolic link" if e.is_symlink() else "not a run copy"):
                    return True
        return False
    if top == "blobs":
        for e in _entries(root / top):
            if _TEMP.match(e.name):
                continue
            size = known.blobs.get(e.name) if _SHA.match(e.name) else None
            ok = size is not None and e.is_file(follow_symlinks=False) and e.stat(follow_symlinks=False).st_size == size
            if not ok and add(f"blobs/{e.name}", "not a recorded file" if size is None else "not as recorded"):
                return True
        return False
    if top == "interpreter":
        for e in _entries(root / top):
            sid = e.name[:-len(".json.gz")] if e.name.endswith(".json.gz") else None
            if e.is_symlink() or sid not in known.sessions:
                if add(f"interpreter/{e.name}"):
                    return True
        return False
    # artifacts/<session>/..., reports/<session>/... (reports/adhoc/: analyses of folders without a session)
    for e in _entries(root / top):
        if e.is_symlink() or not e.is_dir(follow_symlinks=False) or (
                e.name not in known.sessions and not (top == "reports" and e.name == "adhoc")):
            if add(f"{top}/{e.name}"):
                return True
            continue
        named = _ARTIFACT if top == "artifacts" else _ANALYSIS
        for dirpath, dirnames, filenames in os.walk(e.path):  # os.walk does not follow links to folders
            base = Path(dirpath).relative_to(root).as_posix()
            for n in sorted(dirnames + filenames):
                if (Path(dirpath) / n).is_symlink():
                    if add(f"{base}/{n}", "a symbolic link"):
                        return True
                elif n in filenames and not (named.match(n) or _WRITING.match(n)):
                    if add(f"{base}/{n}"):
                        return True
    return False

def describe(found: list[tuple[str, str]], limit: int = 6) -> str:
    shown = [f"{p} ({why})" if why else p for p, why in found[:limit]]
    more = f" (+{len(found) - limit} more)" if len(found) > limit else ""
    return f"files in {LEDGER_DIR}/ the server did not write: " + ", ".join(shown) + more
