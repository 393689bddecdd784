"""The emulated Ascend box's machinery (test-only; see tests/npu_emulator/README.md)."""
