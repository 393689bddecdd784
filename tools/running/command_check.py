"""Check a test command before it is fixed for a session: will it run the script the user means, inside the
workspace, in the session's run mode?

Every check here stands for a way a session went wrong or would have: a typo in the script name costs a baseline
attempt (R5 counts it); a script outside the workspace changes behind the server's back, because the server hashes,
snapshots and restores only workspace bytes; a ``file::test_fn`` selector naming no function runs nothing; and a
run-mode flag that disagrees with the session — or is spelled the way the script does not know, or is missing while
the script defaults to the other mode — makes an NPU session measure simulated runs or a SIM session try a device.

Scripts are read with :mod:`ast`, never imported: importing a test would run it (and pypto kernels compile at
import time in our fixtures). Anything the reader cannot be sure of (a default computed at run time, a parser
defined in another module, a method inherited from an imported class) is left alone rather than guessed.

:func:`check_command` returns problems; it raises only for a caller error (a session run mode other than sim/npu).
"""

from __future__ import annotations

import ast
import difflib
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

from pypto_tune.tools.errors import InputError
from pypto_tune.tools.code import pysource

#: Scripts larger than this are not parsed (a test script is kilobytes; this bounds the time spent on a bad path).
SCRIPT_MAX_BYTES = 5 * 1024 * 1024

_PYTHON_RE = re.compile(r"^(?:python|pypy)(?:\d+(?:\.\d+)*)?[mtw]?$")
_PYTEST_NAMES = ("pytest", "py.test")
_RUN_MODE_FLAG_RE = re.compile(r"^(--run[-_]mode)(?:=(.*))?$")
_SELECTOR_RE = re.compile(r"^[^\s:]+(?:::[A-Za-z_]\w*(?:\[[^\]]*\])?)+$")
# CPython options that take a separate value.
_PY_VALUE_OPTS = {"-W", "-X", "--check-hash-based-pycs"}
# pytest options that take a separate value (so the value is not read as a path to collect).
_PYTEST_VALUE_OPTS = {
    "-k", "-m", "-p", "-o", "-c", "-W", "-r", "-n", "--tb", "--rootdir", "--basetemp", "--junitxml", "--junit-xml",
    "--confcutdir", "--deselect", "--ignore", "--ignore-glob", "--maxfail", "--timeout", "--durations",
    "--log-level", "--log-cli-level", "--log-file", "--import-mode", "--override-ini", "--capture", "--color",
    "--cov", "--cov-report", "--cov-config", "--dist", "--reruns", "--html", "--json-report-file",
}


class CommandProblem(BaseModel):
    """One thing wrong with a test command, written for the agent that has to fix it."""

    code: str = Field(description="stable id: empty-command, workspace-missing, program-not-found, "
                                  "program-not-executable, script-not-found, script-outside-workspace, "
                                  "script-unreadable, selector-not-found, run-mode-conflict, run-mode-invalid-choice, "
                                  "run-mode-flag-unknown, run-mode-flag-without-value, run-mode-default-conflict, "
                                  "run-mode-required, run-mode-hardcoded")
    message: str = Field(description="what is wrong, naming the argument and the file")
    hint: str = Field(description="the next step that fixes it")
    argument: str | None = Field(None, description="the offending element of the command, if one")
    index: int | None = Field(None, description="its position in the argv list (0 = the program)")


# ------------------------------------------------------------------------------------------- reading a script
@dataclass
class _RunModeOption:
    spellings: list[str]
    default: str | None  # "sim" / "npu" when a literal says so; None when absent or computed at run time
    choices: list[str] | None
    required: bool
    line: int


