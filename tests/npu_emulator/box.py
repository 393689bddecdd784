"""Set up an emulated Ascend box for a test: ``env = emulated_box(tmp_path, chips=8, faults={...})``.

The returned dict is a complete environment for a child process (or for starting the server): PATH with the
box's ``npu-smi`` first, PYTHONPATH with the ``torch_npu`` stand-in and the pypto hook, PTO_TILE_LIB_CODE_PATH
at a PTO-ISA tree that mentions DivAlgorithm, TILE_FWK_DEVICE_ID, and PYPTO_NPU_EMU_CONFIG at the box's
``emulator.json``. The box lives in ``tmp_path/npu-box/``; ``box_runs(env)`` reads back what each emulated run
did. See README.md here for what is emulated and what is not.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
SITE = HERE / "site"
SMI = HERE / "bin" / "npu-smi"
PTO_ISA = HERE / "pto_isa"
REFERENCES = HERE / "references.py"
#: References for the three fixture operators (kernel name → "file:function"), see references.py.
FIXTURE_REFERENCES = {"softmax_kernel": f"{REFERENCES}:softmax", "rmsnorm_kernel": f"{REFERENCES}:rmsnorm",
                      "matmul_kernel": f"{REFERENCES}:matmul"}
CONFIG_ENV = "PYPTO_NPU_EMU_CONFIG"


def emulated_box(tmp_path: Path, *, chips: int = 8, faults: dict[int, dict[str, Any]] | None = None,
                 noise_pct: float = 2.0, seed: int = 0, references: dict[str, str] | None = None,
                 device_id: int | None = 0, npu_smi: bool = True, torch_npu: bool = True,
                 pto_isa: str | None = "ok", dump_device_perf: bool = True, config: dict[str, Any] | None = None,
                 base_env: dict[str, str] | None = None) -> dict[str, str]:
    """Create the box and return the environment of a process running on it.

    ``faults`` maps a chip number to DeviceSpec fields (``health`` OK/Warning/Alarm, ``busy``, ``fail_first_runs``,
    ``hang``, ``wrong_numerics``, ...). ``noise_pct`` is σ of every task's duration in % (0 = SIM times exactly,
    up to the 0.02 µs quantum), ``seed`` makes the noise reproducible. ``references`` registers output-filling
    references (e.g. ``FIXTURE_REFERENCES``); without one a kernel's outputs stay unwritten.

    To remove one part of the box (the R3 failure tests): ``npu_smi=False`` (no npu-smi on PATH),
    ``torch_npu=False`` (stand-ins not on PYTHONPATH, so neither torch_npu nor the pypto hook), ``pto_isa``
    ``"old"`` (a tree without DivAlgorithm) / ``"missing"`` (path does not exist) / ``None`` (variable unset),
    ``device_id=None`` (TILE_FWK_DEVICE_ID unset), ``chips=0``. ``config`` adds raw emulator.json keys.
    """
    box = Path(tmp_path) / "npu-box"
    (box / "bin").mkdir(parents=True, exist_ok=True)
    cfg: dict[str, Any] = {"version": 1, "chips": chips, "noise_pct": noise_pct, "seed": seed,
                           "devices": {str(k): v for k, v in (faults or {}).items()},
                           "references": dict(references or {}), "state_dir": str(box / "state")}
    cfg.update(config or {})
    (box / "emulator.json").write_text(json.dumps(cfg, indent=2))
    link = box / "bin" / "npu-smi"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(SMI)

    env = dict(os.environ if base_env is None else base_env)
    # pypto 0.2.0 loads the CANN runtime instead of its CPU stub when ASCEND_HOME_PATH is set (and then fails to
    # import here), so the box never sets it; see README "What is not emulated".
    env.pop("ASCEND_HOME_PATH", None)
    for key in (CONFIG_ENV, "PTO_TILE_LIB_CODE_PATH", "TILE_FWK_DEVICE_ID", "DUMP_DEVICE_PERF"):
        env.pop(key, None)
    rest = [p for p in env.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(os.pathsep) if p]
    first = [str(box / "bin")] if npu_smi else []
    env["PATH"] = os.pathsep.join([*first, os.path.dirname(sys.executable), *rest])
    if torch_npu:
        env["PYTHONPATH"] = os.pathsep.join([str(SITE), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                           if p and p != str(SITE)]])
    env[CONFIG_ENV] = str(box / "emulator.json")
    if pto_isa == "ok":
        env["PTO_TILE_LIB_CODE_PATH"] = str(PTO_ISA)
    elif pto_isa == "old":
        old = box / "pto-isa-old" / "include" / "pto" / "common"
        old.mkdir(parents=True, exist_ok=True)
        (old / "math.hpp").write_text("// a PTO-ISA clone from before the division-algorithm selection\n")
        env["PTO_TILE_LIB_CODE_PATH"] = str(box / "pto-isa-old")
    elif pto_isa == "missing":
        env["PTO_TILE_LIB_CODE_PATH"] = str(box / "no-such-pto-isa")
    elif pto_isa is not None:
        raise ValueError(f"pto_isa must be 'ok', 'old', 'missing' or None, got {pto_isa!r}")
    if device_id is not None:
        env["TILE_FWK_DEVICE_ID"] = str(device_id)
    if dump_device_perf:
        env["DUMP_DEVICE_PERF"] = "true"
    # The box is the emulated device: its configuration and state are read and written by every run, like a real
    # NPU's device nodes, so a server on this box declares it to the run sandbox as a device path (read-write, not
    # fingerprinted; README "Declared roots"). Its bin/ (npu-smi) and the stand-ins on PYTHONPATH are found as the
    # closure's PATH and sys.path roots.
    (box / "state").mkdir(exist_ok=True)
    env["PYPTO_TUNE_SANDBOX_DEVICES"] = str(box)
    # The references that fill the outputs stand for the device's arithmetic: read-only roots of the box.
    refs = sorted({str(Path(spec.rsplit(":", 1)[0]).parent) for spec in (references or {}).values()})
    if refs:
        env["PYPTO_TUNE_SANDBOX_ROOTS"] = os.pathsep.join(refs)
    return env


def box_dir(env: dict[str, str]) -> Path:
    return Path(env[CONFIG_ENV]).parent


def box_runs(env: dict[str, str]) -> list[dict]:
    """Every emulated kernel launch of this box so far (state/runs.jsonl), oldest first."""
    path = box_dir(env) / "state" / "runs.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def set_faults(env: dict[str, str], faults: dict[int, dict[str, Any]]) -> None:
    """Change the chips' faults of a running box (the next process sees them)."""
    path = Path(env[CONFIG_ENV])
    cfg = json.loads(path.read_text())
    cfg["devices"] = {str(k): v for k, v in faults.items()}
    path.write_text(json.dumps(cfg, indent=2))


@pytest.fixture
def npu_box(tmp_path: Path):
    """Factory fixture: ``env = npu_box(chips=4, faults={1: {"busy": True}})`` (arguments of emulated_box)."""

    def make(**kwargs: Any) -> dict[str, str]:
        return emulated_box(tmp_path, **kwargs)

    return make


def load_convert():
    """The SIM → NPU folder converter, loaded by path so the test process never puts the stand-ins (torch_npu,
    sitecustomize) on its own sys.path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_npu_emu_convert_under_test",
                                                  SITE / "_pypto_npu_emu" / "convert.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def copy_operator(operator: str, dest: Path) -> Path:
    """A workspace holding one fixture operator (fixtures/operators/<name>/<name>.py)."""
    src = HERE.parents[1] / "fixtures" / "operators" / operator / f"{operator}.py"
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dest / src.name)
    return dest
