"""Start a Python process as a fresh ``python -m MODULE …`` or ``python SCRIPT …`` would, without paying its imports
each time.

Two kinds of process dominate the suite's starts: the server under test (about 1.1 CPU s before it answers
``initialize``, most of it building the ``mcp`` package's types, and about 2 s once a session has loaded the search,
the analysis and the report) and the fixture scripts that run the simulator (importing torch and pypto is about 2.5
of the ~3 CPU s a small SIM run costs). So each pytest worker keeps one helper interpreter (a *zygote*) per set of
modules it pre-imports (``SERVER``, ``SIMULATOR``), and each such process is a child forked from it:

* the test still starts a process of its own (the *launcher*, a bare ``python -I -S``) with the stdio, working
  folder and environment it gives; the launcher hands its stdin, stdout and stderr to the zygote over a Unix socket
  and asks for a child; the zygote forks one that takes those three descriptors, the folder, the environment,
  ``sys.argv`` and the ``sys.path`` a fresh interpreter would have (``-m``: the folder first; a script: its own
  folder first; then ``PYTHONPATH``), re-seeds ``random`` and runs the module or the script as ``__main__``;
* the launcher forwards the signals it gets (terminate, interrupt, hang-up) to that child, waits for it and exits
  with its status — killed by a signal, it kills itself with the same one; a launcher killed outright (SIGKILL, or
  ``subprocess.run``'s timeout) takes the child with it — so whoever started the launcher sees it behave as the
  process it stands in for.

What runs is the module's or the script's own code, over the real pipes; only the interpreter's start is shared. Where
a fresh interpreter would differ, the test gets one: an environment that sets another ``PYTHON*`` variable than
``PYTHONPATH``, ``PYTHONUNBUFFERED`` and ``PYTHONDONTWRITEBYTECODE`` (they change how an interpreter starts; a child
sets its streams and ``sys.dont_write_bytecode`` from those two itself, as a fresh interpreter would from the
environment it gets: pytest-xdist's workers set both, and the helper's own streams were made from theirs;
``sys.flags`` still shows the helper's start), ``PYPTO_TUNE_COLD_SERVER=1`` in the test process, or a zygote that
could not start. What a fresh interpreter still does differently — it imports the
pre-imported modules after reading the environment the child gets — is left to tests that start one (the server's own
runs never use this: they are the product's, in its sandbox). Tests that need a fresh process for another reason
(another account, a Ray worker) build their commands themselves.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import tempfile
import threading

# The helper: imports the modules it is given, then forks one child per request. Single-threaded on purpose (a fork
# copies one thread; a lock another thread held would stay locked in the child), and it never writes to its own
# stdout, which every child inherits as a buffer until it takes the client's pipe.
_ZYGOTE = r"""
import ctypes, json, os, random, runpy, select, signal, socket, sys

ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG: die with the worker
if os.getppid() != int(sys.argv[2]):
    sys.exit(0)

import importlib
for name in sys.argv[3].split(","):
    importlib.import_module(name)

BASE_PATH = list(sys.path[1:])  # after the '' that ``-c`` puts first


def fresh_streams(env):
    # stdout, stderr and the bytecode switch as a fresh interpreter sets them from env (the helper's own were set from
    # the test process's environment): PYTHONUNBUFFERED writes through, else stdout is block-buffered (line-buffered
    # on a terminal) and stderr line-buffered; PYTHONDONTWRITEBYTECODE writes no .pyc
    import io
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))

    def stream(fd, old, line):
        raw = io.FileIO(fd, "w", closefd=False)
        if unbuffered:
            return io.TextIOWrapper(raw, write_through=True, encoding=old.encoding, errors=old.errors)
        return io.TextIOWrapper(io.BufferedWriter(raw), encoding=old.encoding, errors=old.errors, line_buffering=line)

    sys.stdout = stream(1, sys.stdout, os.isatty(1))
    sys.stderr = stream(2, sys.stderr, True)


