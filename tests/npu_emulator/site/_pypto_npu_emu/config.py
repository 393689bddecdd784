"""The emulated Ascend box's configuration and its small persistent state (test-only, see ../../README.md).

A box is one JSON file (written by ``tests/npu_emulator/box.py``) plus a ``state/`` folder beside it. Every
process of the box finds the same file: ``$PYPTO_NPU_EMU_CONFIG`` first; otherwise ``emulator.json`` in the
parent of the folder holding the first ``npu-smi`` on PATH. The second way matters because the server builds
the test's environment itself and passes only what CANN exports (PATH, PYTHONPATH, ASCEND_*, ...): a box must
still be found when the variable is dropped.

Only the standard library is imported here: ``sitecustomize`` and ``npu-smi`` load this module in every Python
process of the box, including pypto's helper scripts.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_VAR = "PYPTO_NPU_EMU_CONFIG"
CONFIG_NAME = "emulator.json"
HEALTH_STATES = ("OK", "Warning", "Alarm")
HUB_MODES = ("ai-cpu", "drop")
AICPU_TRACE_MODES = ("dump_device_perf", "always", "never")

_TOP_KEYS = {"version", "chips", "chip_name", "hbm_total_mb", "noise_pct", "noise_run_share", "seed", "hub_lane",
             "aicpu_trace", "pipe_usage", "busy_slowdown", "tick_base", "devices", "references", "state_dir",
             "keep_sim_runs", "option_effects", "cache_sim"}
_DEVICE_KEYS = {"health", "busy", "busy_pid", "busy_process", "busy_mem_mb", "fail_first_runs", "hang",
                "wrong_numerics", "hbm_used_mb", "aicore_pct"}


class EmulatorConfigError(RuntimeError):
    """The box's emulator.json is missing or malformed; the message names the file and the key."""


@dataclass(frozen=True)
class DeviceSpec:
    """One chip: what npu-smi shows for it and which fault its runs suffer."""

    index: int
    health: str = "OK"
    busy: bool = False  # another process holds the chip: shown by npu-smi, runs are slowed by busy_slowdown
    busy_pid: int = 4242
    busy_process: str = "python3"
    busy_mem_mb: int = 3000
    fail_first_runs: int = 0  # the first N runs on this chip end in a runtime error
    hang: bool = False  # every run on this chip sleeps until it is killed
    wrong_numerics: bool = False  # outputs are NOT filled from the registered reference
    hbm_used_mb: int = 3400  # idle HBM use of a 910B2 in the sample this follows
    aicore_pct: int = 0


@dataclass(frozen=True)
class EmuConfig:
    path: Path
    chips: int = 8
    chip_name: str = "910B2"
    hbm_total_mb: int = 65536
    noise_pct: float = 2.0
    noise_run_share: float = 0.5
    seed: int = 0
    hub_lane: str = "ai-cpu"
    aicpu_trace: str = "dump_device_perf"
    pipe_usage: bool = True
    busy_slowdown: float = 1.5
    # a known "true change" for noise tests: {runtime option: {value as str: time factor}}, e.g.
    # {"device_sched_mode": {"1": 0.95}} makes a kernel run 5 % faster when its jit sets device_sched_mode 1
    option_effects: dict[str, dict[str, float]] = field(default_factory=dict)
    # reuse the SIM run of identical code (same kernel file, options and inputs) instead of simulating again: an NPU
    # re-runs the same binary, and the noise is drawn afresh for every run anyway; keeps long noise tests affordable
    cache_sim: bool = False
    tick_base: int | None = None
    devices: dict[int, DeviceSpec] = field(default_factory=dict)
    references: dict[str, str] = field(default_factory=dict)
    state_dir: Path | None = None
    keep_sim_runs: bool = False  # tests: the SIM folder moves to <box>/sim-runs/ instead of being deleted

    def device(self, index: int) -> DeviceSpec:
        return self.devices.get(index, DeviceSpec(index=index))

    @property
    def state(self) -> Path:
        return self.state_dir or (self.path.parent / "state")