@dataclass
class _ScriptInfo:
    path: Path
    tree: ast.Module
    has_parser: bool = False  # an ArgumentParser is built in this file
    strict_parse: bool = False  # parse_args() (unknown flags are an error) rather than parse_known_args()
    run_mode_opts: list[_RunModeOption] = field(default_factory=list)
    set_default: str | None = None  # set_defaults(run_mode=...) literal, lower case
    strings: set[str] = field(default_factory=set)  # every string constant (example ids such as "softmax::test")
    jit_modes: list[str | None] = field(default_factory=list)  # per jit decorator: literal run_mode or None


def _mode_of(node: ast.AST | None) -> str | None:
    """'sim' / 'npu' for a literal that names a run mode: "sim", RunMode.SIM, pypto.RunMode.NPU, 0/1 (pypto's
    RunMode values: NPU 0, SIM 1). None for anything computed."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str) and node.value.lower() in ("sim", "npu"):
            return node.value.lower()
        if isinstance(node.value, int) and not isinstance(node.value, bool) and node.value in (0, 1):
            return "npu" if node.value == 0 else "sim"
    if isinstance(node, ast.Attribute) and node.attr.upper() in ("SIM", "NPU"):
        base = node.value
        if isinstance(base, ast.Attribute | ast.Name) and (getattr(base, "attr", None) or getattr(base, "id", "")) \
                == "RunMode":
            return node.attr.lower()
    return None


def _call_name(node: ast.Call) -> str:
    f = node.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return ""


def _kw(node: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in node.keywords if k.arg == name), None)


def _read_script(path: Path) -> _ScriptInfo | str:
    """The parsed script, or a sentence saying why it could not be read."""
    try:
        size = path.stat().st_size
        if size > SCRIPT_MAX_BYTES:
            return f"it is {size} bytes (more than {SCRIPT_MAX_BYTES}); not read"
        data = path.read_bytes()
    except OSError as exc:
        return f"it cannot be read ({exc.strerror})"
    try:
        tree = pysource.parse(data, filename=str(path))
    except SyntaxError as exc:
        return f"it does not parse: {exc.msg} (line {exc.lineno})"
    except ValueError as exc:  # NUL bytes
        return f"it does not parse: {exc}"
    info = _ScriptInfo(path=path, tree=tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            info.strings.add(node.value)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for dec in node.decorator_list:
                if isinstance(dec, ast.Call) and _call_name(dec) == "jit" or \
                        isinstance(dec, ast.Attribute | ast.Name) and (getattr(dec, "attr", None)
                                                                      or getattr(dec, "id", "")) == "jit":
                    opts = _kw(dec, "runtime_options") if isinstance(dec, ast.Call) else None
                    mode = None
                    if isinstance(opts, ast.Dict):
                        for k, v in zip(opts.keys, opts.values, strict=True):
                            if isinstance(k, ast.Constant) and k.value == "run_mode":
                                mode = _mode_of(v)
                    info.jit_modes.append(mode)
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node)
        if name == "ArgumentParser":
            info.has_parser = True
        elif name == "parse_args":
            info.strict_parse = True
        elif name == "set_defaults":
            v = _kw(node, "run_mode")
            if v is not None:
                info.set_default = _mode_of(v)
        elif name in ("add_argument", "addoption"):
            flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            dest = _kw(node, "dest")
            dest_name = dest.value if isinstance(dest, ast.Constant) else None
            if not any(_RUN_MODE_FLAG_RE.match(f) for f in flags) and dest_name != "run_mode":
                continue
            if not any(f.startswith("--") for f in flags):
                continue
            default = _kw(node, "default")
            choices = _kw(node, "choices")
            choice_list = None
            if isinstance(choices, ast.List | ast.Tuple | ast.Set) and all(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) for e in choices.elts):
                choice_list = [e.value for e in choices.elts]  # type: ignore[attr-defined]
            required = _kw(node, "required")
            info.run_mode_opts.append(_RunModeOption(
                spellings=[f for f in flags if f.startswith("--")], default=_mode_of(default), choices=choice_list,
                required=isinstance(required, ast.Constant) and required.value is True, line=node.lineno))
    return info


def _top_level(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Names a module (or class) body defines, looking into if/try/with blocks: defs, classes, assignments and
    imports (pytest collects imported test functions too)."""
    names: dict[str, ast.AST] = {}
    for st in body:
        if isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[st.name] = st
        elif isinstance(st, ast.Assign):
            for t in st.targets:
                if isinstance(t, ast.Name):
                    names[t.id] = st
        elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
            names[st.target.id] = st
        elif isinstance(st, ast.Import | ast.ImportFrom):
            for a in st.names:
                names[(a.asname or a.name).split(".")[0]] = st
        elif isinstance(st, ast.If | ast.Try | ast.With | ast.AsyncWith):
            for sub in ("body", "orelse", "finalbody"):
                names.update(_top_level(getattr(st, sub, []) or []))
            for h in getattr(st, "handlers", []) or []:
                names.update(_top_level(h.body))
    return names


