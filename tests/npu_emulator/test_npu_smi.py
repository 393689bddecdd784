"""The emulated ``npu-smi info``: the A2 table layout of the documented sample, driven by the box config."""

from __future__ import annotations

import re
import shutil
import subprocess

from pypto_tune.tools.running.environment import parse_npu_smi_info

import pytest

pytestmark = pytest.mark.process

WIDTH = 98
CHIP_ROW = re.compile(r"^\| (\d+)\s+910B2\s+\| (\S+)\s+\| (\d+\.\d)\s+(\d+)\s+0\s+/ 0\s+\|$")
BUS_ROW = re.compile(r"^\| 0\s+\| 0000:[0-9A-F]{2}:00\.0\s+\| (\d+)\s+0\s+/ 0\s+(\d+)\s*/ (\d+)\s+\|$")
PROC_ROW = re.compile(r"^\| (\d+)\s+0\s+\| (\d+)\s+\| (\S+)\s+\| (\d+)\s+\|$")


def smi(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("npu-smi", path=env["PATH"])
    assert exe is not None, "the box puts npu-smi on PATH"
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=60)


def test_info_has_the_a2_layout_with_health_memory_and_processes(npu_box) -> None:
    env = npu_box(chips=4, faults={1: {"health": "Warning"}, 2: {"busy": True, "busy_pid": 31337,
                                                                   "busy_process": "vllm_worker", "busy_mem_mb": 2048},
                                   3: {"health": "Alarm"}})
    res = smi(env, "info")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert all(len(ln) == WIDTH and ln[0] in "+|" and ln[-1] in "+|" for ln in lines), lines
    assert lines[1].startswith("| npu-smi ") and "Version: " in lines[1]
    assert "Health" in lines[3] and "Power(W)" in lines[3] and "Temp(C)" in lines[3] and "Hugepages-Usage" in lines[3]
    assert "AICore(%)" in lines[4] and "Memory-Usage(MB)" in lines[4] and "HBM-Usage(MB)" in lines[4]
    chips = [CHIP_ROW.match(ln) for ln in lines]
    assert [(int(m.group(1)), m.group(2)) for m in chips if m] == [(0, "OK"), (1, "Warning"), (2, "OK"), (3, "Alarm")]
    bus = [BUS_ROW.match(ln) for ln in lines]
    usage = [(int(m.group(1)), int(m.group(2)), int(m.group(3))) for m in bus if m]
    assert len(usage) == 4 and all(total == 65536 for _, _, total in usage)
    assert usage[2][0] > 0 and usage[0][0] == 0  # AICore % of the busy chip
    assert usage[2][1] == usage[0][1] + 2048  # its HBM holds the other process's memory
    procs = [PROC_ROW.match(ln) for ln in lines]
    assert [m.groups() for m in procs if m] == [("2", "31337", "vllm_worker", "2048")]
    idle = [int(n) for n in re.findall(r"\| No running processes found in NPU (\d+)\s+\|", res.stdout)]
    assert idle == [0, 1, 3]
    header = lines.index(next(ln for ln in lines if "Process id" in ln))
    assert "Process name" in lines[header] and "Process memory(MB)" in lines[header]


def test_the_environment_check_parser_reads_the_emulated_table(npu_box) -> None:
    env = npu_box(chips=3, faults={0: {"busy": True}, 2: {"health": "Alarm"}})
    info = parse_npu_smi_info(smi(env, "info").stdout)
    assert info is not None
    assert info.health == {0: "OK", 1: "OK", 2: "Alarm"}
    assert info.chips == {0: {0}, 1: {0}, 2: {0}}
    assert info.processes[0] == ["pid 4242 (python3, 3000 MB)"] and info.processes[1] == [] == info.processes[2]


def test_a_box_without_chips_prints_empty_tables(npu_box) -> None:
    res = smi(npu_box(chips=0), "info")
    assert res.returncode == 0
    assert not any(CHIP_ROW.match(ln) or "No running processes" in ln for ln in res.stdout.splitlines())
    assert parse_npu_smi_info(res.stdout) is None


def test_broken_config_missing_box_and_other_commands_fail_with_a_message(npu_box, tmp_path) -> None:
    env = npu_box(faults={1: {"health": "Broken"}})
    res = smi(env, "info")
    assert res.returncode == 1 and "health must be one of" in res.stderr and "devices[1]" in res.stderr
    assert smi(env, "info", "-t", "health").returncode == 1
    alone = dict(env)
    alone.pop("PYPTO_NPU_EMU_CONFIG")
    (tmp_path / "npu-box" / "emulator.json").write_text('{"chips": 2}')
    # the server drops unknown variables: the box is still found next to the npu-smi on PATH
    assert "No running processes found in NPU 1" in smi(alone, "info").stdout
    (tmp_path / "npu-box" / "emulator.json").unlink()
    res = smi(alone, "info")
    assert res.returncode == 1 and "no emulator.json" in res.stderr and not res.stdout
