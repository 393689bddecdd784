"""The environment gate R3 (domain D.2): can this machine run the operator at all, before any measurement?

Each check becomes one :class:`EnvCheck` (``ok`` False = blocks the session; warnings are ``ok=True`` with a
detail that starts with ``warning:``). Checks that need the child's view of the world (``import pypto``,
``torch_npu``, the ``python3`` on PATH) run as subprocesses with the same environment the test command gets,
through :func:`run_command`, so they share its timeout and process-group cleanup.

NPU: ``npu-smi info``; ``torch_npu.npu.device_count() > 0`` and ``torch.npu.is_available()``; TILE_FWK_DEVICE_ID
set, in range, and on an idle chip whose health is not Alarm (from npu-smi's tables);
``$PTO_TILE_LIB_CODE_PATH/include/pto/`` exists and mentions ``DivAlgorithm``; ``import pypto``; each operator file
byte-compiles. SIM: ``import pypto`` and byte-compile apply (R3's last column), plus two
checks from A.2b: a ``python3`` on the child's PATH (else no swimlane is written) and matplotlib absent from it
(else every SIM run also draws a PNG and takes ~15 s instead of ~3 s) — the latter only a warning. Both modes,
last: what the test's own files need (:func:`needs_checks`) — every module they import unconditionally importable,
every pypto option key they set known to the installed pypto — before the session fingerprints the interpreter.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import anyio

from pypto_tune.tools.errors import RunError
from pypto_tune.tools.running import source_needs
from pypto_tune.tools.running.import_memo import ImportAnswer, ImportMemo
from pypto_tune.tools.running.runner import RunResult, run_command
from pypto_tune.tools.snapshot import EnvCheck

CHECK_TIMEOUT_S = 60.0
# pypto 0.2.0 has no __version__: ask the distribution metadata, and show where it was imported from.
_PYPTO_PROBE = ("import importlib.metadata as m, pypto; "
                "print('pypto', m.version('pypto'), 'from', pypto.__file__)")
#: Files larger than this are not searched for DivAlgorithm (headers are small; this skips stray binaries).
_GREP_MAX_FILE_BYTES = 8 * 1024 * 1024


def now_iso() -> str:
    """Same format as the ledger's timestamps (local time with offset); not imported to keep this module light."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


def _check(name: str, ok: bool, detail: str) -> EnvCheck:
    return EnvCheck(name=name, ok=ok, detail=detail[:1000], at=now_iso())


def _short(result: RunResult, limit: int = 400) -> str:
    text = result.output.strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return " | ".join(lines[-4:])[-limit:] if lines else "(no output)"


async def _run(argv: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float) -> RunResult | str:
    """Run a probe; a string is the reason it could not even start."""
    try:
        return await run_command(argv, cwd=cwd, env=env, timeout_s=timeout_s, output_cap_bytes=64 * 1024,
                                 kill_grace_s=1.0)
    except RunError as exc:
        return exc.message


def _failed_probe(res: RunResult | str, what: str) -> str | None:
    if isinstance(res, str):
        return f"{what} could not start: {res}"
    if res.timed_out:
        return f"{what} timed out after {res.duration_s:.0f} s"
    if res.exit_code != 0:
        how = f"signal {res.signal}" if res.signal else f"exit {res.exit_code}"
        return f"{what} failed ({how}): {_short(res)}"
    return None


async def _python_import(name: str, code: str, *, python: str, cwd: Path, env: dict[str, str],
                         timeout_s: float) -> tuple[EnvCheck, RunResult | str]:
    res = await _run([python, "-c", code], cwd=cwd, env=env, timeout_s=timeout_s)
    bad = _failed_probe(res, f"{python} -c {code!r}")
    if bad:
        return _check(name, False, bad), res
    assert isinstance(res, RunResult)
    return _check(name, True, _short(res)), res


