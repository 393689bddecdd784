"""The in-copy half of benchmarks/mutation.py: a fork server that runs kill-suite tests against one mutant at a time
without starting Python, pytest and the project again for each.

mutation.py starts it inside the private copy (cwd = the copy, ``PYTHONPATH`` = the copy's ``pypto_tune`` shim), one
per module under test. It collects the kill suite once (``pytest --collect-only``: the project and the test modules
are imported, assertions rewritten), then answers one JSON request per line on stdin with one JSON line on the
descriptor it inherited as stdout (pytest's own output goes to a log file). Each request runs in a forked child, so
every run starts from the same unmutated, freshly imported process:

* ``{"op": "baseline"}``: the whole suite, with every function and method of the target module recompiled from its
  own text and swapped in — the swap itself must fail nothing; answers the seconds each test took.
* ``{"op": "map"}``: the whole suite under coverage, one dynamic context per test: answers which tests ran each line
  of the target module (mutation.py runs a mutant only against the tests that reach its line).
* ``{"op": "mutant", "source": <the mutated module's text>, "tests": [node ids], "timeout": s}``: the mutated
  function's (or method's) code object replaces the live one's ``__code__`` — every reference to the function, imports
  by name and decorator wrappers included, runs the mutant — then ``pytest -x`` on ``tests``. Answers ``killed`` (and
  the first failing test), ``survived``, ``timeout`` or ``reimport``: a mutation outside any function body (a module
  constant, a default value, a decorator) exists only in a fresh import, which mutation.py runs the standard way —
  or, with ``"reexec": true`` (mutation.py ``--reexec``), here too: the mutated text runs in the live module's
  namespace (``reexec``), which is how a gate table's row is mutated without a fresh interpreter.

Why a swap is sound: a test that fails after it fails on the mutant (nothing but the function's code differs from a
fresh import of the mutated file); a survivor here is run again the standard way (fresh interpreter, mutated file on
disk, whole suite) before it is reported, so a missed reference can only cost time, never hide a live mutant.
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
import os
import signal
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path
from typing import Any

import pytest

DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


# ------------------------------------------------------------------------------------------------ which code changed


def _header(node: ast.AST) -> str:
    """The definition without its body: decorators, defaults, bases — what runs when the ``def``/``class`` runs."""
    shell = copy.copy(node)
    shell.body = []  # type: ignore[attr-defined]
    return ast.dump(shell)


def changed_units(old: str, new: str) -> list[str] | None:
    """Qualified names of the module-level functions and methods whose bodies differ between the two texts, or None
    when anything else differs (a module statement, a class attribute, a ``def`` line): only a fresh import shows
    that mutation."""
    a, b = ast.parse(old), ast.parse(new)
    if len(a.body) != len(b.body):
        return None
    out: list[str] = []
    for x, y in zip(a.body, b.body):
        if ast.dump(x) == ast.dump(y):
            continue
        if isinstance(x, DEFS) and type(x) is type(y) and _header(x) == _header(y):
            out.append(x.name)
        elif isinstance(x, ast.ClassDef) and isinstance(y, ast.ClassDef) and _header(x) == _header(y) \
                and len(x.body) == len(y.body):
            for p, q in zip(x.body, y.body):
                if ast.dump(p) == ast.dump(q):
                    continue
                if isinstance(p, DEFS) and type(p) is type(q) and _header(p) == _header(q):
                    out.append(f"{x.name}.{p.name}")
                else:
                    return None
        else:
            return None
    return out


def every_unit(text: str) -> list[str]:
    """Every module-level function and method of ``text`` (the baseline swaps them all)."""
    out = []
    for x in ast.parse(text).body:
        if isinstance(x, DEFS):
            out.append(x.name)
        elif isinstance(x, ast.ClassDef):
            out.extend(f"{x.name}.{p.name}" for p in x.body if isinstance(p, DEFS))
    return out


# ------------------------------------------------------------------------------------------------ the swap


def _code_objects(code: types.CodeType) -> dict[str, types.CodeType]:
    out: dict[str, types.CodeType] = {}
    stack = [code]
    while stack:
        for k in stack.pop().co_consts:
            if isinstance(k, types.CodeType):
                out.setdefault(k.co_qualname, k)
                stack.append(k)
    return out


def live_function(module: types.ModuleType, qualname: str) -> types.FunctionType:
    """The function object every caller holds (under staticmethod / classmethod / property / ``functools.wraps``)."""
    head, _, rest = qualname.partition(".")
    obj: Any = module.__dict__[head]
    if rest:
        obj = obj.__dict__[rest]
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        obj = obj.fget
    for _ in range(10):
        if inspect.isfunction(obj) and obj.__code__.co_qualname == qualname:
            return obj
        obj = getattr(obj, "__wrapped__", None)
        if obj is None:
            break
    raise LookupError(f"no live function {qualname} in {module.__name__}")


def swap(module: types.ModuleType, source: str, units: list[str]) -> None:
    """Give each of ``units`` the code ``source`` compiles it to (``source`` is the whole module's text)."""
    fresh = _code_objects(compile(source, module.__file__ or "<mutant>", "exec", dont_inherit=True))
    for q in units:
        fn = live_function(module, q)
        fn.__code__ = fresh[q]  # raises ValueError if the closure changed: then a fresh import is needed


def reexec(module: types.ModuleType, source: str) -> None:
    """Run ``source`` in the live module's namespace: a mutation outside any function body (a gate table's row, a
    module constant, a default value) replaces the names the module defines, and every function of the module — old
    or new — reads them from that one namespace. Names another module imported by value keep the old object, so this
    can only miss a kill (a survivor is run again the standard way), never invent one: the baseline runs the module's
    own text this way first, which must fail nothing."""
    exec(compile(source, module.__file__ or "<mutant>", "exec", dont_inherit=True), module.__dict__)


# ------------------------------------------------------------------------------------------------ running tests


class Recorder:
    """pytest plugin: per test its seconds (setup + call + teardown), the first failure, and coverage contexts
    ``<node id>|setup`` / ``|call`` / ``|teardown`` (a line run while a shared fixture is set up may matter to every
    test of that file, mutation.py takes them all)."""

    def __init__(self, cov: Any = None) -> None:
        self.seconds: dict[str, float] = {}
        self.failed: str | None = None
        self.cov = cov

    def _context(self, item: Any, phase: str) -> None:
        if self.cov is not None:
            self.cov.switch_context(f"{item.nodeid}|{phase}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: Any) -> None:
        self._context(item, "setup")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: Any) -> None:
        self._context(item, "call")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item: Any, nextitem: Any) -> None:
        self._context(item, "teardown")

    def pytest_runtest_logreport(self, report: Any) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration
        if report.failed and self.failed is None:
            self.failed = report.nodeid