def _star_import(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in ast.walk(tree))


def _missing_in_chain(tree: ast.Module, chain: list[str]) -> str | None:
    """None when ``chain`` (function, or Class then method...) is defined in the module or cannot be ruled out;
    else the missing part and what is there instead."""
    scope = _top_level(tree.body)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for depth, part in enumerate(chain):
        if part in scope:
            node = scope[part]
            if depth == len(chain) - 1:
                return None
            if not isinstance(node, ast.ClassDef):
                return None  # an assigned / imported object: its attributes are not knowable without importing
            members = _top_level(node.body)
            # Methods may come from base classes: only those defined in this file can be looked into.
            for base in node.bases:
                bname = base.id if isinstance(base, ast.Name) else None
                if bname in classes:
                    members = {**_top_level(classes[bname].body), **members}
                elif not (isinstance(base, ast.Attribute) and base.attr == "TestCase"
                          or bname in ("TestCase", "object")):
                    return None
            scope = members
            continue
        if depth == 0 and _star_import(tree):
            return None
        tests = [n for n in scope if n.lower().startswith("test")] or list(scope)
        close = difflib.get_close_matches(part, tests, n=3)
        there = f"; did you mean {', '.join(close)}?" if close else (
            f"; defined: {', '.join(sorted(tests)[:8])}" if tests else "")
        where = "::".join(chain[:depth]) or "the file"
        return f"{part!r} is not defined in {where}{there}"
    return None


# ------------------------------------------------------------------------------------------- reading argv
@dataclass
class _Plan:
    script_idx: int | None = None  # argv index of the script
    script_path: str | None = None  # the script as given (for -m: the module's file)
    args_from: int = 1  # first argv index of the script's / pytest's own arguments
    pytest: bool = False


def _plan(argv: list[str], ws: Path) -> _Plan:
    """Find the script (or pytest) in the command, looking through wrappers such as env, timeout, uv run."""
    n = len(argv)
    k = 0
    while k < n:
        base = os.path.basename(argv[k])
        if base in _PYTEST_NAMES:
            return _Plan(pytest=True, args_from=k + 1)
        if _PYTHON_RE.match(base):
            i = k + 1
            while i < n:
                a = argv[i]
                if a == "-m" and i + 1 < n:
                    mod = argv[i + 1]
                    if mod in _PYTEST_NAMES:
                        return _Plan(pytest=True, args_from=i + 2)
                    rel = Path(*mod.split("."))
                    for cand in (rel.with_suffix(".py"), rel / "__main__.py"):
                        if (ws / cand).is_file():
                            return _Plan(script_idx=i + 1, script_path=str(cand), args_from=i + 2)
                    return _Plan(args_from=i + 2)  # an installed module: nothing of ours to read
                if a.startswith("-m") and len(a) > 2:
                    return _Plan(pytest=a[2:] in _PYTEST_NAMES, args_from=i + 1)
                if a == "-c" or a.startswith("-c") or a == "-":
                    return _Plan(args_from=n)  # inline code or stdin: no script
                if a == "--":
                    i += 1
                    break
                if a in _PY_VALUE_OPTS:
                    i += 2
                    continue
                if a.startswith("-"):
                    i += 1
                    continue
                break
            if i < n:
                return _Plan(script_idx=i, script_path=argv[i], args_from=i + 1)
            return _Plan(args_from=n)
        if base.endswith(".py"):
            return _Plan(script_idx=k, script_path=argv[k], args_from=k + 1)
        k += 1
        # A wrapper (env, timeout, uv run, torchrun): keep looking for python / pytest / a .py among its words.
        while k < n and argv[k].startswith("-") or k < n and "=" in argv[k] and not argv[k].startswith("/"):
            k += 1
    return _Plan(args_from=n)


