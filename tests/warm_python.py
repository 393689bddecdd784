"""Run Python scripts as ``python SCRIPT ARGS`` would, without paying the interpreter's import of torch and pypto
each time (about 2.5 of the ~3 CPU seconds a small SIM run costs).

A helper process imports torch and pypto once and then, for each script, forks a child that is a fresh interpreter
from that point on: it takes the script's working folder, environment and ``sys.argv``, puts the script's folder
first on ``sys.path``, sends its output to files of its own and runs the script as ``__main__`` (``runpy``). It
exits as the interpreter would: ``sys.exit``'s code, or 1 after printing the traceback of an uncaught exception;
its normal exit runs the atexit handlers (those registered at import are inherited), as a fresh interpreter's does.
Nothing the scripts do is changed: the simulator runs and writes its folders as in a process of its own. What a fresh
interpreter does differently (it imports torch and pypto after reading the environment the script gets, and prints
an uncaught exception's traceback itself) is left to tests that start one.

    with WarmPython() as py:
        proc = py.run(["softmax_op.py", "--run_mode", "sim"], cwd=folder, timeout=240)
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

# The helper: one JSON request a line on stdin (argv, cwd, env, output files); forks, waits, answers one JSON line.
_HELPER = r"""
import json, os, runpy, sys, traceback
import torch  # noqa: F401
import pypto  # noqa: F401

def child(req):
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    script = os.path.abspath(req["argv"][0])
    sys.argv = list(req["argv"])
    sys.path[0] = os.path.dirname(script)
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.exit(code)

out = sys.stdout
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child(req)
    out.write(json.dumps({"pid": pid}) + "\n")
    out.flush()
    _, status = os.waitpid(pid, 0)
    out.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
    out.flush()
"""


class WarmPython:
    """A helper interpreter with torch and pypto imported; :meth:`run` runs one script in a forked child of it."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="warm-python-")
        self._proc = subprocess.Popen([sys.executable, "-c", _HELPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True, start_new_session=True)
        self._n = 0

    def __enter__(self) -> WarmPython:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
        self._dir.cleanup()

    def _line(self, deadline: float) -> dict:
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._proc.stdout], [], [], max(left, 0))
            if ready:
                line = self._proc.stdout.readline()
                assert line, f"the warm interpreter exited (status {self._proc.poll()})"
                return json.loads(line)
            if left <= 0:
                raise subprocess.TimeoutExpired(self._proc.args, 0)

    def run(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None,
            timeout: float = 240) -> subprocess.CompletedProcess[str]:
        """``python *argv`` in ``cwd`` with ``env`` (default: this process's); its exit status and output."""
        self._n += 1
        out, err = Path(self._dir.name) / f"{self._n}.out", Path(self._dir.name) / f"{self._n}.err"
        req = {"argv": argv, "cwd": str(cwd), "env": dict(os.environ if env is None else env),
               "stdout": str(out), "stderr": str(err)}
        self._proc.stdin.write(json.dumps(req) + "\n")
        self._proc.stdin.flush()
        deadline = time.monotonic() + timeout
        pid = self._line(deadline)["pid"]
        try:
            rc = self._line(deadline)["rc"]
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGKILL)
            self._line(time.monotonic() + 30)
            raise
        return subprocess.CompletedProcess([sys.executable, *argv], rc, out.read_text(errors="replace"),
                                           err.read_text(errors="replace"))