def find_config_path(environ: dict[str, str] | None = None) -> Path | None:
    """Where this process's box config is, or None when no box is set up (the stand-ins then stay inert)."""
    env = os.environ if environ is None else environ
    explicit = env.get(ENV_VAR)
    if explicit:
        return Path(explicit)
    for folder in env.get("PATH", "").split(os.pathsep):
        if not folder:
            continue
        smi = Path(folder) / "npu-smi"
        if smi.exists():
            candidate = Path(folder).parent / CONFIG_NAME
            return candidate if candidate.is_file() else None
    return None


def _need(cond: bool, path: Path, msg: str) -> None:
    if not cond:
        raise EmulatorConfigError(f"{path}: {msg}")


def _int(value: Any, path: Path, key: str, lo: int = 0) -> int:
    _need(isinstance(value, int) and not isinstance(value, bool) and value >= lo, path,
          f"{key} must be an integer ≥ {lo}, got {value!r}")
    return value


def _num(value: Any, path: Path, key: str, lo: float = 0.0) -> float:
    _need(isinstance(value, (int, float)) and not isinstance(value, bool) and value >= lo, path,
          f"{key} must be a number ≥ {lo}, got {value!r}")
    return float(value)


def _device(path: Path, key: str, raw: Any, chips: int) -> DeviceSpec:
    _need(key.isdigit() and int(key) < chips, path, f"devices key {key!r} must be a chip number 0..{chips - 1}")
    _need(isinstance(raw, dict), path, f"devices[{key}] must be an object")
    unknown = set(raw) - _DEVICE_KEYS
    _need(not unknown, path, f"devices[{key}] has unknown keys {sorted(unknown)}; known: {sorted(_DEVICE_KEYS)}")
    health = raw.get("health", "OK")
    _need(health in HEALTH_STATES, path, f"devices[{key}].health must be one of {HEALTH_STATES}, got {health!r}")
    kw: dict[str, Any] = {"index": int(key), "health": health}
    for flag in ("busy", "hang", "wrong_numerics"):
        if flag in raw:
            _need(isinstance(raw[flag], bool), path, f"devices[{key}].{flag} must be true or false")
            kw[flag] = raw[flag]
    for name in ("busy_pid", "busy_mem_mb", "fail_first_runs", "hbm_used_mb", "aicore_pct"):
        if name in raw:
            kw[name] = _int(raw[name], path, f"devices[{key}].{name}")
    if "busy_process" in raw:
        _need(isinstance(raw["busy_process"], str) and raw["busy_process"], path,
              f"devices[{key}].busy_process must be a non-empty string")
        kw["busy_process"] = raw["busy_process"]
    return DeviceSpec(**kw)


