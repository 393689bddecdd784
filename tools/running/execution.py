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

import hashlib
import os
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pypto_tune.tools.code.codestate import ExecFile, changed_in_copy, files_hash, materialize
from pypto_tune.tools.code.workspace import LEDGER_DIR
from pypto_tune.tools.running.probe import ProbeRecord, probe_env, read_records
from pypto_tune.tools.running.runner import ProgressCallback, RunResult, run_command

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
    # digest of each output folder (str(path) → dir_digest) taken before it left the copy: the bytes the run wrote.
    # The measuring side compares them after analysing and archiving (runs.py), so a folder rewritten once it is in
    # the agent-writable WORKSPACE/output/ is discarded instead of parsed into a figure.
    output_digests: dict[str, str] = field(default_factory=dict)
    # what the run-time probe recorded (tools/running/probe/); None when the run was not probed
    probe: ProbeRecord | None = None


class CopyWatch:
    """Linux inotify on the directories of the copy that hold recorded files: any write, move, delete or attribute
    change of a recorded file while the run executes marks it touched — even if the bytes are put back before the
    run ends, which a hash taken afterwards cannot see (red team: swap the kernel when the copy appears, restore it
    when its output/ appears, and the swapped bytes were measured).

    Files the run creates (output/, __pycache__/, caches) are not recorded names and do not count. Where inotify is
    unavailable the watch is a no-op and the hash check after the run remains.
    """

    _MASK = 0x00000002 | 0x00000004 | 0x00000008 | 0x00000040 | 0x00000080 | 0x00000100 | 0x00000200 | 0x00000400
    # IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF

    def __init__(self, copy: Path, files: dict[str, ExecFile]) -> None:
        self.fd = -1
        self.dirs: dict[int, tuple[str, set[str]]] = {}
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                return
            self.fd = fd
            by_dir: dict[str, set[str]] = {}
            for rel in files:
                folder, _, name = rel.rpartition("/")
                by_dir.setdefault(folder, set()).add(name)
            for folder, names in by_dir.items():
                wd = libc.inotify_add_watch(fd, str(copy / folder if folder else copy).encode(), self._MASK)
                if wd >= 0:
                    self.dirs[wd] = (folder, names)
        except (OSError, AttributeError):
            self.fd = -1

    def close(self) -> list[str]:
        if self.fd < 0:
            return []
        import struct

        touched: set[str] = set()
        try:
            while True:
                try:
                    buf = os.read(self.fd, 65536)
                except BlockingIOError:
                    break
                if not buf:
                    break
                i = 0
                while i + 16 <= len(buf):
                    wd, _mask, _cookie, length = struct.unpack_from("iIII", buf, i)
                    name = buf[i + 16:i + 16 + length].split(b"\0", 1)[0].decode(errors="replace")
                    i += 16 + length
                    folder, names = self.dirs.get(wd, ("", set()))
                    if name in names:
                        touched.add(f"{folder}/{name}" if folder else name)
        finally:
            os.close(self.fd)
            self.fd = -1
        return sorted(touched)


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


def dir_digest(folder: Path) -> str:
    """sha256 over a folder's tree: every file's relative path and bytes, every link's target, in sorted order."""
    h = hashlib.sha256()
    root = Path(folder)
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            h.update(b"L" + rel.encode() + b"\0" + os.readlink(p).encode() + b"\0")
        elif p.is_file():
            d = hashlib.sha256()
            with open(p, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    d.update(chunk)
            h.update(b"F" + rel.encode() + b"\0" + d.digest())
    return h.hexdigest()


def adopt_outputs(copy: Path, workspace: Path, digests: dict[str, str] | None = None) -> list[Path]:
    """Move the run folders the run wrote under ``copy/output/`` into ``WORKSPACE/output/`` (sorted by name).

    With ``digests``, each folder's :func:`dir_digest` is taken before the move and stored under its new path.
    """
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
        if digests is not None:
            digests[str(target)] = dir_digest(d)
        shutil.move(str(d), str(target))
        moved.append(target)
    return moved


def _with_probe(env: dict[str, str], copy: Path) -> tuple[dict[str, str], Path]:
    """The run's environment with the run-time probe installed, and the folder its record lands in (next to the
    copy, never inside it: the copy holds exactly the recorded files and what the test writes)."""
    record_dir = copy.with_name(copy.name + ".probe")
    record_dir.mkdir(parents=True, exist_ok=True)
    return probe_env(env, record_dir), record_dir


async def run_isolated(files: dict[str, ExecFile], argv: list[str], *, workspace: Path, env: dict[str, str],
                       timeout_s: float, on_progress: ProgressCallback | None = None, tag: str = "",
                       keep_copy: bool = False, probe: bool = False) -> IsolatedRun:
    """Materialise ``files`` into a private copy, run ``argv`` there, verify, move outputs to the workspace.

    ``probe``: install the run-time probe (``tools/running/probe/``) and return what it recorded in
    ``IsolatedRun.probe`` (status ``no-report`` when it left nothing).

    Raises what :func:`run_command` raises (RunError when the program cannot start, cancellation); the copy is
    removed on every path.
    """
    parent = exec_parent(workspace)
    copy = parent / f"{tag or 'run'}-{uuid.uuid4().hex[:10]}"
    materialize(copy, files)
    watch = CopyWatch(copy, files)  # every write to a recorded file of the copy while the run executes
    record_dir: Path | None = None
    try:
        run_argv, run_env = rewrite_command(argv, env, workspace, copy)
        if probe:
            run_env, record_dir = _with_probe(run_env, copy)
        try:
            result = await run_command(run_argv, cwd=copy, env=run_env, timeout_s=timeout_s, on_progress=on_progress)
        finally:
            touched = watch.close()
        tampered = sorted(set(changed_in_copy(copy, files)) | set(touched))
        digests: dict[str, str] = {}
        outputs = adopt_outputs(copy, workspace, digests)
        record = read_records(record_dir, [str(copy)]) if record_dir is not None else None
        return IsolatedRun(result=result, exec_hash=files_hash(files), exec_dir=str(copy), tampered=tampered,
                           output_dirs=outputs, argv=run_argv, output_digests=digests, probe=record)
    finally:
        if record_dir is not None:
            shutil.rmtree(record_dir, ignore_errors=True)
        if not keep_copy:
            shutil.rmtree(copy, ignore_errors=True)