def byte_compile_check(workspace: Path, rel: str) -> EnvCheck:
    """compile() the file in-process: catches syntax errors without writing a .pyc into the user's tree."""
    name = f"byte-compile {rel}"
    path = (workspace / rel) if not Path(rel).is_absolute() else Path(rel)
    try:
        source = path.read_bytes()
    except OSError as exc:
        return _check(name, False, f"cannot read {path}: {exc.strerror or exc}")
    try:
        compile(source, str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:  # IndentationError / TabError are subclasses
        where = f"{exc.filename or rel}:{exc.lineno}" + (f":{exc.offset}" if exc.offset else "")
        return _check(name, False, f"{type(exc).__name__} at {where}: {exc.msg}"
                      + (f" — {exc.text.strip()!r}" if exc.text else ""))
    except (ValueError, UnicodeDecodeError) as exc:  # NUL bytes, bad encoding
        return _check(name, False, f"{type(exc).__name__}: {exc}")
    return _check(name, True, f"{path} compiles")


def _grep_tree(root: Path, needle: bytes) -> Path | None:
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            try:
                if p.stat().st_size > _GREP_MAX_FILE_BYTES:
                    continue
                if needle in p.read_bytes():
                    return p
            except OSError:
                continue
    return None


async def pto_isa_check(env: dict[str, str], timeout_s: float = CHECK_TIMEOUT_S) -> EnvCheck:
    """R3: ``$PTO_TILE_LIB_CODE_PATH/include/pto/`` exists and some file under it mentions ``DivAlgorithm``."""
    name = "PTO-ISA DivAlgorithm"
    root = env.get("PTO_TILE_LIB_CODE_PATH")
    if not root:
        return _check(name, False, "PTO_TILE_LIB_CODE_PATH is not set in the child environment; clone PTO-ISA and "
                      "export PTO_TILE_LIB_CODE_PATH=<clone> before starting the server")
    inc = Path(root) / "include" / "pto"
    if not inc.is_dir():
        return _check(name, False, f"{inc} does not exist; PTO_TILE_LIB_CODE_PATH must point at a PTO-ISA clone")
    with anyio.move_on_after(timeout_s):
        hit = await anyio.to_thread.run_sync(_grep_tree, inc, b"DivAlgorithm", abandon_on_cancel=True)
        if hit is None:
            return _check(name, False, f"no file under {inc} mentions DivAlgorithm: the PTO-ISA clone is too old; "
                          "update it")
        return _check(name, True, f"DivAlgorithm found in {hit}")
    return _check(name, False, f"searching {inc} for DivAlgorithm took more than {timeout_s:.0f} s")


_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]+$")
_NPU_NAME = re.compile(r"^(\d+)\s+\S")
_NO_PROCESS = re.compile(r"No running processes found in NPU\s+(\d+)")


@dataclass
class NpuSmiInfo:
    """What ``npu-smi info`` says about each NPU: health word, chips per NPU, and the processes on it."""

    health: dict[int, str] = field(default_factory=dict)
    chips: dict[int, set[int]] = field(default_factory=dict)
    processes: dict[int, list[str]] = field(default_factory=dict)  # NPU → "pid <pid> (<name>, <mem> MB)"


def parse_npu_smi_info(text: str) -> NpuSmiInfo | None:
    """Read the chip and process tables of ``npu-smi info`` (A2 layout with HBM column, and the older 310P/910
    layouts: both put NPU + Name then Health in a chip block's first row, the chip id and the Bus-Id in its second,
    and "<NPU> <Chip> | <pid> | <name> | <MB>" or "No running processes found in NPU <n>" below the "Process id"
    header). None when no chip block is recognised."""
    info = NpuSmiInfo()
    in_processes = False
    npu: int | None = None
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if "Process id" in line and "Process name" in line:
            in_processes = True
            continue
        if in_processes:
            m = _NO_PROCESS.search(line)
            if m:
                info.processes.setdefault(int(m.group(1)), [])
                continue
            ids = cells[0].split()
            if len(cells) >= 4 and len(ids) >= 2 and ids[0].isdigit() and cells[1].isdigit():
                info.processes.setdefault(int(ids[0]), []).append(
                    f"pid {cells[1]} ({cells[2] or '?'}, {cells[3]} MB)")
            continue
        if len(cells) >= 3 and _BUS_ID.match(cells[1]) and npu is not None:
            chip = cells[0].split()
            if chip and chip[0].isdigit():
                info.chips.setdefault(npu, set()).add(int(chip[0]))
            continue
        m = _NPU_NAME.match(cells[0]) if len(cells) >= 3 else None
        if m and cells[1]:
            npu = int(m.group(1))
            info.health.setdefault(npu, cells[1])
    return info if info.health else None