def load_config(path: Path) -> EmuConfig:
    """Read and validate a box config; every problem is an EmulatorConfigError naming the key."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise EmulatorConfigError(f"cannot read the NPU emulator config {path}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise EmulatorConfigError(f"{path} is not valid JSON: {exc}") from exc
    _need(isinstance(raw, dict), path, "the config must be a JSON object")
    unknown = set(raw) - _TOP_KEYS
    _need(not unknown, path, f"unknown keys {sorted(unknown)}; known: {sorted(_TOP_KEYS)}")
    _need(raw.get("version", 1) == 1, path, f"version must be 1, got {raw.get('version')!r}")
    chips = _int(raw.get("chips", 8), path, "chips")
    kw: dict[str, Any] = {"path": Path(path), "chips": chips}
    if "chip_name" in raw:
        _need(isinstance(raw["chip_name"], str) and 0 < len(raw["chip_name"]) <= 20, path,
              "chip_name must be a string of 1..20 characters")
        kw["chip_name"] = raw["chip_name"]
    if "hbm_total_mb" in raw:
        kw["hbm_total_mb"] = _int(raw["hbm_total_mb"], path, "hbm_total_mb", 1)
    if "noise_pct" in raw:
        kw["noise_pct"] = _num(raw["noise_pct"], path, "noise_pct")
        _need(kw["noise_pct"] <= 50, path, "noise_pct must be ≤ 50")
    if "noise_run_share" in raw:
        kw["noise_run_share"] = _num(raw["noise_run_share"], path, "noise_run_share")
        _need(kw["noise_run_share"] <= 1, path, "noise_run_share must be within 0..1")
    if "seed" in raw:
        kw["seed"] = _int(raw["seed"], path, "seed")
    if "cache_sim" in raw:
        _need(isinstance(raw["cache_sim"], bool), path, "cache_sim must be true or false")
        kw["cache_sim"] = raw["cache_sim"]
    if "option_effects" in raw:
        eff = raw["option_effects"]
        _need(isinstance(eff, dict) and all(isinstance(v, dict) for v in eff.values()), path,
              "option_effects must be {option: {value: factor}}")
        kw["option_effects"] = {str(k): {str(val): _num(f, path, f"option_effects.{k}.{val}", 0.01)
                                         for val, f in v.items()} for k, v in eff.items()}
    if "busy_slowdown" in raw:
        kw["busy_slowdown"] = _num(raw["busy_slowdown"], path, "busy_slowdown", 1.0)
    if "tick_base" in raw and raw["tick_base"] is not None:
        kw["tick_base"] = _int(raw["tick_base"], path, "tick_base")
    for key, allowed in (("hub_lane", HUB_MODES), ("aicpu_trace", AICPU_TRACE_MODES)):
        if key in raw:
            _need(raw[key] in allowed, path, f"{key} must be one of {allowed}, got {raw[key]!r}")
            kw[key] = raw[key]
    for flag in ("pipe_usage", "keep_sim_runs"):
        if flag in raw:
            _need(isinstance(raw[flag], bool), path, f"{flag} must be true or false")
            kw[flag] = raw[flag]
    devices = raw.get("devices", {})
    _need(isinstance(devices, dict), path, "devices must be an object keyed by chip number")
    kw["devices"] = {int(k): _device(path, k, v, chips) for k, v in devices.items()}
    refs = raw.get("references", {})
    _need(isinstance(refs, dict) and all(isinstance(k, str) and isinstance(v, str) and ":" in v
                                         for k, v in refs.items()), path,
          "references must map a kernel name to '<file.py>:<function>'")
    kw["references"] = dict(refs)
    if raw.get("state_dir"):
        kw["state_dir"] = Path(raw["state_dir"])
    return EmuConfig(**kw)


def current_config() -> EmuConfig | None:
    """The box of this process (None = no box); a broken config raises EmulatorConfigError."""
    path = find_config_path()
    return load_config(path) if path is not None else None


# ------------------------------------------------------------------------------------------------ state
@contextmanager
def _locked_state(cfg: EmuConfig) -> Iterator[dict]:
    """Read-modify-write of state/counters.json under an exclusive lock (runs of a box may be concurrent)."""
    folder = cfg.state
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        counters_path = folder / "counters.json"
        try:
            state = json.loads(counters_path.read_text()) if counters_path.exists() else {}
        except json.JSONDecodeError:
            state = {}
        yield state
        tmp = counters_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, sort_keys=True))
        os.replace(tmp, counters_path)


def next_run_index(cfg: EmuConfig, device: int) -> int:
    """0 for the first run on ``device`` in this box, then 1, 2, ... (shared by every process of the box)."""
    with _locked_state(cfg) as state:
        runs = state.setdefault("runs_per_device", {})
        index = int(runs.get(str(device), 0))
        runs[str(device)] = index + 1
    return index


def log_run(cfg: EmuConfig, record: dict) -> None:
    """Append one JSON line to state/runs.jsonl: what each emulated run did (tests read it back)."""
    folder = cfg.state
    folder.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, sort_keys=True) + "\n"
    with open(folder / "runs.jsonl", "a", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(line)


def device_from_env(environ: dict[str, str] | None = None) -> int:
    """The chip a kernel runs on: TILE_FWK_DEVICE_ID (pypto's runtime reads it), default 0."""
    env = os.environ if environ is None else environ
    raw = env.get("TILE_FWK_DEVICE_ID", "0").strip()
    if not raw.isdigit():
        raise RuntimeError(f"TILE_FWK_DEVICE_ID must be a chip number, got {raw!r}")
    return int(raw)