def serve_child(req, fds, listener, clients):
    listener.close()
    for c in clients.values():
        c.close()
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    extra = [os.path.abspath(p) for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    random.seed()
    fresh_streams(req["env"])
    if req["argv"][0] == "-m":
        _, module, *args = req["argv"]
        sys.path[:] = [os.getcwd(), *extra, *BASE_PATH]
        sys.argv = [module, *args]  # run_module puts the module's file first, as ``python -m`` does
        sys.modules.pop(module, None)  # run as ``__main__``, not as the module some import may have loaded
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script = os.path.abspath(req["argv"][0])  # ``__main__.__file__`` is absolute, as a fresh interpreter's
        sys.path[:] = [os.path.dirname(script), *extra, *BASE_PATH]
        sys.argv = list(req["argv"])
        runpy.run_path(script, run_name="__main__")


def main():
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(sys.argv[1])
    listener.listen(64)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select() to reap
    print("ready", file=sys.stderr, flush=True)
    clients = {}  # child pid -> the launcher's connection
    while True:
        ready, _, _ = select.select([listener, *clients.values()], [], [], 0.5)
        for pid, conn in list(clients.items()):
            if conn in ready:  # the launcher is gone (killed): so is the process the client started
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                del clients[pid]
                conn.close()
        if listener in ready:
            conn, _ = listener.accept()
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            if not msg or len(fds) != 3:  # a launcher that died before it asked
                for fd in fds:
                    os.close(fd)
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                serve_child(json.loads(msg), fds, listener, clients)
                return  # the child's interpreter exits as the server's would (atexit handlers, its status)
            for fd in fds:
                os.close(fd)
            conn.send(json.dumps({"pid": pid}).encode())
            clients[pid] = conn
        while clients:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = clients.pop(pid, None)
            if conn is not None:
                try:
                    conn.send(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode())
                except OSError:
                    pass
                conn.close()


main()
"""

# The process the test starts: hands over its stdio, forwards signals, exits as the server did.
_LAUNCHER = r"""
import json, os, signal, socket, sys
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)  # one sent before the child's pid is known waits for it
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sys.argv[1])
req = {"argv": sys.argv[2:], "cwd": os.getcwd(), "env": dict(os.environ)}
socket.send_fds(s, [json.dumps(req).encode()], [0, 1, 2])
pid = json.loads(s.recv(1 << 16))["pid"]
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(null, 1)  # the client's EOF on stdout must come from the server alone
for sig in FORWARDED:
    signal.signal(sig, lambda n, _f: os.kill(pid, n))
signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
msg = s.recv(1 << 16)
code = json.loads(msg)["status"] if msg else 1
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
os._exit(code)
"""

#: what a server imports before it answers, and what a session loads
SERVER = ("pypto_tune.server.app", "pypto_tune.tools.service", "pypto_tune.tools.search.propose",
          "pypto_tune.tools.analysis.engine", "pypto_tune.tools.report", "anyio", "libcst", "jinja2", "numpy")
#: what a script that runs the simulator imports first
SIMULATOR = ("torch", "pypto")

_lock = threading.Lock()
_zygotes: dict[tuple[str, ...], tuple[subprocess.Popen[bytes], str]] = {}
_failed: set[tuple[str, ...]] = set()


def _start(preload: tuple[str, ...]) -> str | None:
    """The socket of the zygote that imported ``preload``, starting it on first use; None when it cannot start (the
    caller starts a fresh interpreter)."""
    with _lock:
        known = _zygotes.get(preload)
        if known is not None and known[0].poll() is None:
            return known[1]
        if preload in _failed:
            return None
        folder = tempfile.mkdtemp(prefix="warm-interpreter-")
        path = os.path.join(folder, "s")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        proc = subprocess.Popen([sys.executable, "-c", _ZYGOTE, path, str(os.getpid()), ",".join(preload)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                                cwd=folder)
        line = proc.stderr.readline() if proc.stderr else b""
        if line.strip() != b"ready":
            proc.kill()
            _failed.add(preload)
            return None
        proc.stderr.close()  # type: ignore[union-attr]
        _zygotes[preload] = (proc, path)
        atexit.register(proc.kill)
        return path


#: start-up options a forked child takes on itself (pytest-xdist's workers set both, and the processes a test starts
#: inherit them)
HONOURED = frozenset({"PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED"})


def _fresh_only(env: dict[str, str] | None, honoured: frozenset[str]) -> bool:
    if os.environ.get("PYPTO_TUNE_COLD_SERVER") == "1":
        return True
    return any(k.startswith("PYTHON") and k not in honoured for k in (env or {}))


def _command(argv: list[str], env: dict[str, str] | None, preload: tuple[str, ...]) -> tuple[str, list[str]]:
    if not _fresh_only(env, HONOURED):
        path = _start(preload)
        if path is not None:
            return sys.executable, ["-I", "-S", "-c", _LAUNCHER, path, *argv]
    return sys.executable, list(argv)


def module_command(module: str, args: list[str], env: dict[str, str] | None,
                   preload: tuple[str, ...] = SERVER) -> tuple[str, list[str]]:
    """``(command, args)`` that run as ``sys.executable -m MODULE *args`` in the given environment: a launcher of a
    child of the warm interpreter that imported ``preload`` where that behaves the same, else that fresh interpreter
    itself."""
    return _command(["-m", module, *args], env, preload)


def script_command(argv: list[str], env: dict[str, str] | None,
                   preload: tuple[str, ...] = SIMULATOR) -> tuple[str, list[str]]:
    """``(command, args)`` that run as ``sys.executable SCRIPT *args`` (``argv[0]`` the script), warm as
    :func:`module_command` is."""
    return _command(list(argv), env, preload)


def server_command(args: list[str], env: dict[str, str] | None) -> tuple[str, list[str]]:
    """``sys.executable -m pypto_tune.server.cli *args``, warm where that behaves the same (:func:`module_command`)."""
    return module_command("pypto_tune.server.cli", args, env)
