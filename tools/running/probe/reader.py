"""The server side of the probe: the run's environment that installs it, and the record it left.

Delivery: the hook folder (:data:`HOOK_DIR`, part of the installed pypto-tune, never the workspace) goes first on
``PYTHONPATH`` and ``$PYPTO_TUNE_PROBE_DIR`` (:data:`DIR_ENV`) names a folder the server chose; every Python process
of the run that imports pypto writes ``probe-<pid>.json`` there. A session's runs get both through the run sandbox's
hooks (``RunSpec.pythonpath_first`` / ``capture_env``, set in ``operations/runs.py``: the folder is the run's capture
folder and its files come back as ``IsolatedRun.captured``); :func:`probe_env` builds the same environment for a
command run directly (tests, benchmarks). Reading (:func:`parse_records` on the captured bytes, :func:`read_records`
on a folder): the files are merged into one :class:`ProbeRecord`, paths inside the run's copy of the workspace made
workspace-relative. A run that left no file, or only unreadable ones, is *not reported* — never guessed.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pypto_tune.tools.running.sandbox import run_env

from .models import Frame, MatmulOperands, ProbeCall, ProbeKernel, ProbeRecord, UnrollVariant

HOOK_DIR = Path(__file__).resolve().parent / "hook"
DIR_ENV = "PYPTO_TUNE_PROBE_DIR"
MAX_RECORD_BYTES = 32 * 1024 * 1024  # a record larger than this is not the probe's (it caps its own sites)


def probe_env(env: dict[str, str], record_dir: str | Path, hook_dir: str | Path = HOOK_DIR) -> dict[str, str]:
    """``env`` plus what installs the probe, built as the sandbox builds a probed run's (``sandbox.run_env``): the
    hook folder first on PYTHONPATH, the record folder named (and TMPDIR dropped, as in a run)."""
    return run_env(env, pythonpath_first=(str(hook_dir),), capture_env=DIR_ENV, capture_path=str(record_dir))


def _normal(path: str) -> str:
    """A path as one spelling: the test command may name the workspace ``/./ws``, ``//ws`` or through ``..`` (the
    sandbox mounts the copy at every spelling alike), and Python keeps the spelling it was given in file names."""
    if not path.startswith("/"):
        return path  # "<string>", "<frozen …>": not a file
    norm = os.path.normpath(path)
    return "/" + norm.lstrip("/")  # normpath keeps a leading "//"


def _extent(raw: Any) -> dict[str, list[int | None]] | None:
    """A tile call's operation extent as the hook wrote it (rank -> per-dimension maximum), or None where it is
    missing or not in that form (the record comes from the run: nothing in it is trusted)."""
    if not isinstance(raw, dict) or not raw:
        return None
    out: dict[str, list[int | None]] = {}
    for rank, dims in raw.items():
        if not (isinstance(rank, str) and rank.isdigit() and isinstance(dims, list) and len(dims) == int(rank)
                and all(d is None or (type(d) is int and d > 0) for d in dims)):
            return None
        out[rank] = dims
    return out


def _operands(raw: Any) -> MatmulOperands | None:
    """A cube tile call's matmul operands as the hook wrote them, or None where they are not in that form."""
    if not isinstance(raw, dict):
        return None
    shapes = [raw.get("a"), raw.get("b")]
    if not all(isinstance(d, list) and 2 <= len(d) <= 8 and all(x is None or (type(x) is int and x > 0) for x in d)
               for d in shapes) or not all(type(raw.get(t, False)) is bool for t in ("a_trans", "b_trans")):
        return None
    return MatmulOperands(a=shapes[0], b=shapes[1], a_trans=raw.get("a_trans", False),
                          b_trans=raw.get("b_trans", False))


def _relative(path: str, roots: list[str]) -> tuple[str, bool]:
    path = _normal(path)
    for root in roots:
        root = _normal(root).rstrip("/")
        if root and (path == root or path.startswith(root + "/")):
            return path[len(root) + 1:], True
    return path, False


def _frame(raw: list[Any], roots: list[str]) -> Frame:
    file, inside = _relative(str(raw[0]), roots)
    return Frame(file=file, line=int(raw[1]), function=str(raw[2]), jit_body=bool(raw[3]), in_workspace=inside)


def read_records(record_dir: str | Path, roots: list[str]) -> ProbeRecord:
    """Merge the probe files of one run found in ``record_dir``. ``roots``: the paths the run's copy of the
    workspace had (outside and, in a sandbox, inside); files under them become workspace-relative."""
    folder = Path(record_dir)
    named: dict[str, bytes] = {}
    unreadable: list[str] = []
    for f in sorted(folder.glob("probe-*.json")) if folder.is_dir() else []:
        try:
            if f.stat().st_size > MAX_RECORD_BYTES:
                unreadable.append(f"{f.name}: larger than {MAX_RECORD_BYTES} bytes")
                continue
            named[f.name] = f.read_bytes()
        except OSError as exc:
            unreadable.append(f"{f.name}: {type(exc).__name__}")
    return parse_records(named, roots, unreadable)


