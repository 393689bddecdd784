"""The run sandbox: a measured or verified run sees only the recorded closure (issue #16).

Before this module the server guarded a run by naming what it must not touch — argument rewriting by string
prefix, a list of interpreter folders, a watch on the recorded files — and whatever it did not name stayed
reachable: the live workspace spelled ``/./ws``, a data file in ``/tmp``, a ``sitecustomize.py`` on a command's own
``PYTHONPATH``, a ``pytest.ini`` found by walking upward from the run copy. Now a run executes under bubblewrap
(``bwrap``, Debian package ``bubblewrap``) in a mount namespace built from nothing, holding:

* the private copy of the recorded tree **at the workspace's own path** (so every spelling of a workspace path —
  ``//``, ``/./``, ``..`` walks, ``/proc/self/cwd`` — reaches the copy, and nothing above it exists): a tmpfs of the
  sandbox's own mount namespace that bwrap fills from descriptors holding the ledger's bytes and remounts read-only
  (:class:`SealedLayout`) — it exists in no host folder, so no process outside can plant a ``__pycache__`` beside
  its modules or change a file of it while it runs;
* a fresh, empty, writable ``WORKSPACE/output/`` (the only output folders that count are born there), a fresh
  ``/tmp`` and a fresh folder at the recorded ``HOME`` path — tmpfs of the sandbox too; what the run leaves comes
  back after the command as one tar stream through a descriptor (:func:`handback_script`, ``handback.py``);
* the closure's read-only roots (:class:`Closure`: the interpreter, every root on the run's ``sys.path``, the
  recorded ``PATH`` folders, declared toolchain roots) and its device paths (NPU device nodes), each at its own path;
  inside a root, the package folders the interpreter does not use (``Closure.hidden``) are empty;
* the system, read-only: ``/usr`` and the merged-``/usr`` links (``/bin``, ``/lib*``, ``/sbin``), and exactly the
  ``/etc`` files :data:`ETC_FILES` names (chosen by tracing a SIM run: the dynamic loader's cache and the local time
  zone; the rest serve user-name lookups and CANN's install record);
* its own ``/proc`` (own pid namespace), a minimal ``/dev``, no network (``--unshare-net``), ``--die-with-parent``.

Nothing else: not the live workspace, not its ``.pypto-tune/``, not the rest of the file system. The root of the
sandbox is an empty tmpfs remounted read-only once the mounts are in place.

Process semantics stay the runner's (``runner.py``): bwrap is the child of the parent-death supervisor, in the
run's process group, without ``--new-session`` — so a group signal reaches bwrap and every process inside; bwrap
dying takes the whole pid namespace with it (a grandchild that called ``setsid()`` dies too, which the runner alone
could not promise).

Availability (:func:`status`) is probed once per process by running ``/bin/true`` in a sandbox of the same shape;
``PYPTO_TUNE_BWRAP`` names another bwrap binary. Where it cannot run (no bwrap, user namespaces disabled), the
server refuses to measure unless the person starting it passed ``pypto-tune serve --unsandboxed``
(:func:`configure`), and such a session is marked unsandboxed in the ledger, the board and the report.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pypto_tune.tools.errors import PyptoTuneError

BWRAP_ENV = "PYPTO_TUNE_BWRAP"
#: Folders of the system mounted read-only when they exist (a merged-/usr link is recreated as the same link).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: The /etc files a run gets, read-only when present. Measured with strace on a SIM softmax run (2026-12-03): the
#: interpreter, torch and pypto open only /etc/ld.so.cache (dynamic loader) and /etc/localtime (pypto names its
#: output folders in local time; without it they would be UTC and the server's time-window check would miss). The
#: others: passwd/group for user-name lookups (getpass, ``~user``), nsswitch.conf for how those lookups are made,
#: alternatives/ for Debian's /usr/bin links into it, ascend_install.info where CANN records its install path.
ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf",
             "/etc/alternatives", "/etc/ascend_install.info")
#: Read-only system files outside /usr and /etc: the CPU lists libgomp/OpenBLAS read to size their thread pools.
SYS_FILES = ("/sys/devices/system/cpu",)
#: Where the folder named by a RunSpec's ``capture_env`` appears inside the sandbox.
CAPTURE_DIR = "/run/pypto-tune/capture"
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora/RHEL: dnf install bubblewrap), "
                "or start the server with `pypto-tune serve --unsandboxed` to measure without it (the session is "
                "then marked unsandboxed in the ledger, the board and the report)")


class SandboxUnavailable(PyptoTuneError):
    """The sandbox cannot be created on this machine; the message names what is missing."""

    code = "sandbox"


@dataclass(frozen=True)
class Closure:
    """What a run may see besides the system: ``roots`` read-only and ``devices`` read-write, each at its own path.

    ``fingerprinted`` lists the roots whose entries the session fingerprints (``interpreter_files.py``): every root
    on the run's ``sys.path``, the interpreter, the recorded PATH folders and declared roots — not system folders
    and not toolchain roots such as CANN (large, and outside what an agent writes; see the README's trust section).
    """

    roots: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    fingerprinted: tuple[str, ...] = ()
    #: Package folders inside a root that the run's interpreter does not put on ``sys.path`` (a virtual
    #: environment's base installation keeps its own site-packages: 51 000 entries here). The sandbox shows an empty
    #: read-only folder in their place, so nothing in them can reach a run, and the fingerprint leaves them out.
    hidden: tuple[str, ...] = ()

    def as_json(self) -> dict[str, list[str]]:
        return {"roots": list(self.roots), "devices": list(self.devices), "fingerprinted": list(self.fingerprinted),
                "hidden": list(self.hidden)}

    @classmethod
    def from_json(cls, data: dict) -> "Closure":
        # a closure recorded before ``hidden`` existed hides nothing: its runs see, and its scans cover, everything
        return cls(roots=tuple(data.get("roots", ())), devices=tuple(data.get("devices", ())),
                   fingerprinted=tuple(data.get("fingerprinted", ())), hidden=tuple(data.get("hidden", ())))


@dataclass(frozen=True)
class Status:
    """Whether sandboxed runs work here: ``tool`` is e.g. ``bubblewrap 0.8.0``; ``missing`` says why not."""

    ok: bool
    bwrap: str = ""
    tool: str = ""
    missing: str = ""


@dataclass(frozen=True)
class Policy:
    """The server's choices: ``allow_unsandboxed`` is the person's ``--unsandboxed``; ``roots`` / ``devices`` are
    their ``--sandbox-root`` / ``--sandbox-device`` declarations (``closure.py``)."""

    allow_unsandboxed: bool = False
    roots: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()


_policy = Policy()
_status: Status | None = None
_lock = threading.Lock()


def configure(*, allow_unsandboxed: bool = False, roots: Iterable[str] = (), devices: Iterable[str] = ()) -> None:
    """Set by ``pypto-tune serve`` (``--unsandboxed``, ``--sandbox-root``, ``--sandbox-device``) before any session
    is served."""
    global _policy
    _policy = Policy(allow_unsandboxed=bool(allow_unsandboxed), roots=tuple(os.path.abspath(p) for p in roots),
                     devices=tuple(os.path.abspath(p) for p in devices))


def policy() -> Policy:
    return _policy


def _probe_argv(bwrap: str) -> list[str]:
    return [bwrap, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
            *system_mounts(), "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/", "--", "/bin/true"]


def status(*, refresh: bool = False) -> Status:
    """Probe once per process (``refresh`` probes again): is bwrap there, and can it build a sandbox here?"""
    global _status
    with _lock:
        if _status is not None and not refresh:
            return _status
        _status = _probe()
        return _status


def _probe() -> Status:
    wanted = os.environ.get(BWRAP_ENV) or "bwrap"
    bwrap = shutil.which(wanted) if os.sep not in wanted else (wanted if os.access(wanted, os.X_OK) else None)
    if bwrap is None:
        where = f"{BWRAP_ENV}={wanted}" if os.environ.get(BWRAP_ENV) else "on PATH"
        return Status(ok=False, missing=f"bubblewrap (bwrap) is not installed ({where} names no executable)")
    try:
        ver = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10)
        tool = (ver.stdout.strip() or "bubblewrap").splitlines()[0]
        res = subprocess.run(_probe_argv(bwrap), capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Status(ok=False, bwrap=bwrap, missing=f"{bwrap} could not be run: {exc}")
    if res.returncode != 0:
        why = (res.stderr or res.stdout).strip().splitlines()
        detail = why[-1] if why else f"exit {res.returncode}"
        return Status(ok=False, bwrap=bwrap, tool=tool, missing=(
            f"{bwrap} cannot create a sandbox here ({detail}): user namespaces are probably disabled — allow them "
            "(sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0; on Ubuntu 23.10+ also "
            "kernel.apparmor_restrict_unprivileged_userns=0) or install bwrap setuid root"))
    if not any(os.access(t, os.X_OK) for t in ("/usr/bin/tar", "/bin/tar")):
        return Status(ok=False, bwrap=bwrap, tool=tool, missing=(
            "the system has no tar (/usr/bin/tar), with which a sandboxed run hands its outputs back — install it"))
    return Status(ok=True, bwrap=bwrap, tool=tool)


def require() -> Status:
    """The sandbox, or SandboxUnavailable naming what is missing and how to install it."""
    st = status()
    if not st.ok:
        raise SandboxUnavailable(f"runs cannot be sandboxed on this machine: {st.missing}", hint=INSTALL_HINT)
    return st


# ------------------------------------------------------------------------------------------------ the mount plan
def system_mounts() -> list[str]:
    """bwrap arguments for the read-only system: /usr and friends (links recreated as links), the /etc files."""
    args: list[str] = []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for f in (*ETC_FILES, *SYS_FILES):
        if os.path.lexists(f):
            args += ["--ro-bind-try", f, f]
    return args


_SYSTEM_PREFIXES = tuple(d for d in SYSTEM_DIRS)


def under(path: str, parents: Iterable[str]) -> bool:
    """``path`` equals or lies inside one of ``parents`` (plain path logic on normalised absolute paths)."""
    p = os.path.normpath(path)
    for q in parents:
        q = os.path.normpath(q)
        if p == q or p.startswith(q.rstrip("/") + "/"):
            return True
    return False


def is_system_path(path: str) -> bool:
    """Inside the system folders the sandbox mounts anyway (binding again would be redundant)."""
    real = os.path.realpath(path)
    return under(path, _SYSTEM_PREFIXES) or under(real, _SYSTEM_PREFIXES)


def outermost(paths: Iterable[str]) -> list[str]:
    """The paths, normalised, without duplicates and without those inside another one of them (sorted)."""
    norm = sorted({os.path.normpath(p) for p in paths if p and os.path.isabs(p)})
    out: list[str] = []
    for p in norm:
        if not any(under(p, [q]) for q in out):
            out.append(p)
    return out


@dataclass(frozen=True)
class Feed:
    """One recorded file put into a sealed sandbox (:class:`SealedLayout`): bwrap copies descriptor ``fd``'s content
    into the sandbox's own tmpfs at ``rel`` under the workspace path (``--file``); a link is created as a link."""

    rel: str
    fd: int = -1
    executable: bool = False
    link: str | None = None


@dataclass
class SealedLayout:
    """One sandboxed run with no host folder the run's account could write while it executes (see
    :func:`command`): the copy is fed from descriptors into a tmpfs at ``workspace`` and made read-only; output, temp,
    home and capture folders are tmpfs of the sandbox; what the run leaves is handed back as one tar stream written
    to the sandbox's stdin — a socket the server reads — once the command ended (:func:`handback_script`)."""

    workspace: str
    feeds: tuple[Feed, ...]
    capture: bool = False
    extra_ro: tuple[str, ...] = field(default_factory=tuple)


@dataclass
class Layout:
    """One sandboxed run, seen from the host: where its private folders are and where they appear inside.

    ``copy`` appears at ``workspace``; ``output`` at ``workspace/output``; ``tmp`` at ``/tmp``; ``home`` at the
    recorded ``HOME``; ``capture`` (optional) at :data:`CAPTURE_DIR`.
    """

    workspace: str
    copy: Path
    output: Path
    tmp: Path
    home: Path
    capture: Path | None = None
    extra_ro: tuple[str, ...] = field(default_factory=tuple)


def command(bwrap: str, argv: list[str], *, layout: Layout | SealedLayout, closure: Closure,
            home: str) -> list[str]:
    """The bwrap command line that runs ``argv`` with ``layout`` and ``closure`` (see the module docstring).

    Mounts are applied in order, shallow before deep, so a deeper mount shadows what a shallower one put there: the
    copy shadows whatever a read-only root holds at the workspace's path (a ``PATH`` folder that contains the
    workspace shows the copy, never the live files), the fresh output folder shadows the copy's ``output/``.

    With a :class:`SealedLayout` nothing of the run lives in a host folder: ``/tmp``, the home folder, ``output/``
    and the capture folder are tmpfs of the sandbox's own mount namespace, and the workspace path is a tmpfs that
    bwrap fills from the feeds' descriptors and remounts read-only before the command starts — no process outside
    can add a ``__pycache__/*.pyc`` to it or change a file in it by any path (a read-only mount stays read-only
    through ``/proc/<pid>/root`` too), and the run cannot either. The command runs under :func:`handback_script`,
    which writes the copy, ``output/`` and the capture folder as one tar stream to its stdin once it ended.
    """
    ws = os.path.normpath(layout.workspace)
    sealed = isinstance(layout, SealedLayout)
    plan: list[tuple[int, int, list[str]]] = []  # (depth, tie-break, args)

    def depth(p: str) -> int:
        return len(Path(p).parts)

    plan.append((depth("/tmp"), 0, ["--tmpfs", "/tmp"] if sealed else ["--bind", str(layout.tmp), "/tmp"]))
    home = os.path.normpath(home) if home and os.path.isabs(home) else ""
    if home and home != "/" and not is_system_path(home):
        plan.append((depth(home), 0, ["--tmpfs", home] if sealed else ["--bind", str(layout.home), home]))
    for root in outermost([*closure.roots, *layout.extra_ro]):
        if root in ("/", ws) or is_system_path(root) or under(root, [ws]):
            continue  # the system is mounted anyway; the workspace is the copy's, never a root's
        plan.append((depth(root), 1, ["--ro-bind-try", root, root]))
    for folder in closure.hidden:
        if under(folder, closure.roots) and not under(ws, [folder]):
            # deeper than its root, so mounted after it: an empty tmpfs, then read-only
            plan.append((depth(folder), 1, ["--tmpfs", folder, "--remount-ro", folder]))
    for dev in sorted(set(closure.devices)):
        plan.append((depth(dev), 1, ["--dev-bind-try", dev, dev]))
    output = os.path.join(ws, "output")
    if isinstance(layout, SealedLayout):
        below = [a[-1] for _, _, a in plan if under(a[-1], [ws]) and a[-1] != ws]
        plan.append((depth(ws), 2, _sealed_copy(ws, layout.feeds, mount_points=[output, *below])))
        plan.append((depth(ws) + 1, 3, ["--tmpfs", output]))
        if layout.capture:
            plan.append((depth(CAPTURE_DIR), 4, ["--tmpfs", CAPTURE_DIR]))
    else:
        plan.append((depth(ws), 2, ["--bind", str(layout.copy), ws]))
        plan.append((depth(ws) + 1, 3, ["--bind", str(layout.output), output]))
        if layout.capture is not None:
            plan.append((depth(CAPTURE_DIR), 4, ["--bind", str(layout.capture), CAPTURE_DIR]))
    plan.sort(key=lambda t: (t[0], t[1]))
    args = [bwrap, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", *system_mounts(), "--proc", "/proc", "--dev", "/dev"]
    for _, _, a in plan:
        args += a
    if isinstance(layout, SealedLayout):
        taken = [ws.lstrip("/") or "."] + ([CAPTURE_DIR.lstrip("/")] if layout.capture else [])
        argv = [SHELL, "-c", handback_script(taken), "pypto-tune-run", *argv]
    return [*args, "--remount-ro", "/", "--chdir", ws, "--", *argv]


#: The shell the handback runs in (POSIX ``sh`` of the system, mounted read-only with /usr).
SHELL = "/bin/sh"


def handback_script(paths: Iterable[str]) -> str:
    """The ``sh -c`` script around a sealed run's command (its arguments): run it with stdin from /dev/null, then
    write what the run leaves (``paths`` relative to ``/``: the copy as it is now with ``output/`` inside it, the
    capture folder) as one tar stream to the shell's own stdin — a socket whose other end the server reads — and
    leave with the command's status (128 + N for a signal, as bwrap reports it).

    A socket, not a file or a pipe: no process can open it again through ``/proc/<pid>/fd`` (a socket cannot be
    reopened by path), and the command never holds it (its stdin is /dev/null). tar is the system's (never one of a
    recorded PATH folder), stores links as links and crosses into ``output/``'s own tmpfs. A run stopped by a signal
    to its group (timeout, cancellation) hands back nothing: its caller treats it as a run without outputs."""
    quoted = " ".join(shlex.quote(p) for p in paths)
    return (f'"$@" </dev/null; rc=$?; {shlex.quote(tar_program())} -c -f - -C / {quoted} >&0 2>/dev/null; '
            'exit $rc')


def _sealed_copy(ws: str, feeds: Iterable[Feed], *, mount_points: Iterable[str]) -> list[str]:
    """bwrap arguments that build the copy at ``ws`` from ``feeds`` in a fresh tmpfs, make the folders later mounts
    land on, and remount the whole read-only."""
    args = ["--tmpfs", ws]
    folders: set[str] = set()
    for feed in sorted(feeds, key=lambda f: f.rel):
        dest = os.path.join(ws, feed.rel)
        if under(dest, [os.path.join(ws, "output")]):
            continue  # shadowed by the run's fresh output folder, as a host copy's output/ was
        parent = os.path.dirname(feed.rel)
        while parent and parent not in folders:
            folders.add(parent)
            parent = os.path.dirname(parent)
        if feed.link is not None:
            args += ["--symlink", feed.link, dest]
        else:
            args += ["--perms", "0755" if feed.executable else "0644", "--file", str(feed.fd), dest]
    for point in sorted(set(mount_points)):
        args += ["--dir", point]
    return [*args, "--remount-ro", ws]


def tar_program() -> str:
    """The system's tar (``/usr/bin/tar`` or ``/bin/tar``): the handback's, never one a recorded PATH folder holds."""
    for candidate in ("/usr/bin/tar", "/bin/tar"):
        if os.access(candidate, os.X_OK):
            return candidate
    raise SandboxUnavailable("the system has no tar (/usr/bin/tar): a sandboxed run hands its outputs back as a "
                             "tar stream", hint="install tar (Debian/Ubuntu: apt-get install tar)")


def run_env(env: dict[str, str], *, pythonpath_first: Iterable[str] = (), capture_env: str | None = None,
            capture_path: str | None = None) -> dict[str, str]:
    """The environment inside: the recorded one, with ``pythonpath_first`` put first on PYTHONPATH and the capture
    variable set. TMPDIR and friends are dropped: the fresh /tmp is the run's temp folder."""
    out = {k: v for k, v in env.items() if k not in ("TMPDIR", "TEMP", "TMP")}
    first = [p for p in pythonpath_first if p]
    if first:
        rest = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p and p not in first]
        out["PYTHONPATH"] = os.pathsep.join([*first, *rest])
    if capture_env:
        out[capture_env] = capture_path or CAPTURE_DIR
    return out