def _pytest_positionals(argv: list[str], start: int) -> list[int]:
    out = []
    i = start
    while i < len(argv):
        a = argv[i]
        if a == "--":
            out.extend(range(i + 1, len(argv)))
            break
        if a.startswith("-"):
            if a in _PYTEST_VALUE_OPTS or _RUN_MODE_FLAG_RE.match(a) and "=" not in a:
                i += 2
                continue
            i += 1
            continue
        out.append(i)
        i += 1
    return out


def _run_mode_flags(argv: list[str], start: int) -> list[tuple[int, str, str | None]]:
    """(index, flag spelling, value or None) of every --run_mode / --run-mode in argv[start:]."""
    found = []
    for i in range(start, len(argv)):
        m = _RUN_MODE_FLAG_RE.match(argv[i])
        if not m:
            continue
        if m.group(2) is not None:
            found.append((i, m.group(1), m.group(2)))
        elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            found.append((i, m.group(1), argv[i + 1]))
        else:
            found.append((i, m.group(1), None))
    return found


# ------------------------------------------------------------------------------------------------ the checks
def _resolve_in(ws: Path, given: str) -> Path:
    p = Path(given).expanduser()
    return p if p.is_absolute() else ws / p


def _inside(path: Path, ws: Path) -> bool:
    try:
        return path.resolve().is_relative_to(ws.resolve())
    except OSError:
        return False


def _check_program(argv: list[str], ws: Path, env: Mapping[str, str]) -> list[CommandProblem]:
    prog = argv[0]
    if "/" in prog:
        p = _resolve_in(ws, prog)
        if not p.exists():
            return [CommandProblem(code="program-not-found", argument=prog, index=0,
                                   message=f"the program {prog!r} does not exist (looked at {p})",
                                   hint="give a path relative to the workspace, or a program name on PATH such as "
                                        "python3")]
        if not p.is_file() or not os.access(p, os.X_OK):
            return [CommandProblem(code="program-not-executable", argument=prog, index=0,
                                   message=f"the program {prog!r} is not an executable file ({p})",
                                   hint=(f"run it through the interpreter: python3 {prog}" if prog.endswith(".py")
                                         else f"make it executable (chmod +x {prog}) or name an interpreter first"))]
        return []
    path = env.get("PATH", os.defpath)
    if shutil.which(prog, path=path) is None:
        return [CommandProblem(code="program-not-found", argument=prog, index=0,
                               message=f"the program {prog!r} is not on the PATH the test command gets ({path})",
                               hint="use python3 (the server's interpreter directory is first on that PATH) or an "
                                    "absolute path")]
    return []


def _check_file(ws: Path, given: str, idx: int, what: str) -> tuple[Path | None, list[CommandProblem]]:
    p = _resolve_in(ws, given)
    if not p.is_file():
        looked = f" (looked at {p})" if str(p) != given else ""
        return None, [CommandProblem(
            code="script-not-found", argument=given, index=idx,
            message=f"the {what} {given!r} does not exist{looked}; the command runs with the workspace {ws} as its "
                    "working directory",
            hint="give the path relative to the workspace, e.g. python3 op/test_op.py")]
    if not _inside(p, ws):
        return None, [CommandProblem(
            code="script-outside-workspace", argument=given, index=idx,
            message=f"the {what} {given!r} resolves to {p.resolve()}, outside the workspace {ws.resolve()}: the server "
                    "hashes, snapshots and restores only files inside the workspace, so changes to it would go "
                    "unnoticed",
            hint="copy the test into the workspace (next to the operator) and name it by its path there")]
    return p, []