def _child(req: dict[str, Any], module: types.ModuleType, suite: list[str], out_path: str, log_fd: int) -> int:
    os.setpgid(0, 0)  # a timeout kills the test's own children too
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    op = req["op"]
    cov = None
    answer: dict[str, Any] = {}
    if op == "mutant":
        units = changed_units(ORIGINAL, req["source"])
        if units is None and not req.get("reexec"):
            answer = {"outcome": "reimport"}
            Path(out_path).write_text(json.dumps(answer))
            return 0
        if units is None:
            try:
                reexec(module, req["source"])
            except Exception:  # noqa: BLE001 - a module that no longer imports fails every test that imports it
                answer = {"outcome": "killed", "failed": "<the mutated module does not import>"}
                Path(out_path).write_text(json.dumps(answer))
                return 0
            units = ["<module>"]
        else:
            swap(module, req["source"], units)
        answer["units"] = units
        tests = list(req["tests"])
    else:
        tests = list(suite)
        if op == "baseline":
            if REEXEC:
                reexec(module, ORIGINAL)  # running the module's text again in place must change nothing either
            swap(module, ORIGINAL, every_unit(ORIGINAL))  # the swap alone must change nothing
        if op == "map":
            import coverage

            cov = coverage.Coverage(data_file=None, include=[str(Path(module.__file__).resolve()),
                                                             module.__file__])
            cov.start()
    rec = Recorder(cov)
    stop = ["-x"] if op == "mutant" else []
    rc = int(pytest.main(["-q", "-p", "no:cacheprovider", "-m", "not sim", *stop, *tests], plugins=[rec]))
    answer.update(rc=rc, failed=rec.failed, seconds=rec.seconds)
    if cov is not None:
        cov.stop()
        data = cov.get_data()
        lines: dict[int, set[str]] = {}
        for f in data.measured_files():
            for line, ctxs in data.contexts_by_lineno(f).items():
                lines.setdefault(line, set()).update(c for c in ctxs if c)
        answer["lines"] = {str(k): sorted(v) for k, v in lines.items()}
    Path(out_path).write_text(json.dumps(answer))
    return 0


def serve(target: str, suite: list[str], reply: Any, log_path: str) -> None:
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    saved = (os.dup(1), os.dup(2))
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    rc = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-m", "not sim", *suite])
    os.dup2(saved[0], 1)
    os.dup2(saved[1], 2)
    name = "pypto_tune." + target.removesuffix(".py").replace("/", ".")
    module = importlib.import_module(name)
    if not str(Path(module.__file__ or "").resolve()).startswith(str(Path.cwd().resolve())):
        raise SystemExit(f"{name} is imported from {module.__file__}, not from the copy")
    global ORIGINAL
    ORIGINAL = Path(module.__file__ or "").read_text(encoding="utf-8")
    reply.write(json.dumps({"ready": int(rc) == 0, "module": module.__file__}) + "\n")
    reply.flush()
    for line in sys.stdin:
        req = json.loads(line)
        fd, out_path = tempfile.mkstemp(prefix="mutant-", suffix=".json")
        os.close(fd)
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            try:
                code = _child(req, module, suite, out_path, log_fd)
            except BaseException:  # noqa: BLE001 - reported to the driver, never raised in the server
                Path(out_path).write_text(json.dumps({"outcome": "error", "error": traceback.format_exc()}))
                code = 0
            os._exit(code)
        deadline = t0 + float(req.get("timeout") or 1e9)
        status = None
        while status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
            elif time.monotonic() > deadline:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                os.waitpid(pid, 0)
                status = -1
            else:
                time.sleep(0.02)
        seconds = time.monotonic() - t0
        text = Path(out_path).read_text() if status != -1 else ""
        os.unlink(out_path)
        answer: dict[str, Any] = json.loads(text) if text else {}
        if status == -1:
            answer = {"outcome": "timeout"}
        elif not answer:
            answer = {"outcome": "error", "error": f"the child ended with status {status} and no answer"}
        elif "outcome" not in answer:
            rc = answer["rc"]
            # pytest: 0 all passed, 1 a test failed, 5 nothing collected; anything else is pytest's own trouble
            answer["outcome"] = {0: "survived", 1: "killed", 5: "unreached"}.get(rc, "error")
        answer["wall"] = round(seconds, 3)
        reply.write(json.dumps(answer) + "\n")
        reply.flush()


ORIGINAL = ""
REEXEC = os.environ.get("MUTATION_REEXEC") == "1"  # mutation.py --reexec: module-level mutants run here too

if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())  # the copy's tests/ package, as pytest's rootdir import would find it
    out = os.fdopen(os.dup(1), "w")
    serve(sys.argv[1], sys.argv[3:], out, sys.argv[2])
