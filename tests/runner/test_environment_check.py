"""check_environment: the R3 checklist, run for real on this machine (pypto 0.2.0 SIM, no NPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pypto_tune.tools.environment import byte_compile_check, check_environment, pto_isa_check
from pypto_tune.tools.runner import build_child_env

pytestmark = pytest.mark.anyio


def by_name(checks):
    return {c.name: c for c in checks}


@pytest.mark.sim
async def test_sim_checklist_on_this_machine(tmp_path: Path) -> None:
    (tmp_path / "op.py").write_text("import pypto\nX = 1\n")
    (tmp_path / "broken.py").write_text("def f(:\n    pass\n")
    checks = await check_environment(run_mode="sim", workspace=tmp_path, operator_files=["op.py", "broken.py"],
                                     env=build_child_env(run_mode="sim"), python=sys.executable)
    c = by_name(checks)
    assert list(c) == ["import pypto", "python3 on PATH", "matplotlib absent", "byte-compile op.py",
                       "byte-compile broken.py"]
    assert c["import pypto"].ok and "0.2.0" in c["import pypto"].detail
    assert c["python3 on PATH"].ok
    assert c["matplotlib absent"].ok  # a warning-level check never blocks
    assert c["byte-compile op.py"].ok
    assert not c["byte-compile broken.py"].ok and "SyntaxError" in c["byte-compile broken.py"].detail
    assert "broken.py:1" in c["byte-compile broken.py"].detail
    assert all(x.at for x in checks)
    assert not list(tmp_path.rglob("*.pyc"))  # byte-compiling wrote nothing into the workspace


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