def _selector_problem(arg: str, idx: int, file_label: str, missing: str) -> CommandProblem:
    return CommandProblem(code="selector-not-found", argument=arg, index=idx,
                          message=f"the selector {arg!r} selects nothing: {missing} ({file_label})",
                          hint="name a function (or Class::method) that the file defines, or drop the selector to "
                               "run the whole file")


def _check_selector(ws: Path, arg: str, idx: int, cache: dict[Path, _ScriptInfo | str]) -> list[CommandProblem]:
    """``file.py::test_fn`` / ``file.py::Class::test_m[param]``: the file must exist in the workspace and define it."""
    file_part, *chain = arg.split("::")
    chain = [re.sub(r"\[.*\]$", "", c) for c in chain]
    p, problems = _check_file(ws, file_part, idx, "test file")
    if p is None:
        return problems
    info = cache.setdefault(p, _read_script(p))
    if isinstance(info, str):
        return [CommandProblem(code="script-unreadable", argument=arg, index=idx,
                               message=f"{file_part} cannot be checked: {info}",
                               hint="fix the file so that Python can parse it")]
    missing = _missing_in_chain(info.tree, chain)
    return [_selector_problem(arg, idx, file_part, missing)] if missing else []


def _check_example_id(ws: Path, script: _ScriptInfo, arg: str, idx: int,
                      cache: dict[Path, _ScriptInfo | str]) -> list[CommandProblem]:
    """PyPTO examples take ``<module>::<test_fn>`` as an argument (``softmax::test_softmax``) and look it up in a
    dict of example ids. Accepted when the script names that id literally, or defines the function (in itself or
    in ``<module>.py`` beside it)."""
    if arg in script.strings:
        return []
    module, *chain = arg.split("::")
    chain = [re.sub(r"\[.*\]$", "", c) for c in chain]
    if _missing_in_chain(script.tree, chain) is None:
        return []
    other = script.path.parent / f"{module}.py"
    if other.is_file() and other.resolve() != script.path.resolve():
        info = cache.setdefault(other, _read_script(other))
        if not isinstance(info, str) and _missing_in_chain(info.tree, chain) is None:
            return []
    ids = sorted(s for s in script.strings if _SELECTOR_RE.match(s) and "::" in s)
    missing = _missing_in_chain(script.tree, chain) or "not defined"
    if ids:
        missing += f"; the example ids the script knows: {', '.join(ids[:8])}"
    return [_selector_problem(arg, idx, script.path.name, missing)]


