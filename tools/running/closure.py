"""The closure of a run: everything outside the recorded tree that a run may read (``sandbox.Closure``).

Found, not listed: the interpreter the test command runs is asked (with the run's own environment) for its
``sys.path``, its prefixes (the virtual environment and the base installation: the interpreter binary, its shared
library, ``pyvenv.cfg``) and the folders of editable installs (setuptools' ``__editable__`` finders map package
names to source folders that are not on ``sys.path``; pypto-tune's own is left out: the server's code is no part of
any run). To these come the recorded ``PATH`` folders (pypto starts its
writer scripts with the ``python3`` found there, domain A.2b; an NPU box has ``npu-smi`` there), the toolchain roots
the environment names (``PTO_TILE_LIB_CODE_PATH``, CANN's ``ASCEND_*`` homes, ``LD_LIBRARY_PATH``), the NPU device
nodes present on the machine, and what the person starting the server declared:

* ``--sandbox-root PATH`` / ``PYPTO_TUNE_SANDBOX_ROOTS`` (``os.pathsep``-separated): more read-only roots (and
  fingerprinted ones);
* ``--sandbox-device PATH`` / ``PYPTO_TUNE_SANDBOX_DEVICES``: more read-write device paths (a device node, or the
  state folder of an emulated device).

The closure is recorded with the session (``sessions.config``); a resume whose closure differs is refused
(``recorded_env.py``).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

import anyio

from pypto_tune.tools.running import sandbox
from pypto_tune.tools.running.sandbox import Closure, is_system_path, outermost, under

ROOTS_ENV = "PYPTO_TUNE_SANDBOX_ROOTS"
DEVICES_ENV = "PYPTO_TUNE_SANDBOX_DEVICES"
#: Ascend device nodes (domain G.3: what the Ascend container runtime mounts; ``davinci<N>`` one per chip).
NPU_DEVICE_GLOBS = ("/dev/davinci[0-9]*", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
#: Environment variables whose value is a toolchain folder (bound read-only, not fingerprinted: CANN is large and
#: lives where an agent's user does not write).
TOOLCHAIN_VARS = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "ASCEND_OPP_PATH", "ASCEND_AICPU_PATH", "TOOLCHAIN_HOME")

_PROBE = (
    "import json, os, sys\n"
    "extra = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]\n"
    "exe = os.path.realpath(sys.executable)\n"
    "for name, mod in list(sys.modules.items()):\n"
    "    if name.startswith('__editable__') and 'pypto_tune' not in name:\n"
    "        m = getattr(mod, 'MAPPING', None)\n"
    "        if isinstance(m, dict): extra += [str(v) for v in m.values()]\n"
    "print('PYPTO-TUNE-CLOSURE ' + json.dumps({'path': [p for p in sys.path if p], 'prefixes': extra, 'exe': exe}))\n"
)
#: Seconds an interpreter probe may take (it imports nothing beyond site).
PROBE_TIMEOUT_S = 60.0


def declared(env: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """Declared roots and devices: the server's ``--sandbox-root`` / ``--sandbox-device`` (``sandbox.configure``)
    plus the ``PYPTO_TUNE_SANDBOX_*`` variables of ``env`` (default: the server's environment)."""
    src = os.environ if env is None else env
    pol = sandbox.policy()
    r = [*pol.roots, *[p for p in src.get(ROOTS_ENV, "").split(os.pathsep) if p]]
    d = [*pol.devices, *[p for p in src.get(DEVICES_ENV, "").split(os.pathsep) if p]]
    return ([os.path.abspath(p) for p in r], [os.path.abspath(p) for p in d])


def probe_interpreter(python: str, env: dict[str, str], *, prefix: list[str] | None = None,
                      cwd: str = "/") -> dict:
    """``sys.path``, prefixes and editable-install folders of ``python`` run with ``env``; ``prefix`` wraps the
    command (a sandbox). On failure the dict holds ``error`` (the output's tail) and empty lists."""
    argv = [*(prefix or []), python, "-c", _PROBE]
    try:
        res = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=PROBE_TIMEOUT_S, start_new_session=True)
        output = res.stdout + res.stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        output = str(exc)
    for line in reversed(output.splitlines()):
        if line.startswith("PYPTO-TUNE-CLOSURE "):
            try:
                return dict(json.loads(line.split(" ", 1)[1]))
            except ValueError:
                break
    return {"path": [], "prefixes": [], "exe": "", "error": output.strip()[-600:] or "no output"}


