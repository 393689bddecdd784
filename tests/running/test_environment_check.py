"""check_environment: the R3 checklist, run for real on this machine (pypto 0.2.0 SIM, no NPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pypto_tune.tools.running.environment import byte_compile_check, check_environment, pto_isa_check
from pypto_tune.tools.running.runner import build_child_env
from tests.conftest import require_real

pytestmark = [pytest.mark.process, pytest.mark.anyio]


def by_name(checks):
    return {c.name: c for c in checks}


@pytest.mark.sim
async def test_the_sim_checklist_imports_pypto_in_one_child_and_the_probe_alone_names_a_failed_import(
        tmp_path: Path) -> None:
    """The SIM checklist, run for real on this machine. Importing pypto (and torch with it) costs as much CPU as a SIM
    kernel: the "import pypto" check and the test's needs are answered by one child. Where pypto does not import, the
    probe of its own runs and names the error."""
    (tmp_path / "op.py").write_text("import pypto\nimport torch\nX = 1\n")
    (tmp_path / "broken.py").write_text("def f(:\n    pass\n")
    log = tmp_path / "argv.log"
    python = tmp_path / "python"  # the interpreter the checks use, logging each child it starts
    python.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" | tr '\\n' ' ' >> {log}\necho >> {log}\n"
                      f"exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    env = build_child_env(run_mode="sim")
    checks = await check_environment(run_mode="sim", workspace=tmp_path, operator_files=["op.py", "broken.py"],
                                     env=env, python=str(python))
    c = by_name(checks)
    # the SIM checklist on this machine (pypto 0.2.0, no NPU), in order
    assert list(c) == ["import pypto", "python3 on PATH", "matplotlib absent", "byte-compile op.py",
                       "byte-compile broken.py", "test imports"]
    assert c["python3 on PATH"].ok
    assert c["matplotlib absent"].ok  # a warning-level check never blocks
    assert c["byte-compile op.py"].ok
    assert not c["byte-compile broken.py"].ok and "SyntaxError" in c["byte-compile broken.py"].detail
    assert "broken.py:1" in c["byte-compile broken.py"].detail
    assert all(x.at for x in checks)
    assert not list(tmp_path.rglob("*.pyc"))  # byte-compiling wrote nothing into the workspace
    assert c["import pypto"].ok and c["import pypto"].detail.startswith("pypto 0.2.0 from "), c["import pypto"]
    assert c["test imports"].ok and "torch" in c["test imports"].detail
    children = log.read_text().splitlines()
    assert sum("import" in a and "pypto" in a for a in children) == 1, children

    # an interpreter where pypto fails to import: the check fails with pypto's own error, from its own probe
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "pypto.py").write_text("raise ImportError('this pypto is broken on purpose')\n")
    log.unlink()
    broken = build_child_env(run_mode="sim", extra={"PYTHONPATH": str(tmp_path / "site")})
    c = by_name(await check_environment(run_mode="sim", workspace=tmp_path, operator_files=["op.py"], env=broken,
                                        python=str(python)))
    assert not c["import pypto"].ok and "this pypto is broken on purpose" in c["import pypto"].detail, c
    assert sum("import" in a and "pypto" in a for a in log.read_text().splitlines()) == 2


@pytest.mark.sim
async def test_a_missing_import_and_an_option_pypto_does_not_know_are_named_with_where_and_the_fix(
        tmp_path: Path) -> None:
    """PyPTO's tests import pytest at module level and may set a runtime option another pypto version knows
    (``max_workspace_kb``: pypto 0.2.0 fails it as ``IndexError: map::at`` from SetScope, naming nothing). Both are
    named before the baseline, with the file and line. A guarded import (the NPU branch's torch_npu) and the
    workspace's own modules are not required."""
    (tmp_path / "helper.py").write_text("ROWS = 8\n")
    (tmp_path / "op.py").write_text(
        "import pypto\nfrom helper import ROWS\ntry:\n    import torch_npu\nexcept ImportError:\n    pass\n\n"
        "@pypto.frontend.jit(runtime_options={'run_mode': 1, 'max_workspace_kb': 64},\n"
        "                    pass_options=dict(pg_upper_bound=5, no_such_pass_knob=1))\n"
        "def kernel():\n    pass\n")
    (tmp_path / "test_op.py").write_text("import pytest\nimport no_such_module_for_tests\nimport op\n")
    checks = by_name(await check_environment(run_mode="sim", workspace=tmp_path, operator_files=["op.py"],
                                             env=build_child_env(run_mode="sim"), python=sys.executable,
                                             test_command=["python", "-m", "pytest", "test_op.py::test_it"]))
    imports, options = checks["test imports"], checks["pypto options"]
    assert not imports.ok
    assert imports.detail.startswith(f"test_op.py:2 imports no_such_module_for_tests, which {sys.executable} "
                                     "cannot import")
    assert "before the baseline" in imports.detail and "pip install" in imports.detail
    assert "torch_npu" not in imports.detail and "helper" not in imports.detail and "pytest," not in imports.detail
    assert not options.ok
    assert "op.py:8: runtime_options key 'max_workspace_kb' is not an option of the installed pypto" in options.detail
    assert "op.py:9: pass_options key 'no_such_pass_knob'" in options.detail
    assert "stitch_function_max_num" in options.detail and "IndexError: map::at" in options.detail
    assert "'run_mode'" not in options.detail and "pg_upper_bound'" not in options.detail


async def test_no_python3_on_path_fails_the_a2b_check(tmp_path: Path) -> None:
    (tmp_path / "op.py").write_text("X = 1\n")
    env = build_child_env(run_mode="sim", extra={"PATH": str(tmp_path)})  # a PATH without any python3
    checks = by_name(await check_environment(run_mode="sim", workspace=tmp_path, operator_files=["op.py"], env=env,
                                             python=sys.executable, timeout_s=30))
    assert not checks["python3 on PATH"].ok and "A.2b" in checks["python3 on PATH"].detail


async def test_npu_checklist_fails_clearly_without_an_npu(tmp_path: Path) -> None:
    (tmp_path / "op.py").write_text("X = 1\n")
    env = build_child_env(run_mode="npu", device_id="0", base={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    checks = by_name(await check_environment(run_mode="npu", workspace=tmp_path, operator_files=["op.py"], env=env,
                                             python=sys.executable, device_ids=["0"], timeout_s=30))
    assert not checks["npu-smi info"].ok and "npu-smi" in checks["npu-smi info"].detail
    assert not checks["torch_npu devices"].ok
    assert not checks["PTO-ISA DivAlgorithm"].ok and "PTO_TILE_LIB_CODE_PATH" in checks["PTO-ISA DivAlgorithm"].detail
    assert checks["byte-compile op.py"].ok


async def test_pto_isa_check_greps_for_div_algorithm(tmp_path: Path) -> None:
    missing = await pto_isa_check({"PTO_TILE_LIB_CODE_PATH": str(tmp_path / "pto-isa")})
    assert not missing.ok and "does not exist" in missing.detail
    inc = tmp_path / "pto-isa" / "include" / "pto" / "common"
    inc.mkdir(parents=True)
    (inc / "math.hpp").write_text("enum class RoundMode {};\n")

    async def pto_check():
        env = build_child_env(run_mode="npu", device_id="0",
                              base={"PATH": "/usr/bin:/bin", "PTO_TILE_LIB_CODE_PATH": str(tmp_path / "pto-isa")})
        return await pto_isa_check(env)

    old = await pto_check()
    assert not old.ok and "too old" in old.detail
    (inc / "div.hpp").write_text("template <DivAlgorithm A> struct Div {};\n")
    new = await pto_check()
    assert new.ok and "div.hpp" in new.detail


def test_byte_compile_reports_missing_files_and_bad_bytes(tmp_path: Path) -> None:
    assert not byte_compile_check(tmp_path, "absent.py").ok
    (tmp_path / "nul.py").write_bytes(b"x = 1\x00\n")
    assert not byte_compile_check(tmp_path, "nul.py").ok


# ------------------------------------------------------------------------------------------- the emulated Ascend box
# The server builds the child's environment itself (build_child_env drops PYPTO_NPU_EMU_CONFIG): the box is found
# through the npu-smi on PATH and the stand-ins through PYTHONPATH, exactly as CANN's set_env.sh exposes torch_npu.
R3_NPU = ["npu-smi info", "torch_npu devices", "TILE_FWK_DEVICE_ID", "PTO-ISA DivAlgorithm", "import pypto",
          "python3 on PATH", "matplotlib absent", "byte-compile op.py", "test imports"]


async def box_checks(tmp_path: Path, *, python: str = sys.executable, keep_config_var: bool = False,
                     **box) -> dict:
    from tests.npu_emulator.box import emulated_box

    (tmp_path / "op.py").write_text("import pypto\nX = 1\n")
    base = emulated_box(tmp_path, **box)
    extra = {"PYPTO_NPU_EMU_CONFIG": base["PYPTO_NPU_EMU_CONFIG"]} if keep_config_var else None
    env = build_child_env(run_mode="npu", base=base, extra=extra)
    checks = await check_environment(run_mode="npu", workspace=tmp_path, operator_files=["op.py"], env=env,
                                     python=python, timeout_s=180)
    assert [c.name for c in checks] == R3_NPU
    return by_name(checks)


@pytest.mark.sim
async def test_every_r3_check_passes_on_the_emulated_box(tmp_path: Path) -> None:
    c = await box_checks(tmp_path, chips=8, device_id=3)
    assert all(x.ok for x in c.values()), {k: x.detail for k, x in c.items() if not x.ok}
    assert c["torch_npu devices"].detail == "device_count 8, torch.npu.is_available() True"
    assert c["TILE_FWK_DEVICE_ID"].detail == "TILE_FWK_DEVICE_ID=3 (of 8 devices), idle, health OK (npu-smi)"
    assert c["PTO-ISA DivAlgorithm"].detail.endswith("include/pto/common/div_algorithm.hpp")
    assert "pypto 0.2.0" in c["import pypto"].detail


def _base_python_without_pypto() -> str:
    import subprocess

    # CI runs in the venv scripts/setup.sh made from a base interpreter that has neither pypto nor torch: a
    # missing one there is a broken setup, not a reason to skip (require_real fails in CI)
    base = getattr(sys, "_base_executable", "") or ""
    require_real(bool(base) and base != sys.executable,
                 "no base interpreter outside the venv to stand for a host without pypto")
    has = subprocess.run([base, "-c", "import pypto"], capture_output=True, timeout=120).returncode == 0
    require_real(not has, f"{base} can import pypto itself")
    return base


@pytest.mark.sim
@pytest.mark.parametrize(("removed", "box", "failing"), [
    ("npu-smi and a current PTO-ISA", {"npu_smi": False, "pto_isa": "old", "keep_config_var": True},
     {"npu-smi info": "npu-smi is not on the child's PATH",
      "PTO-ISA DivAlgorithm": "no file under"}),
    ("torch_npu and TILE_FWK_DEVICE_ID", {"torch_npu": False, "device_id": None},
     {"torch_npu devices": "No module named 'torch_npu'",
      "TILE_FWK_DEVICE_ID": "TILE_FWK_DEVICE_ID must be set to a chip number, got None"}),
    ("every chip", {"chips": 0},
     {"torch_npu devices": "torch_npu.npu.device_count() = 0, torch.npu.is_available() = False: no usable NPU",
      "TILE_FWK_DEVICE_ID": "TILE_FWK_DEVICE_ID=0 but only 0 device(s)"}),
    ("an idle chip", {"faults": {0: {"busy": True, "busy_pid": 777, "busy_process": "train.py"}}},
     {"TILE_FWK_DEVICE_ID": "chip 0 is busy — npu-smi shows pid 777 (train.py, 3000 MB) on NPU 0"}),
    ("pypto", {"python": "base"},
     {"import pypto": "No module named 'pypto'", "torch_npu devices": "No module named 'torch'"}),
])
async def test_each_r3_check_fails_cleanly_without_its_part(tmp_path: Path, removed, box, failing) -> None:
    if box.get("python") == "base":
        box = {**box, "python": _base_python_without_pypto()}
    c = await box_checks(tmp_path, **box)
    assert {k for k, x in c.items() if not x.ok} == set(failing), f"removed {removed}: " + str(
        {k: x.detail for k, x in c.items()})
    for name, text in failing.items():
        assert text in c[name].detail, (name, c[name].detail)


def test_the_idle_chip_check_reads_health_and_processes_from_npu_smi(tmp_path: Path) -> None:
    import subprocess

    from pypto_tune.tools.running.environment import _idle_chip_check
    from tests.npu_emulator.box import emulated_box

    env = emulated_box(tmp_path, chips=4, faults={1: {"health": "Warning"}, 2: {"health": "Alarm"},
                                                  3: {"busy": True}})
    table = subprocess.run(["npu-smi", "info"], env=env, capture_output=True, text=True, timeout=60).stdout
    assert _idle_chip_check("0", table) == (True, ", idle, health OK (npu-smi)")
    assert _idle_chip_check("1", table) == (True, ", idle; warning: npu-smi reports health Warning for NPU 1")
    ok, note = _idle_chip_check("2", table)
    assert not ok and "health Alarm for NPU 2; pick a healthy chip" in note
    ok, note = _idle_chip_check("3", table)
    assert not ok and "chip 3 is busy" in note
    assert _idle_chip_check("5", table)[0] and "not verified" in _idle_chip_check("5", table)[1]
    assert _idle_chip_check("0", None) == (True, "; warning: idle state not verified (npu-smi info did not run)")
    # two chips per NPU (310P / 910 layouts): the NPU column is no device id, so nothing is claimed
    lines = table.splitlines()
    bus = next(k for k, ln in enumerate(lines) if "0000:C1:00.0" in ln)  # NPU 0's second row, chip 0
    lines[bus + 1:bus + 1] = [lines[bus - 1], lines[bus].replace("| 0 ", "| 1 ", 1)]
    assert "several chips per NPU" in _idle_chip_check("0", "\n".join(lines))[1]
