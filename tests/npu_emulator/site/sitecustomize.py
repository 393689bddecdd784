"""Loaded by every Python process that has the emulated box's site folder on PYTHONPATH (test-only).

When a box config is found, pypto's jit is hooked so that ``RunMode.NPU`` kernels run on the emulated box
(see _pypto_npu_emu/hook.py). Without a box nothing happens. A broken config is reported once on stderr and
left to fail loudly where it is used (npu-smi, torch_npu, the kernel call).
"""

try:
    from _pypto_npu_emu.config import EmulatorConfigError, find_config_path

    if find_config_path() is not None:
        from _pypto_npu_emu.hook import install

        install()
except EmulatorConfigError as _exc:  # pragma: no cover - reported, not swallowed silently
    import sys

    print(f"[npu-emulator] {_exc}", file=sys.stderr)