def _check_run_mode(argv: list[str], plan: _Plan, mode: str, script: _ScriptInfo | None,
                    options: list[_RunModeOption], label: str) -> list[CommandProblem]:
    problems: list[CommandProblem] = []
    other = "npu" if mode == "sim" else "sim"
    flags = _run_mode_flags(argv, plan.args_from if (plan.script_idx is not None or plan.pytest) else 1)
    spellings = sorted({s for o in options for s in o.spellings})
    choices = next((o.choices for o in options if o.choices), None)
    for idx, flag, value in flags:
        if spellings and flag not in spellings:
            fate = ("pytest stops with 'unrecognized arguments'" if plan.pytest else
                    "argparse stops with 'unrecognized arguments'" if script is None or script.strict_parse
                    else "the script ignores it and uses its default")
            problems.append(CommandProblem(
                code="run-mode-flag-unknown", argument=flag, index=idx,
                message=f"{label} declares {' / '.join(spellings)}, not {flag}: {fate}",
                hint=f"spell it {spellings[0]} {mode}"))
        if value is None:
            problems.append(CommandProblem(
                code="run-mode-flag-without-value", argument=flag, index=idx,
                message=f"{flag} is given without a value, so the run mode is whatever the script makes of that",
                hint=f"pass {flag} {mode}"))
            continue
        if value.lower() in ("sim", "npu") and value.lower() != mode:
            given = argv[idx] if "=" in argv[idx] else f"{argv[idx]} {value}"
            problems.append(CommandProblem(
                code="run-mode-conflict", argument=given, index=idx,
                message=f"the command runs the operator in {value.lower()} mode ({given}) but the session's "
                        f"run_mode is {mode}",
                hint=f"pass {flag} {mode}, or start the session with run_mode={value.lower()!r}"))
        elif choices is not None and value not in choices:
            problems.append(CommandProblem(
                code="run-mode-invalid-choice", argument=value, index=idx + (0 if "=" in argv[idx] else 1),
                message=f"{label} accepts {flag} {' | '.join(choices)}, not {value!r}",
                hint=f"pass {flag} {mode}"))
    if script is not None and not options and flags and script.has_parser and script.strict_parse:
        idx, flag, _ = flags[0]
        problems.append(CommandProblem(
            code="run-mode-flag-unknown", argument=flag, index=idx,
            message=f"{label} builds an argument parser that declares no run-mode option, so argparse stops with "
                    f"'unrecognized arguments: {flag}'",
            hint=f"drop {flag} from the command, or add it to the script's parser"))
    if not flags and options:
        opt = options[0]
        default = script.set_default if script is not None and script.set_default else opt.default
        if opt.required:
            problems.append(CommandProblem(
                code="run-mode-required", argument=None, index=None,
                message=f"{label} requires {opt.spellings[0]} (line {opt.line}) and the command does not pass it",
                hint=f"add {opt.spellings[0]} {mode} to the test command"))
        elif default == other:
            problems.append(CommandProblem(
                code="run-mode-default-conflict", argument=None, index=None,
                message=f"the command passes no run-mode flag, so {label} runs with its default {opt.spellings[0]} "
                        f"{other!r} (line {opt.line}), but the session's run_mode is {mode}",
                hint=f"add {opt.spellings[0]} {mode} to the test command"))
    if script is not None and script.jit_modes and all(m == other for m in script.jit_modes):
        problems.append(CommandProblem(
            code="run-mode-hardcoded", argument=None, index=None,
            message=f"every jit in {label} fixes runtime_options run_mode to {other.upper()}, but the session's "
                    f"run_mode is {mode}: the runs would not be {mode} runs",
            hint=f"start the session with run_mode={other!r}, or make the jit's run_mode follow a flag"))
    return problems