def _idle_chip_check(dev: str, smi_text: str | None) -> tuple[bool, str]:
    """R3 "TILE_FWK_DEVICE_ID on an idle chip": (ok, note) from the npu-smi tables. The chip is matched by the NPU
    column, which is the device id on single-chip cards (Atlas A2); anything the tables cannot settle is a warning."""
    if smi_text is None:
        return True, "; warning: idle state not verified (npu-smi info did not run)"
    info = parse_npu_smi_info(smi_text)
    if info is None:
        return True, "; warning: idle state not verified (npu-smi info's tables were not recognised)"
    if any(len(c) > 1 for c in info.chips.values()):
        return True, ("; warning: idle state not verified (npu-smi lists several chips per NPU, so the NPU column "
                      "is not the device id)")
    n = int(dev)
    if n not in info.health:
        return True, f"; warning: idle state not verified (npu-smi lists NPUs {sorted(info.health)}, not {n})"
    busy = info.processes.get(n, [])
    if busy:
        return False, (f": chip {n} is busy — npu-smi shows {'; '.join(busy[:3])} on NPU {n}; pick an idle chip "
                       "(start_session device_ids) or stop that process")
    health = info.health[n]
    if health == "OK":
        return True, ", idle, health OK (npu-smi)"
    if health == "Warning":
        return True, f", idle; warning: npu-smi reports health Warning for NPU {n}"
    return False, f": npu-smi reports health {health} for NPU {n}; pick a healthy chip (start_session device_ids)"


async def _device_checks(*, python: str, cwd: Path, env: dict[str, str], device_ids: list[str] | None,
                         timeout_s: float) -> list[EnvCheck]:
    checks: list[EnvCheck] = []
    smi = shutil.which("npu-smi", path=env.get("PATH"))
    smi_text: str | None = None
    if smi is None:
        checks.append(_check("npu-smi info", False, "npu-smi is not on the child's PATH: no Ascend driver here "
                             "(use run_mode 'sim' on a machine without an NPU)"))
    else:
        res = await _run([smi, "info"], cwd=cwd, env=env, timeout_s=timeout_s)
        bad = _failed_probe(res, "npu-smi info")
        checks.append(_check("npu-smi info", bad is None, bad or "npu-smi info works"))
        if bad is None and isinstance(res, RunResult):
            smi_text = res.output
    code = ("import torch, torch_npu; print('count', torch_npu.npu.device_count()); "
            "print('available', torch.npu.is_available())")
    chk, res = await _python_import("torch_npu devices", code, python=python, cwd=cwd, env=env, timeout_s=timeout_s)
    count: int | None = None
    if chk.ok and isinstance(res, RunResult):
        words = res.output.split()
        try:
            count = int(words[words.index("count") + 1])
            available = words[words.index("available") + 1] == "True"
        except (ValueError, IndexError):
            chk = _check(chk.name, False, f"unexpected output: {_short(res)}")
        else:
            if count <= 0 or not available:
                chk = _check(chk.name, False, f"torch_npu.npu.device_count() = {count}, torch.npu.is_available() = "
                             f"{available}: no usable NPU")
            else:
                chk = _check(chk.name, True, f"device_count {count}, torch.npu.is_available() True")
    checks.append(chk)
    dev = env.get("TILE_FWK_DEVICE_ID")
    name = "TILE_FWK_DEVICE_ID"
    if dev is None or not dev.strip().isdigit():
        checks.append(_check(name, False, f"TILE_FWK_DEVICE_ID must be set to a chip number, got {dev!r}; pass "
                             "device_ids when starting the session"))
    elif count is not None and int(dev) >= count:
        checks.append(_check(name, False, f"TILE_FWK_DEVICE_ID={dev} but only {count} device(s) (0..{count - 1})"))
    elif device_ids and dev not in device_ids:
        checks.append(_check(name, False, f"TILE_FWK_DEVICE_ID={dev} is not one of the session's device_ids "
                             f"{device_ids}"))
    else:
        idle, note = _idle_chip_check(dev, smi_text)
        checks.append(_check(name, idle, f"TILE_FWK_DEVICE_ID={dev}"
                             + (f" (of {count} devices)" if count is not None else "") + note))
    checks.append(await pto_isa_check(env, timeout_s))
    return checks