def _existing(paths: Iterable[str]) -> list[str]:
    out = []
    for p in paths:
        if p and os.path.isabs(p) and os.path.exists(p):
            out.append(os.path.normpath(p))
    return out


def _link_targets(folders: Iterable[str]) -> list[str]:
    """Where the programs in ``folders`` that are symbolic links lead (a PATH folder of links into a toolchain: the
    link alone would dangle in the sandbox). Targets in the system folders are left out (mounted anyway)."""
    out: dict[str, None] = {}
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for e in entries:
            if e.is_symlink():
                target = os.path.realpath(e.path)
                if os.path.isfile(target) and not is_system_path(target):
                    out.setdefault(target, None)
    return list(out)


def build(info: dict, env: dict[str, str], *, workspace: Path, declared_roots: Iterable[str] = (),
          declared_devices: Iterable[str] = ()) -> Closure:
    """The closure from an interpreter probe (:func:`probe_interpreter`), the run's environment and the declarations.

    Paths inside the workspace are left out (the recorded tree covers them); a folder that *contains* the workspace
    stays a root (the sandbox mounts the copy over the workspace's place in it) but is fingerprinted without it.
    """
    ws = os.path.normpath(str(workspace))

    def keep(p: str) -> bool:
        return not under(p, [ws])

    sys_path = [p for p in _existing(info.get("path", [])) if keep(p)]
    prefixes = [p for p in _existing(info.get("prefixes", [])) if keep(p)]
    exe = info.get("exe") or ""
    path_dirs = [p for p in _existing(env.get("PATH", "").split(os.pathsep)) if keep(p) and os.path.isdir(p)]
    path_dirs = [p for p in path_dirs if not is_system_path(p)]
    linked = _link_targets(path_dirs)
    tile_lib = _existing([env.get("PTO_TILE_LIB_CODE_PATH", "")])
    toolchain = _existing([*(env.get(v, "") for v in TOOLCHAIN_VARS),
                           *env.get("LD_LIBRARY_PATH", "").split(os.pathsep)])
    decl_roots = _existing(declared_roots)
    roots = outermost([*sys_path, *prefixes, *path_dirs, *tile_lib, *toolchain, *decl_roots,
                       *([os.path.dirname(exe)] if exe else []), *(os.path.dirname(t) for t in linked)])
    # Fingerprinted: what an agent's user may write and a run imports or executes. The system folders are not
    # (fingerprinting /usr would cost seconds per run); a prefix that IS a system folder (a system Python under
    # /usr) contributes only its interpreter binary.
    fp = [*sys_path, *path_dirs, *linked, *tile_lib, *decl_roots,
          *[p for p in prefixes if not is_system_path(p)]]
    if exe and os.path.exists(exe):
        fp.append(exe)
    fingerprinted = [p for p in dict.fromkeys(os.path.normpath(x) for x in fp) if keep(p)]
    devices = sorted({*(p for g in NPU_DEVICE_GLOBS for p in glob.glob(g)), *_existing(declared_devices)})
    used = [*sys_path, *prefixes, *path_dirs, *linked, *tile_lib, *toolchain, *decl_roots, *([exe] if exe else []), ws]
    return Closure(roots=tuple(roots), devices=tuple(devices), fingerprinted=tuple(fingerprinted),
                   hidden=tuple(unused_package_folders(prefixes, used)))


#: Where an installation keeps its third-party packages, relative to its prefix.
PACKAGE_FOLDER_GLOBS = ("lib*/python3*/site-packages", "lib*/python3*/dist-packages",
                        "local/lib*/python3*/site-packages", "local/lib*/python3*/dist-packages")


