"""Run the test command on a private, freshly materialised copy of the recorded code state, in the run sandbox.

Every run the server measures or verifies goes through :func:`run_isolated`:

1. the exact files the ledger records (``codestate.exec_files``) are put into descriptors, never into a host folder;
2. the command runs in the sealed sandbox (``sandbox.py``, :class:`sandbox.SealedLayout`): bwrap copies those
   descriptors into a tmpfs of the sandbox's own mount namespace at the workspace's own path and makes it read-only;
   output, temp, home and capture folders are tmpfs there too; nothing else of the file system exists but the
   closure (interpreter, ``sys.path`` roots, declared toolchain roots, read-only) — so no spelling of a path reaches
   the live workspace, no file the ledger does not record can reach the run, and no process outside, of any
   account, can reach a folder of the running sandbox through a host path (a ``__pycache__`` planted beside the
   copy's module, a file written into its output folder);
3. once the command ended, the sandbox hands back the copy, the output folders and the capture folder as one tar
   stream through a socket (``handback.py``): a copy that holds anything but the recorded files with their
   recorded bytes marks the run tampered, and the caller discards it;
4. the output folders are unpacked into the run's private folder, digested from the stream as they arrive, checked
   against what the run compiled (``run_outputs.py``) and moved into ``WORKSPACE/output/`` where users and the
   skill's workflow look for them; the run's private folder is removed.

Where the person starting the server allowed it (``serve --unsandboxed``, a machine that cannot build the sandbox),
``sandboxed=False`` writes the copy into ``.pypto-tune/exec/`` and runs the command on it directly, with the old
argument rewriting as a best effort, the copy's recorded files hashed again after the run and watched (inotify)
while it runs; the session says so everywhere.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import shutil
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from pypto_tune.tools.code.codestate import ExecFile, changed_in_copy, files_hash, materialize
from pypto_tune.tools.code.workspace import LEDGER_DIR
from pypto_tune.tools.errors import InputError, RunError
from pypto_tune.tools.running import closure as closure_mod
from pypto_tune.tools.running import handback, sandbox
from pypto_tune.tools.running.run_outputs import check_folder, run_folders
from pypto_tune.tools.running.runner import ProgressCallback, RunResult, _check_startable, run_command

EXEC_DIR = "exec"
#: Most bytes brought back from a run's capture folder (``capture_env``); files beyond it are left out.
CAPTURE_MAX_BYTES = 16 * 1024 * 1024


@dataclass
class IsolatedRun:
    """What one isolated run did. ``output_dirs`` are already in ``WORKSPACE/output/`` (empty when none)."""

    result: RunResult
    exec_hash: str  # tree hash of the materialised files = what executed
    exec_dir: str  # the copy's name (unsandboxed: where it lived; sealed: it existed only inside the sandbox)
    tampered: list[str] = field(default_factory=list)
    output_dirs: list[Path] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)  # as executed (after rewriting)
    # digest of each output folder (str(path) → dir_digest) taken before it left the copy: the bytes the run wrote.
    # The measuring side compares them after analysing and archiving (runs.py), so a folder rewritten once it is in
    # the agent-writable WORKSPACE/output/ is discarded instead of parsed into a figure.
    output_digests: dict[str, str] = field(default_factory=dict)
    # str(path in WORKSPACE/output) → the recorded files its program.json names (run_outputs.check_folder)
    output_sources: dict[str, list[str]] = field(default_factory=dict)
    # folder name → why it does not count (not born in this run, or not compiled from the recorded copy)
    rejected_outputs: dict[str, list[str]] = field(default_factory=dict)
    sandbox: str = ""  # "bubblewrap 0.8.0", or "none" for an unsandboxed run
    captured: dict[str, bytes] = field(default_factory=dict)  # files the run left in its capture folder


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
    """Replace the workspace prefix where it names a path: the whole value, after ``=``, or in a path list.

    Unsandboxed runs only (``serve --unsandboxed``): a best effort that misses every other spelling of the path
    (``/./ws``, a symlink, ``/proc/self/cwd/..``) — the reason sandboxed runs mount the copy at the path instead."""
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


def adopt_outputs(copy: Path, workspace: Path, digests: dict[str, str] | None = None, *,
                  only: set[str] | None = None, names: dict[str, str] | None = None,
                  known: dict[str, str] | None = None) -> list[Path]:
    """Move the run folders the run wrote under ``copy/output/`` into ``WORKSPACE/output/`` (sorted by name).

    With ``digests``, each folder's :func:`dir_digest` is taken before the move and stored under its new path —
    or, when ``known`` gives it (name as born → digest computed from the sandbox's handback stream), that one;
    ``only`` restricts the move to those folder names; ``names`` receives new path → name as born.
    """
    src = copy / "output"
    if not src.is_dir():
        return []
    dest_root = Path(workspace) / "output"
    dest_root.mkdir(parents=True, exist_ok=True)
    moved = []
    for d in sorted(src.iterdir()):
        if d.is_symlink() or not d.is_dir() or not d.name.startswith("output_"):
            continue
        if only is not None and d.name not in only:
            continue
        target = dest_root / d.name
        n = 1
        while target.exists():  # two parallel trials in the same microsecond and pid: keep both
            target = dest_root / f"{d.name}_{n}"
            n += 1
        if digests is not None:
            digests[str(target)] = known[d.name] if known is not None and d.name in known else dir_digest(d)
        shutil.move(str(d), str(target))
        if names is not None:
            names[str(target)] = d.name
        moved.append(target)
    return moved


def private_folders(copy: Path) -> Path:
    """Where a run's own folders live beside its copy ``<tag>-<hex>``: ``<tag>.run-<hex>/`` holding ``output/``
    (mounted at ``WORKSPACE/output`` in the sandbox), ``tmp/``, ``home/`` and ``capture/`` (a name of the shape the
    server's folder check, ``tools/code/server_files.py``, knows as a run's)."""
    tag, _, hexpart = copy.name.rpartition("-")
    return copy.with_name(f"{tag}.run-{hexpart}")


_closures: dict[tuple, sandbox.Closure] = {}


async def default_closure(argv: list[str], env: dict[str, str], workspace: str) -> sandbox.Closure:
    """The closure of a run nobody recorded one for (tests, benchmarks, legacy sessions): found for the command's
    interpreter with the run's environment and the server's declarations, once per process and environment."""
    from pypto_tune.tools.running.interpreter_files import python_of

    python = python_of(argv)
    key = (python, tuple(sorted(env.items())), workspace)
    if key not in _closures:
        roots, devices = closure_mod.declared()
        _closures[key], _ = await closure_mod.find(python, env, workspace=Path(workspace), declared_roots=roots,
                                                   declared_devices=devices)
    return _closures[key]


def _take_captured(folder: Path | None) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    if folder is None or not folder.is_dir():
        return out
    budget = CAPTURE_MAX_BYTES
    for p in sorted(folder.iterdir()):
        try:
            if p.is_symlink() or not p.is_file() or p.stat().st_size > budget:
                continue
            data = p.read_bytes()
        except OSError:
            continue
        budget -= len(data)
        out[p.name] = data
    return out


def _check_startable_sealed(prog: str, files: dict[str, ExecFile], *, inside: str, env: dict[str, str]) -> None:
    """"Cannot start" stays a RunError, as without the sandbox: the program is checked as the run will see it — a
    path in the workspace must be a recorded file (the copy holds nothing else), any other program must exist."""
    ws = inside.rstrip("/")
    if os.sep in prog:
        full = os.path.normpath(prog if os.path.isabs(prog) else os.path.join(ws, prog))
        if full.startswith(ws + "/"):
            rel = full[len(ws) + 1:]
            f = files.get(rel)
            if f is None or not (f.executable or f.link is not None):
                raise RunError(f"cannot start {prog!r}: {rel} is not an executable file of the recorded tree",
                               hint="record the file with its executable bit (chmod +x, then start a new session), "
                                    "or run it through its interpreter (python3 script.py)")
            return
    _check_startable(prog, cwd=Path("/"), env=env)


#: What a fed descriptor may no longer do once it holds the recorded bytes: be written, shrunk, grown, or unsealed.
_FEED_SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


def _feeds(files: dict[str, ExecFile]) -> tuple[list[sandbox.Feed], list[int]]:
    """One descriptor per recorded file (a memfd holding its bytes, read from the start by bwrap ``--file``); links
    are fed as links. Returns the feeds and the descriptors to pass to the run (and close after it).

    Each memfd is sealed against writes once filled: a process of the server's account can open it again through
    ``/proc/<server pid>/fd/N`` until bwrap has copied it, and a sealed file refuses that writer (EPERM)."""
    feeds: list[sandbox.Feed] = []
    fds: list[int] = []
    try:
        for rel, f in sorted(files.items()):
            pure = Path(rel)
            if pure.is_absolute() or ".." in pure.parts or not pure.parts:
                raise InputError(f"refusing to materialise {rel!r}: not a relative path inside the tree",
                                 hint="this is a bug in the recorded tree; start a new session")
            if f.link is not None:
                feeds.append(sandbox.Feed(rel=rel, link=f.link))
                continue
            fd = os.memfd_create(f"pypto-tune-copy-{len(fds)}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            fds.append(fd)
            view = memoryview(f.data)
            while view:
                view = view[os.write(fd, view):]
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _FEED_SEALS)
            os.lseek(fd, 0, os.SEEK_SET)
            feeds.append(sandbox.Feed(rel=rel, fd=fd, executable=f.executable))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return feeds, fds


#: Seconds the handback may take to reach its end once the run ended (a holder of the socket's other end that
#: outlived the run's process group would otherwise keep the server waiting).
HANDBACK_GRACE_S = 30.0


async def _drain(sock: socket.socket, into: bytearray, done: anyio.Event) -> None:
    """Read ``sock`` until its end (every holder of the other end closed it) into ``into``."""
    try:
        while True:
            await anyio.wait_readable(sock)
            try:
                chunk = sock.recv(1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                return
            into += chunk
    finally:
        done.set()


async def _run_sealed(box: sandbox.Status, files: dict[str, ExecFile], argv: list[str], *, workspace: Path,
                      inside: str, env: dict[str, str], timeout_s: float, on_progress: ProgressCallback | None,
                      copy: Path, aux: Path, closure: sandbox.Closure | None, ro_binds: tuple[str, ...],
                      pythonpath_first: tuple[str, ...], capture_env: str | None) -> IsolatedRun:
    """:func:`run_isolated` in the sealed sandbox (see the module docstring). ``aux`` is the run's only host folder:
    the working folder of its processes outside the sandbox, and where its output folders arrive after it ended."""
    _check_startable_sealed(argv[0], files, inside=inside, env=env)
    clo = closure if closure is not None else await default_closure(argv, env, inside)
    aux.mkdir(parents=True)
    feeds, fds = _feeds(files)
    mine, theirs = socket.socketpair()
    received = bytearray()
    try:
        mine.setblocking(False)
        layout = sandbox.SealedLayout(workspace=inside, feeds=tuple(feeds), capture=capture_env is not None,
                                      extra_ro=tuple(ro_binds) + tuple(pythonpath_first))
        run_argv = sandbox.command(box.bwrap, list(argv), layout=layout, closure=clo, home=env.get("HOME", ""))
        run_env = sandbox.run_env(env, pythonpath_first=pythonpath_first, capture_env=capture_env)
        done = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(_drain, mine, received, done)
            try:
                result = await run_command(run_argv, cwd=aux, env=run_env, timeout_s=timeout_s,
                                           on_progress=on_progress, pass_fds=tuple(fds), stdin=theirs.fileno())
            finally:
                theirs.close()
                for fd in fds:  # bwrap has copied them
                    os.close(fd)
                fds = []
            with anyio.move_on_after(HANDBACK_GRACE_S):
                await done.wait()
            tg.cancel_scope.cancel()
    finally:
        theirs.close()
        mine.close()
        for fd in fds:
            os.close(fd)
    result = result.model_copy(update={"argv": list(argv)})
    back = take_handback(bytes(received), files=files, inside=inside, capture=capture_env is not None, dest=aux)
    tampered = list(back.copy_problems)
    stopped = result.timed_out or result.cancelled or result.signal is not None
    if not back.received and not stopped:
        # the command ended on its own but nothing came back (the run killed the sandbox's shell, or broke the
        # stream): its copy cannot be shown to have held the recorded bytes only
        tampered.append("(the sandbox handed nothing back: " + (back.error or "an empty stream") + ")")
    # the server's own read-only folders are the run's too: PyPTO names an operation after the Python frame that
    # made it, and the COPY_IN a ``pypto.view`` makes inside the probe hook's wrapper names the hook's file
    # (upstream_rope pinned to a (2, 256) tile: a run that compiled was recorded as a compile failure)
    given = [*clo.roots, *ro_binds, *pythonpath_first]

    def closure_file(path: str) -> bool:
        return sandbox.under(path, given) or sandbox.is_system_path(path)

    checks = [check_folder(folder, run_root=inside, files=files.keys(), started_at=result.started_at,
                           ended_at=result.ended_at, closure_file=closure_file)
              for folder in run_folders(aux / "output") if folder.name in back.digests]
    sources = {c.name: c.sources for c in checks if c.ok}
    digests: dict[str, str] = {}
    names: dict[str, str] = {}
    outputs = adopt_outputs(aux, workspace, digests, only=set(sources), names=names, known=back.digests)
    return IsolatedRun(result=result, exec_hash=files_hash(files), exec_dir=str(copy), tampered=tampered,
                       output_dirs=outputs, argv=list(argv), output_digests=digests,
                       output_sources={p: sources[n] for p, n in names.items()},
                       rejected_outputs={c.name: c.problems for c in checks if not c.ok},
                       sandbox=box.tool, captured=back.captured)


def take_handback(stream: bytes, *, files: dict[str, ExecFile], inside: str, capture: bool,
                  dest: Path) -> handback.Handback:
    """Read the handback stream a sealed run wrote and unpack its output folders under ``dest/output``
    (``handback.unpack``)."""
    return handback.unpack(io.BytesIO(stream), copy_prefix=os.path.normpath(inside).lstrip("/"),
                           capture_prefix=sandbox.CAPTURE_DIR.lstrip("/") if capture else None, files=files,
                           output_dest=dest / "output", capture_max_bytes=CAPTURE_MAX_BYTES)


async def run_isolated(files: dict[str, ExecFile], argv: list[str], *, workspace: Path, env: dict[str, str],
                       timeout_s: float, on_progress: ProgressCallback | None = None, tag: str = "",
                       keep_copy: bool = False, sandboxed: bool = True, closure: sandbox.Closure | None = None,
                       mount_at: str | None = None, ro_binds: tuple[str, ...] = (),
                       pythonpath_first: tuple[str, ...] = (), capture_env: str | None = None) -> IsolatedRun:
    """Run ``argv`` on exactly ``files`` — fed into the sealed sandbox, or (``sandboxed=False``) materialised into a
    private copy under ``.pypto-tune/exec/`` — verify what the run leaves, move its output folders out.

    ``workspace`` is where the copy and the outputs live on this machine; ``mount_at`` the path the copy appears at
    inside the sandbox (default: ``workspace``; a Ray worker mounts the driver's workspace path). ``closure`` is what
    the run may read besides the system (default: found for the command, :func:`default_closure`). ``ro_binds``,
    ``pythonpath_first``, ``capture_env``: see ``executors/base.py::RunSpec``.

    Raises what :func:`run_command` raises (RunError when the program cannot start, cancellation), and
    ``sandbox.SandboxUnavailable`` when ``sandboxed`` and the sandbox cannot be built; the copy and the run's
    private folders are removed on every path (``keep_copy`` keeps an unsandboxed run's copy).
    """
    parent = exec_parent(workspace)
    copy = parent / f"{tag or 'run'}-{uuid.uuid4().hex[:10]}"
    aux = private_folders(copy)
    inside = os.path.normpath(mount_at or str(workspace))
    if sandboxed:
        box = sandbox.require()
        try:
            return await _run_sealed(box, files, argv, workspace=workspace, inside=inside, env=env,
                                     timeout_s=timeout_s, on_progress=on_progress, copy=copy, aux=aux,
                                     closure=closure, ro_binds=ro_binds, pythonpath_first=pythonpath_first,
                                     capture_env=capture_env)
        finally:
            shutil.rmtree(aux, ignore_errors=True)
    materialize(copy, files)
    try:
        for sub in ("output", "tmp", "home"):
            (aux / sub).mkdir(parents=True)
        capture = aux / "capture" if capture_env else None
        if capture is not None:
            capture.mkdir()
        run_argv, run_env = rewrite_command(argv, env, workspace, copy)
        run_env = sandbox.run_env(run_env, pythonpath_first=pythonpath_first, capture_env=capture_env,
                                  capture_path=str(capture) if capture is not None else None)

        def closure_file(path: str) -> bool:  # anything but the live workspace (a spelling the rewrite missed)
            return not sandbox.under(path, [str(workspace), inside])

        watch = CopyWatch(copy, files)  # every write to a recorded file of the copy while the run executes
        try:
            result = await run_command(run_argv, cwd=copy, env=run_env, timeout_s=timeout_s,
                                       on_progress=on_progress)
        finally:
            touched = watch.close()
        result = result.model_copy(update={"argv": run_argv})
        tampered = sorted(set(changed_in_copy(copy, files)) | set(touched))
        checks = [check_folder(folder, run_root=str(copy), files=files.keys(), started_at=result.started_at,
                               ended_at=result.ended_at, closure_file=closure_file)
                  for folder in run_folders(copy / "output")]
        sources = {c.name: c.sources for c in checks if c.ok}
        digests: dict[str, str] = {}
        names: dict[str, str] = {}
        outputs = adopt_outputs(copy, workspace, digests, only=set(sources), names=names)
        return IsolatedRun(result=result, exec_hash=files_hash(files), exec_dir=str(copy), tampered=tampered,
                           output_dirs=outputs, argv=run_argv, output_digests=digests,
                           output_sources={p: sources[n] for p, n in names.items()},
                           rejected_outputs={c.name: c.problems for c in checks if not c.ok},
                           sandbox="none", captured=_take_captured(capture))
    finally:
        if not keep_copy:
            shutil.rmtree(copy, ignore_errors=True)
        shutil.rmtree(aux, ignore_errors=True)