async def _path_python_checks(*, cwd: Path, env: dict[str, str], timeout_s: float) -> list[EnvCheck]:
    py3 = shutil.which("python3", path=env.get("PATH"))
    if py3 is None:
        return [_check("python3 on PATH", False, "no python3 on the child's PATH: pypto runs its swimlane writer "
                       "with it, so bubble_analysis.log / merged_swimlane.json would be missing (A.2b)")]
    code = ("import importlib.util, sys; "
            "print(sys.version.split()[0], importlib.util.find_spec('matplotlib') is not None)")
    res = await _run([py3, "-c", code], cwd=cwd, env=env, timeout_s=timeout_s)
    bad = _failed_probe(res, f"{py3} -c ...")
    if bad:
        return [_check("python3 on PATH", False, f"{py3} does not run: {bad}")]
    assert isinstance(res, RunResult)
    words = res.output.split()
    version = words[0] if words else "?"
    has_mpl = len(words) > 1 and words[1] == "True"
    mpl = (_check("matplotlib absent", True, f"warning: matplotlib is importable by {py3}: every SIM run will also "
                  "draw _simulate.swim.png and take ~15 s instead of ~3 s; uninstall it from that environment "
                  "(A.2b)") if has_mpl else
           _check("matplotlib absent", True, f"matplotlib not importable by {py3}: no PNG drawing, fast SIM runs "
                  "(its ModuleNotFoundError tracebacks are harmless)"))
    return [_check("python3 on PATH", True, f"{py3} (Python {version})"), mpl]


# What the test's files need, asked of the interpreter the runs use, in one child: ``find_spec`` locates a module
# without running it; the options tree needs pypto imported. The answer is the last line (pypto may print before it).
# The same child answers the "import pypto" check first (its line after PYPTO_MARK): importing pypto and torch costs
# ~2.7 CPU s, as much as a SIM run's kernel, and a second child importing them again doubled the checklist's cost.
# argv[2] "0": the answer is remembered (import_memo.py), so only the cheap find_spec part runs. The top-level
# modules the import loaded, and those it loaded from the working folder, let the answer be remembered safely.
PYPTO_MARK = "PYPTO-TUNE-IMPORT-PYPTO "
_NEEDS_PROBE = r"""
import importlib.util, json, os, sys
ask = sys.argv[2] == "1"
if ask:
    try:
        import importlib.metadata as _m, pypto
        print("PYPTO-TUNE-IMPORT-PYPTO pypto", _m.version("pypto"), "from", pypto.__file__, flush=True)
    except BaseException:  # the separate "import pypto" probe then runs and names pypto's own error
        pass
missing = []
for name in json.loads(sys.argv[1]):
    try:
        if importlib.util.find_spec(name) is None:
            missing.append(name)
    except (ImportError, ValueError):
        missing.append(name)
tree = modules = local = None
if ask and "pypto" not in missing:
    try:
        import pypto.config
        tree = sorted({l.split(":", 1)[0].strip() for l in pypto.config.get_options_tree().splitlines() if ":" in l})
    except Exception as exc:
        tree = "%s: %s" % (type(exc).__name__, exc)
    here = os.path.realpath(os.getcwd()) + os.sep
    files = {n: getattr(m, "__file__", None) for n, m in list(sys.modules.items())}
    modules = sorted({n.split(".", 1)[0] for n in files})
    # (torch.ops and torch.classes carry a made-up relative __file__: only a real path can be the workspace's)
    local = sorted(n for n, f in files.items()
                   if isinstance(f, str) and os.path.isabs(f) and os.path.realpath(f).startswith(here))
print(json.dumps({"missing": missing, "options": tree, "modules": modules, "local": local}))
"""


