"""``npu-smi info`` of the emulated box, in the Atlas A2 (910B) table layout (test-only).

The layout follows a documented sample (see ../../README.md, "npu-smi"): 98-character rows, a two-line block per
chip (NPU / Name / Health / Power / Temp / Hugepages, then Chip / Bus-Id / AICore % / Memory-Usage / HBM-Usage),
then the process table with one row per process or "No running processes found in NPU <n>". Power, temperature,
bus ids and the idle HBM use are plausible constants, not measurements.
"""

from __future__ import annotations

import sys

from _pypto_npu_emu.config import EmuConfig, EmulatorConfigError, current_config

VERSION = "25.2.0"
WIDTH = 98  # every row of the A2 layout is this wide, borders included
_BUS_IDS = ("C1", "01", "C2", "02", "81", "41", "82", "42")  # slot order of an 8-card A2 server
_DASH = "+---------------------------+---------------+----------------------------------------------------+"
_EQ = "+===========================+===============+====================================================+"


def _chip_rows(cfg: EmuConfig, npu: int) -> list[str]:
    dev = cfg.device(npu)
    power = 92.4 + (npu % 4) * 1.3 + (35.0 if dev.busy else 0.0)
    temp = 36 + (npu % 3) + (6 if dev.busy else 0)
    aicore = dev.aicore_pct or (37 if dev.busy else 0)
    hbm_used = dev.hbm_used_mb + (dev.busy_mem_mb if dev.busy else 0)
    bus = f"0000:{_BUS_IDS[npu % len(_BUS_IDS)]}:00.0"
    first = f"| {npu:<5} {cfg.chip_name:<20}| {dev.health:<13} | {power:<11.1f} {temp:<17} {0:<5}/ {0:<13} |"
    # On A2 the Memory-Usage column is always 0 / 0: the chip's memory is reported as HBM.
    second = f"| {0:<26}| {bus:<13} | {aicore:<11} {0:<5}/ {0:<10} {hbm_used:<5}/ {cfg.hbm_total_mb:<13} |"
    return [first, second, _EQ]


def _process_rows(cfg: EmuConfig, npu: int) -> list[str]:
    dev = cfg.device(npu)
    if dev.busy:
        rows = [f"| {npu:<7} {0:<18}| {dev.busy_pid:<13} | {dev.busy_process[:24]:<24} | {dev.busy_mem_mb:<23} |"]
    else:
        rows = [f"| No running processes found in NPU {npu:<7}".ljust(WIDTH - 1) + "|"]
    return [*rows, _EQ]


def render_info(cfg: EmuConfig) -> str:
    """The full ``npu-smi info`` text for this box (ends with a newline)."""
    lines = ["+" + "-" * (WIDTH - 2) + "+",
             f"| npu-smi {VERSION:<24} Version: {VERSION:<52} |",
             _DASH,
             "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|",
             "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |",
             _EQ]
    for npu in range(cfg.chips):
        lines += _chip_rows(cfg, npu)
    lines += [_DASH,
              "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |",
              _EQ]
    for npu in range(cfg.chips):
        lines += _process_rows(cfg, npu)
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv[:1] != ["info"] or len(argv) > 1:
        print("npu-smi (pypto-tune NPU emulator): only `npu-smi info` is emulated", file=sys.stderr)
        return 1
    try:
        cfg = current_config()
    except EmulatorConfigError as exc:
        print(f"npu-smi (pypto-tune NPU emulator): {exc}", file=sys.stderr)
        return 1
    if cfg is None:
        # What a host without the driver's device files looks like to npu-smi's user: a failure, no table.
        print("npu-smi (pypto-tune NPU emulator): no emulator.json found (set PYPTO_NPU_EMU_CONFIG)",
              file=sys.stderr)
        return 1
    sys.stdout.write(render_info(cfg))
    return 0
