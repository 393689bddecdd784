"""What a campaign tunes: a manifest (TOML, or YAML when PyYAML is installed) or a folder of operators.

A manifest names each operator's workspace, operator files, test command, run mode, goal and budget::

    name = "fixtures"            # default: the file's stem
    batch = 2                    # candidates per run_candidates batch (fixed, so every executor runs the same trials)
    concurrency = 4              # sessions at once (default: twice the executor's slots)
    trials = 60                  # overall trial budget (optional)
    wall_h = 4.0                 # overall wall-time budget in hours (optional)

    [defaults]                   # every operator inherits these keys
    run_mode = "sim"
    goal_speedup = 4.0           # or goal_target_us; one of them is required (R1: never guessed)
    trials = 8                   # trial budget of one operator
    wall_h = 1.0                 # wall-time budget of one operator (its session's time limit, R14b)

    [[operator]]
    name = "softmax"
    workspace = "work/softmax"   # relative to the manifest's folder; the session's ledger goes in it
    source = "../fixtures/operators/softmax"   # optional: copied into the workspace while it does not exist
    operator_files = ["softmax.py"]
    test_command = ["python", "softmax.py", "--run-mode", "sim"]

A folder of operators: every sub-folder holding a ``@pypto.frontend.jit`` kernel is one operator; its operator files
are the files with a jit, its test is the one script with a ``__main__`` block (a ``test_*.py`` first), run with the
campaign's interpreter and the script's own run-mode flag (``--run-mode`` or ``--run_mode``). Anything that cannot be
told for sure is an error naming the folder, with a manifest as the way out.

Every error is an ``InputError`` naming the key and the operator, with the fix in its hint.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from pypto_tune.tools.errors import InputError

DEFAULT_BATCH = 2
MAX_BATCH = 16  # run_candidates' own limit (tools/operations/search.py)
#: keys an operator may set, directly or through [defaults]
OPERATOR_KEYS = {"name", "workspace", "source", "operator_files", "test_command", "run_mode", "goal_speedup",
                 "goal_target_us", "trials", "wall_h", "timeout_s", "repeats", "device_ids", "pass_pattern",
                 "fail_pattern"}
CAMPAIGN_KEYS = {"name", "batch", "concurrency", "trials", "wall_h", "defaults", "operator"}
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class OperatorSpec(BaseModel):
    """One operator of a campaign, every path absolute."""

    name: str
    workspace: Path = Field(description="the folder the test command runs in; the session's ledger goes in it")
    source: Path | None = Field(None, description="copied into the workspace while the workspace does not exist")
    operator_files: list[str]
    test_command: list[str]
    run_mode: Literal["sim", "npu"] = "sim"
    goal_speedup: float | None = None
    goal_target_us: float | None = None
    trials: int = Field(8, ge=0, description="trial budget of this operator (candidates run)")
    wall_h: float = Field(1.0, gt=0, le=168, description="wall-time budget: the session's time limit (R14b)")
    timeout_s: float = Field(300.0, ge=1, le=86400)
    repeats: int | None = None
    device_ids: list[str] | None = None
    pass_pattern: str | None = None
    fail_pattern: str | None = None

    @property
    def goal(self) -> str:
        return f"{self.goal_speedup:g}x" if self.goal_speedup is not None else f"≤ {self.goal_target_us:g} µs"


class CampaignSpec(BaseModel):
    """A whole campaign, resolved (defaults applied, paths absolute)."""

    name: str
    origin: str = Field(description="the manifest file or operators folder it was read from")
    home: str = Field("", description="where the campaign's folder goes by default: the manifest's folder, or the "
                      "folder the operators are copied to")
    batch: int = Field(DEFAULT_BATCH, ge=1, le=MAX_BATCH)
    concurrency: int | None = Field(None, ge=1, le=256)
    trials: int | None = Field(None, ge=0, description="overall trial budget")
    wall_h: float | None = Field(None, gt=0, description="overall wall-time budget in hours")
    operators: list[OperatorSpec]

    def digest(self) -> str:
        """What a resumed campaign must still be: the operators and their settings (not the overall budgets, which
        may be raised to continue)."""
        body = json.dumps([o.model_dump(mode="json") for o in self.operators] + [self.batch], sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def operator(self, name: str) -> OperatorSpec:
        for o in self.operators:
            if o.name == name:
                return o
        raise InputError(f"campaign {self.name} has no operator {name!r}",
                         hint="operators: " + ", ".join(o.name for o in self.operators))


# ---------------------------------------------------------------------------------------------- manifest files


def _read_table(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read the manifest {path}: {exc}", hint="pass an existing .toml or .yaml file, "
                         "or a folder of operators") from None
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise InputError(f"{path} is YAML, and PyYAML is not installed", hint="pip install pyyaml, or write the "
                             "manifest in TOML (same keys)") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InputError(f"{path} is not valid YAML: {exc}", hint="fix the line it names") from None
    else:
        import tomllib

        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"{path} is not valid TOML: {exc}", hint="fix the line it names (or name the file "
                             ".yaml if it is YAML)") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: the manifest must be a table of keys, not {type(data).__name__}",
                         hint="see `pypto-tune campaign --help` for the keys")
    return data


def _operator(raw: dict[str, Any], defaults: dict[str, Any], base: Path, index: int, where: Path) -> OperatorSpec:
    label = f"{where}: operator #{index + 1}" + (f" ({raw['name']})" if isinstance(raw.get("name"), str) else "")
    unknown = sorted(set(raw) - OPERATOR_KEYS)
    if unknown:
        raise InputError(f"{label}: unknown key(s) {', '.join(unknown)}", hint="operator keys: "
                         + ", ".join(sorted(OPERATOR_KEYS)))
    merged = {**defaults, **raw}
    for key in ("workspace", "operator_files", "test_command"):
        if key not in merged:
            raise InputError(f"{label}: '{key}' is missing", hint="each [[operator]] names its workspace, "
                             "operator_files and test_command")
    if ("goal_speedup" in merged) == ("goal_target_us" in merged):
        raise InputError(f"{label}: exactly one of goal_speedup or goal_target_us is required (R1: the goal is the "
                         "user's, never guessed)", hint="set it per operator or under [defaults]")
    ws = Path(str(merged["workspace"])).expanduser()
    merged["workspace"] = (ws if ws.is_absolute() else base / ws).resolve()
    if merged.get("source") is not None:
        src = Path(str(merged["source"])).expanduser()
        merged["source"] = (src if src.is_absolute() else base / src).resolve()
        if not merged["source"].is_dir():
            raise InputError(f"{label}: source {merged['source']} is not a folder", hint="source is the operator "
                             "folder copied into the workspace on the first start")
    cmd = merged["test_command"]
    if isinstance(cmd, str):
        import shlex

        cmd = shlex.split(cmd)
    merged["test_command"] = cmd
    merged.setdefault("name", merged["workspace"].name)
    if isinstance(merged.get("operator_files"), str):
        merged["operator_files"] = [merged["operator_files"]]
    if merged.get("device_ids") is not None:
        merged["device_ids"] = [str(d) for d in merged["device_ids"]]
    try:
        op = OperatorSpec.model_validate(merged)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(x) for x in first["loc"])
        raise InputError(f"{label}: {key}: {first['msg']}", hint="see the manifest keys in "
                         "`pypto-tune campaign --help`") from None
    if not _NAME_RE.match(op.name):
        raise InputError(f"{label}: name {op.name!r} must be 1–64 letters, digits, '.', '_' or '-'",
                         hint="it names the operator on the board and in the report")
    if not op.test_command or not op.operator_files:
        raise InputError(f"{label}: test_command and operator_files must not be empty", hint="name the test's argv "
                         "and the files the session may change")
    return op


def load_manifest(path: Path, **overrides: Any) -> CampaignSpec:
    """A campaign from a TOML or YAML manifest; ``overrides`` replace top-level keys (CLI flags)."""
    path = path.resolve()
    data = _read_table(path)
    unknown = sorted(set(data) - CAMPAIGN_KEYS)
    if unknown:
        raise InputError(f"{path}: unknown top-level key(s) {', '.join(unknown)}",
                         hint="top-level keys: " + ", ".join(sorted(CAMPAIGN_KEYS)) + " (operators go in "
                         "[[operator]] tables)")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict) or set(defaults) - (OPERATOR_KEYS - {"name", "workspace", "source"}):
        raise InputError(f"{path}: [defaults] may set only " + ", ".join(sorted(OPERATOR_KEYS - {"name", "workspace",
                                                                                                 "source"})),
                         hint="per-operator paths go in each [[operator]]")
    raws = data.get("operator") or []
    if not isinstance(raws, list) or not raws:
        raise InputError(f"{path}: no [[operator]] entries", hint="add one [[operator]] table per operator, or "
                         "pass a folder of operators instead of a manifest")
    ops = [_operator(r, defaults, path.parent, i, path) for i, r in enumerate(raws)]
    top = {k: v for k, v in data.items() if k in ("batch", "concurrency", "trials", "wall_h")}
    top.update({k: v for k, v in overrides.items() if v is not None})
    return _campaign(data.get("name") or path.stem, str(path), top, ops, home=path.parent)


def _campaign(name: str, origin: str, top: dict[str, Any], ops: list[OperatorSpec], *, home: Path) -> CampaignSpec:
    names = [o.name for o in ops]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InputError(f"{origin}: operator name(s) used twice: {', '.join(dup)}", hint="give each operator its "
                         "own name")
    spaces = [str(o.workspace) for o in ops]
    shared = sorted({s for s in spaces if spaces.count(s) > 1})
    if shared:
        raise InputError(f"{origin}: workspace(s) shared by several operators: {', '.join(shared)}",
                         hint="one workspace holds one session at a time: give each operator its own folder")
    try:
        return CampaignSpec(name=str(name), origin=origin, home=str(home), operators=ops, **top)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputError(f"{origin}: {'.'.join(str(x) for x in first['loc'])}: {first['msg']}",
                         hint="batch 1–16, concurrency ≥ 1, trials ≥ 0, wall_h > 0") from None


# ---------------------------------------------------------------------------------------------- operator folders


def _is_operator_file(text: str) -> bool:
    return "frontend.jit" in text


def _test_script(folder: Path, texts: dict[str, str]) -> str:
    mains = sorted(name for name, text in texts.items() if re.search(r"^if __name__ == ['\"]__main__['\"]", text,
                                                                        re.MULTILINE))
    tests = [m for m in mains if m.startswith("test_")]
    chosen = tests if tests else mains
    if len(chosen) != 1:
        found = ", ".join(mains) or "none"
        raise InputError(f"{folder}: cannot tell the test script (scripts with a __main__ block: {found})",
                         hint="name it in a manifest: [[operator]] test_command = [...]")
    return chosen[0]


def scan_folder(folder: Path, *, copy_to: Path | None = None, run_mode: str = "sim",
                python: str = sys.executable, **settings: Any) -> CampaignSpec:
    """One operator per sub-folder holding a jit kernel (see the module docstring). ``copy_to``: each operator is
    tuned in ``copy_to/<name>`` (copied on the first start), never in ``folder`` itself. ``settings``: operator
    keys for every operator (goal_speedup, trials, wall_h, ...) and the campaign keys batch, concurrency, trials_total
    and wall_h_total."""
    folder = folder.resolve()
    if not folder.is_dir():
        raise InputError(f"{folder} is not a folder", hint="pass a manifest (.toml/.yaml) or a folder of operators")
    top = {"batch": settings.pop("batch", None), "concurrency": settings.pop("concurrency", None),
           "trials": settings.pop("trials_total", None), "wall_h": settings.pop("wall_h_total", None)}
    top = {k: v for k, v in top.items() if v is not None}
    ops: list[OperatorSpec] = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        texts = {}
        for f in sorted(sub.glob("*.py")):
            try:
                texts[f.name] = f.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
        op_files = [n for n, t in texts.items() if _is_operator_file(t)]
        if not op_files:
            continue
        script = _test_script(sub, texts)
        text = texts[script]
        flag = "--run_mode" if "--run_mode" in text else "--run-mode" if "--run-mode" in text else None
        cmd = [python, script] + ([flag, run_mode] if flag else [])
        raw = {"name": sub.name, "workspace": str((copy_to / sub.name) if copy_to else sub),
               "source": str(sub) if copy_to else None, "operator_files": op_files, "test_command": cmd,
               "run_mode": run_mode, **{k: v for k, v in settings.items() if v is not None}}
        ops.append(_operator(raw, {}, folder, len(ops), folder))
    if not ops:
        raise InputError(f"{folder}: no sub-folder holds a @pypto.frontend.jit kernel",
                         hint="pass the folder whose sub-folders are the operators, or a manifest")
    return _campaign(settings.get("name") or folder.name, str(folder), top, ops, home=copy_to or folder)


def load(target: Path, **options: Any) -> CampaignSpec:
    """A manifest file or a folder of operators (``options`` as the CLI passes them)."""
    if target.is_dir():
        return scan_folder(target, **options)
    manifest_overrides = {"batch": options.get("batch"), "concurrency": options.get("concurrency"),
                          "trials": options.get("trials_total"), "wall_h": options.get("wall_h_total")}
    return load_manifest(target, **manifest_overrides)