async def needs_checks(*, workspace: Path, files: list[str], python: str, env: dict[str, str],
                      timeout_s: float = CHECK_TIMEOUT_S, pypto_ok: list[EnvCheck] | None = None,
                      memo: ImportMemo | None = None) -> list[EnvCheck]:
    """Two checks of what the test's own files need (``source_needs.py``): every module they import unconditionally
    is importable by ``python`` (a missing one is named with where it is imported and how to install it — before the
    session fingerprints the interpreter, after which an install voids its runs), and every pypto option key they
    set is one the installed pypto knows (an unknown key fails inside the run as ``IndexError: map::at``).

    ``pypto_ok``: when pypto imported in the same child, the passed "import pypto" check is appended to it (what
    the separate probe would have said: the output up to its line). ``memo``: where that import's answer is
    remembered for this interpreter and environment (``import_memo.py``); a remembered one spares the import."""
    imports = source_needs.module_imports(workspace, files)
    imports.pop("pypto", None)  # the "import pypto" check names it, with pypto's own error
    keys = source_needs.option_keys(workspace, files)
    recalled = memo.recall() if memo is not None and pypto_ok is not None else None
    res = await _run([python, "-c", _NEEDS_PROBE, json.dumps(sorted(imports)), "0" if recalled else "1"],
                     cwd=workspace, env=env, timeout_s=timeout_s)
    pypto_line: str | None = None
    if recalled is not None:
        pypto_line = recalled.pypto
        assert pypto_ok is not None
        pypto_ok.append(_check("import pypto", True, f"{recalled.pypto} (remembered from {recalled.at}: the "
                               "interpreter's files and the run environment are as they were then)"))
    elif pypto_ok is not None and isinstance(res, RunResult):
        lines = res.output.splitlines()
        at = next((i for i, ln in enumerate(lines) if ln.startswith(PYPTO_MARK)), None)
        if at is not None:
            upto = [ln.removeprefix(PYPTO_MARK) for ln in lines[:at + 1] if ln.strip()]
            pypto_line = " | ".join(upto[-4:])[-400:]
            pypto_ok.append(_check("import pypto", True, pypto_line))
    bad = _failed_probe(res, "the import probe")
    answer = None
    if not bad:
        assert isinstance(res, RunResult)
        last = [ln for ln in res.output.splitlines() if ln.startswith('{"missing"')]
        answer = json.loads(last[-1]) if last else None
    if answer is not None and recalled is not None:
        answer["options"] = recalled.options
    elif (answer is not None and memo is not None and pypto_line is not None and isinstance(answer["options"], list)
          and isinstance(answer.get("modules"), list) and not answer.get("local")):
        memo.remember(ImportAnswer(pypto=pypto_line, options=answer["options"], modules=answer["modules"],
                                   at=now_iso()))
    if answer is None:
        why = bad or "the import probe printed no answer"
        return [_check("test imports", True, f"warning: {why}; the test's imports were not checked")]
    missing = answer["missing"]
    if missing:
        detail = "; ".join(f"{imports[m]} imports {m}, which {python} cannot import" for m in missing)
        fix = (f"install {'them' if len(missing) > 1 else 'it'} into that interpreter now, before the baseline "
               f"({python} -m pip install <the package that provides {', '.join(missing)}>"
               + ("; pytest comes with bash scripts/setup.sh" if "pytest" in missing else "")
               + "): the session fingerprints the interpreter's files once this checklist passes, and a package "
               "installed later voids its runs")
        checks = [_check("test imports", False, f"{detail}: {fix}")]
    else:
        checks = [_check("test imports", True, f"{len(imports)} module(s) the test's files import are importable"
                         + (f" ({', '.join(sorted(imports)[:8])})" if imports else ""))]
    options = answer["options"]
    if not keys:
        return checks
    if not isinstance(options, list):
        return [*checks, _check("pypto options", True, f"warning: could not list the installed pypto's options "
                                f"({options}); the test's option keys were not checked")]
    known = set(options)
    unknown = [k for k in keys if k.tree_name not in known]
    if not unknown:
        return [*checks, _check("pypto options", True, f"{len(keys)} option key(s) the test sets are known to the "
                                "installed pypto")]
    parts = []
    for k in unknown:
        same_kind = sorted(o.split(".", 1)[1] for o in known if o.startswith(source_needs.OPTION_KINDS[k.kind] + "."))
        parts.append(f"{k.where}: {k.kind} key {k.key!r} is not an option of the installed pypto (its {k.kind}: "
                     f"{', '.join(same_kind) or 'none'})")
    return [*checks, _check("pypto options", False, "; ".join(parts) + " — such a key fails the run as "
                            "`IndexError: map::at` from SetScope; remove it from the test, or install the pypto "
                            "that has it")]