def unused_package_folders(prefixes: Iterable[str], used: Iterable[str]) -> list[str]:
    """The package folders of the interpreter's installations that the run does not use: a virtual environment's
    base installation keeps its own site-packages, mounted with the base (its interpreter, standard library and
    shared library are needed) but not on the run's ``sys.path``. Hiding them (``Closure.hidden``) leaves a run
    unable to read them by any path, so the scan after every run need not cover them — on this project's machines
    that halves the scan.

    A folder stays visible when anything the closure uses lies inside it (a ``sys.path`` entry, an editable
    install, a PATH folder, the workspace) or it is one of the system folders (mounted whole, never fingerprinted).
    """
    used = [q for u in used if u for q in (os.path.normpath(u), os.path.realpath(u))]
    out: dict[str, None] = {}
    for prefix in prefixes:
        if is_system_path(prefix):
            continue
        for pattern in PACKAGE_FOLDER_GLOBS:
            for folder in sorted(glob.glob(os.path.join(glob.escape(prefix), pattern))):
                folder = os.path.normpath(folder)
                # reached through a link (a venv's lib64 -> lib): the mount would land on the link's target, which
                # may be the folder the run does use
                if os.path.realpath(folder) != folder or not os.path.isdir(folder) or is_system_path(folder):
                    continue
                if any(under(u, [folder]) for u in used):
                    continue
                out.setdefault(folder, None)
    return list(out)


def find_sync(python: str, env: dict[str, str], *, workspace: Path, declared_roots: Iterable[str] = (),
              declared_devices: Iterable[str] = ()) -> tuple[Closure, dict]:
    """Probe ``python`` (from "/", never the live workspace) and build its closure; returns ``(closure, probe)``."""
    info = probe_interpreter(python, env)
    return build(info, env, workspace=workspace, declared_roots=declared_roots,
                 declared_devices=declared_devices), info


async def find(python: str, env: dict[str, str], *, workspace: Path, declared_roots: Iterable[str] = (),
               declared_devices: Iterable[str] = ()) -> tuple[Closure, dict]:
    """:func:`find_sync` off the event loop."""
    return await anyio.to_thread.run_sync(lambda: find_sync(
        python, env, workspace=workspace, declared_roots=tuple(declared_roots),
        declared_devices=tuple(declared_devices)))


def check_inside(python: str, env: dict[str, str], closure: Closure, *, workspace: Path,
                 outside: dict) -> str:
    """Ask the interpreter again, inside a sandbox built from ``closure`` (an empty folder at the workspace's path):
    '' when it starts there and sees the ``sys.path`` it saw outside, else what went wrong — so a closure that
    misses something (a shared library, an editable install) is named at session start, not at the first run."""
    status = sandbox.require()
    tmp = Path(tempfile.mkdtemp(prefix="pypto-tune-probe-"))
    try:
        for sub in ("copy", "output", "tmp", "home"):
            (tmp / sub).mkdir()
        layout = sandbox.Layout(workspace=os.path.normpath(str(workspace)), copy=tmp / "copy", output=tmp / "output",
                                tmp=tmp / "tmp", home=tmp / "home")
        prefix = sandbox.command(status.bwrap, [], layout=layout, closure=closure, home=env.get("HOME", ""))
        inside = probe_interpreter(python, sandbox.run_env(env), prefix=prefix, cwd=str(tmp / "copy"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if inside.get("error"):
        return (f"{python} does not start inside the run sandbox: {inside['error'][-300:]} — declare what it "
                "needs with `pypto-tune serve --sandbox-root PATH` (read-only) or --sandbox-device PATH")
    missing = [p for p in outside.get("path", []) if p not in inside.get("path", [])]
    if missing:
        return (f"inside the run sandbox {python} does not see {', '.join(missing[:4])} on sys.path (outside it "
                "does): declare the folder with `pypto-tune serve --sandbox-root PATH`")
    return ""
