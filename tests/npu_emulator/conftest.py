"""Fixtures of the emulated Ascend box tests (the box itself: box.py)."""

from __future__ import annotations

from tests.npu_emulator.box import npu_box  # noqa: F401  (re-exported fixture)