def parse_records(named: dict[str, bytes], roots: list[str], unreadable: list[str] | None = None) -> ProbeRecord:
    """Merge probe files given as name → bytes (what a sandbox hands back from the run's capture folder)."""
    files = {n: b for n, b in sorted(named.items()) if n.startswith("probe-") and n.endswith(".json")}
    bad = list(unreadable or [])
    if not files and not bad:
        return ProbeRecord(status="no-report", reason="the run left no probe record (the test's Python did not "
                           "start through the hook, did not import pypto, or could not write)")
    roots = sorted({str(r) for r in roots if r}, key=len, reverse=True)
    raws: list[dict[str, Any]] = []
    for name, data in files.items():
        if len(data) > MAX_RECORD_BYTES:
            bad.append(f"{name}: larger than {MAX_RECORD_BYTES} bytes")
            continue
        try:
            raws.append(json.loads(data.decode("utf-8")))
        except (UnicodeDecodeError, ValueError) as exc:
            bad.append(f"{name}: {type(exc).__name__}")
    if not raws:
        return ProbeRecord(status="unreadable", reason="; ".join(bad[:3]))
    try:
        return _merge(raws, roots, bad)
    except (ValidationError, KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        return ProbeRecord(status="unreadable", reason=f"the probe record does not have the expected form: "
                           f"{type(exc).__name__}: {str(exc)[:200]}")


def _merge(raws: list[dict[str, Any]], roots: list[str], bad: list[str]) -> ProbeRecord:
    kernels: list[ProbeKernel] = []
    calls: list[ProbeCall] = []
    traced: dict[str, set[int]] = {}
    modules: set[str] = set()
    sys_path: list[str] = []
    faults = list(bad)
    main = max(raws, key=lambda r: len(r.get("kernels") or []))
    for raw in raws:
        keys: dict[str, str] = {}  # the hook's key names the absolute file; ours the workspace-relative one
        for k in raw.get("kernels") or []:
            file, inside = _relative(str(k["file"]), roots)
            key = keys[str(k["key"])] = f"{file}:{int(k['line'])}:{k['qualname']}"
            kernels.append(ProbeKernel(
                key=key, name=str(k["name"]), qualname=str(k["qualname"]), file=file, line=int(k["line"]),
                in_workspace=inside, calls=int(k["calls"]), compiled=k.get("compiled"), ran=bool(k.get("ran")),
                error=k.get("error"), inputs=list(k.get("inputs") or []), options=dict(k.get("options") or {}),
                called_from=[[_frame(fr, roots) for fr in chain] for chain in k.get("called_from") or []]))
        for c in raw.get("calls") or []:
            file, inside = _relative(str(c["file"]), roots)
            calls.append(ProbeCall(
                api=str(c["api"]), file=file, line=int(c["line"]), function=str(c["function"]),
                jit_body=bool(c.get("jit_body")), in_workspace=inside,
                kernel=keys.get(str(c["kernel"]), str(c["kernel"])) if c.get("kernel") else None,
                origin=c.get("origin", "direct"), args=list(c.get("args") or []), kwargs=dict(c.get("kwargs") or {}),
                result_shape=c.get("result_shape"), count=int(c.get("count", 1)),
                ops=c["ops"] if type(c.get("ops")) is int else None, extent=_extent(c.get("extent")),
                operands=_operands(c.get("operands")),
                stack=[_frame(fr, roots) for fr in c.get("stack") or []],
                unroll=[UnrollVariant(file=_relative(str(u[0]), roots)[0], line=int(u[1]),
                                      factor=u[2] if isinstance(u[2], int) else None)
                        for u in c.get("unroll") or [] if isinstance(u, list) and len(u) == 3]))
        for file, lines in (raw.get("traced") or {}).items():
            rel, _ = _relative(str(file), roots)
            traced.setdefault(rel, set()).update(int(x) for x in lines)
        modules.update(str(m) for m in raw.get("modules") or [])
        faults.extend(str(f) for f in raw.get("faults") or [])
    _variant_trips(calls)
    for p in main.get("sys_path") or []:
        if p not in sys_path:
            sys_path.append(str(p))
    return ProbeRecord(
        status="reported", pypto_version=main.get("pypto_version"), python=str(main.get("python", "")),
        argv=[str(a) for a in main.get("argv") or []], processes=len(raws), sys_path=sys_path,
        modules=sorted(modules), kernels=kernels, calls=calls,
        self_s=round(sum(float(r.get("self_s") or 0.0) for r in raws), 6),
        traced={f: sorted(v) for f, v in sorted(traced.items())}, faults=faults)


_UNROLL_NAME = re.compile(r"_LoopUnroll(\d+)$")


def _variant_trips(calls: list[ProbeCall]) -> None:
    """Each loop_unroll variant's trip count at the test's shapes. pypto 0.2.0's ``loop_unroll`` opens one ``loop``
    per factor p (named ``<name>_LoopUnroll<p>``, bounds [start', stop − left, step · p]); the probe records it as a
    call pypto made at the same line. Concrete bounds give the trip count (0: the variant is traced and compiled but
    never executed for this shape); symbolic ones leave it unknown."""
    trips: dict[tuple[str, int, str | None, int], int] = {}
    for c in calls:
        m = _UNROLL_NAME.search(str(c.kwargs.get("name", ""))) if c.api == "loop" and c.origin == "pypto" else None
        a = c.args
        if m is None or len(a) != 3 or not all(isinstance(x, int) and not isinstance(x, bool) for x in a) or a[2] <= 0:
            continue
        trips[(c.file, c.line, c.kernel, int(m.group(1)))] = max(0, -(-(a[1] - a[0]) // a[2]))
    for c in calls:
        for u in c.unroll:
            if u.factor is not None:
                u.iterations = trips.get((u.file, u.line, c.kernel, u.factor))