def check_command(argv: list[str], *, workspace: Path, run_mode: str, env: Mapping[str, str]) -> list[CommandProblem]:
    """Every problem found in a test command for a session in ``workspace`` running in ``run_mode``.

    ``env`` is the environment the command will get (:func:`~pypto_tune.tools.running.runner.build_child_env`); its PATH
    decides whether a bare program name can be found. Relative paths are taken from ``workspace``, the command's
    working directory. Checks, in order: the program exists and is executable; the script (``python x.py``,
    ``./x.py``, ``python -m pkg.mod`` from the workspace, through wrappers such as ``env``/``timeout``) exists inside
    the workspace and parses; each ``file.py::test_fn`` selector (also for ``pytest`` / ``python -m pytest``) names
    a file inside the workspace that defines it; a PyPTO-style ``module::test_fn`` argument names an example the
    script knows; and the run mode: a ``--run_mode`` / ``--run-mode`` flag whose value, spelling or choice the
    session or the script's argparse (or conftest ``addoption``) disagrees with, a missing flag whose script default
    is the other mode, and a script whose every jit hard-codes the other mode.

    Returns an empty list when nothing is wrong. Raises :class:`InputError` only for a ``run_mode`` other than
    sim / npu (the caller's value, not the command's).
    """
    mode = str(run_mode).lower()
    if mode not in ("sim", "npu"):
        raise InputError(f"run_mode must be 'sim' or 'npu', got {run_mode!r}")
    if not argv or not str(argv[0]).strip():
        return [CommandProblem(code="empty-command", message="the test command is empty",
                               hint='give the command as a list, e.g. ["python3", "test_op.py", "--run_mode", '
                                    f'"{mode}"]')]
    ws = Path(workspace).expanduser()
    if not ws.is_dir():
        return [CommandProblem(code="workspace-missing", message=f"the workspace {ws} is not a folder",
                               hint="start the session with the folder that holds the operator and its test")]
    argv = [str(a) for a in argv]
    problems = _check_program(argv, ws, env)
    plan = _plan(argv, ws)
    cache: dict[Path, _ScriptInfo | str] = {}
    script: _ScriptInfo | None = None
    label = "the script"
    options: list[_RunModeOption] = []

    if plan.script_path is not None and plan.script_idx is not None:
        given = plan.script_path
        sel = "::" in given
        if sel:
            # "python x.py::test_fn": Python opens the whole word as a file name. Only pytest reads selectors.
            problems.append(CommandProblem(
                code="script-not-found", argument=given, index=plan.script_idx,
                message=f"Python cannot run {given!r}: it opens the whole word as a file name; the file::function "
                        "form is pytest's",
                hint=f"run python3 -m pytest {given}, or pass the selector as an argument if the script takes one "
                     "(PyPTO examples: python3 op.py op::test_fn)"))
            problems += _check_selector(ws, given, plan.script_idx, cache)
            given = given.split("::")[0]
        p, file_problems = _check_file(ws, given, plan.script_idx, "script")
        if not sel:
            problems += file_problems
        if p is not None:
            info = cache.setdefault(p, _read_script(p))
            if isinstance(info, str):
                if not sel:
                    problems.append(CommandProblem(code="script-unreadable", argument=plan.script_path,
                                                   index=plan.script_idx, message=f"{given} cannot be checked: {info}",
                                                   hint="fix the file so that Python can parse it"))
            else:
                script, label, options = info, Path(given).name, info.run_mode_opts
        if script is not None:
            for i in range(plan.args_from, len(argv)):
                a = argv[i]
                if not _SELECTOR_RE.match(a):
                    continue
                if a.split("::")[0].endswith(".py"):
                    problems += _check_selector(ws, a, i, cache)
                else:
                    problems += _check_example_id(ws, script, a, i, cache)

    if plan.pytest:
        label = "the pytest options"
        confs: list[Path] = []
        for i in _pytest_positionals(argv, plan.args_from):
            a = argv[i]
            if "::" in a:
                problems += _check_selector(ws, a, i, cache)
            elif a.endswith(".py"):
                problems += _check_file(ws, a, i, "test file")[1]
            target = _resolve_in(ws, a.split("::")[0])
            start = target if target.is_dir() else target.parent
            while _inside(start, ws):
                if (start / "conftest.py").is_file():
                    confs.append(start / "conftest.py")
                if start.resolve() == ws.resolve():
                    break
                start = start.parent
        if (ws / "conftest.py").is_file():
            confs.append(ws / "conftest.py")
        for c in dict.fromkeys(confs):
            info = cache.setdefault(c, _read_script(c))
            if not isinstance(info, str):
                options += info.run_mode_opts
        if options:
            label = "conftest.py"
        # pytest plugins may declare options we cannot see: no "unknown flag" from pytest's side, hence script=None
        # below, but value, spelling and default checks against a conftest declaration still apply.
    problems += _check_run_mode(argv, plan, mode, script, options, label)
    return problems