async def check_environment(*, run_mode: str, workspace: Path, operator_files: list[str], env: dict[str, str],
                            python: str = sys.executable, device_ids: list[str] | None = None,
                            timeout_s: float = CHECK_TIMEOUT_S, test_command: list[str] | None = None,
                            memo: ImportMemo | None = None) -> list[EnvCheck]:
    """Run the R3 checklist for ``run_mode`` ('sim' or 'npu') and return one EnvCheck per item, in a fixed order.

    ``env`` is the child environment the test command will get (:func:`build_child_env`); ``python`` the
    interpreter the checks import with; ``operator_files`` are relative to ``workspace``; ``memo``: where the answer
    of ``import pypto`` is remembered for this interpreter and environment (``import_memo.py``). Never raises for a
    failing check — a failed check is data (``ok=False`` with a detail saying what to fix).
    """
    mode = run_mode.lower()
    cwd = workspace if workspace.is_dir() else Path.cwd()
    # The probes are independent subprocesses: run them concurrently (each imports torch or pypto, ~2-3 s), then
    # report in a fixed order so the ledger's list reads the same every time.
    parts: dict[str, list[EnvCheck]] = {}

    async def npu() -> None:
        parts["npu"] = await _device_checks(python=python, cwd=cwd, env=env, device_ids=device_ids,
                                            timeout_s=timeout_s)

    async def pypto() -> None:
        chk, _ = await _python_import("import pypto", _PYPTO_PROBE, python=python, cwd=cwd, env=env,
                                      timeout_s=timeout_s)
        parts["pypto"] = [chk]

    async def path_python() -> None:
        parts["path"] = await _path_python_checks(cwd=cwd, env=env, timeout_s=timeout_s)

    async def needs() -> None:
        # One child imports pypto for both checks; the "import pypto" probe runs on its own only where it did not
        # answer (no test files found, or pypto failed to import: then the probe names pypto's own error).
        files = source_needs.files_of_test(workspace, list(test_command or []), operator_files)
        pypto_ok: list[EnvCheck] = []
        parts["needs"] = await needs_checks(workspace=cwd, files=files, python=python, env=env,
                                            timeout_s=timeout_s, pypto_ok=pypto_ok, memo=memo) if files else []
        if pypto_ok:
            parts["pypto"] = pypto_ok
        else:
            await pypto()

    async with anyio.create_task_group() as tg:
        if mode == "npu":
            tg.start_soon(npu)
        tg.start_soon(path_python)
        tg.start_soon(needs)
    checks: list[EnvCheck] = [*parts.get("npu", []), *parts["pypto"], *parts["path"]]
    if not operator_files:
        checks.append(_check("byte-compile", False, "no operator files were given"))
    for rel in operator_files:
        checks.append(byte_compile_check(workspace, rel))
    return checks + parts["needs"]
